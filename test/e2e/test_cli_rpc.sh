#!/bin/sh
# test_cli_rpc.sh -- `snowflake id`, `ids N` and `info` against a real snowflaked
# on a free loopback port, and the tool's errors: bad arguments, a refused
# request, an unreachable server and one that never answers.
set -u
b="${top_builddir:-.}"
. "${top_srcdir:-.}/test/tools/sfstart.sh"
cli="$b/src/snowflake"
server="$b/src/snowflaked"
fails=0; passes=0
tmp=$(mktemp -d)
server_pid=; mute_pid=; full_pid=
cleanup() {
  for p in $server_pid $mute_pid $full_pid; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM

check() { # name, expected-substring, actual
  case "$3" in
    *"$2"*) passes=$((passes + 1)) ;;
    *) echo "FAIL: $1: expected '$2' in:"; echo "$3"; fails=$((fails + 1)) ;;
  esac
}
check_true() { # name, then a command that must succeed
  name=$1; shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL: $name"; fails=$((fails + 1)); fi
}

# Inherited SNOWFLAKE_* settings would change what the server does (but for the event
# loop: the suite runs once per loop).
for v in $(env | sed -n 's/^\(SNOWFLAKE_[A-Z_]*\)=.*/\1/p'); do
  [ "$v" = SNOWFLAKE_EVENT_LOOP ] || unset "$v"
done

# ---- without a server: usage errors and an unreachable port ------------------
out=$("$cli" --help)
check "help lists id" "id [--agent A]" "$out"
check "help lists ids" "ids N [--agent A]" "$out"
check "help lists info" "  [CONNECTION] info" "$out"
check "help names the default port" "(default 7609)" "$out"
out=$("$cli" ids 0 2>&1); rc=$?
check "ids 0 exit" "2" "$rc"
check "ids 0 names range" "count '0' is not valid: allowed 1..1000000" "$out"
out=$("$cli" ids 2>&1); rc=$?
check "ids without count exit" "2" "$rc"
out=$("$cli" --port 70000 id 2>&1); rc=$?
check "bad port exit" "2" "$rc"
check "bad port names range" "--port '70000' is not valid: allowed 1..65535" "$out"
out=$("$cli" --timeout-ms 0 id 2>&1); rc=$?
check "bad timeout exit" "2" "$rc"
check "bad timeout names range" "allowed 1..600000" "$out"
out=$("$cli" id extra 2>&1); rc=$?
check "stray argument exit" "2" "$rc"
out=$("$cli" info --agent x 2>&1); rc=$?
check "agent with info exit" "2" "$rc"

