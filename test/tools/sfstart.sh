# sfstart.sh -- sourced by the shell tests and scripts that need a snowflaked of their own:
# one way to pick a free port, to start a server and learn its port, and to read a
# process's CPU time. (The Python tests start servers with test/e2e/sftest.py.)

# sf_free_port prints a loopback TCP port that nothing listens on right now, taken below the
# kernel's ephemeral range by the picker every test shares (test/tools/free_port.py; the
# sourcing script sets top, or the test harness top_srcdir).
sf_free_port() {
  python3 "${top:-${top_srcdir:-.}}/test/tools/free_port.py"
}

# sf_start LOG COMMAND... starts COMMAND (a snowflaked command line, usually with --port 0)
# in the background, its output in LOG, and waits up to 60 s for its "listening on" line
# (generous: the suite runs on busy build machines too).
# Sets SF_PID and SF_PORT; returns 1, with SF_PORT empty, when the server exited or never
# said so (LOG says why).
sf_start() {
  sf_log=$1
  shift
  "$@" >"$sf_log" 2>&1 &
  SF_PID=$!
  SF_PORT=""
  for _ in $(seq 600); do
    SF_PORT=$(sed -n 's/.*listening on [^ ]*:\([0-9][0-9]*\).*/\1/p' "$sf_log" | head -n 1)
    [ -n "$SF_PORT" ] && return 0
    kill -0 "$SF_PID" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# sf_cpu_ticks PID prints the user + system clock ticks the process has used so far
# (getconf CLK_TCK of them a second).
sf_cpu_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
