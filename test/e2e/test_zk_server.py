#!/usr/bin/python3
"""test_zk_server.py -- snowflaked registered in a real ZooKeeper, end to end: static
and automatic claims, conflicts, exhaustion, the peer sanity checks and the clock check
against the ensemble (daemons and embedded holders), fencing, restart
safety, the lease (a frozen node), SIGTERM, snowflake-zk against live holders, and a fleet
mixing daemons with an embedded holder (libsnowflake-zk). One ZooKeeper server serves
every check; each check uses its own worker_id_path. Every process is stopped however
the test ends."""
import json
import os
import signal
import socket
import subprocess
import time

import sftest
from sftest import Server, ServiceUnavailable, decode, expect_raises
from thrift.transport import TTransport

PY = "/usr/bin/python3"
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
# The session of a node that a check fences on purpose by outlasting it (ZooKeeper down,
# the node frozen). Short, so those checks are quick.
SESSION_MS = 2000
# Every other node's session.
STEADY_SESSION_MS = sftest.STEADY_SESSION_MS
ZK = sftest.ZooKeeper()
# The port kept open while not serving: refusals are typed (ServiceUnavailable).
TYPED = ["--set", "snowflake.listen_while_not_serving=true"]


def zk_server(path, worker_id=1, datacenter_id=2, extra=(), env=None, admin=False,
              session_ms=STEADY_SESSION_MS, start_timeout_s=1):
    """A snowflaked registering under path in the test's ZooKeeper, trying its start for
    start_timeout_s (by default a moment, so that every failure shows at once)."""
    args = ["--zookeeper", ZK.hosts,
            "--set", "snowflake.worker_id_path=%s" % path,
            "--set", "zookeeper.session_timeout_ms=%d" % session_ms,
            "--set", "zookeeper.start_timeout_s=%d" % start_timeout_s,
            "--set", "zookeeper.claim_retries=0",
            "--set", "zookeeper.state_interval_ms=200"] + list(extra)
    return Server(args, env=env, admin=admin, worker_id=worker_id, datacenter_id=datacenter_id,
                  wait_serving=False)


def serving(server, timeout=sftest.PATIENCE):
    """Waits until the server serves; returns the worker id it holds."""
    m = server.wait_for(r"serving ids as worker id (\d+)", timeout)
    return int(m.group(1))


def refused(server, text, timeout=sftest.PATIENCE):
    """Waits for the server to stop by itself, non-zero, with text in its log."""
    rc = server.wait_exit(timeout)
    assert rc not in (0, None), "exit status %r, expected non-zero; log:\n%s" % (rc, server.log())
    assert text in server.log(), "%r not in the log:\n%s" % (text, server.log())


def worker_of_next_id(server, timeout=sftest.PATIENCE):
    """The worker id of an id from server, asked until it gives one: a busy machine may fence
    a node with a short session for a moment."""
    deadline = time.time() + timeout
    while True:
        try:
            with server.client() as api:
                return decode(api.get_id("zktest"))[2]
        except (ServiceUnavailable, TTransport.TTransportException, OSError):
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def assert_serving_again(server, worker_id, timeout=sftest.PATIENCE):
    """After fencing: the server claims worker_id again, hands out its ids and
    says so in /health and its log. While it is fenced its port may be closed or the
    call refused, depending on listen_while_not_serving."""
    deadline = time.time() + timeout
    worker = None
    while time.time() < deadline and worker is None:
        try:
            with server.client() as api:
                worker = decode(api.get_id("zktest"))[2]
        except (ServiceUnavailable, TTransport.TTransportException, OSError):
            time.sleep(0.2)
    assert worker == worker_id, "not serving again as %d (%r); log:\n%s" % (
        worker_id, worker, server.log())
    # Waited for, not read once: the session is short, and a renewal a loaded machine
    # delays may fence the node again for a moment right after that id.
    sftest.wait_until(lambda: server.http("/health")[0] == 200, timeout, "/health 200 again")
    assert "claimed again" in server.log(), server.log()