# A listener that accepts (the kernel does) but never answers.
python3 -c 'import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True); time.sleep(60)' >"$tmp/mute.port" &
mute_pid=$!
i=0; while [ ! -s "$tmp/mute.port" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
mute_port=$(cat "$tmp/mute.port")
out=$("$cli" --port "$mute_port" --timeout-ms 300 id 2>&1); rc=$?
check "silent server exit" "3" "$rc"
check "silent server named" "127.0.0.1:$mute_port did not answer get_id within" "$out"
kill "$mute_pid"; wait "$mute_pid" 2>/dev/null; mute_pid=
# The port just released is free again: nothing listens there.
out=$("$cli" --port "$mute_port" id 2>&1); rc=$?
check "unreachable exit" "3" "$rc"
check "unreachable named" "cannot connect to 127.0.0.1:$mute_port: Connection refused" "$out"

# ---- against a real snowflaked ------------------------------------------------
if [ ! -x "$server" ]; then
  echo "SKIP: $server is not built; only the checks without a server ran"
else
  sf_start "$tmp/server.log" "$server" --bind 127.0.0.1 --port 0 --admin-port 0 --worker-id 5 \
    --datacenter-id 9
  server_pid=$SF_PID; port=$SF_PORT
  if [ -z "$port" ]; then
    echo "FAIL: snowflaked did not start:"; cat "$tmp/server.log"; fails=$((fails + 1))
  else
    c() { "$cli" --port "$port" "$@"; }
    id=$(c id); rc=$?
    check "id exit" "0" "$rc"
    check "id is one number" "yes" "$(echo "$id" | grep -qx '[0-9][0-9]*' && echo yes)"
    out=$("$cli" decode --json "$id")
    check "id has the server's datacenter and worker" '"datacenter_id":9,"worker_id":5,' "$out"

    c ids 5 >"$tmp/ids"; rc=$?
    check "ids exit" "0" "$rc"
    check "ids gives 5 lines" "5" "$(wc -l <"$tmp/ids" | tr -d ' ')"
    check_true "ids increasing and unique" sort -n -u -c "$tmp/ids"
    check_true "ids after the first id" test "$(head -n 1 "$tmp/ids")" -gt "$id"

    out=$(c id --agent infra-dm); rc=$?
    check "valid agent exit" "0" "$rc"
    # The client library holds the agent to the original's grammar before asking.
    out=$(c id --agent 'a b' 2>&1); rc=$?
    check "bad agent exit" "2" "$rc"
    check "bad agent named" "agent 'a b' is not valid: a letter, then letters" "$out"
    out=$(c ids 3 --agent 1asdf 2>&1); rc=$?
    check "bad agent ids exit" "2" "$rc"
    check "bad agent ids named" "agent '1asdf' is not valid" "$out"
    out=$(c ids 10001 2>&1); rc=$?
    check "too many ids exit" "1" "$rc"
    check "too many ids exception" "server refused the request: InvalidRequestError: " "$out"

    out=$(c info); rc=$?
    check "info exit" "0" "$rc"
    check "info worker" "worker_id       5" "$out"
    check "info datacenter" "datacenter_id   9" "$out"
    check "info server" "server          127.0.0.1:$port" "$out"
    check "info ISO time" "yes" "$(echo "$out" |
      grep -q '^server_time     20[0-9][0-9]-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-5][0-9]\.[0-9][0-9][0-9]Z$' && echo yes)"
    skew=$(echo "$out" | sed -n 's/^skew_ms *//p')
    check_true "info skew on one host under 1 s" test "${skew#-}" -lt 1000
    ms=$(echo "$out" | sed -n 's/^server_time_ms *//p')
    now=$(date +%s)
    check_true "info ms matches the clock" test $((ms / 1000 - now)) -le 2 -a $((now - ms / 1000)) -le 2

    kill "$server_pid"; wait "$server_pid"; rc=$?; server_pid=
    check "server exit after SIGTERM" "0" "$rc"
    out=$(c id 2>&1); rc=$?
    check "stopped server exit" "3" "$rc"
    check "stopped server named" "cannot connect to 127.0.0.1:$port: Connection refused" "$out"
  fi
fi

# ---- a server whose accept queue is full: the connect itself must time out ----
# A backlog of 0 holds one connection; SYNs beyond it are dropped, so a plain
# blocking connect would wait for the kernel's retries (minutes).
python3 -c '
import socket, sys, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(0)
port = l.getsockname()[1]
held = []
for _ in range(3):
    c = socket.socket(); c.setblocking(False)
    try:
        c.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    held.append(c)
time.sleep(0.2)
print(port, flush=True)
time.sleep(600)
' >"$tmp/full.port" &
full_pid=$!
i=0; while [ ! -s "$tmp/full.port" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
port=$(cat "$tmp/full.port")
out=$(timeout 20 "$cli" --port "$port" --timeout-ms 300 info 2>&1); rc=$?
check "full accept queue exit" "3" "$rc"
# The call's bound is 300 ms; the connect's own figure is what was left of it when the try
# began (a millisecond less on a busy machine).
check "full accept queue says no answer" "cannot connect to 127.0.0.1:$port: no answer within" "$out"
check "full accept queue names the bound" "within 300 ms" "$out"

echo "test_cli_rpc: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
