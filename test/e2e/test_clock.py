#!/usr/bin/python3
"""test_clock.py -- a clock going backwards, end to end: snowflaked runs under
libfaketime, the test steps the running process's clock back five seconds,
the client gets InvalidSystemClock ("Clock moved backwards ..."), and once the
clock is stepped forward again ids come again, still increasing."""
import os
import re
import tempfile

import sftest
from sftest import InvalidSystemClock, Server, decode, expect_raises

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
BACK_MS = 5000


class FakeClock:
    """The faketime offset file the server reads on every clock call."""

    def __init__(self):
        fd, self.path = tempfile.mkstemp(prefix="sf-faketime-", suffix=".rc")
        os.close(fd)
        self.set("+0")

    def set(self, offset):
        tmp = self.path + ".new"
        with open(tmp, "w") as f:
            f.write(offset + "\n")
        os.replace(tmp, self.path)  # never let the server read a half-written file

    def env(self):
        return {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME_TIMESTAMP_FILE": self.path,
                "FAKETIME_NO_CACHE": "1",
                # with --enable-sanitizers, ASan need not be first in the library list
                "ASAN_OPTIONS": ":".join(filter(None, [os.environ.get("ASAN_OPTIONS"),
                                                       "verify_asan_link_order=0"]))}

    def remove(self):
        os.unlink(self.path)


def test_clock_backwards(srv, clock):
    with srv.client() as api:
        before = api.get_id("infra-dm")
        ts_before = api.get_timestamp()
        clock.set("-%ds" % (BACK_MS // 1000))
        ts_back = api.get_timestamp()
        assert ts_back < ts_before - BACK_MS // 2, "the fake clock did not step back"
        e = expect_raises(InvalidSystemClock, api.get_id, "infra-dm")
        m = re.search(r"Clock moved backwards.*?(\d+) milliseconds", e.message)
        assert m, e.message
        assert BACK_MS // 2 <= int(m.group(1)) <= BACK_MS + 1000, e.message
        e = expect_raises(InvalidSystemClock, api.get_ids, "infra-dm", 10)
        assert "Clock moved backwards" in e.message, e.message
        assert api.get_worker_id() == 1, "other methods must keep working"
        clock.set("+0")
        after = api.get_id("infra-dm")
        batch = api.get_ids("infra-dm", 100)
    assert after > before and batch[0] > after, (before, after, batch[0])
    assert decode(after)[0] >= decode(before)[0]
    assert_fresh_client(srv)


def assert_fresh_client(srv):
    """A new connection gets ids after the clock recovered."""
    with srv.client() as api:
        assert api.get_id("infra-dm") > 0


def test_refusals_counted(srv, clock):
    status, body = srv.http("/stats.json")
    assert status == 200, status
    assert re.search(r'"[^"]*(clock|backward)[^"]*"\s*:\s*[1-9]', body), \
        "no clock-backwards counter above 0 in %s" % body


def require_faketime():
    """Skips the test when libfaketime is not installed."""
    if not os.path.exists(FAKETIME_LIB):
        print("%s is missing: apt-get install faketime" % FAKETIME_LIB)
        raise SystemExit(sftest.SKIP)


def main():
    sftest.require_server()
    require_faketime()
    r = sftest.Runner("test_clock")
    clock = FakeClock()
    try:
        with Server(env=clock.env(), admin=True) as srv:
            r.run(test_clock_backwards, srv, clock)
            r.run(test_refusals_counted, srv, clock)
    finally:
        clock.remove()
    r.finish()


if __name__ == "__main__":
    main()