def connected_after_an_id(server, timeout=30.0):
    """A client of server (socket timeout `timeout` s) on which get_id just handed out an
    id, and that id's worker: asked on new connections until one comes, as a node with a
    short session may be fenced for a moment on a loaded machine."""
    deadline = time.time() + sftest.PATIENCE
    while True:
        client = None
        try:
            client = server.client(timeout=timeout)
            return client, decode(client.api.get_id("zktest"))[2]
        except (ServiceUnavailable, TTransport.TTransportException, OSError):
            if client is not None:
                client.close()
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def node_data(zk, path):
    """The data of path as text, or None while it does not exist."""
    from kazoo.exceptions import NoNodeError
    try:
        return zk.get(path)[0].decode()
    except NoNodeError:
        return None


def dead_port():
    """A loopback port nothing listens on (it was free a moment ago)."""
    return sftest.free_port()


def zk_tool(*args):
    """Runs scripts/snowflake-zk against the test's ZooKeeper: (exit status, output). The
    holders it asks are live, but may be slow to answer on a loaded machine: it waits for
    them as long as the tests wait for anything. Its messages (and kazoo's, on a dropped
    connection) follow its output only when it fails, so that --json output parses."""
    tool = os.path.join(sftest.TOP_SRCDIR, "scripts", "snowflake-zk")
    out = subprocess.run([PY, tool, "--zookeeper", ZK.hosts,
                          "--timeout-ms", "%d" % (sftest.PATIENCE * 500)] + list(args),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         timeout=4 * sftest.PATIENCE)
    return out.returncode, out.stdout + (out.stderr if out.returncode else "")


def static_claim_conflict_and_sigterm():
    """A static id is claimed with our host:port as data; a second server wanting it exits
    naming the holder; SIGTERM frees the node at once and records the last timestamp."""
    zk = ZK.client()
    try:
        first = zk_server("/static", worker_id=5).start()
        assert serving(first) == 5
        data, stat = zk.get("/static/5")
        assert data.decode() == "127.0.0.1:%d" % first.port, data
        assert stat.ephemeralOwner != 0, "the worker node must be ephemeral"
        with first.client() as api:
            assert api.get_worker_id() == 5
            last_ms, dc, worker, _ = decode(api.get_id("zktest"))
            assert (dc, worker) == (2, 5), (dc, worker)
        second = zk_server("/static", worker_id=5).start()
        refused(second, "127.0.0.1:%d" % first.port)
        assert "worker id 5 is already held" in second.log(), second.log()
        assert first.stop() == 0
        assert zk.exists("/static/5") is None, "the node outlived SIGTERM"
        kind, recorded = zk.get("/static-state/5")[0].decode().split()
        recorded = int(recorded)
        assert kind == "released", kind
        # The record is the last timestamp the node used: from the id we got to now (however
        # long the second server took to start and be refused; under valgrind on a busy
        # machine, over 10 s).
        assert last_ms <= recorded <= time.time() * 1000, (last_ms, recorded, time.time())
        third = zk_server("/static", worker_id=5).start()
        assert serving(third) == 5, "a restarted node must claim the freed id at once"
        third.stop()
    finally:
        zk.stop()


def ids_refused_until_startup_sleep_ends():
    """With listen_while_not_serving, after the claim and during startup_sleep_ms the
    node answers its worker id (peers may check it) but refuses get_id with
    ServiceUnavailable; then it serves."""
    s = zk_server("/sleep", worker_id=3,
                  extra=["--set", "snowflake.startup_sleep_ms=8000"] + TYPED).start()
    s.wait_for(r"waiting startup_sleep_ms")
    with s.client() as api:
        assert api.get_worker_id() == 3
        e = expect_raises(ServiceUnavailable, api.get_id, "zktest")
        assert "starting" in e.message, e.message
    assert serving(s) == 3
    with s.client() as api:
        assert decode(api.get_id("zktest"))[2] == 3
    s.stop()


