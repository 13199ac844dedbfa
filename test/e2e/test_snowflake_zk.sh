#!/bin/sh
# test_snowflake_zk.sh -- each snowflake-zk subcommand against a real ZooKeeper server.
set -u
top_srcdir=${top_srcdir:-.}
PY=/usr/bin/python3
TOOL="$PY $top_srcdir/scripts/snowflake-zk"
dir=$(mktemp -d /tmp/sf-zktool-XXXXXX)
cleanup() { "$top_srcdir/test/tools/zk-server.sh" stop "$dir" >/dev/null 2>&1; rm -rf "$dir"; }
trap cleanup EXIT INT TERM
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }
expect() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }

hosts=$("$top_srcdir/test/tools/zk-server.sh" start "$dir") || { echo "test_snowflake_zk: no ZooKeeper"; exit 1; }
# A holder whose node outlives it: an unreachable host:port holds worker id 3,
# and a holder record for id 5 with a recorded timestamp.
$PY - "$hosts" <<'PY' || { echo "test_snowflake_zk: cannot seed nodes"; exit 1; }
import sys
from kazoo.client import KazooClient
z = KazooClient(hosts=sys.argv[1]); z.start()
z.create("/snowflake-servers/3", b"127.0.0.1:1", makepath=True)
z.create("/snowflake-servers/5", b"127.0.0.1:2", makepath=True)
z.create("/snowflake-servers-state/5", b"1700000000000", makepath=True)
z.create("/snowflake-servers/05", b"127.0.0.1:3", makepath=True)
z.stop()
PY
T="$TOOL --zookeeper $hosts"

out=$($T list); rc=$?
expect "list exits 0" "[ $rc -eq 0 ]"
expect "list shows holder of 3" "echo \"\$out\" | grep -q '^3 .*127.0.0.1:1'"
expect "list shows recorded timestamp of 5" "echo \"\$out\" | grep -q '^5 .*1700000000000'"
expect "list shows free ids without 3 and 5" "echo \"\$out\" | grep -q '^free: 0 1 2 4 6 7'"
expect "a name that is not canonical decimal is not a worker id" "echo \"\$out\" | grep -q '^not worker ids (ignored by snowflaked): 05'"
out=$($T --json list)
expect "list --json counts 30 free" "[ \"\$(echo \"\$out\" | $PY -c 'import json,sys; print(len(json.load(sys.stdin)[\"free\"]))')\" = 30 ]"
out=$($TOOL list --json --zookeeper "$hosts")
expect "options after the command: list --json --zookeeper" "[ \"\$(echo \"\$out\" | $PY -c 'import json,sys; print(len(json.load(sys.stdin)[\"free\"]))')\" = 30 ]"
out=$($TOOL list --timeout-ms 0 --zookeeper "$hosts" 2>&1); rc=$?
expect "a timeout out of range is refused naming the range" "[ $rc -ne 0 ] && echo \"\$out\" | grep -q '1..600000'"
out=$($T inspect 3)
expect "inspect names the holder and its silence" "echo \"\$out\" | grep -q 'does not answer'"
out=$($T inspect 9)
expect "inspect of a free id says free" "echo \"\$out\" | grep -q 'is free'"
out=$($T --json stale)
expect "stale finds both unreachable holders" "[ \"\$(echo \"\$out\" | $PY -c 'import json,sys; print(sorted(e[\"worker_id\"] for e in json.load(sys.stdin)))')\" = '[3, 5]' ]"
$T check >/dev/null; rc=$?
expect "check fails on unreachable holders" "[ $rc -eq 1 ]"
out=$(echo n | $T release 3); rc=$?
expect "release without yes keeps the node" "[ $rc -eq 1 ] && $T list | grep -q '^3 '"
$T release 3 --yes >/dev/null; rc=$?
expect "release --yes deletes" "[ $rc -eq 0 ] && ! $T list | grep -q '^3 '"
$T release 3 --yes >/dev/null 2>&1; rc=$?
expect "release of a free id fails" "[ $rc -ne 0 ]"
$T release 5 --yes >/dev/null
out=$($T check); rc=$?
expect "check passes with no holders" "[ $rc -eq 0 ]"
$T inspect 40 >/dev/null 2>&1; rc=$?
expect "an id out of range is refused" "[ $rc -eq 2 ]"
$TOOL --zookeeper 127.0.0.1:1 --timeout-ms 500 list >/dev/null 2>&1; rc=$?
expect "no ZooKeeper is an error" "[ $rc -ne 0 ]"

