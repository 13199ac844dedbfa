#!/bin/sh
# test_cli.sh -- `snowflake decode` on known ids, bad input, and stdin; `range`, `compose`,
# `encode` and `decode --baseNN` on answers worked out by hand from the bit layout, round
# trips through the CLI, and bad input named with its allowed range.
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
check "non-numeric named" "'abc' is not an id in base 10: 'a' at position 1 is not one of" "$out"
check "negative named" "'-5' is not an id in base 10: it is negative; allowed 0..9223372036854775807" "$out"
check "later valid id still decoded" "2010-11-04T01:42:54.657Z" "$out"
out=$("$cli" decode 99999999999999999999 2>&1); rc=$?
check "overflow exit" "1" "$rc"
check "overflow named" "'99999999999999999999' in base 10 is past the largest id" "$out"
out=$("$cli" decode --epoch 9223372036854775807 4194725930 2>&1); rc=$?
check "huge epoch exit" "2" "$rc"
check "huge epoch named" "--epoch '9223372036854775807' is not valid: expected ms 0..4102444800000" "$out"
out=$("$cli" frobnicate 2>&1); rc=$?
check "unknown command exit" "2" "$rc"
check "unknown command named" "unknown command 'frobnicate'" "$out"
out=$("$cli" --help)
check "help lists decode" "decode [--json]" "$out"
# 2026-11-01T00:00Z is Unix ms 1793491200000, 504656225343 ms after Twitter's epoch.
lo=$((504656225343 << 22)); hi=$(((504656225343 + 86400000) << 22 | 4194303))
out=$("$cli" range 2026-11-01T00:00Z 2026-11-02T00:00Z)
check "range of a day" "$lo $hi" "$out"
out=$("$cli" range 1793491200000 1793577600000)
check "range in unix ms" "$lo $hi" "$out"
out=$("$cli" range 2026-11-01T01:00+01:00 2026-11-02)
check "range with an offset and a date" "$lo $hi" "$out"
out=$("$cli" range --json 2026-11-01T00:00:00.000Z 2026-11-01T00:00:00.000Z)
check "range json, ids also as strings" "\"lo\":$lo,\"lo_str\":\"$lo\",\"hi\":$((lo + 4194303)),\"hi_str\":\"$((lo + 4194303))\"" "$out"
out=$("$cli" range --epoch 0 0 0)
check "range from a custom epoch" "0 4194303" "$out"
out=$("$cli" range 2026-11-02T00:00Z 2026-11-01T00:00Z 2>&1); rc=$?
check "from after to exit" "2" "$rc"
check "from after to named" "from 1793577600000 ms is after to 1793491200000 ms: allowed from <= to" "$out"
out=$("$cli" range 2010-11-04T01:42:54.656Z 2026-11-01T00:00Z 2>&1); rc=$?
check "before the epoch exit" "2" "$rc"
check "before the epoch named" "from 1288834974656 ms is outside the ids' time range 1288834974657..3487858230208" "$out"
out=$("$cli" range 2026-11-01T00:00Z 2080-07-10T17:30:30.209Z 2>&1); rc=$?
check "past 41 bits exit" "2" "$rc"
check "past 41 bits named" "to 3487858230209 ms is outside" "$out"
out=$("$cli" range yesterday 1 2>&1); rc=$?
check "bad time exit" "2" "$rc"
check "bad time named" "FROM 'yesterday' is not a time: expected ISO-8601" "$out"

