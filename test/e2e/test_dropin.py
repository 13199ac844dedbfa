#!/usr/bin/python3
"""test_dropin.py -- snowflaked in place of a legacy node, seen through a client generated
from the original IDL (test/e2e/legacy_snowflake.thrift, without throws clauses). Such a client
cannot decode ServiceUnavailable, so a registered node's Thrift port accepts connections only
while it serves: refused during start-up and while fenced, when open connections are closed
unanswered. A pool that fails over on transport errors, as legacy pools do, then gets ids
through a restart and a fence of one node without a single application error. One real
ZooKeeper; node A reaches it through a proxy the test can cut. Everything started is
stopped however the test ends."""
import logging
import os
import re
import signal
import socket
import sys
import threading
import time

import sftest
from sftest import Server, decode, wait_until

sys.path.insert(0, os.path.join(sftest.TOP_BUILDDIR, "thrift", "gen-py-legacy"))
from legacy_snowflake import Snowflake as Legacy  # noqa: E402  (generated at build time)
from thrift.Thrift import TApplicationException  # noqa: E402
from thrift.protocol import TBinaryProtocol  # noqa: E402
from thrift.transport import TSocket, TTransport  # noqa: E402

# A node's session; node A of the pool, whose session the test waits out, has a short one.
SESSION_MS = sftest.STEADY_SESSION_MS
SHORT_SESSION_MS = 2000
ZK = sftest.ZooKeeper()
logging.getLogger("thrift").setLevel(logging.CRITICAL)  # refused connects are expected here
TRANSPORT_ERRORS = (TTransport.TTransportException, OSError, EOFError)


class LinkProxy:
    """A TCP relay from a loopback port to ZooKeeper that can be cut: cut() closes every
    relayed connection and closes new ones at once (the node sees ZooKeeper vanish while
    its own clients still reach it); mend() relays again."""

    def __init__(self, target_port):
        self.target = target_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.socks = []
        self.is_cut = False
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                if self.is_cut or self.closed:
                    conn.close()
                    continue
                try:
                    upstream = socket.create_connection(("127.0.0.1", self.target), 2)
                except OSError:
                    conn.close()
                    continue
                self.socks += [conn, upstream]
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        with self.lock:
            self.is_cut = True
            socks, self.socks = self.socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def mend(self):
        with self.lock:
            self.is_cut = False

    def close(self):
        self.closed = True
        self.cut()
        self.listener.close()


def zk_port():
    return int(ZK.hosts.rsplit(":", 1)[1])


def node(path, worker_id, hosts, port=0, extra=(), session_ms=SESSION_MS):
    """A registered snowflaked on a given port (0 = any)."""
    args = ["--zookeeper", hosts,
            "--set", "snowflake.worker_id_path=%s" % path,
            "--set", "zookeeper.session_timeout_ms=%d" % session_ms,
            "--set", "zookeeper.claim_retries=100",
            "--set", "zookeeper.claim_retry_wait_ms=200",
            "--port", str(port)] + list(extra)
    return Server(args, admin=True, worker_id=worker_id, wait_serving=False)


class LegacyClient:
    """One connection of the legacy client: framed transport, binary protocol."""

    def __init__(self, port, timeout=5.0):
        sock = TSocket.TSocket("127.0.0.1", port)
        sock.setTimeout(timeout * 1000)
        self.transport = TTransport.TFramedTransport(sock)
        self.api = Legacy.Client(TBinaryProtocol.TBinaryProtocol(self.transport))
        self.transport.open()

    def close(self):
        self.transport.close()


def refuses_connections(port):
    """True when a connect to the port is refused (nothing listens). A connect reset is not
    yet an answer: it landed in the backlog of a socket closed at that moment, and the next
    try is refused."""
    try:
        socket.create_connection(("127.0.0.1", port), 2).close()
        return False
    except ConnectionResetError:
        return False
    except ConnectionRefusedError:
        return True


def health(server):
    return server.http("/health")


def serving_on(server, worker_id, timeout=sftest.PATIENCE):
    """Waits until the legacy client gets an id of worker_id from server."""
    def gets_id():
        try:
            c = LegacyClient(server.port, 2.0)
        except TRANSPORT_ERRORS:
            return False
        try:
            return decode(c.api.get_id("dropin"))[2] == worker_id
        except TRANSPORT_ERRORS:
            return False
        finally:
            c.close()
    wait_until(gets_id, timeout, "serving as worker id %d; log:\n%s" % (worker_id, server.log()))


