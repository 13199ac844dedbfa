#!/bin/sh
# test_idcheck.sh -- the id checker finds each kind of fault, and passes clean input.
set -u
idcheck="${top_builddir:-.}/test/tools/idcheck"
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
        out.append('n%d-c%d %d %d %d' % (w, conn, w, dc, mk(1000 + i, dc, w, conn // 4)))
$1
print('\n'.join(out))
"; }
gen "" > "$tmp/clean"
expect "clean input" 0 "idcheck: 200000 ids on 8 connections: 0 duplicates, 0 not increasing, 0 with wrong worker/datacenter" "$tmp/clean"
gen "out.append('n0-c9 0 1 %d' % mk(1000, 1, 0, 0))" > "$tmp/dup"
expect "duplicate across connections" 1 "1 duplicates" "$tmp/dup"
expect "duplicate decoded" 1 "duplicate: id 4194435072 (2010-11-04T01:42:55.657Z, datacenter 1, worker 0, sequence 0)" "$tmp/dup"
gen "out.append('n0-c0 0 1 %d' % mk(5, 1, 0, 7))" > "$tmp/back"
expect "not increasing on a connection" 1 "0 duplicates, 1 not increasing" "$tmp/back"
gen "out.append('n0-c0 3 1 %d' % mk(99999, 1, 0, 0))" > "$tmp/wrong"
expect "wrong worker" 1 "1 with wrong worker/datacenter" "$tmp/wrong"
expect "wrong worker named" 1 "decodes to worker 0 datacenter 1, its server reported worker 3 datacenter 1" "$tmp/wrong"
# Handovers: worker 5 passes from node a to node b. Clean when b's first id comes in a
# later millisecond than a's last; an overlap when they share one (or interleave).
gen "
out = []
for i in range(1000): out.append('a-c0 5 1 %d' % mk(1000 + i, 1, 5, 0))
for i in range(1000): out.append('b-c1 5 1 %d' % mk(2100 + i, 1, 5, 0))" > "$tmp/handover"
expect "clean handover passes" 0 "1 handovers, 0 overlapping, smallest margin 101 ms" "$tmp/handover"
expect "handover printed" 0 "handover 1 5 a b 1288834976656 1288834976757 101" "$tmp/handover"
gen "
out = []
for i in range(1000): out.append('a-c0 5 1 %d' % mk(1000 + i, 1, 5, 0))
for i in range(1000): out.append('b-c1 5 1 %d' % mk(1999 + i, 1, 5, 1))" > "$tmp/overlap"
expect "same-millisecond handover is an overlap" 1 "1 overlapping, smallest margin 0 ms" "$tmp/overlap"
expect "overlap named" 1 "handover 1 5 a b 1288834976656 1288834976656 0 OVERLAP" "$tmp/overlap"
gen "
out = []
for i in range(1000): out.append('a-c0 5 1 %d' % mk(1000 + i, 1, 5, 0))
for i in range(500): out.append('b-c1 5 1 %d' % mk(1500 + i, 1, 5, 1))" > "$tmp/interleave"
expect "interleaved holders overlap" 1 "0 duplicates" "$tmp/interleave"
expect "interleaved holders counted" 1 "999 handovers, 999 overlapping" "$tmp/interleave"
gen "
out = []
for i in range(500): out.append('a-c0 5 1 %d' % mk(1000 + 2 * i, 1, 5, 0))
for i in range(500): out.append('b-c1 5 1 %d' % mk(1001 + 2 * i, 1, 5, 0))" > "$tmp/turns"
expect "holders taking turns a millisecond apart overlap" 1 "999 handovers, 998 overlapping, smallest margin 1 ms" "$tmp/turns"
# Ids from a client's prefetch buffer (node "buffer") sit among the handover's ids: no
# handover of their own, but still counted for duplicates.
gen "
out = []
for i in range(1000): out.append('a-c0 5 1 %d' % mk(1000 + i, 1, 5, 0))
for i in range(1000): out.append('buffer-k0 5 1 %d' % mk(1000 + 2 * i, 1, 5, 1))
for i in range(1000): out.append('b-c1 5 1 %d' % mk(2100 + i, 1, 5, 0))" > "$tmp/buffer"
expect "buffered ids make no handover" 0 "1 handovers, 0 overlapping, smallest margin 101 ms" "$tmp/buffer"
gen "
out = []
for i in range(1000): out.append('a-c0 5 1 %d' % mk(1000 + i, 1, 5, 0))
out.append('buffer-k0 5 1 %d' % mk(1500, 1, 5, 0))" > "$tmp/bufdup"
expect "buffered ids counted for duplicates" 1 "1 duplicates" "$tmp/bufdup"
printf 'c0 1 1 notanumber\n' > "$tmp/bad"
expect "malformed line" 2 "1 malformed lines" "$tmp/bad"
out=$("$idcheck" /nonexistent 2>&1); rc=$?
if [ "$rc" -eq 2 ] && echo "$out" | grep -q "cannot open /nonexistent"; then passes=$((passes + 1)); else echo "FAIL: missing file: $out"; fails=$((fails + 1)); fi
echo "test_idcheck: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
