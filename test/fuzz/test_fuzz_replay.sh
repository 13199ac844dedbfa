#!/bin/sh
# test_fuzz_replay.sh -- replays every kept fuzz input (seeds and reproducers of
# bugs the fuzzers found) through its target; scripts/fuzz does the fuzzing.
set -u
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
status=0
for dir in "$top_srcdir"/test/fuzz/*/; do
  target=$(basename "$dir")
  replay="$top_builddir/test/fuzz/replay_$target"
  [ -x "$replay" ] || { echo "FAIL: no replay program for $target"; status=1; continue; }
  # shellcheck disable=SC2046
  "$replay" "$dir"* || status=1
done
exit $status