# A wait the node is told to make (a start-up sleep, a claim retry's wait), and how soon
# after SIGTERM it must end instead: far apart, so that a loaded machine's slow exit is
# still told from a node that sat the wait out.
LONG_WAIT_MS = 120000
PROMPT_S = sftest.PATIENCE / 2


def stopped_promptly(server):
    """SIGTERM, then the exit status and how long the exit took."""
    t0 = time.monotonic()
    rc = server.stop()
    return rc, time.monotonic() - t0


def sigterm_during_start_up():
    """SIGTERM while the node waits out startup_sleep_ms, or waits to retry a claim, ends
    it at once with exit 0, and no worker node of its own is left behind."""
    zk = ZK.client()
    try:
        s = zk_server("/stopstart", worker_id=4,
                      extra=["--set", "snowflake.startup_sleep_ms=%d" % LONG_WAIT_MS]).start()
        s.wait_for(r"waiting startup_sleep_ms")
        assert zk.exists("/stopstart/4") is not None
        rc, took = stopped_promptly(s)
        assert rc == 0 and took < PROMPT_S, "exit %r after %.1f s of a %d ms startup_sleep_ms; " \
            "log:\n%s" % (rc, took, LONG_WAIT_MS, s.log())
        assert zk.exists("/stopstart/4") is None, "the node outlived SIGTERM during start-up"

        holder = zk_server("/stopstart", worker_id=6).start()
        assert serving(holder) == 6
        waiting = zk_server("/stopstart", worker_id=6,
                            extra=["--set", "zookeeper.claim_retries=100",
                                   "--set", "zookeeper.claim_retry_wait_ms=%d" % LONG_WAIT_MS]
                            ).start()
        waiting.wait_for(r"retry 1 of 100")
        rc, took = stopped_promptly(waiting)
        assert rc == 0 and took < PROMPT_S, "exit %r after %.1f s of a %d ms wait to retry a " \
            "claim; log:\n%s" % (rc, took, LONG_WAIT_MS, waiting.log())
        data, stat = zk.get("/stopstart/6")
        assert data.decode() == "127.0.0.1:%d" % holder.port, data
        holder.stop()
    finally:
        zk.stop()


def eight_auto_servers_get_distinct_ids():
    """Eight servers with worker_id = auto started at once hold eight distinct ids, each
    taken at its place in the claim queue (the lowest free one for the first): claimants
    that come together spread over the ids rather than all trying the lowest, so an id
    may be passed over for a moment, but none beyond the queue's reach."""
    servers = [zk_server("/auto", worker_id="auto")
               for _ in range(8)]
    try:
        for s in servers:
            s.start()
        ids = [serving(s) for s in servers]
        assert len(set(ids)) == 8 and max(ids) < 16, ids
        zk = ZK.client()
        try:
            assert sorted(int(k) for k in zk.get_children("/auto")) == sorted(ids)
            assert zk.get_children("/auto-locks") == [], "lock nodes left behind"
        finally:
            zk.stop()
        for s in servers:
            assert worker_of_next_id(s) == ids[servers.index(s)]
    finally:
        for s in servers:  # their worker nodes go with them, whatever failed
            s.stop()


def exhaustion_lists_holders():
    """With all 32 ids taken, an auto server exits listing the holders."""
    zk = ZK.client()
    try:
        for i in range(32):
            zk.create("/full/%d" % i, b"127.0.0.1:%d" % (1000 + i), ephemeral=True,
                      makepath=True)
        s = zk_server("/full", worker_id="auto",
                      extra=["--set", "snowflake.skip_sanity_checks=true"]).start()
        refused(s, "all 32 worker ids under /full are taken")
        assert "0=127.0.0.1:1000" in s.log() and "31=127.0.0.1:1031" in s.log(), s.log()
    finally:
        zk.stop()


def peer_in_another_datacenter():
    """A peer reporting another datacenter id stops start-up."""
    peer = zk_server("/dc", worker_id=1, datacenter_id=3).start()
    serving(peer)
    s = zk_server("/dc", worker_id=2, datacenter_id=2).start()
    refused(s, "datacenter id insanity")
    peer.stop()


