#!/bin/sh
# test_cli.sh -- `snowflake decode` on known ids, bad input, and stdin.
set -u
cli="${top_builddir:-.}/src/snowflake"
fails=0; passes=0
check() { # name, expected-substring, actual
  case "$3" in
    *"$2"*) passes=$((passes + 1)) ;;
    *) echo "FAIL: $1: expected '$2' in:"; echo "$3"; fails=$((fails + 1)) ;;
  esac
}
# 1000 ms after Twitter's epoch, datacenter 3, worker 7, sequence 42.
out=$("$cli" decode 4194725930)
check "table row" "4194725930           2010-11-04T01:42:55.657Z  1288834975657           3      7       42" "$out"
out=$("$cli" decode --json 4194725930)
check "json" '{"id":4194725930,"id_str":"4194725930","timestamp_ms":1288834975657,"time":"2010-11-04T01:42:55.657Z","datacenter_id":3,"worker_id":7,"sequence":42}' "$out"
out=$(printf '4194725930\n0\n' | "$cli" decode --json)
check "stdin first" '"id":4194725930' "$out"
check "stdin second" '"id":0,"id_str":"0","timestamp_ms":1288834974657' "$out"
out=$("$cli" decode --epoch 0 --json 4194725930)
check "custom epoch" '"timestamp_ms":1000,' "$out"
out=$("$cli" decode 4194725930 abc -5 0 2>&1); rc=$?
check "bad input exit" "1" "$rc"
check "valid decoded before errors" "2010-11-04T01:42:55.657Z" "$out"
check "non-numeric named" "'abc' is not an id: expected a decimal integer 0..9223372036854775807" "$out"
check "negative named" "id -5 is negative: allowed 0..9223372036854775807" "$out"
check "later valid id still decoded" "2010-11-04T01:42:54.657Z" "$out"
out=$("$cli" decode 99999999999999999999 2>&1); rc=$?
check "overflow exit" "1" "$rc"
check "overflow named" "'99999999999999999999' is not an id" "$out"
out=$("$cli" decode --epoch 9223372036854775807 4194725930 2>&1); rc=$?
check "huge epoch exit" "2" "$rc"
check "huge epoch named" "--epoch '9223372036854775807' is not valid: expected ms 0..4102444800000" "$out"
out=$("$cli" frobnicate 2>&1); rc=$?
check "unknown command exit" "2" "$rc"
check "unknown command named" "unknown command 'frobnicate'" "$out"
out=$("$cli" --help)
check "help lists decode" "decode [--json]" "$out"
echo "test_cli: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