# Every id of a range decodes inside it; the ids just outside decode outside.
id=$("$cli" compose --time 2026-11-01T00:00Z --datacenter 3 --worker 7 --sequence 42)
check "compose" "$((lo | 3 << 17 | 7 << 12 | 42))" "$id"
out=$("$cli" decode --json "$id")
check "compose decodes back" '"timestamp_ms":1793491200000,"time":"2026-11-01T00:00:00.000Z","datacenter_id":3,"worker_id":7,"sequence":42' "$out"
out=$("$cli" decode --json $((lo - 1)) $((hi + 1)))
check "before lo" '"time":"2026-10-31T23:59:59.999Z"' "$out"
check "after hi" '"time":"2026-11-02T00:00:00.001Z"' "$out"
out=$("$cli" compose --time 2026-11-01T00:00Z --sequence 4096 2>&1); rc=$?
check "compose bad sequence exit" "2" "$rc"
check "compose bad sequence named" "--sequence '4096' is not valid: expected 0..4095" "$out"
out=$("$cli" compose --worker 1 2>&1); rc=$?
check "compose without time exit" "2" "$rc"
check "compose without time named" "compose needs --time T" "$out"
for sub in range compose encode; do
  out=$("$cli" $sub --help 2>&1); rc=$?
  check "$sub --help exit" "0" "$rc"
  check "$sub --help usage" "WHERE id BETWEEN lo AND hi" "$out"
done

# String forms: bwmarrin's base58, fixed-width base62 and Crockford base32, and back.
out=$("$cli" encode --base58 0 57 58 9223372036854775807)
check "base58" "1
Z
21
npL6MjP8Qfc" "$out"
out=$("$cli" encode --base62 0 9223372036854775807)
check "base62 fixed width" "00000000000
AzL8n0Y58m7" "$out"
out=$("$cli" encode --base32 4194725930 9223372036854775807)
check "base32 fixed width" "0000003X0CW1A
7ZZZZZZZZZZZZ" "$out"
for base in 32 58 62; do
  text=$("$cli" encode --base$base "$id")
  out=$("$cli" decode --json --base$base "$text")
  check "base$base round trip" "\"id_str\":\"$id\"" "$out"
done
out=$(printf '0000003x0cw1a\n7ZZZZZZZZZZZZ\n' | "$cli" decode --json --base32)
check "base32 on stdin, lower case" '"id":4194725930,' "$out"
check "base32 on stdin, largest" '"id_str":"9223372036854775807"' "$out"
out=$("$cli" decode --base58 12l0 npL6MjP8Qfd 21 2>&1); rc=$?
check "bad base58 exit" "1" "$rc"
check "bad base58 character named" "'12l0' is not an id in base 58: 'l' at position 3 is not one of" "$out"
check "base58 overflow named" "'npL6MjP8Qfd' in base 58 is past the largest id: allowed 0..9223372036854775807" "$out"
check "good base58 still decoded" "58  " "$out"
out=$("$cli" encode --base62 12 -3 2>&1); rc=$?
check "encode bad id exit" "1" "$rc"
check "encode good id printed" "0000000000C" "$out"
check "encode bad id named" "'-3' is not an id in base 10" "$out"
# Every decimal is read alike: digits only, a negative id is bad input (exit 1) everywhere.
for args in "decode" "encode --base58"; do
  for bad in " 12" "12 " "+12" "-5" ""; do
    out=$("$cli" $args "$bad" 2>&1); rc=$?
    check "$args '$bad' exit" "1" "$rc"
    check "$args '$bad' named" "'$bad' is not an id in base 10" "$out"
  done
done
out=$(printf ' 12\n' | "$cli" decode 2>&1); rc=$?
check "decode ' 12' on stdin exit" "1" "$rc"
out=$("$cli" --servers 127.0.0.1:1 --timeout-ms ' 5' id 2>&1); rc=$?
check "--timeout-ms ' 5' exit" "2" "$rc"
check "--timeout-ms ' 5' named" "--timeout-ms ' 5' is not valid" "$out"
out=$("$cli" --servers 127.0.0.1:1 --timeout-ms +5 id 2>&1); rc=$?
check "--timeout-ms +5 exit" "2" "$rc"
out=$("$cli" decode --epoch ' 0' 12 2>&1); rc=$?
check "--epoch ' 0' exit" "2" "$rc"
out=$("$cli" encode 12 2>&1); rc=$?
check "encode without a base exit" "2" "$rc"
out=$("$cli" --help)
check "help lists range" "range [--json] [--epoch MS] FROM TO" "$out"
check "help lists encode" "encode --base32|--base58|--base62 ID..." "$out"
echo "test_cli: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