def clock_30_seconds_ahead():
    """The environment of a process whose clock runs 30 s ahead (libfaketime)."""
    if not os.path.exists(FAKETIME_LIB):
        raise AssertionError("%s is missing: apt-get install faketime" % FAKETIME_LIB)
    return {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": "+30s",
            # an ASan build must accept a preloaded library before its own
            "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"}


def peer_clock_30_seconds_ahead():
    """A node whose clock is 30 s ahead (libfaketime) is refused before it claims: ZooKeeper
    stamps the write it makes first with the ensemble's clock. Started without the sanity
    checks it serves, and then a node on the true clock fails the peers' timestamp check."""
    s = zk_server("/clock", worker_id=1, env=clock_30_seconds_ahead()).start()
    refused(s, "clock sanity check failed: our clock is at least")
    assert "ms ahead of ZooKeeper's" in s.log(), s.log()
    peer = zk_server("/clock", worker_id=1, env=clock_30_seconds_ahead(),
                     extra=["--set", "snowflake.skip_sanity_checks=true"]).start()
    serving(peer)
    with peer.client() as api:
        skew = api.get_timestamp() - time.time() * 1000
    assert 25000 < skew < 35000, "faketime did not move the peer's clock: %d ms" % skew
    s = zk_server("/clock", worker_id=2).start()
    refused(s, "timestamp sanity check failed")
    peer.stop()


def clock_30_seconds_ahead_on_a_recorded_path():
    """Where the epoch is recorded already (a node on the true clock held an id and
    stopped: no peer is left to compare with), a node whose clock is 30 s ahead writes no
    record: the stamp on its claim's own first node shows the skew, the worker node of a
    static claim, the lock node of an automatic one. Refused, it leaves neither behind, and
    the record stays as the first holder wrote it."""
    first = zk_server("/recorded", worker_id=1).start()
    serving(first)
    first.stop()
    s = zk_server("/recorded", worker_id=2, env=clock_30_seconds_ahead()).start()
    refused(s, "clock sanity check failed: our clock is at least")
    assert "ms ahead of ZooKeeper's (its leader stamped our write of /recorded/2 " in s.log(), \
        s.log()
    a = zk_server("/recorded", worker_id="auto", env=clock_30_seconds_ahead()).start()
    refused(a, "clock sanity check failed: our clock is at least")
    assert "stamped our write of /recorded-locks/lock-" in a.log(), a.log()
    zk = ZK.client()
    try:
        assert zk.get_children("/recorded") == [], zk.get_children("/recorded")
        assert zk.get_children("/recorded-locks") == [], zk.get_children("/recorded-locks")
        data, stat = zk.get("/recorded-state")
        assert (data, stat.version) == (b"epoch_ms %d" % sftest.TWITTER_EPOCH_MS, 1), \
            (data, stat)
    finally:
        zk.stop()
        zk.close()


def unreachable_peer():
    """A registered peer that takes the connection but never answers stops start-up,
    naming it; with skip_unreachable_peers the server starts. A peer whose port refuses
    connections is not serving (a node closes its port while starting or fenced) and is
    skipped with a warning."""
    zk = ZK.client()
    mute = socket.socket()
    try:
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)  # the kernel completes connects; nobody ever reads or answers
        silent = "127.0.0.1:%d" % mute.getsockname()[1]
        zk.create("/unreach/4", silent.encode(), ephemeral=True, makepath=True)
        s = zk_server("/unreach", worker_id=1).start()
        refused(s, "peer %s holding worker id 4 under /unreach is unreachable" % silent)
        s = zk_server("/unreach", worker_id=1,
                      extra=["--set", "snowflake.skip_unreachable_peers=true"]).start()
        assert serving(s) == 1
        s.stop()
        zk.delete("/unreach/4")
        closed = "127.0.0.1:%d" % dead_port()
        zk.create("/unreach/4", closed.encode(), ephemeral=True)
        s = zk_server("/unreach", worker_id=1).start()
        assert serving(s) == 1, s.log()
        assert "peer %s (worker id 4) refuses connections: not serving" % closed in s.log(), \
            s.log()
        s.stop()
    finally:
        mute.close()
        zk.stop()


