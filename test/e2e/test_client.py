#!/usr/bin/python3
"""test_client.py -- libsnowflake-client against real snowflaked nodes and a real ZooKeeper,
through test/tools/client_drive (one client, driven a command at a time) and the `snowflake`
CLI: failover on each kind of failure (a killed node, a frozen one, ServiceUnavailable,
InvalidSystemClock), no retry of the caller's own errors, deadlines with every node down,
discovery following nodes that join, fence and leave, the prefetch buffer's age bound, a node
whose name does not resolve in time, the options sfc_open refuses, and the CLI's --servers,
--zookeeper and watch. Every process is stopped however the test ends."""
import array
import fcntl
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import termios
import threading
import time

import sftest
from sftest import Server, wait_until
from test_clock import FAKETIME_LIB, FakeClock

DRIVE = os.path.join(sftest.TOP_BUILDDIR, "test", "tools", "client_drive")
DRIVE_COUNTED = DRIVE + "_counted"  # counts the pool's locks: the `locks` command
ZK = sftest.ZooKeeper()
# A registered node's session; the node a check freezes past its session has a shorter one,
# so that the freeze is short.
SESSION_MS = sftest.STEADY_SESSION_MS
FROZEN_SESSION_MS = 4000
# The deadline of calls in checks that are not about deadlines: long enough for a node on a
# busy machine to answer, so that an error is the client's fault and not the machine's.
CALL_MS = 10000
SF_ERR_REFUSED, SF_ERR_CLOCK, SF_ERR_UNAVAILABLE = -3, -4, -5
# What a call may take beyond its deadline here: scheduling on a busy machine (a woken
# thread waiting for a core) adds to every call, while what these tests catch, a lookup or a
# refill that ignores the deadline, overran it by far more (a lookup by the resolver's 30 s).
OVERRUN_MS = 2000


