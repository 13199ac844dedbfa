#!/bin/sh
# test_handler_timens.sh -- runs the handler's tests in a time namespace whose boot
# clock is 100 s ahead of its monotonic clock, as after a suspend: a lease kept on the
# wrong clock then shows. Needs unshare(1) with --time (util-linux) and root.
set -eu
bin=${top_builddir:-.}/test/unit/check_handler
if ! unshare --time --boottime 100000 true 2>/dev/null; then
  echo "test_handler_timens: cannot create a time namespace (unshare --time needs root and Linux >= 5.6)"
  exit 1
fi
exec unshare --time --boottime 100000 "$bin"
