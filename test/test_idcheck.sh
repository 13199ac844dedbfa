#!/bin/sh
# test_idcheck.sh -- the id checker finds each kind of fault, and passes clean input.
set -u
idcheck="${top_builddir:-.}/test/idcheck"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
fails=0; passes=0
expect() { # name, expected exit, expected substring, file
  out=$("$idcheck" "$4" 2>&1); rc=$?
  if [ "$rc" -eq "$2" ] && echo "$out" | grep -qF -- "$3"; then passes=$((passes + 1));
  else echo "FAIL: $1 (exit $rc, wanted $2 and '$3'):"; echo "$out"; fails=$((fails + 1)); fi
}
# ids built from fields: (ms << 22) | (dc << 17) | (worker << 12) | seq
gen() { python3 -c "
import sys
def mk(ms, dc, w, seq): return (ms << 22) | (dc << 17) | (w << 12) | seq
out = []
for conn in range(8):
    w, dc = conn % 4, 1
    for i in range(25000):
        out.append('c%d %d %d %d' % (conn, w, dc, mk(1000 + i, dc, w, conn // 4)))
$1
print('\n'.join(out))
"; }
gen "" > "$tmp/clean"
expect "clean input" 0 "idcheck: 200000 ids on 8 connections: 0 duplicates, 0 not increasing, 0 with wrong worker/datacenter" "$tmp/clean"
gen "out.append('c9 0 1 %d' % mk(1000, 1, 0, 0))" > "$tmp/dup"
expect "duplicate across connections" 1 "1 duplicates" "$tmp/dup"
expect "duplicate decoded" 1 "duplicate: id 4194435072 (2010-11-04T01:42:55.657Z, datacenter 1, worker 0, sequence 0)" "$tmp/dup"
gen "out.append('c0 0 1 %d' % mk(5, 1, 0, 7))" > "$tmp/back"
expect "not increasing on a connection" 1 "0 duplicates, 1 not increasing" "$tmp/back"
gen "out.append('c0 3 1 %d' % mk(99999, 1, 0, 0))" > "$tmp/wrong"
expect "wrong worker" 1 "1 with wrong worker/datacenter" "$tmp/wrong"
expect "wrong worker named" 1 "decodes to worker 0 datacenter 1, its server reported worker 3 datacenter 1" "$tmp/wrong"
printf 'c0 1 1 notanumber\n' > "$tmp/bad"
expect "malformed line" 2 "1 malformed lines" "$tmp/bad"
out=$("$idcheck" /nonexistent 2>&1); rc=$?
if [ "$rc" -eq 2 ] && echo "$out" | grep -q "cannot open /nonexistent"; then passes=$((passes + 1)); else echo "FAIL: missing file: $out"; fails=$((fails + 1)); fi
echo "test_idcheck: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