def port_refused_until_serving():
    """During start-up (here startup_sleep_ms) the port refuses connections and /health
    says why; once the node serves, the legacy client gets its ids."""
    s = node("/dropin-start", 3, ZK.hosts, extra=["--set", "snowflake.startup_sleep_ms=8000"])
    s.start()
    try:
        s.wait_for(r"waiting startup_sleep_ms")
        assert refuses_connections(s.port), "the port accepts before the node serves"
        status, body = health(s)
        assert status == 503 and "starting" in body, (status, body)
        serving_on(s, 3)
        c = LegacyClient(s.port)
        try:
            assert c.api.get_worker_id() == 3
            assert c.api.get_datacenter_id() == 2
            assert abs(c.api.get_timestamp() - time.time() * 1000) < 10000
        finally:
            c.close()
        assert health(s)[0] == 200
    finally:
        s.stop()


def fenced_port_closes_and_reopens():
    """Cut off from ZooKeeper, the node fences: its open connection is closed (the next
    call is a transport error, never an application error or an id), connects are
    refused, /health says why; once the link is back it serves again on the same port."""
    link = LinkProxy(zk_port())
    s = node("/dropin-fence", 11, "127.0.0.1:%d" % link.port)
    try:
        s.start()
        serving_on(s, 11)
        c = LegacyClient(s.port)
        assert decode(c.api.get_id("dropin"))[2] == 11
        link.cut()
        wait_until(lambda: health(s)[0] == 503, sftest.PATIENCE, "fenced")
        wait_until(lambda: refuses_connections(s.port), sftest.PATIENCE, "refusing connections while fenced")
        try:
            got = c.api.get_id("dropin")
            raise AssertionError("a fenced node answered the open connection with id %d" % got)
        except TApplicationException as e:
            raise AssertionError("an application error a legacy pool does not retry: %s" % e)
        except TRANSPORT_ERRORS:
            pass
        c.close()
        status, body = health(s)
        assert status == 503 and "ZooKeeper" in body, (status, body)
        link.mend()
        serving_on(s, 11)
        wait_until(lambda: line_index(s, accepting_on(s.port), 2) is not None, sftest.PATIENCE,
                   "the port opened again in the log")
    finally:
        s.stop()
        link.close()


def accepting_on(port):
    """The log line of the port opening; "stopped accepting ..." is its closing."""
    return r"(?<!stopped )accepting connections on port %d" % port


def line_index(server, pattern, nth=1):
    """Index in server's log of the nth line matching the regular expression, or None."""
    seen = 0
    for i, line in enumerate(list(server.lines)):
        if re.search(pattern, line):
            seen += 1
            if seen == nth:
                return i
    return None


def serving_line_means_port_open():
    """The log line "serving ids as worker id" (and systemd's READY) come only once the
    port accepts: tooling that waits for the line, as a load balancer's health check
    or a test does, can connect at once. Checked at start and after a fence."""
    link = LinkProxy(zk_port())
    s = node("/dropin-ready", 12, "127.0.0.1:%d" % link.port)
    try:
        s.start()
        for nth in (1, 2):
            wait_until(lambda: line_index(s, r"serving ids as worker id 12", nth) is not None,
                       sftest.PATIENCE, "serving (%d) as worker id 12; log:\n%s" % (nth, s.log()))
            c = LegacyClient(s.port)  # at once: refused here would fail the test
            try:
                assert decode(c.api.get_id("dropin"))[2] == 12
            finally:
                c.close()
            accepting = line_index(s, accepting_on(s.port), nth)
            serving = line_index(s, r"serving ids as worker id 12", nth)
            assert accepting is not None and accepting < serving, (
                "serving announced before the port accepted; log:\n%s" % s.log())
            if nth == 1:
                link.cut()
                wait_until(lambda: refuses_connections(s.port), sftest.PATIENCE, "refusing while fenced")
                link.mend()
    finally:
        s.stop()
        link.close()