# Floors: what a new holder of an id waits for, and a guarded reset of one left far ahead.
$PY - "$hosts" <<'PY' || bad "seed floors"
import sys, time
from kazoo.client import KazooClient
z = KazooClient(hosts=sys.argv[1]); z.start()
z.create("/snowflake-servers/6", b"127.0.0.1:6", makepath=True)
z.create("/snowflake-servers-state/6", b"reserved %d" % (time.time() * 1000 + 60000))
z.create("/snowflake-servers-state/7", b"released %d" % (time.time() * 1000 + 86400000))
z.stop()
PY
out=$($T floor 6)
expect "floor names a reservation and its holder" "echo \"\$out\" | grep -q 'reserved by its holder.*ahead of this host.*held by 127.0.0.1:6'"
out=$($T list)
expect "list shows the floors ahead of this clock, free ones marked" "echo \"\$out\" | grep -q '^floors ahead of.*6 (+[0-9]* ms), 7 (+[0-9]* ms, free)'"
out=$($T reset-floor 6 --yes 2>&1); rc=$?
expect "reset-floor refuses while the id is held" "[ $rc -eq 1 ] && echo \"\$out\" | grep -q 'is held by 127.0.0.1:6'"
out=$(echo n | $T reset-floor 7); rc=$?
expect "reset-floor asks, showing the old floor, and keeps it on no" "[ $rc -eq 1 ] && echo \"\$out\" | grep -q 'from released [0-9]*' && $T floor 7 | grep -q 'ahead of this host'"
out=$($T reset-floor 7 --to 1700000000000 --yes); rc=$?
expect "reset-floor --to writes the floor and says what it was" "[ $rc -eq 0 ] && echo \"\$out\" | grep -q 'was released [0-9]* .*now 1700000000000'"
expect "the reset floor reads back as a clean release" "$T --json floor 7 | grep -q '\"floor\": 1700000000000, \"kind\": \"released\"'"
out=$($T reset-floor 8 --yes); rc=$?
expect "reset-floor of an id without a floor records one" "[ $rc -eq 0 ] && $T floor 8 | grep -q 'clean stop'"
$T reset-floor 7 --to -5 --yes >/dev/null 2>&1; rc=$?
expect "a floor out of range is refused" "[ $rc -eq 2 ]"
$T release 6 --yes >/dev/null

# release re-checks the node after asking: replaced meanwhile (another creation, another
# holder), it is kept.
$PY - "$hosts" <<'PY' || bad "seed node 11"
import sys
from kazoo.client import KazooClient
z = KazooClient(hosts=sys.argv[1]); z.start()
z.create("/snowflake-servers/11", b"127.0.0.1:11", makepath=True)
z.stop()
PY
# ask OUT TEXT ARGS...: runs the tool with ARGS, its standard input a fifo, and returns once
# OUT shows TEXT (its question), or after 60 s. answer REPLY then answers it and waits; the
# tool's exit status is in rc.
fifo="$dir/answer"
mkfifo "$fifo"
ask() {
  out=$1 text=$2
  shift 2
  $T "$@" <"$fifo" >"$out" 2>&1 &
  asking=$!
  exec 3>"$fifo"
  for _ in $(seq 600); do
    grep -qsF -- "$text" "$out" && break
    sleep 0.1
  done
}
answer() { echo "$1" >&3; exec 3>&-; wait "$asking"; rc=$?; }
ask "$dir/release.out" 'delete /snowflake-servers/11' release 11
$PY - "$hosts" <<'PY' || bad "replace node 11"
import sys
from kazoo.client import KazooClient
z = KazooClient(hosts=sys.argv[1]); z.start()
z.delete("/snowflake-servers/11")
z.create("/snowflake-servers/11", b"127.0.0.1:12")
z.stop()
PY
answer y
expect "release of a node replaced while asking fails" "[ $rc -eq 1 ]"
expect "release names the change" "grep -q 'changed since it was read' \"$dir/release.out\""
expect "the replacing node is kept" "$T list | grep -q '^11 .*127.0.0.1:12'"

# The Thrift code is imported from absolute paths only: code planted in the current
# directory, where a relative path would find it, is never run.
$PY - "$hosts" <<'PY' || bad "seed node 17"
import sys
from kazoo.client import KazooClient
z = KazooClient(hosts=sys.argv[1]); z.start()
z.create("/snowflake-servers/17", b"127.0.0.1:17", makepath=True)
z.stop()
PY
plant="$dir/plant"
mkdir -p "$plant/thrift/gen-py/snowflake_thrift"
echo "open('$plant/ran', 'w').close()" >"$plant/thrift/gen-py/snowflake_thrift/__init__.py"
tool_abs="$(cd "$top_srcdir" && pwd)/scripts/snowflake-zk"
(cd "$plant" && env -u top_builddir -u SNOWFLAKE_GEN_PY $PY "$tool_abs" --zookeeper "$hosts" \
  inspect 17 >/dev/null 2>&1)
expect "no code from the current directory is imported" "[ ! -e \"$plant/ran\" ]"

