#!/bin/sh
# test_snowflake_zk.sh -- each snowflake-zk subcommand against a real ZooKeeper server.
set -u
top_srcdir=${top_srcdir:-.}
PY=/usr/bin/python3
TOOL="$PY $top_srcdir/scripts/snowflake-zk"
dir=$(mktemp -d /tmp/sf-zktool-XXXXXX)
cleanup() { "$top_srcdir/test/zk-server.sh" stop "$dir" >/dev/null 2>&1; rm -rf "$dir"; }
trap cleanup EXIT INT TERM
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }
expect() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }

hosts=$("$top_srcdir/test/zk-server.sh" start "$dir") || { echo "test_snowflake_zk: no ZooKeeper"; exit 1; }
# A holder whose node outlives it: an unreachable host:port holds worker id 3,
# and a holder record for id 5 with a recorded timestamp.
$PY - "$hosts" <<'PY' || { echo "test_snowflake_zk: cannot seed nodes"; exit 1; }
import sys
from kazoo.client import KazooClient
z = KazooClient(hosts=sys.argv[1]); z.start()
z.create("/snowflake-servers/3", b"127.0.0.1:1", makepath=True)
z.create("/snowflake-servers/5", b"127.0.0.1:2", makepath=True)
z.create("/snowflake-servers-state/5", b"1700000000000", makepath=True)
z.stop()
PY
T="$TOOL --zookeeper $hosts"

out=$($T list); rc=$?
expect "list exits 0" "[ $rc -eq 0 ]"
expect "list shows holder of 3" "echo \"\$out\" | grep -q '^3 .*127.0.0.1:1'"
expect "list shows recorded timestamp of 5" "echo \"\$out\" | grep -q '^5 .*1700000000000'"
expect "list shows free ids without 3 and 5" "echo \"\$out\" | grep -q '^free: 0 1 2 4 6 7'"
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

echo "test_snowflake_zk: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