class Drive:
    """One client_drive process: ask() sends a command and returns its answer's words."""

    def __init__(self, *args, prefix=(), drive=DRIVE):
        # Every GObject from malloc, so that a sanitizer build sees each one a connection
        # leaves behind (GLib's slices hide them until memory is reused).
        self.proc = subprocess.Popen(list(prefix) + [drive] + list(args), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True,
                                     env=dict(os.environ, G_SLICE="always-malloc"))
        first = self.proc.stdout.readline().strip()
        assert first == "ready", "client_drive did not start: %r" % first

    def send(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def answer(self, command):
        line = self.proc.stdout.readline().strip()
        assert line, "client_drive ended on %r (exit %r)" % (command, self.proc.poll())
        return line

    def ask(self, command):
        self.send(command)
        return self.answer(command)

    def unread(self):
        """How many bytes of the commands sent client_drive has not read yet."""
        n = array.array("i", [0])
        fcntl.ioctl(self.proc.stdin.fileno(), termios.FIONREAD, n)
        return n[0]

    def run(self, seconds):
        line = self.ask("run %d" % seconds)
        head, _, first_error = line.partition(" first_error=")
        out = dict(kv.split("=") for kv in head.split()[1:])
        out = {k: int(v) for k, v in out.items()}
        out["first_error"] = first_error
        return out

    def servers(self):
        words = self.ask("servers").split()
        return int(words[1]), words[3] if len(words) > 3 else ""

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            try:
                self.proc.wait(sftest.PATIENCE)  # a busy ZooKeeper may be slow to end its session
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        assert self.proc.returncode == 0, "client_drive exit %r" % self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def open_error(*args):
    """What client_drive says when sfc_open refuses its options: (exit status, message)."""
    out = subprocess.run([DRIVE] + list(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         text=True, timeout=60)
    return out.returncode, out.stdout.strip()


class SilentResolver:
    """A DNS server that never answers (a UDP socket on port 53 of a loopback address of its
    own) and the prefix that runs a program with it as its only resolver: a private mount
    namespace in which /etc/resolv.conf and /etc/nsswitch.conf are the test's own. Needs root
    and unshare(1); .why says what is missing otherwise."""

    def __init__(self):
        import tempfile
        self.why = None
        self.dir = tempfile.mkdtemp(prefix="sf-dns-")
        self.sock = None
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            self.why = "needs root and unshare(1) for a mount namespace"
            return
        for _ in range(20):
            addr = "127.%d.%d.%d" % (random.randint(1, 254), random.randint(1, 254),
                                     random.randint(2, 254))
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                self.sock.bind((addr, 53))
                break
            except OSError:
                self.sock.close()
                self.sock = None
        if self.sock is None:
            self.why = "no loopback address had port 53 free"
            return
        self.resolv = os.path.join(self.dir, "resolv.conf")
        with open(self.resolv, "w") as f:
            # The longest timeout the resolver takes: a lookup that ignores a call's deadline
            # overruns it by 30 s, far past what a busy machine adds to a call.
            f.write("nameserver %s\noptions timeout:30 attempts:1\n" % addr)
        self.nss = os.path.join(self.dir, "nsswitch.conf")
        with open(self.nss, "w") as f:
            f.write("hosts: files dns\n")
        self.prefix = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                       'mount --bind "$1" /etc/resolv.conf && mount --bind "$2" '
                       '/etc/nsswitch.conf && shift 2 && exec "$@"', "sh", self.resolv, self.nss]

    def close(self):
        if self.sock is not None:
            self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def node(worker_id, env=None, args=()):
    return Server(list(args), env=env, worker_id=worker_id, datacenter_id=3).start()


def registered(path, worker_id, args=(), session_ms=SESSION_MS):
    """A node registered in the test's ZooKeeper under path (port closed while it does not
    serve)."""
    return Server(["--zookeeper", ZK.hosts, "--set", "snowflake.worker_id_path=%s" % path,
                   "--set", "zookeeper.session_timeout_ms=%d" % session_ms,
                   "--set", "zookeeper.claim_retries=0",
                   "--set", "zookeeper.state_interval_ms=200"] + list(args),
                  worker_id=worker_id, datacenter_id=3, wait_serving=False).start()


def hostport(srv):
    return "127.0.0.1:%d" % srv.port


def failover_on_each_failure_kind():
    """Three nodes; one at a time is killed, frozen, not serving (ServiceUnavailable), or
    refusing with InvalidSystemClock: the caller sees no error and ids keep coming."""
    clock = FakeClock()
    a = node(1, env=clock.env())
    b = node(2)
    c = node(4)
    try:
        servers = ",".join(hostport(s) for s in (a, b, c))
        with Drive("--servers", servers, "--timeout-ms", str(CALL_MS), "--try-timeout-ms", "200",
                   "--backoff-ms", "100") as d:
            r = d.run(1)
            assert r["ids"] > 0 and r["errors"] == 0 and r["dups"] == 0, r
            # InvalidSystemClock: tried on another node once, not returned.
            clock.set("-5s")

            def failed_over():  # one call: the node stays skipped once it refused
                words = d.ask("id").split()
                return words[0] == "ok" and "failovers=0" not in words

            wait_until(failed_over, sftest.PATIENCE, "a failover on InvalidSystemClock")
            r = d.run(1)
            assert r["errors"] == 0 and r["ids"] > 0, r
            clock.set("+0")
            # kill -9: a closed port and broken pooled connections.
            c.stop(signal.SIGKILL)
            r = d.run(2)
            assert r["errors"] == 0 and r["ids"] > 0 and r["failovers"] > 0, r
            assert "%s:down" % hostport(c) in d.servers()[1], d.servers()
            # Frozen: connections accepted, nothing answered.
            os.kill(b.proc.pid, signal.SIGSTOP)
            try:
                r = d.run(2)
                assert r["errors"] == 0 and r["ids"] > 0, r
                assert r["max_gap_ms"] < 2000, r  # each stall ends with the try's timeout
            finally:
                os.kill(b.proc.pid, signal.SIGCONT)
            # Back: the prober finds the frozen node serving again after its backoff.
            wait_until(lambda: "%s:up" % hostport(b) in d.servers()[1], sftest.PATIENCE,
                       "the resumed node probed back up")
            # The caller's own error goes back at once, from the first node asked.
            words = d.ask("ids 10001").split()
            assert words[0] == "error" and int(words[1]) == SF_ERR_REFUSED, words
            assert "InvalidRequestError" in " ".join(words), words
            d.close()
    finally:
        for s in (a, b, c):
            s.stop()
        clock.remove()


def unavailable_node_is_skipped():
    """A node that answers ServiceUnavailable (registered, in its start-up sleep, port kept
    open) is skipped, and a lone one gives SFC_ERR_UNAVAILABLE naming it."""
    waiting = registered("/client-unavailable", 5,
                         ["--set", "snowflake.listen_while_not_serving=true",
                          "--set", "snowflake.startup_sleep_ms=60000"])
    good = node(6)
    try:
        # The call asks the node again until its deadline, which leaves room for a first answer
        # on a busy machine: the error says what the node answered, not that it did not.
        with Drive("--servers", hostport(waiting), "--timeout-ms", "3000") as d:
            words = d.ask("id").split(maxsplit=3)
            assert words[0] == "error" and int(words[1]) == SF_ERR_UNAVAILABLE, words
            assert "ServiceUnavailable" in words[3] and hostport(waiting) in words[3], words
            d.close()
        with Drive("--servers", "%s,%s" % (hostport(waiting), hostport(good)),
                   "--timeout-ms", str(CALL_MS)) as d:
            r = d.run(1)
            assert r["errors"] == 0 and r["ids"] > 0 and r["failovers"] > 0, r
            # Skipped after each ServiceUnavailable (a probe's get_timestamp, which a node
            # not serving answers, lets calls try it again after its backoff).
            wait_until(lambda: d.ask("id").split()[0] == "ok" and
                       "%s:down" % hostport(waiting) in d.servers()[1], sftest.PATIENCE,
                       "the node not serving skipped")
            d.close()
    finally:
        waiting.stop()
        good.stop()


def a_moment_with_no_node_serving_is_ridden_out():
    """Every node refusing for a moment (a ZooKeeper election can fence a whole fleet at
    once) costs a call time, not an error: it tries the nodes again until its deadline."""
    port = sftest.free_port()
    srv = None
    # A deadline long enough for the node's start on a loaded machine (it can take seconds).
    deadline_ms = int(2 * sftest.PATIENCE * 1000)
    with Drive("--servers", "127.0.0.1:%d" % port, "--timeout-ms", str(deadline_ms)) as d:
        try:
            d.send("id")
            # The call begins as client_drive reads it, which a busy machine may put off.
            wait_until(lambda: d.unread() == 0, sftest.PATIENCE, "the call read")
            time.sleep(0.5)  # the call has found the node's port closed
            srv = node(10, args=["--port", str(port)])
            answer = d.answer("id")  # by the call's deadline
            assert answer.split()[0] == "ok", answer
            ms = int(answer.split()[-1].split("=")[1])
            assert ms >= 400, "the call had nothing to wait for: %r" % answer
            d.close()
        finally:
            if srv is not None:
                srv.stop()


def clock_refusals_from_one_node_and_from_two():
    """InvalidSystemClock from two nodes in a row comes back at once (SFC_ERR_CLOCK): a clock
    step across hosts. From one node, while the others refuse connections, the call waits
    the refusal out within its deadline."""
    clock = FakeClock()
    a = node(11, env=clock.env())
    b = node(12, env=clock.env())
    closed = "127.0.0.1:%d" % sftest.free_port()
    try:
        # Waiting the refusal out would take the whole deadline (the step outlasts it), so
        # "at once" can allow what a busy machine adds and still tell the two apart.
        with Drive("--servers", "%s,%s" % (hostport(a), hostport(b)), "--timeout-ms",
                   "10000") as d:
            served = set()

            def both_served():  # a try timed out on a busy machine sends a call elsewhere
                words = d.ask("id").split()
                assert words[0] == "ok", words
                served.add(words[2])
                return len(served) == 2

            wait_until(both_served, sftest.PATIENCE, "ids made by both nodes")
            clock.set("-15s")
            words = d.ask("id").split(maxsplit=3)
            assert words[:2] == ["error", str(SF_ERR_CLOCK)], words
            assert int(words[2].split("=")[1]) < 3000, words
            assert "InvalidSystemClock" in words[3], words
            d.close()
        b.stop()
        clock.set("+0")
        with Drive("--servers", "%s,%s" % (hostport(a), closed), "--timeout-ms",
                   "15000") as d:
            assert d.ask("id").split()[0] == "ok"
            # Refused for 4 s from a's last id: at least 1 s of it is left to wait out
            # however long a busy machine takes to send the next call.
            clock.set("-4s")
            words = d.ask("id").split()
            assert words[0] == "ok", words
            assert int(words[-1].split("=")[1]) >= 1000, "no refusal waited out: %r" % words
            d.close()
    finally:
        for s in (a, b):
            s.stop()
        clock.remove()


def deadlines_hold_with_every_node_down():
    """Nothing listening, a listener that never answers, a frozen node: a call returns by
    its deadline with an error naming every node and why it failed."""
    closed = sftest.free_port()
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(128)  # room for every connection the calls and probes leave unaccepted
    frozen = node(7)
    os.kill(frozen.proc.pid, signal.SIGSTOP)
    # Several rounds over the nodes (250 ms a try): the error names what each node did in the
    # last whole round, which a busy machine must not stretch past the deadline.
    deadline_ms = 2000
    try:
        servers = "127.0.0.1:%d,127.0.0.1:%d,%s" % (closed, mute.getsockname()[1],
                                                   hostport(frozen))
        with Drive("--servers", servers, "--timeout-ms", str(deadline_ms),
                   "--try-timeout-ms", "250") as d:
            for _ in range(3):
                words = d.ask("id").split(maxsplit=3)
                assert words[0] == "error" and int(words[1]) == SF_ERR_UNAVAILABLE, words
                ms = int(words[2].split("=")[1])
                assert ms <= deadline_ms + OVERRUN_MS, \
                    "a call took %d ms with a %d ms deadline" % (ms, deadline_ms)
                assert "cannot connect to 127.0.0.1:%d" % closed in words[3], words
                assert "did not answer get_id" in words[3], words
            d.close()
    finally:
        os.kill(frozen.proc.pid, signal.SIGCONT)
        frozen.stop()
        mute.close()


def discovery_follows_joins_fences_and_leaves():
    """--zookeeper: the list follows nodes registering, a node fenced (frozen past its
    session: its node goes) and coming back, and a node stopping; an embedded holder's node
    (no Thrift port) is never listed."""
    path = "/client-discovery"
    zk = ZK.client()
    a = b = None
    try:
        with Drive("--zookeeper", ZK.hosts, "--path", path, "--timeout-ms", "300") as d:
            words = d.ask("id").split()
            assert words[0] == "error", words  # no node registered yet
            d.close()
        # Calls ride out a moment in which the node they need does not serve (b, on its
        # shorter session, may fence for a moment on a busy machine).
        with Drive("--zookeeper", ZK.hosts, "--path", path, "--timeout-ms", str(CALL_MS)) as d:
            zk.ensure_path(path)
            zk.create(path + "/9", b"embedded pid=1 host=elsewhere datacenter=3",
                      ephemeral=True)
            a = registered(path, 1)
            wait_until(lambda: d.servers()[1].startswith(hostport(a) + ":"), sftest.PATIENCE, "a listed")
            # Listed once it holds its id; its port opens when it serves.
            wait_until(lambda: d.ask("id").split()[0] == "ok", sftest.PATIENCE, "an id from a")
            b = registered(path, 2, session_ms=FROZEN_SESSION_MS)
            wait_until(lambda: d.servers()[0] == 2, sftest.PATIENCE, "b listed")
            # Listed as soon as its worker node exists, while its first start may still be
            # reading the floor: frozen then, that start fails (claim_retries = 0) and the
            # node exits instead of coming back. Only a node that serves is fenced here.
            wait_until(lambda: sftest.gives_an_id(b), sftest.PATIENCE, "b serving")
            os.kill(b.proc.pid, signal.SIGSTOP)  # past its session: fenced, its node goes
            try:
                wait_until(lambda: d.servers()[0] == 1, sftest.PATIENCE, "the fenced node unlisted")
                r = d.run(1)
                assert r["errors"] == 0 and r["ids"] > 0, r
            finally:
                os.kill(b.proc.pid, signal.SIGCONT)
            wait_until(lambda: d.servers()[0] == 2, sftest.PATIENCE, "the node back after fencing listed")
            # Listed once it holds its id again, but its port opens only when it serves (after
            # the floor): stopping a before that leaves no node to ask.
            wait_until(lambda: sftest.gives_an_id(b), sftest.PATIENCE, "the node back after fencing serving")
            a.stop()
            wait_until(lambda: d.servers() == (1, "%s:up" % hostport(b)), sftest.PATIENCE, "a unlisted")
            r = d.run(1)
            assert r["errors"] == 0 and r["ids"] > 0, r
            d.close()
    finally:
        zk.stop()
        for s in (a, b):
            if s is not None:
                s.stop()


def prefetch_never_hands_out_old_ids():
    """--prefetch: ids come from the buffer, each checked against its own timestamp when
    asked for (an id asked of a node directly, when none in the buffer is young enough, is
    as old as that call took); after an idle pause the old ones are dropped, not handed out."""
    # The limit is one a batch can meet on a busy machine: a sanitizer build there took over
    # 100 ms to bring a batch of 5,000 ids, so every one came stale out of the buffer.
    max_age_ms = 1000
    srv = node(8)
    try:
        with Drive("--servers", hostport(srv), "--prefetch", "20000", "--batch", "5000",
                   "--max-age-ms", str(max_age_ms), "--timeout-ms", str(CALL_MS)) as d:
            r = d.run(2)
            # Ids from the buffer (no rate asked: a sanitizer build on a busy machine may
            # get many of them stale, and ask the node for the rest).
            assert r["ids"] > 0 and r["prefetched"] > 0, r
            assert r["errors"] == 0 and r["dups"] == 0, r
            assert r["max_call_age_ms"] <= max_age_ms, r
            # The buffer's ids are now too old, and so are those of a fetch that was on its
            # way when the run ended (made before it, or soon after).
            time.sleep(2.5 * max_age_ms / 1000)
            r = d.run(1)
            assert r["ids"] > 0 and r["errors"] == 0 and r["max_call_age_ms"] <= max_age_ms, r
            assert r["stale"] > 0, r  # the old ones were there, and dropped
            d.close()
    finally:
        srv.stop()


def cli_servers_zookeeper_and_watch():
    """The CLI on the library: a dead node first in --servers, --zookeeper, and watch."""
    path = "/client-cli"
    srv = registered(path, 3)
    try:
        wait_until(lambda: "serving ids as worker id" in srv.log(), sftest.PATIENCE, "the node serving")
        cli = sftest.SNOWFLAKE_CLI
        dead = "127.0.0.1:%d" % sftest.free_port()
        out = subprocess.run([cli, "--servers", "%s,%s" % (dead, hostport(srv)), "id"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             timeout=30)
        assert out.returncode == 0 and out.stdout.strip().isdigit(), out
        # Through ZooKeeper, whose first answers a busy machine can hold up past the default
        # 5 s: every call of watch counts, and one that gave up would be an error on its line.
        zookeeper = [cli, "--zookeeper", ZK.hosts, "--zookeeper-path", path,
                     "--timeout-ms", str(int(sftest.PATIENCE * 1000))]
        out = subprocess.run(zookeeper + ["info"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, timeout=3 * sftest.PATIENCE)
        assert out.returncode == 0 and "worker_id       3" in out.stdout, out
        out = subprocess.run(zookeeper + ["watch", "--seconds", "2"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, timeout=3 * sftest.PATIENCE)
        lines = out.stdout.strip().splitlines()
        assert out.returncode == 0 and len(lines) == 3, out
        for line in lines[1:]:
            words = line.split()
            assert int(words[1]) > 0 and words[3] == "0" and words[4] == "1/1", line
        out = subprocess.run([cli, "--servers", dead, "--zookeeper", ZK.hosts, "id"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             timeout=30)
        assert out.returncode == 2 and "give one of" in out.stderr, out
    finally:
        srv.stop()


def unresolved_name_is_skipped_within_the_deadline():
    """A node listed under a name whose lookup never answers is skipped like one that refuses
    connections: every call returns by its deadline with an id from the node that serves, and
    a lone such node fails by the deadline naming the lookup."""
    good = node(13)
    slow = "sf-slow-dns.example:%d" % good.port
    # Time for the node that serves after a try on the other (250 ms) on a busy machine; a
    # lookup that ignored the deadline would hold a call for the resolver's 30 s.
    deadline_ms = 3000
    try:
        with SilentResolver() as dns:
            if dns.why is not None:
                print("unresolved_name_is_skipped_within_the_deadline: skipped: %s" % dns.why)
                return
            with Drive("--servers", "%s,%s" % (slow, hostport(good)),
                       "--timeout-ms", str(deadline_ms), "--try-timeout-ms", "250",
                       prefix=dns.prefix) as d:
                for _ in range(4):  # the round robin starts on each node in turn
                    words = d.ask("id").split()
                    assert words[0] == "ok", words
                    assert int(words[-1].split("=")[1]) <= deadline_ms + OVERRUN_MS, words
                    assert words[2] == "server=%s" % hostport(good), words
                assert "%s:down" % slow in d.servers()[1], d.servers()
                r = d.run(2)
                assert r["errors"] == 0 and r["ids"] > 0, r
                assert r["max_gap_ms"] <= deadline_ms + OVERRUN_MS, r
                d.close()
            with Drive("--servers", slow, "--timeout-ms", str(deadline_ms),
                       prefix=dns.prefix) as d:
                words = d.ask("id").split(maxsplit=3)
                assert words[0] == "error" and int(words[1]) == SF_ERR_UNAVAILABLE, words
                assert int(words[2].split("=")[1]) <= deadline_ms + OVERRUN_MS, words
                assert "cannot resolve 'sf-slow-dns.example'" in words[3], words
                d.close()
    finally:
        good.stop()


def prefetch_call_fails_over_by_itself():
    """With prefetch on, a call that finds the buffer empty asks the nodes itself until its
    own deadline, whatever the refill under way meets: across a node killed and back half a
    second later, a call fails only when it used its whole deadline (no node served within
    it), and none overruns it."""
    port = sftest.free_port()
    srv = node(14, args=["--port", str(port)])
    back = None
    try:
        with Drive("--servers", "127.0.0.1:%d" % port, "--prefetch", "100", "--batch", "100",
                   "--timeout-ms", "1000", "--threads", "8") as d:
            result = []
            running = threading.Thread(target=lambda: result.append(d.run(6)))
            running.start()
            time.sleep(2.0)
            srv.stop(signal.SIGKILL)
            time.sleep(0.5)
            back = node(14, args=["--port", str(port)])
            running.join(60)
            assert result, "the run did not end"
            r = result[0]
            assert r["ids"] > 0 and r["dups"] == 0, r
            assert r["errors"] == 0 or r["min_error_ms"] >= 1000, r
            assert r["max_call_ms"] <= 1000 + OVERRUN_MS, r
            d.close()
    finally:
        srv.stop()
        if back is not None:
            back.stop()


def fenced_node_backs_off_doubling():
    """A node that listens but does not serve (ServiceUnavailable) stays down across probes:
    its failures in a row grow and its backoff doubles, rather than a probe marking it up."""
    waiting = registered("/client-fenced-probe", 15,
                         ["--set", "snowflake.listen_while_not_serving=true",
                          "--set", "snowflake.startup_sleep_ms=60000"])
    good = node(16)
    try:
        with Drive("--servers", "%s,%s" % (hostport(waiting), hostport(good)),
                   "--backoff-ms", "50", "--timeout-ms", str(CALL_MS)) as d:

            def failures():
                assert d.ask("id").split()[0] == "ok"
                for entry in d.servers()[1].split(","):  # host:port:up or host:port:down:N
                    words = entry.split(":")
                    if entry.startswith(hostport(waiting) + ":") and words[2] == "down":
                        return int(words[3])
                return 0

            wait_until(lambda: failures() >= 4, sftest.PATIENCE, "four failures in a row on the fenced node")
            d.close()
    finally:
        waiting.stop()
        good.stop()


def every_node_back_after_a_total_outage():
    """Every node killed, then back: once one answers again, the others are probed at once
    instead of each waiting out its backoff, so the load spreads over all of them again."""
    ports = [sftest.free_port() for _ in range(3)]
    nodes = [node(17 + i, args=["--port", str(p)]) for i, p in enumerate(ports)]
    try:
        servers = ",".join("127.0.0.1:%d" % p for p in ports)
        # A probe has a try's time to find a node serving again; one that a busy machine made
        # miss it would double that node's backoff to 120 s.
        with Drive("--servers", servers, "--timeout-ms", "3000", "--try-timeout-ms", "2000",
                   "--backoff-ms", "60000", "--backoff-max-ms", "120000") as d:
            assert d.run(1)["errors"] == 0
            for n in nodes:
                n.stop(signal.SIGKILL)
            assert d.ask("id").split()[0] == "error"  # each node down, for 60 s
            nodes = [node(17 + i, args=["--port", str(p)]) for i, p in enumerate(ports)]
            wait_until(lambda: d.ask("id").split()[0] == "ok", sftest.PATIENCE, "an id after the outage")
            # Within half the backoff: only a probe brought forward gets them all back so soon.
            wait_until(lambda: d.ask("servers").split()[2] == "up=3", 30,
                       "every node up again")
            d.close()
    finally:
        for n in nodes:
            n.stop()


def a_call_takes_the_pool_lock_twice():
    """A successful call takes the pool's lock at most twice (acquire, release), counted by
    a build of the client that counts them; a call that had to try again (a node failing, or
    a try timed out on a busy machine) may take more, and is counted apart."""
    a, b = node(20), node(21)
    try:
        with Drive("--servers", "%s,%s" % (hostport(a), hostport(b)),
                   "--timeout-ms", str(CALL_MS), drive=DRIVE_COUNTED) as d:
            d.ask("locks 10")  # the connections made
            words = dict(w.split("=") for w in d.ask("locks 1000").split()[1:])
            assert words["ok"] == "1000", words
            assert int(words["first_try"]) >= 900, words  # nearly all: two nodes serve
            assert int(words["most"]) == 2, words  # and the counter counts
            d.close()
    finally:
        a.stop()
        b.stop()


def a_call_under_its_own_agent():
    """sfc_next_id_as and sfc_next_ids_as: the node counts each call under the agent it was
    made under; a bad agent is refused by name without asking a node; a call under another
    agent than the client's never takes prefetched ids."""
    srv = Server([], admin=True, worker_id=22, datacenter_id=3).start()
    try:
        def count(agent):
            status, body = srv.http("/stats.json")
            assert status == 200, body
            return json.loads(body)["counters"].get("ids_generated_" + agent, 0)
        with Drive("--servers", hostport(srv), "--timeout-ms", str(CALL_MS)) as d:
            assert d.ask("agent web") == "agent web"
            one = d.ask("id")
            assert one.startswith("ok "), one
            assert d.ask("ids 7").startswith("ok 7 ")
            assert d.ask("agent -") == "agent -"
            assert d.ask("id").startswith("ok ")
            assert count("web") == 8 and count("snowflake-client") == 1, (
                count("web"), count("snowflake-client"))
            d.ask("agent 9bad")
            words = d.ask("id").split()
            assert words[:2] == ["error", "-1"] and "'9bad'" in " ".join(words), words
            assert count("9bad") == 0
            d.close()
        with Drive("--servers", hostport(srv), "--timeout-ms", str(CALL_MS), "--prefetch", "100",
                   "--batch", "50") as d:
            wait_until(lambda: d.ask("id").split()[2] == "server=", sftest.PATIENCE,
                       "an id from the prefetch buffer")
            d.ask("agent other")
            words = d.ask("id").split()
            assert words[0] == "ok" and words[2] == "server=" + hostport(srv), words
            assert count("other") == 1
            d.close()
    finally:
        srv.stop()


def open_refuses_unclear_options():
    """sfc_open names the option at fault: an empty server list, a ZooKeeper host with no port
    or that does not resolve, and a prefetch batch past what the nodes accept."""
    rc, out = open_error("--servers", "")
    assert rc == 1 and "servers is empty" in out, out
    rc, out = open_error("--zookeeper", "nohost")
    assert rc == 1 and "zookeeper_hosts" in out and "'nohost'" in out and "port" in out, out
    rc, out = open_error("--zookeeper", "sf-no-such-host.invalid:2181")
    assert rc == 1 and "zookeeper_hosts" in out and "sf-no-such-host.invalid" in out, out
    assert "No such file" not in out, out
    rc, out = open_error("--servers", "127.0.0.1:1", "--prefetch", "100000", "--batch", "20000")
    assert rc == 1 and "prefetch_batch = 20000" in out and "1..10000" in out, out


def main():
    sftest.require_server()
    sftest.require_zookeeper_client()
    if not os.path.exists(FAKETIME_LIB):
        print("%s is missing: apt-get install faketime" % FAKETIME_LIB)
        raise SystemExit(1)
    ZK.start()
    r = sftest.Runner("test_client")
    r.run(failover_on_each_failure_kind)
    r.run(unavailable_node_is_skipped)
    r.run(deadlines_hold_with_every_node_down)
    r.run(a_moment_with_no_node_serving_is_ridden_out)
    r.run(clock_refusals_from_one_node_and_from_two)
    r.run(discovery_follows_joins_fences_and_leaves)
    r.run(prefetch_never_hands_out_old_ids)
    r.run(cli_servers_zookeeper_and_watch)
    r.run(unresolved_name_is_skipped_within_the_deadline)
    r.run(prefetch_call_fails_over_by_itself)
    r.run(fenced_node_backs_off_doubling)
    r.run(every_node_back_after_a_total_outage)
    r.run(open_refuses_unclear_options)
    r.run(a_call_under_its_own_agent)
    r.run(a_call_takes_the_pool_lock_twice)
    r.finish()


if __name__ == "__main__":
    main()