def deeply_nested_peer_reply():
    """A fake peer answers the start-up check with a reply nesting structs 200,000 deep
    (800 KB, one frame): the node reports the peer as broken and exits cleanly; reading
    the reply used to overflow its stack."""
    import socket
    import struct
    import threading
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]

    def fake_peer():
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(10)
            try:
                head = conn.recv(4)
                need = struct.unpack(">i", head)[0] if len(head) == 4 else 0
                while need > 0:
                    need -= len(conn.recv(need))
                name, depth = b"get_worker_id", 200000
                body = struct.pack(">Ii", 0x80010002, len(name)) + name + struct.pack(">i", 0)
                body += struct.pack(">bh", 12, 99) + struct.pack(">bh", 12, 1) * (depth - 1)
                body += b"\x00" * (depth + 1)
                conn.sendall(struct.pack(">i", len(body)) + body)
                conn.recv(1)
            except OSError:
                pass

    t = threading.Thread(target=fake_peer, daemon=True)
    t.start()
    zk = ZK.client()
    try:
        zk.create("/nestpeer/4", ("127.0.0.1:%d" % port).encode(), ephemeral=True, makepath=True)
        s = zk_server("/nestpeer", worker_id=1,
                      extra=["--set", "snowflake.thrift_server_threads=1"]).start()
        rc = s.wait_exit(sftest.PATIENCE)
        assert rc is not None and rc > 0, "exit status %r (negative: a signal); log:\n%s" % (
            rc, s.log())
        assert "nested more than 64" in s.log(), s.log()
    finally:
        zk.stop()
        listener.close()
        t.join(10)


def stale_node_of_restarted_peer():
    """A node left by a process that restarted at the same address and took
    another id is reported as stale, not as insanity; with
    skip_unreachable_peers it is skipped."""
    zk = ZK.client()
    try:
        peer = zk_server("/stale", worker_id=4).start()
        serving(peer)
        zk.create("/stale/0", ("127.0.0.1:%d" % peer.port).encode(), ephemeral=True)
        s = zk_server("/stale", worker_id=1).start()
        refused(s, "/stale/0 is stale: 127.0.0.1:%d now holds worker id 4" % peer.port)
        s = zk_server("/stale", worker_id=1,
                      extra=["--set", "snowflake.skip_unreachable_peers=true"]).start()
        assert serving(s) == 1
        s.stop()
        peer.stop()
    finally:
        zk.stop()


def restart_safety_waits_or_refuses():
    """A recorded timestamp ahead of the clock: within what a new holder waits (the lease plus
    max_clock_skew_ms, or max_clock_backward_wait_ms if longer) the server waits then serves
    ids after it; beyond it, it exits saying how far behind it is."""
    zk = ZK.client()
    try:
        # Far enough ahead to outlast a slow start (under valgrind, or on a loaded machine,
        # it takes seconds): a start that came after it would have nothing to wait for.
        ahead = int(time.time() * 1000) + 15000
        zk.create("/rs-state/6", b"released %d" % ahead, makepath=True)
        s = zk_server("/rs", worker_id=6,
                      extra=["--set", "snowflake.max_clock_backward_wait_ms=30000"]).start()
        serving(s)
        assert "waiting" in s.log(), s.log()
        with s.client() as api:
            ts = decode(api.get_id("zktest"))[0]
        assert ts > ahead, "id at %d, not after the recorded %d" % (ts, ahead)
        s.stop()
        zk.set("/rs-state/6", b"released %d" % (time.time() * 1000 + 120000))
        s = zk_server("/rs", worker_id=6,
                      extra=["--set", "snowflake.max_clock_backward_wait_ms=1000"]).start()
        refused(s, "behind the floor recorded for worker id 6")
        assert zk.exists("/rs/6") is None, "a refused node must not keep the id"
    finally:
        zk.stop()