# The credential can come from a file, out of sight of ps.
$PY - "$hosts" <<'PY' || bad "seed a secured node"
import sys
from kazoo.client import KazooClient
from kazoo.security import make_acl, make_digest_acl
z = KazooClient(hosts=sys.argv[1], auth_data=[("digest", "ops:secret")]); z.start()
acl = [make_digest_acl("ops", "secret", all=True), make_acl("world", "anyone", read=True)]
z.create("/secured", b"", acl=acl)
z.create("/secured/13", b"127.0.0.1:13", acl=acl)
z.stop()
PY
$T --path /secured release 13 --yes >/dev/null 2>&1; rc=$?
expect "release without the credential is refused" "[ $rc -eq 1 ]"
echo "ops:secret" >"$dir/auth"
$T --path /secured --auth-file "$dir/auth" release 13 --yes >/dev/null; rc=$?
expect "release with --auth-file deletes" "[ $rc -eq 0 ] && ! $T --path /secured list | grep -q '^13 '"
$T --auth-file "$dir/missing" list >/dev/null 2>&1; rc=$?
expect "a missing --auth-file is an error" "[ $rc -eq 2 ]"

# An embedded holder (a program on libsnowflake-zk) serves no Thrift: the tools read what its
# node says and never try to connect to it.
$PY - "$hosts" <<'PY' || bad "seed embedded holders"
import sys
from kazoo.client import KazooClient
z = KazooClient(hosts=sys.argv[1]); z.start()
z.create("/embedded/4", b"embedded pid=4242 host=app1 datacenter=2", makepath=True)
z.create("/embedded/8", b"embedded pid=77 host=app2 datacenter=2")
z.stop()
PY
out=$($T --path /embedded list)
expect "list names an embedded holder by its program" \
  "echo \"\$out\" | grep -q '^4 *embedded, pid 4242 on host app1 '"
out=$($T --path /embedded inspect 4)
expect "inspect names an embedded holder without querying it" \
  "echo \"\$out\" | grep -q 'embedded, pid 4242 on host app1, datacenter_id=2 (not queried'"
out=$($T --path /embedded --json stale)
expect "embedded holders are not stale for not answering Thrift" "[ \"\$out\" = '[]' ]"
$T --path /embedded check >/dev/null; rc=$?
expect "check passes with embedded holders of one datacenter" "[ $rc -eq 0 ]"
$PY - "$hosts" <<'PY' || bad "seed an embedded holder of another datacenter"
import sys
from kazoo.client import KazooClient
z = KazooClient(hosts=sys.argv[1]); z.start()
z.create("/embedded/9", b"embedded pid=78 host=app3 datacenter=5")
z.stop()
PY
out=$($T --path /embedded check); rc=$?
expect "check fails on embedded holders of two datacenters" \
  "[ $rc -eq 1 ] && echo \"\$out\" | grep -q 'several datacenter ids'"

# The epoch a path's first holder records (PATH-state's data): shown; cleared only while no
# id is held, after asking.
$PY - "$hosts" <<'PY' || bad "seed an epoch record"
import sys
from kazoo.client import KazooClient
z = KazooClient(hosts=sys.argv[1]); z.start()
z.create("/epoch-held/2", b"127.0.0.1:9", makepath=True)
z.create("/epoch-held-state", b"epoch_ms 1288834974657")
z.create("/epoch-free-state", b"epoch_ms 1400000000000", makepath=True)
z.stop()
PY
out=$($T --path /epoch-held epoch)
expect "epoch shows the recorded epoch" \
  "echo \"\$out\" | grep -q 'count from epoch_ms 1288834974657 (2010-11-04T01:42:54.657Z)'"
out=$($T --path /epoch-held epoch --clear --yes 2>&1); rc=$?
expect "epoch --clear refuses while an id is held" "[ $rc -eq 1 ] && echo \"\$out\" | grep -q 'worker ids 2 are held'"
out=$(echo n | $T --path /epoch-free epoch --clear); rc=$?
expect "epoch --clear asks and keeps the record on no" \
  "[ $rc -eq 1 ] && $T --path /epoch-free epoch | grep -q 'epoch_ms 1400000000000'"
out=$($T --path /epoch-free epoch --clear --yes); rc=$?
expect "epoch --clear forgets a free path's epoch" \
  "[ $rc -eq 0 ] && $T --path /epoch-free epoch | grep -q 'no epoch recorded'"

# A holder that claims while the operator is being asked: the answer comes after it, and
# the record it counts from must stay.
$PY - "$hosts" <<'PY' || bad "seed a second epoch record"
import sys
from kazoo.client import KazooClient
z = KazooClient(hosts=sys.argv[1]); z.start()
z.create("/epoch-asked-state", b"epoch_ms 1400000000000")
z.stop()
PY
ask "$dir/asked.out" '[y/N]' --path /epoch-asked epoch --clear
$PY - "$hosts" <<'PY' || bad "claim worker id 4 while the tool asks"
import sys
from kazoo.client import KazooClient
z = KazooClient(hosts=sys.argv[1]); z.start()
z.create("/epoch-asked/4", b"127.0.0.1:9", makepath=True)
z.stop()
PY
answer y
expect "epoch --clear refuses an id held by the time the operator answers" \
  "[ $rc -eq 1 ] && grep -q 'worker ids 4 are held' \"$dir/asked.out\""
expect "the record that holder counts from is kept" \
  "$T --path /epoch-asked epoch | grep -q 'epoch_ms 1400000000000'"
[ $rc -eq 1 ] || cat "$dir/asked.out"

echo "test_snowflake_zk: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
