#!/usr/bin/python3
"""test_start.py -- a registered snowflaked's start-up when it fails for a reason that can
pass, against a real ZooKeeper: down at start, the node keeps trying on its defaults
(saying so on the admin endpoint, to systemd and, once a try, in its log) and serves as
soon as ZooKeeper is back, without a supervisor; SIGTERM ends the wait at once;
[zookeeper] start_timeout_s bounds it, and what cannot pass (another epoch) exits at once.
Every process is stopped however the test ends."""
import json
import time

import sftest
from sftest import NotifySocket, Server

# How long ZooKeeper stays down before it comes up (the operators' case: a rolling restart
# or an outage under a fleet that starts), and how soon after its return the node serves.
DOWN_S = 90
SERVES_WITHIN_S = 20
ZK = sftest.ZooKeeper()


def registered(extra=(), env=None, admin=True):
    """A node registering in ZK on its defaults but for the ports and bind address; with admin,
    started once its admin endpoint answers."""
    return Server(["--zookeeper", ZK.hosts] + list(extra), env=env, admin=admin, worker_id=None,
                  datacenter_id=None, wait_serving=False)


def state(server):
    """The admin endpoint's /state.json."""
    status, body = server.http("/state.json")
    assert status == 200, (status, body)
    return json.loads(body)


def tries_logged(server):
    """The log's lines that announce another try of the start."""
    return [line for line in server.lines if "trying again in" in line]


def zookeeper_down_at_start_then_back():
    """ZooKeeper down when the node starts and back DOWN_S later: meanwhile the node runs,
    the admin endpoint says it is starting (the reason, the tries, the next one) and so does
    STATUS=; the log says each try once; SERVES_WITHIN_S after ZooKeeper is back it serves,
    by itself."""
    ZK.stop()
    zk_up = False
    notify = NotifySocket()
    s = registered(env={"NOTIFY_SOCKET": notify.path})
    try:
        s.start()
        began = time.time()
        seen_next_try = False
        while time.time() - began < DOWN_S:
            st = state(s)
            assert not st["serving"] and st["reason_code"] == "starting", st
            assert st["reason"].startswith("starting"), st
            if st["start"] is not None and st["start"]["next_try_ms"] is not None:
                assert st["start"]["tries"] >= 1, st
                seen_next_try = True
            assert s.proc.poll() is None, "the node exited while ZooKeeper was down:\n" + s.log()
            time.sleep(1)
        assert seen_next_try, "no wait between tries seen on /state.json: %r" % state(s)
        st = state(s)
        logged = len(tries_logged(s))
        assert 1 <= logged <= st["start"]["tries"], \
            "%d tries logged for %d made:\n%s" % (logged, st["start"]["tries"], s.log())
        notify.wait_for(lambda m: "STATUS=starting: " in m and "trying again in" in m, 1)
        ZK.start()
        zk_up = True
        back = time.time()
        s.wait_for(r"serving ids as worker id 0", sftest.PATIENCE)
        took = time.time() - back
        print("served %.1f s after ZooKeeper came back (%d tries while it was down)"
              % (took, st["start"]["tries"]))
        assert took <= SERVES_WITHIN_S, "served %.1f s after ZooKeeper came back" % took
        assert state(s)["start"] is None, state(s)
        notify.wait_for(lambda m: "READY=1" in m, sftest.PATIENCE)
        with s.client() as api:
            assert sftest.decode(api.get_id("starttest"))[2] == 0
    finally:
        s.stop()
        notify.close()
        if not zk_up:
            ZK.start()


def sigterm_while_trying_stops_at_once():
    """SIGTERM while the start waits for ZooKeeper: the node exits 0 at once (the harness
    fails a crash or another status), no try left running."""
    ZK.stop()
    s = registered()
    try:
        s.start()
        s.wait_for(r"trying again in", sftest.PATIENCE)
        t0 = time.time()
        assert s.stop() == 0, s.log()
        took = time.time() - t0
        print("stopped %.2f s after SIGTERM while trying" % took)
        assert took < 15, "SIGTERM took %.1f s to stop a node waiting for ZooKeeper" % took
    finally:
        s.stop()
        ZK.start()


def start_timeout_exits_saying_what_it_tried():
    """[zookeeper] start_timeout_s: once it is up, the node exits 1, saying how often and how
    long it tried."""
    ZK.stop()
    s = registered(["--set", "zookeeper.start_timeout_s=3"])
    try:
        s.start()
        rc = s.wait_exit(sftest.PATIENCE)
        assert rc == 1, "exit status %r; log:\n%s" % (rc, s.log())
        m = s.wait_for(r"cannot claim a worker id: .*no ZooKeeper server at '%s'.*\(tried (\d+) "
                       r"times? in \d+ s; start_timeout_ms = 3000\)" % ZK.hosts, 5)
        assert int(m.group(1)) >= 1, s.log()
    finally:
        s.stop()
        ZK.start()


def another_epoch_exits_at_once():
    """What no try can mend (the path records another epoch) ends the start at once, whatever
    start_timeout_s allows."""
    zk = ZK.client()
    try:
        zk.ensure_path("/epoch-start-state")
        zk.set("/epoch-start-state", b"epoch_ms 1400000000000")
    finally:
        zk.stop()
        zk.close()
    # No admin endpoint to wait for: the node may exit before a client reaches it.
    s = registered(["--set", "snowflake.worker_id_path=/epoch-start"], admin=False)
    try:
        s.start()
        t0 = time.time()
        rc = s.wait_exit(sftest.PATIENCE)
        took = time.time() - t0
        assert rc == 1, "exit status %r; log:\n%s" % (rc, s.log())
        assert "count from epoch_ms 1400000000000" in s.log(), s.log()
        assert not tries_logged(s), "it tried again:\n" + s.log()
        print("exited %.1f s after it listened" % took)
    finally:
        s.stop()


def main():
    sftest.require_server()
    sftest.require_zookeeper_client()
    ZK.start()
    r = sftest.Runner("test_start")
    r.run(another_epoch_exits_at_once)
    r.run(start_timeout_exits_saying_what_it_tried)
    r.run(sigterm_while_trying_stops_at_once)
    r.run(zookeeper_down_at_start_then_back)
    r.finish()


if __name__ == "__main__":
    main()