class LegacyPool:
    """A pool as legacy clients had it (Ruby's thrift_client, the original's own
    ConnectionPool): one connection per server, calls round robin, and a transport error
    moves the call to the next server. Anything else is an application error."""

    def __init__(self, ports):
        self.ports = ports
        self.conns = {}
        self.next = 0
        self.ids = []
        self.failovers = 0
        self.app_errors = []
        self.failed_calls = 0
        self.stop = threading.Event()

    def _conn(self, port):
        if port not in self.conns:
            # A generous timeout: the faults here close ports, which fails at once; a call
            # slow for want of a core on a busy machine is no reason to move on.
            self.conns[port] = LegacyClient(port, 10.0)
        return self.conns[port]

    def _drop(self, port):
        c = self.conns.pop(port, None)
        if c is not None:
            c.close()

    def call(self):
        for attempt in range(2 * len(self.ports)):
            port = self.ports[self.next % len(self.ports)]
            self.next += 1
            try:
                self.ids.append(self._conn(port).api.get_id("legacy-pool"))
                return
            except TApplicationException as e:
                self.app_errors.append(str(e))
                self._drop(port)
                return
            except TRANSPORT_ERRORS:
                self.failovers += 1
                self._drop(port)
        self.failed_calls += 1
        time.sleep(0.05)

    def run(self):
        while not self.stop.is_set():
            self.call()
        for port in list(self.conns):
            self._drop(port)


def pooled_client_fails_over():
    """Two nodes; a legacy pool calls both without pause while node A restarts (SIGTERM,
    then started again on its port) and then is fenced (its ZooKeeper link cut past the
    session timeout, then mended). The pool never sees an application error, every call
    gets an id, no id repeats, and both faults really made it fail over."""
    link = LinkProxy(zk_port())
    port_a = sftest.free_port()
    a = node("/dropin-pool", 12, "127.0.0.1:%d" % link.port, port=port_a,
             session_ms=SHORT_SESSION_MS)
    # B, which the faults leave alone, has the long session: every call must find it serving.
    b = node("/dropin-pool", 13, ZK.hosts)
    zk = ZK.client()
    pool = None
    try:
        a.start()
        serving_on(a, 12)
        b.start()
        serving_on(b, 13)
        pool = LegacyPool([a.port, b.port])
        load = threading.Thread(target=pool.run, daemon=True)
        load.start()
        time.sleep(0.5)
        before_restart = pool.failovers
        assert a.stop() == 0, a.log()
        time.sleep(0.5)
        a = node("/dropin-pool", 12, "127.0.0.1:%d" % link.port, port=port_a,
                 session_ms=SHORT_SESSION_MS)
        a.start()
        serving_on(a, 12)
        restart_failovers = pool.failovers - before_restart
        time.sleep(0.5)
        before_fence = pool.failovers
        link.cut()
        wait_until(lambda: refuses_connections(port_a), sftest.PATIENCE, "node A fenced")
        # Past its session: ZooKeeper, which a busy machine can make late, removes its node.
        wait_until(lambda: zk.exists("/dropin-pool/12") is None, sftest.PATIENCE,
                   "node A's session expired")
        link.mend()
        serving_on(a, 12)
        time.sleep(0.5)
        fence_failovers = pool.failovers - before_fence
        pool.stop.set()
        load.join(10)
        assert not pool.app_errors, "application errors: %r" % pool.app_errors[:5]
        assert pool.failed_calls == 0, "%d calls got no id from any node" % pool.failed_calls
        assert len(set(pool.ids)) == len(pool.ids), "duplicate ids"
        assert restart_failovers > 0 and fence_failovers > 0, \
            "the faults never reached the pool (%d, %d failovers)" % (restart_failovers,
                                                                      fence_failovers)
        workers = {decode(i)[2] for i in pool.ids}
        assert workers == {12, 13}, workers
        print("    %d ids, %d failovers (restart %d, fence %d), 0 application errors"
              % (len(pool.ids), pool.failovers, restart_failovers, fence_failovers))
    finally:
        if pool is not None:
            pool.stop.set()
        zk.stop()
        a.stop()
        b.stop()
        link.close()


def main():
    sftest.require_server()
    sftest.require_zookeeper_client()
    ZK.start()
    r = sftest.Runner("test_dropin")
    r.run(port_refused_until_serving)
    r.run(fenced_port_closes_and_reopens)
    r.run(serving_line_means_port_open)
    r.run(pooled_client_fails_over)
    r.finish()


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    main()
