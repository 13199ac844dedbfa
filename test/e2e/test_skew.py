#!/usr/bin/python3
"""test_skew.py -- the live clock check, end to end: three snowflaked registered in a real
ZooKeeper, one of them under libfaketime with its wall clock moved while it runs (its
monotonic and boot clocks left alone, as NTP would). Its skew gauge and its peers' offset
histogram follow the move; past max_peer_skew_ms it refuses ids, /health names the skew,
and the two others serve on; moved back, it serves again. And the reservation: a node
killed while its clock runs ahead and restarted on the true clock waits until it is past
every millisecond the crashed run could have used. Every process is stopped however the
test ends."""
import os
import re
import signal

import sftest
from sftest import Server, decode, wait_until
from test_clock import FAKETIME_LIB, FakeClock, require_faketime

ZK = sftest.ZooKeeper()
PATH = "/skew-test"
MAX_SKEW_MS = 1500


def node(worker_id, env=None):
    """A snowflaked under PATH with the live clock check bounded by MAX_SKEW_MS. Its session
    is long: these checks fence by the clock alone, and a renewal a loaded machine delays
    must not fence a node they expect to serve."""
    args = ["--zookeeper", ZK.hosts,
            "--set", "snowflake.worker_id_path=%s" % PATH,
            "--set", "zookeeper.session_timeout_ms=%d" % sftest.STEADY_SESSION_MS,
            "--set", "zookeeper.max_peer_skew_ms=%d" % MAX_SKEW_MS]
    return Server(args, env=env, admin=True, worker_id=worker_id, datacenter_id=2,
                  wait_serving=False)


def metric(srv, name):
    """The value of snowflake_<name> on srv's /metrics, or None when it is not there; a
    figure in seconds (name ending in _seconds) in whole ms."""
    status, body = srv.http("/metrics")
    assert status == 200, status
    m = re.search(r"^snowflake_%s (-?[\d.]+)$" % re.escape(name), body, re.M)
    if not m:
        return None
    return round(float(m.group(1)) * 1000) if name.endswith("_seconds") else int(m.group(1))


def skew_near(srv, want_ms, slack_ms=400):
    """True when srv's skew gauge is within slack of want, from a round with answers."""
    skew = metric(srv, "peer_clock_skew_seconds")
    return metric(srv, "peer_clock_known") == 1 and skew is not None and \
        abs(skew - want_ms) <= slack_ms


def ids_served(srv):
    """True when srv hands out an id now."""
    try:
        with srv.client(timeout=2.0) as api:
            return api.get_id("skew-test") > 0
    except Exception:  # refused, closed or unavailable: not serving
        return False


def offset_seen(srv):
    """True when srv's offset histogram on /stats.txt holds an offset in -10000..-100 ms."""
    status, text = srv.http("/stats.txt")
    m = re.search(r"peer_clock_offset_ms: \(le_-10000=(\d+), le_-1000=\d+, le_-100=(\d+)", text)
    return status == 200 and m is not None and int(m.group(2)) > int(m.group(1))


def test_gauge_follows_drift(nodes, clock):
    a, b, c = nodes
    for srv in nodes:
        wait_until(lambda: skew_near(srv, 0), sftest.PATIENCE, "a skew near 0 on worker %s" % srv.argv)
    clock.set("+1s")  # within the bound: measured, not refused
    wait_until(lambda: skew_near(c, 1000), sftest.PATIENCE, "the moved node's gauge near +1000 ms")
    # Waited for rather than read once: a node that refused for a skew within the bound
    # would refuse for as long as its clock stays moved, while on a loaded machine one call,
    # or one round trip of the estimate, may fail or run long.
    wait_until(lambda: ids_served(c), sftest.PATIENCE, "ids from a node within max_peer_skew_ms")
    wait_until(lambda: offset_seen(a) and offset_seen(b), sftest.PATIENCE,
               "an offset near -1000 ms (ours minus the moved node's) in /stats.txt")
    # Once both have measured the moved clock: an estimate the drift moved stays moved.
    try:
        wait_until(lambda: skew_near(a, 0) and skew_near(b, 0), sftest.PATIENCE,
                   "the others' estimates near 0")
    except AssertionError:
        raise AssertionError("one node's drift must not move the others' estimate: %r %r" % (
            metric(a, "peer_clock_skew_seconds"), metric(b, "peer_clock_skew_seconds")))
    assert "peer_clock_skew_ms:" in a.http("/stats.txt")[1]
    status, body = a.http("/metrics")
    assert "# TYPE snowflake_peer_clock_offset_seconds histogram" in body, body
    assert re.search(r'^snowflake_peer_clock_offset_seconds_bucket\{le="\+Inf"\} [1-9]', body,
                     re.M), body


