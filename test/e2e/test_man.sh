#!/bin/sh
# test_man.sh -- the manual pages render without a single groff warning, carry a NAME
# line that lexgrog (and so apropos/whatis) reads, and cannot drift from the settings:
# mkman refuses a settings file that leaves out a key the server knows.
set -u
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }
tmp=$(mktemp -d /tmp/sf-man-XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM

for page in snowflaked.8 snowflake.1 snowflake-zk.8 snowflake.conf.5 snowflake_zk.3 snowflake_client.3; do
  f="$top_builddir/man/$page"
  name=${page%.*}
  if [ ! -s "$f" ]; then bad "$page was not built"; continue; fi
  out=$(lexgrog "$f" 2>&1)
  case $out in
    *": \"$name - "*) ok "lexgrog reads the NAME line of $page" ;;
    *) bad "lexgrog on $page: $out" ;;
  esac
  warnings=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$f" 2>&1 >/dev/null)
  if [ -z "$warnings" ]; then ok "man --warnings is silent on $page"
  else bad "man --warnings on $page: $warnings"; fi
  lines=$(LC_ALL=C.UTF-8 MANWIDTH=80 man -l "$f" 2>/dev/null | wc -l)
  if [ "$lines" -gt 20 ]; then ok "$page renders ($lines lines)"; else bad "$page renders $lines lines"; fi
done

# Every key of the server's settings table is documented in the page.
keys=$(grep -c '^  \[' "$top_builddir/man/snowflaked.help")
documented=$(grep -c '^Allowed: ' "$top_builddir/man/snowflake.conf.5")
if [ "$keys" -gt 20 ] && [ "$keys" -eq "$documented" ]; then ok "snowflake.conf(5) documents all $keys keys"
else bad "snowflake.conf(5) documents $documented keys of $keys"; fi

# A settings file missing a key the server knows stops the build, naming the key.
grep -v '^max_batch_size' "$top_srcdir/conf/snowflake.conf" >"$tmp/short.conf"
if out=$(/usr/bin/python3 "$top_srcdir/man/mkman" --manual "$top_srcdir/doc/manual" --conf "$tmp/short.conf" \
    --help-text "$top_builddir/man/snowflaked.help" --version 0 --sysconfdir /etc \
    --unitdir /lib/systemd/system --out "$tmp" 2>&1); then
  bad "mkman accepted a settings file without max_batch_size"
else
  case $out in
    *"[snowflake] max_batch_size"*) ok "mkman refuses a settings file without a known key" ;;
    *) bad "mkman failed without naming the key: $out" ;;
  esac
fi

echo "test_man: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