def ops_tool_against_live_holders():
    """snowflake-zk list/inspect/stale/check with live holders; check fails once a holder
    reports another datacenter."""
    a = zk_server("/ops", worker_id=1).start()
    b = zk_server("/ops", worker_id=2).start()
    serving(a)
    serving(b)
    rc, out = zk_tool("--path", "/ops", "list")
    assert rc == 0, out
    assert "127.0.0.1:%d" % a.port in out and "127.0.0.1:%d" % b.port in out, out
    rc, out = zk_tool("--path", "/ops", "inspect", "2")
    assert rc == 0 and "worker_id=2" in out and "datacenter_id=2" in out, out
    rc, out = zk_tool("--path", "/ops", "--json", "stale")
    assert rc == 0 and json.loads(out) == [], out
    rc, out = zk_tool("--path", "/ops", "check")
    assert rc == 0, out
    other = zk_server("/ops", worker_id=3, datacenter_id=4,
                      extra=["--set", "snowflake.skip_sanity_checks=true"]).start()
    serving(other)
    rc, out = zk_tool("--path", "/ops", "check")
    assert rc == 1 and "datacenter" in out, out
    for s in (a, b, other):
        s.stop()


def ops_tool_check_times_each_answer():
    """check compares each holder's clock with ours at the moment it answered: a live
    holder asked before one that never answers (its 3 s timeout) is not reported 3 s
    behind with --max-skew-ms 2000; the silent one is reported as not answering."""
    a = zk_server("/ops-slow", worker_id=1).start()
    silent = socket.socket()  # accepts connections (the kernel does) and never answers
    zk = ZK.client()
    try:
        serving(a)
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        zk.create("/ops-slow/2", b"127.0.0.1:%d" % silent.getsockname()[1], ephemeral=True)
        rc, out = zk_tool("--path", "/ops-slow", "check", "--max-skew-ms", "2000",
                          "--timeout-ms", "3000")
        assert rc == 1 and "worker id 2: 127.0.0.1:%d does not answer" % silent.getsockname()[1] \
            in out, out
        assert "clock is" not in out, out
    finally:
        zk.stop()
        silent.close()
        a.stop()


def mixed_fleet_with_embedded_holder():
    """A program on libsnowflake-zk (test/tools/chaos_embedded) and daemons share one
    worker_id_path: the automatic claim skips the embedded holder's id, a daemon's peer
    check reads the embedded holder's datacenter from its node (a mismatch stops it),
    snowflake-zk check passes and inspect names the holder; a SIGTERM releases its id."""
    import tempfile
    with tempfile.TemporaryDirectory() as out:
        prog = os.path.join(sftest.TOP_BUILDDIR, "test", "tools", "chaos_embedded")
        log = open(os.path.join(out, "embedded.log"), "w")
        e = subprocess.Popen([prog, out, "e1", ZK.hosts, "/mixed", "auto", "2",
                              str(STEADY_SESSION_MS), "0", "10000", "500"],
                             stdout=log, stderr=log)
        try:
            state = os.path.join(out, "state-e1")
            sftest.wait_until(lambda: os.path.exists(state) and
                              open(state).read().startswith("serving 0"), sftest.PATIENCE,
                              "the embedded holder serving as worker id 0")
            c = zk_server("/mixed", worker_id="auto", datacenter_id=3).start()
            refused(c, "datacenter id insanity: /mixed/0 (embedded pid=%d" % e.pid)
            a = zk_server("/mixed", worker_id=1).start()
            serving(a)
            b = zk_server("/mixed", worker_id="auto").start()
            assert serving(b) == 2, b.log()
            rc, out_check = zk_tool("--path", "/mixed", "check")
            assert rc == 0, out_check
            rc, out_inspect = zk_tool("--path", "/mixed", "inspect", "0")
            assert rc == 0 and "embedded, pid %d" % e.pid in out_inspect, out_inspect
            e.send_signal(signal.SIGTERM)
            assert e.wait(sftest.PATIENCE) == 0, open(os.path.join(out, "embedded.log")).read()
            rc, out_list = zk_tool("--path", "/mixed", "list")
            assert rc == 0 and "embedded" not in out_list, out_list
            ids = [f for f in os.listdir(out) if f.endswith(".ids")]
            assert ids and os.path.getsize(os.path.join(out, ids[0])) > 0, ids
            for s in (a, b):
                s.stop()
        finally:
            if e.poll() is None:
                e.kill()
                e.wait()
            log.close()