def test_fence_trips_and_recovers(nodes, clock):
    a, b, c = nodes
    clock.set("+4s")
    # Its reservation in ZooKeeper may refuse ids first, until the next renewal.
    wait_until(lambda: "max_peer_skew_ms" in c.http("/health")[1], sftest.PATIENCE,
               "the moved node fenced for its skew")
    status, body = c.http("/health")
    assert status == 503, (status, body)
    assert "max_peer_skew_ms = %d" % MAX_SKEW_MS in body and "ahead of the peers'" in body, body
    assert metric(c, "peer_clock_fenced") == 1
    assert skew_near(c, 4000, 600), metric(c, "peer_clock_skew_seconds")
    assert not ids_served(c), "a node past max_peer_skew_ms must refuse ids"
    for srv in (a, b):
        # Waited for: the moved clock would fence them for as long as it stays moved, a
        # loaded machine only for a moment.
        wait_until(lambda: srv.http("/health")[0] == 200 and ids_served(srv), sftest.PATIENCE,
                   "the nodes whose clocks agree serving on: %s" % srv.argv)
    c.wait_for(r"our clock is \d+ ms ahead of the peers'")
    clock.set("+0")
    wait_until(lambda: c.http("/health")[0] == 200, sftest.PATIENCE, "the node serving again")
    wait_until(lambda: ids_served(c), sftest.PATIENCE, "ids from the node again")
    assert metric(c, "peer_clock_fenced") == 0
    c.wait_for(r"our clock is back within max_peer_skew_ms")


def crash_ahead_restart_behind(worker_id):
    """One run of the check below: the crashed run's last id and the restarted run's first,
    and whether the restart had to wait for the floor (None when it found the floor already
    passed, on a machine too slow to restart within the offset)."""
    ahead = {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": "+9s", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
             # with --enable-sanitizers, ASan need not be first in the library list
             "ASAN_OPTIONS": ":".join(filter(None, [os.environ.get("ASAN_OPTIONS"),
                                                    "verify_asan_link_order=0"]))}
    args = ["--zookeeper", ZK.hosts, "--set", "snowflake.worker_id_path=/crash-test",
            "--set", "zookeeper.session_timeout_ms=2000",
            "--set", "zookeeper.state_interval_ms=60000"]
    zk = ZK.client()
    crashed = restarted = None
    try:
        crashed = Server(args, env=ahead, worker_id=worker_id, datacenter_id=2,
                         wait_serving=False).start()
        crashed.wait_for(r"serving ids as worker id %d" % worker_id)
        with crashed.client() as api:
            last = max(decode(api.get_id("skew-test"))[0] for _ in range(100))
        crashed.stop(signal.SIGKILL)
        wait_until(lambda: zk.exists("/crash-test/%d" % worker_id) is None, sftest.PATIENCE,
                   "the crashed node's session gone")
        restarted = Server(args, worker_id=worker_id, datacenter_id=2,
                           wait_serving=False).start()
        restarted.wait_for(r"serving ids as worker id %d" % worker_id)
        waited = re.search(r"waiting \d+ ms for the clock to pass the floor recorded for worker "
                           r"id %d \(the reservation" % worker_id, restarted.log())
        with restarted.client() as api:
            first = decode(api.get_id("skew-test"))[0]
        return last, first, waited
    finally:
        for srv in (crashed, restarted):
            if srv is not None:
                srv.stop()
        zk.stop()


def test_crash_ahead_restart_behind():
    """kill -9 while the clock runs 9 s ahead (under the 10 s that the claim's check against
    ZooKeeper's clock allows), a restart on the true clock on the same worker id: the last
    timestamp is recorded only by the lease renewals' reservations (the periodic record set
    to a minute), and they hold the new run back. The offset is fixed for the crashed run's
    life (FAKETIME, not a file read on every clock call, which a busy machine now and then
    reads as no offset at all). A restart slower than the offset finds nothing to wait for
    and proves nothing: such a run is tried again, on another worker id, up to 3 runs."""
    for run, worker_id in enumerate((5, 6, 7), 1):
        last, first, waited = crash_ahead_restart_behind(worker_id)
        assert first > last, "the restarted run's first id at %d, not after the crashed " \
            "run's last at %d" % (first, last)
        if waited:
            return
        print("   run %d: the restart came after the floor had passed (a slow machine): "
              "again" % run)
    raise AssertionError("in 3 runs the restart never had to wait for the floor: the machine "
                         "restarted slower than the clock's 9 s offset, so nothing was shown")


def main():
    sftest.require_server()
    sftest.require_zookeeper_client()
    require_faketime()
    r = sftest.Runner("test_skew")
    clock = FakeClock()
    env = dict(clock.env(), FAKETIME_DONT_FAKE_MONOTONIC="1")
    try:
        ZK.start()
        nodes = []
        for worker, node_env in ((1, None), (2, None), (3, env)):
            srv = node(worker, node_env).start()
            srv.wait_for(r"serving ids as worker id %d" % worker)
            nodes.append(srv)
        r.run(test_gauge_follows_drift, nodes, clock)
        r.run(test_fence_trips_and_recovers, nodes, clock)
        r.run(test_crash_ahead_restart_behind)
    finally:
        clock.remove()
        ZK.remove()
    r.finish()


if __name__ == "__main__":
    main()