def embedded_clock_30_seconds_ahead():
    """An embedded holder (test/tools/chaos_embedded) whose clock runs 30 s ahead: nobody
    queries it over Thrift, but ZooKeeper's stamp on its first write shows the skew, and it
    is refused before it claims (tried again for the start's 1 s, then it gives up)."""
    import tempfile
    with tempfile.TemporaryDirectory() as out:
        prog = os.path.join(sftest.TOP_BUILDDIR, "test", "tools", "chaos_embedded")
        env = sftest.clean_env(clock_30_seconds_ahead())
        preload = env.pop("LD_PRELOAD")  # into the program, not libtool's wrapper script
        run = subprocess.run([sftest.LIBTOOL, "--mode=execute", "env", "LD_PRELOAD=" + preload,
                              prog, out, "e1", ZK.hosts, "/eclock", "auto", "2",
                              str(STEADY_SESSION_MS),
                              "0", "10000", "500", "1000"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=60)
        assert run.returncode == 1, "exit status %d; log:\n%s" % (run.returncode, run.stdout)
        assert "clock sanity check failed: our clock is at least" in run.stdout, run.stdout
    zk = ZK.client()
    try:
        assert zk.get_children("/eclock") == [], "the refused holder left a node"
    finally:
        zk.stop()


def ops_tool_finds_split_worker_ids():
    """Two nodes of one datacenter registered apart, one through a chroot in its hosts: each
    may hold the same worker id as the other. snowflake-zk check finds the other path from
    ZooKeeper's root and fails, naming it; --other-fleet declares it a separate fleet."""
    zk = ZK.client()
    try:
        zk.ensure_path("/fleet-b")
    finally:
        zk.stop()
    a = zk_server("/split", worker_id=1, datacenter_id=3).start()
    b = Server(["--zookeeper", ZK.hosts + "/fleet-b",
                "--set", "snowflake.worker_id_path=/split",
                "--set", "zookeeper.session_timeout_ms=%d" % STEADY_SESSION_MS],
               worker_id=1, datacenter_id=3, wait_serving=False).start()
    try:
        serving(a)
        serving(b)
        rc, out = zk_tool("--path", "/split", "check")
        assert rc == 1 and "are split: /fleet-b/split" in out, out
        assert "127.0.0.1:%d" % b.port in out, out
        rc, out = zk_tool("--path", "/split", "check", "--other-fleet", "/fleet-b/split")
        assert rc == 0, out
        tool = os.path.join(sftest.TOP_SRCDIR, "scripts", "snowflake-zk")
        out = subprocess.run([PY, tool, "--zookeeper", ZK.hosts + "/fleet-b", "--path", "/split",
                              "check"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=60)
        assert out.returncode == 1 and "chroot /fleet-b" in out.stdout, out.stdout
        assert "are split: /split" in out.stdout, out.stdout
    finally:
        a.stop()
        b.stop()


def fencing_and_reregistration():
    """ZooKeeper down longer than the session timeout: with listen_while_not_serving,
    ids are refused with ServiceUnavailable and /health is 503 with the reason; once it
    is back the node registers again and serves."""
    s = zk_server("/fence", worker_id=7, admin=True, extra=TYPED, session_ms=SESSION_MS).start()
    serving(s)
    assert worker_of_next_id(s) == 7
    ZK.stop()
    try:
        deadline = time.time() + sftest.PATIENCE
        fenced = None
        while time.time() < deadline and fenced is None:
            with s.client() as api:
                try:
                    api.get_id("zktest")
                    time.sleep(0.1)
                except ServiceUnavailable as e:
                    fenced = e
        assert fenced is not None, "still handing out ids with ZooKeeper down; log:\n" + s.log()
        assert "ZooKeeper" in fenced.message, fenced.message
        status, body = s.http("/health")
        assert status == 503 and "ZooKeeper" in body, (status, body)
        time.sleep(SESSION_MS / 1000.0)  # longer than the session timeout in all
    finally:
        ZK.start()
    assert_serving_again(s, 7)
    zk = ZK.client()
    try:
        # Waited for: on a loaded machine the short session may be lost again, and the node
        # claimed anew, right after it served.
        sftest.wait_until(lambda: node_data(zk, "/fence/7") == "127.0.0.1:%d" % s.port,
                          sftest.PATIENCE, "/fence/7 naming the node")
    finally:
        zk.stop()
    s.stop()


def frozen_node_closes_queued_request():
    """The default (port closed while not serving) of the check below."""
    frozen_node_refuses_queued_request(False)


def frozen_node_refuses_queued_request(typed):
    """A node frozen (SIGSTOP) for 3x its session timeout with a get_id already written
    to its socket never answers it with an id: ZooKeeper expired the session meanwhile and
    another node may hold the id, and the lease ran out before the registry's thread could
    notice. With listen_while_not_serving the answer is ServiceUnavailable; by default the
    connection is closed unanswered (the port closes while fenced). Then the node registers
    again and serves."""
    s = zk_server("/frozen-%s" % typed, worker_id=8, admin=True,
                  extra=TYPED if typed else (), session_ms=SESSION_MS).start()
    try:
        assert serving(s) == 8
        client, worker = connected_after_an_id(s)
        try:
            assert worker == 8, worker
            try:
                sftest.freeze(s.proc.pid)
                client.api.send_get_id("zktest")
                time.sleep(3 * SESSION_MS / 1000.0)
            finally:
                os.kill(s.proc.pid, signal.SIGCONT)
            try:
                id_ = client.api.recv_get_id()
                raise AssertionError("a frozen node handed out id %d (worker %d) after its "
                                     "session expired; log:\n%s" % (id_, decode(id_)[2], s.log()))
            except ServiceUnavailable as e:
                assert typed, "a refusal a legacy client cannot decode: %s" % e.message
                # Refused before the id was made (the lease ran out: the reason names
                # ZooKeeper), or after, when the registry's thread, woken too, closed the
                # fence while the id was made.
                assert "ZooKeeper" in e.message or \
                    "fenced while the id was being made" in e.message, e.message
            except TTransport.TTransportException:
                assert not typed, "the connection was closed although the port stays open"
                assert s.wait_for(r"stopped accepting connections on port %d" % s.port)
        finally:
            client.close()
        assert_serving_again(s, 8)
    finally:
        s.stop()


def main():
    sftest.require_server()
    sftest.require_zookeeper_client()
    ZK.start()
    r = sftest.Runner("test_zk_server")
    r.run(static_claim_conflict_and_sigterm)
    r.run(ids_refused_until_startup_sleep_ends)
    r.run(sigterm_during_start_up)
    r.run(eight_auto_servers_get_distinct_ids)
    r.run(exhaustion_lists_holders)
    r.run(peer_in_another_datacenter)
    r.run(peer_clock_30_seconds_ahead)
    r.run(clock_30_seconds_ahead_on_a_recorded_path)
    r.run(unreachable_peer)
    r.run(deeply_nested_peer_reply)
    r.run(stale_node_of_restarted_peer)
    r.run(restart_safety_waits_or_refuses)
    r.run(ops_tool_against_live_holders)
    r.run(ops_tool_check_times_each_answer)
    r.run(ops_tool_finds_split_worker_ids)
    r.run(mixed_fleet_with_embedded_holder)
    r.run(embedded_clock_30_seconds_ahead)
    r.run(fencing_and_reregistration)
    r.run(frozen_node_closes_queued_request)
    r.run(frozen_node_refuses_queued_request, True)
    r.finish()


if __name__ == "__main__":
    main()
