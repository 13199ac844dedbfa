#!/usr/bin/python3
"""test_http.py -- the HTTP ids port ([http] port) end to end, with real clients: curl,
Python's http.client on one kept-alive connection, pipelined requests on a raw socket, and a
Leaf-style caller (a plain GET of /api/snowflake/get/KEY whose body is read as a number).
The JSON and text shapes, every error status with its message (400, 404, 405, 503 with
Retry-After while fenced and 200 again after, and while the clock is behind), HEAD, the
figures on the admin endpoint, ids unique across the Thrift and HTTP ports under
concurrent load (standalone and registered in ZooKeeper), and the limits: connections over the maximum, a slow sender, an idle
connection, an oversized request line and header block, keep-alive off, a request with a
body, the budget of unsent answers, and descriptors: too few at start, and running out.
Every process is stopped however the test ends."""
import http.client
import json
import re
import socket
import subprocess
import threading
import time
import urllib.request

import sftest
from sftest import Server, closed_by_peer, decode, wait_until
from test_clock import FakeClock, require_faketime
from test_limits import (assert_quiet_while, close_all, open_many, raise_own_nofile,
                         soft_nofile)

WORKER, DATACENTER = 6, 5
ID_JSON = re.compile(r'\{"id":"(\d+)"\}\n')
ZK = sftest.ZooKeeper()


class HttpNode(Server):
    """A snowflaked with its admin port and its HTTP ids port on free loopback ports
    (.http_port), registered under zookeeper's path when given ((hosts, path)); started, it
    has logged that the HTTP port is open and, registered, that it serves. Use as a context
    manager, or start() and stop()."""

    def __init__(self, extra=(), env=None, zookeeper=None, worker_id=WORKER, session_ms=None,
                 prefix=()):
        self.http_port = sftest.free_port()
        args = ["--http-port", str(self.http_port), "--set", "http.bind_address=127.0.0.1"]
        if zookeeper is not None:
            args += ["--zookeeper", zookeeper[0],
                     "--set", "snowflake.worker_id_path=%s" % zookeeper[1],
                     "--set", "zookeeper.session_timeout_ms=%d"
                     % (session_ms or sftest.STEADY_SESSION_MS)]
        self.registered = zookeeper is not None
        super().__init__(args + list(extra), env=env, admin=True, worker_id=worker_id,
                         datacenter_id=DATACENTER, wait_serving=not self.registered,
                         prefix=prefix)

    def start(self, timeout=sftest.PATIENCE):
        super().start(timeout)
        self.wait_for(r"HTTP ids on http://127\.0\.0\.1:%d/" % self.http_port)
        if self.registered:
            self.wait_for(r"serving ids as worker id")
        return self


def request(srv, path, method="GET", headers=None, timeout=sftest.PATIENCE):
    """(status, {header: value} in lower case, body bytes) of one request on a new
    connection."""
    c = http.client.HTTPConnection("127.0.0.1", srv.http_port, timeout=timeout)
    try:
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def curl(srv, path, *opts):
    """(status, {header: value} in lower case, body text) of `curl -s -i`."""
    out = subprocess.run(["curl", "-s", "-i", "--max-time", str(int(sftest.PATIENCE))] + list(opts)
                         + ["http://127.0.0.1:%d%s" % (srv.http_port, path)],
                         stdout=subprocess.PIPE, check=True, timeout=2 * sftest.PATIENCE).stdout
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body.decode()


def stats(srv):
    """(counters, gauges) of /stats.json."""
    status, body = srv.http("/stats.json")
    assert status == 200, (status, body)
    doc = json.loads(body)
    return doc["counters"], doc["gauges"]


def read_answers(sock, n):
    """[(status, body)] of the next n answers on sock, each delimited by its
    Content-Length."""
    data, answers = b"", []
    while len(answers) < n:
        head, sep, rest = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length: (\d+)", head) if sep else None
        if length and len(rest) >= int(length.group(1)):
            answers.append((int(head.split()[1]), rest[:int(length.group(1))]))
            data = rest[int(length.group(1)):]
            continue
        chunk = sock.recv(65536)
        assert chunk, "closed after %d answers" % len(answers)
        data += chunk
    return answers


def assert_own_ids(ids):
    """Every id is this node's, and they increase."""
    assert all(decode(i)[1:3] == (DATACENTER, WORKER) for i in ids), [decode(i) for i in ids]
    assert all(a < b for a, b in zip(ids, ids[1:])), ids


def assert_error(got, status, error, reason):
    """An answer of the error status: JSON {"error","reason"} naming what is wrong."""
    code, headers, body = got
    assert code == status, (code, body)
    assert headers["content-type"] == "application/json", headers
    doc = json.loads(body)
    assert set(doc) == {"error", "reason"} and doc["error"] == error, doc
    assert reason in doc["reason"], (reason, doc["reason"])
    return doc["reason"]


# ---- shapes --------------------------------------------------------------------------

def json_and_text_shapes(srv):
    """curl: /id as {"id":"..."} (a string: JavaScript loses integers over 2^53), in text with
    Accept: text/plain or ?format=text; /ids?count=N as {"ids":[...]} or one id a line;
    JSON whenever the Accept header names it, and ?format over Accept. Never cached."""
    status, headers, body = curl(srv, "/id")
    assert status == 200 and headers["content-type"] == "application/json", (status, headers)
    assert headers["cache-control"] == "no-store", headers
    m = ID_JSON.fullmatch(body)
    assert m, body
    ids = [int(m.group(1))]
    for opts, path in (((), "/id?format=text"), (("-H", "Accept: text/plain"), "/id"),
                       (("-H", "Accept: text/html;q=0.5 ,  TEXT/Plain ; q=1"), "/id")):
        status, headers, body = curl(srv, path, *opts)
        assert status == 200 and headers["content-type"] == "text/plain; charset=utf-8", headers
        assert re.fullmatch(r"\d+\n", body), body
        ids.append(int(body))
    status, headers, body = curl(srv, "/ids?count=5")
    doc = json.loads(body)
    assert list(doc) == ["ids"] and len(doc["ids"]) == 5, body
    assert all(isinstance(i, str) for i in doc["ids"]), body
    ids += [int(i) for i in doc["ids"]]
    status, headers, body = curl(srv, "/ids?count=4&agent=shapes", "-H", "Accept: text/plain")
    assert status == 200 and re.fullmatch(r"(\d+\n){4}", body), body
    ids += [int(i) for i in body.split()]
    for accept in ("text/plain, application/json", "text/plainx", " application/json;q=0.1,"
                   "text/plain"):
        _, headers, body = curl(srv, "/id", "-H", "Accept: " + accept)
        assert ID_JSON.fullmatch(body) and headers["content-type"] == "application/json", \
            (accept, body)
        ids.append(int(ID_JSON.fullmatch(body).group(1)))
    _, headers, body = curl(srv, "/id?format=json", "-H", "Accept: text/plain")
    assert ID_JSON.fullmatch(body), body
    ids.append(int(ID_JSON.fullmatch(body).group(1)))
    assert_own_ids(ids)


def leaf_caller(srv):
    """A Leaf snowflake-mode caller: GET /api/snowflake/get/KEY, the body read as a number
    (digits alone, no newline); the key is the agent in the stats, ?agent= over it."""
    before = stats(srv)[0].get("ids_generated_leaf-orders", 0)
    ids = []
    for _ in range(3):
        url = "http://127.0.0.1:%d/api/snowflake/get/leaf-orders" % srv.http_port
        with urllib.request.urlopen(url, timeout=sftest.PATIENCE) as r:
            body = r.read()
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain"), r.headers
        assert re.fullmatch(rb"\d+", body), body
        ids.append(int(body))
    status, _, body = request(srv, "/api/snowflake/get/leaf-orders?agent=leaf-override")
    assert status == 200, body
    ids.append(int(body))
    assert_own_ids(ids)
    counters = stats(srv)[0]
    assert counters["ids_generated_leaf-orders"] == before + 3, counters
    assert counters["ids_generated_leaf-override"] >= 1, counters


def keep_alive_and_pipelining(srv):
    """http.client keeps one connection for 300 requests of every route (the listener
    accepts it once), and requests pipelined in one write are answered in order."""
    accepted = stats(srv)[0]["http_connections_accepted"]
    c = http.client.HTTPConnection("127.0.0.1", srv.http_port, timeout=sftest.PATIENCE)
    ids = []
    try:
        for i in range(100):
            for path in ("/id?agent=kept", "/ids?count=3&agent=kept", "/api/snowflake/get/kept"):
                c.request("GET", path)
                r = c.getresponse()
                body = r.read()
                assert r.status == 200 and r.getheader("Connection") != "close", (r.status, body)
                ids += [int(x) for x in re.findall(rb"\d{6,}", body)]
    finally:
        c.close()
    assert_own_ids(ids)
    assert len(ids) == 500, len(ids)
    assert stats(srv)[0]["http_connections_accepted"] == accepted + 1
    with socket.create_connection(("127.0.0.1", srv.http_port), sftest.PATIENCE) as s:
        s.sendall(b"GET /id HTTP/1.1\r\nHost: a\r\n\r\nGET /ids?count=2&format=text HTTP/1.1\r\n"
                  b"Host: a\r\n\r\nGET /api/snowflake/get/piped HTTP/1.1\r\nHost: a\r\n\r\n")
        answers = read_answers(s, 3)
    assert [status for status, _ in answers] == [200, 200, 200], answers
    piped = [int(x) for _, body in answers for x in re.findall(rb"\d{6,}", body)]
    assert len(piped) == 4 and answers[0][1].startswith(b'{"id":'), answers
    assert_own_ids(piped)


# ---- errors --------------------------------------------------------------------------

def every_error_status(srv):
    """Each refusal: its status, JSON {"error","reason"} with the bad value and what is
    allowed; refusals of the handler's own checks are counted where the Thrift port's are;
    405 says Allow; the node serves throughout."""
    before = stats(srv)[0]
    # method path | status error | what the reason must say
    cases = """
    GET /ids?count=0 | 400 invalid_request | count 0 is outside the allowed range 1..10000 (max_
    GET /ids?count=10001 | 400 invalid_request | count 10001 is outside
    GET /ids?count=abc | 400 invalid_request | count 'abc' is not a number
    GET /ids?count=-3 | 400 invalid_request | 1..10000 (max_batch_size
    GET /ids?count=99999999999 | 400 invalid_request | '99999999999'
    GET /ids | 400 invalid_request | count is missing
    GET /id?agent=1bad | 400 invalid_user_agent | invalid user agent "1bad"
    GET /ids?count=2&agent=a%20b | 400 invalid_user_agent | "a b"
    GET /id?agent=AGENT256 | 400 invalid_user_agent | max_useragent_length
    GET /api/snowflake/get/order_id | 400 invalid_user_agent | "order_id"
    GET /id?format=xml | 400 invalid_request | format 'xml' is not valid: allowed json or text
    GET /id?count=3 | 400 invalid_request | parameter 'count' is not known to /id
    GET /ids?count=1&count=2 | 400 invalid_request | 'count' is given twice
    GET /api/snowflake/get/k?format=text | 400 invalid_request | allowed agent
    GET /nope | 404 not_found | /id, /ids?count=N and /api/snowflake/get/{key}
    GET /id/ | 404 not_found | no such path /id/
    GET /api/snowflake/get/ | 404 not_found | no such path
    GET /api/segment/get/orders | 404 not_found | segment mode
    POST /id | 405 method_not_allowed | not POST
    PUT /ids?count=1 | 405 method_not_allowed | GET and HEAD
    DELETE /api/snowflake/get/k | 405 method_not_allowed | not DELETE
    """.replace("AGENT256", "a" * 256)
    for line in cases.strip().splitlines():
        call, answer, reason = (part.strip() for part in line.split(" | "))
        (method, path), (status, error) = call.split(), answer.split()
        status = int(status)
        got = request(srv, path, method)
        assert_error(got, status, error, reason)
        if status == 405:
            assert got[1]["allow"] == "GET, HEAD", got[1]
        assert "retry-after" not in got[1], (path, got[1])
    status, _, body = curl(srv, "/id?agent=%22%01%ff%5C")  # quote, control, not UTF-8, \
    assert status == 400 and json.loads(body)["error"] == "invalid_user_agent", body
    after = stats(srv)[0]
    # Through the handler, counted as the Thrift port's refusals: counts 0, 10001, -3 is not
    # a number here; five agents refused, the last by curl.
    assert after["invalid_request_errors"] == before["invalid_request_errors"] + 2, after
    assert after["invalid_agent_errors"] == before["invalid_agent_errors"] + 5, after
    assert ID_JSON.fullmatch(request(srv, "/id")[2].decode())


def head_makes_no_ids(srv):
    """HEAD answers the status and headers a GET would, making no id: 200 (no body) for a
    call that would be served, 400 for one that would be refused."""
    generated = stats(srv)[0]["ids_generated"]
    for path, ctype in (("/id", "application/json"), ("/ids?count=7&format=text", "text/plain"),
                        ("/api/snowflake/get/probe", "text/plain")):
        status, headers, body = request(srv, path, "HEAD")
        assert status == 200 and body == b"" and headers["content-type"].startswith(ctype), \
            (path, status, headers)
    for path in ("/ids?count=0", "/id?agent=1x", "/ids?count=x"):
        assert request(srv, path, "HEAD")[0] == 400, path
    assert request(srv, "/nope", "HEAD")[0] == 404
    assert stats(srv)[0]["ids_generated"] == generated


def figures_on_the_admin_endpoint(srv):
    """/metrics counts requests by route and status, times the id routes in the Thrift
    methods' histogram, and gives the connections; /stats.json says the port."""
    request(srv, "/id")
    request(srv, "/ids?count=0")
    _, body = srv.http("/metrics")
    for pattern in (r'snowflake_http_requests_total\{route="/id",status="200"\} [1-9]',
                    r'snowflake_http_requests_total\{route="/ids",status="400"\} [1-9]',
                    r'snowflake_request_duration_seconds_count\{method="http_id"\} [1-9]',
                    r"snowflake_http_connections_accepted_total [1-9]",
                    r"snowflake_http_connections \d", r"snowflake_http_port %d" % srv.http_port):
        assert re.search(pattern, body, re.M), "%s not in:\n%s" % (pattern, body)
    # The default, unless the open-file limit (shared with the Thrift port; valgrind keeps
    # some) made the node lower it.
    fitted = [re.search(r"\[http\] max_connections = \d+ does not fit .* serving at most "
                        r"(\d+) connections", line) for line in srv.lines]
    limit = next((int(m.group(1)) for m in fitted if m), 16384)
    assert re.search(r"^snowflake_http_max_connections %d$" % limit, body, re.M), body
    counters, gauges = stats(srv)
    assert gauges["http_port"] == srv.http_port, gauges
    assert "http_connections_refused" in counters, counters


# ---- ids unique across the ports -----------------------------------------------------

def load_both_ports(srv, seconds=2.0):
    """Every id handed out on both ports by eight clients at once for seconds: Thrift get_id
    and get_ids, HTTP /id, /ids (JSON and text) and Leaf's path, each on its own kept
    connection. Each client's ids increase; none repeats across all."""
    streams, errors = [], []
    until = time.time() + seconds

    def thrift(batch):
        got = []
        with srv.client(sftest.PATIENCE) as api:
            while time.time() < until:
                got += api.get_ids("load-thrift", 50) if batch else [api.get_id("load-thrift")]
        return got

    def http_path(path):
        got = []
        c = http.client.HTTPConnection("127.0.0.1", srv.http_port, timeout=sftest.PATIENCE)
        while time.time() < until:
            c.request("GET", path)
            r = c.getresponse()
            body = r.read()
            assert r.status == 200, (r.status, body)
            got += [int(x) for x in re.findall(rb"\d{6,}", body)]
        c.close()
        return got

    def run(fn, *args):
        try:
            streams.append(fn(*args))
        except Exception as e:  # reported below, with the others
            errors.append("%s%r: %r" % (fn.__name__, args, e))

    jobs = [(thrift, False), (thrift, True), (http_path, "/id?agent=load-http"),
            (http_path, "/ids?count=50&agent=load-http"), (http_path, "/ids?count=20&format=text"),
            (http_path, "/api/snowflake/get/load-leaf"), (http_path, "/id"),
            (thrift, False)]
    threads = [threading.Thread(target=run, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    everything = [i for s in streams for i in s]
    for s in streams:
        assert all(a < b for a, b in zip(s, s[1:])), "a client's ids went backwards"
    assert len(set(everything)) == len(everything), "%d ids repeated" % (
        len(everything) - len(set(everything)))
    assert all(len(s) > 0 for s in streams), [len(s) for s in streams]
    return everything


def unique_across_ports_standalone():
    """A standalone node under load on both ports at once."""
    with HttpNode() as srv:
        ids = load_both_ports(srv)
        assert_own_ids(sorted(ids))
        print("   %d ids from 8 clients on both ports, none twice" % len(ids))


# ---- limits --------------------------------------------------------------------------

def connections_over_the_maximum():
    """Past [http] max_connections a connection is closed at once, unanswered, and counted;
    the connections open go on being served, and a new one is taken once one closes."""
    with HttpNode(["--set", "http.max_connections=4"]) as srv:
        kept = []
        for _ in range(4):
            c = http.client.HTTPConnection("127.0.0.1", srv.http_port, timeout=sftest.PATIENCE)
            c.request("GET", "/id")
            assert c.getresponse().read()
            kept.append(c)
        with socket.create_connection(("127.0.0.1", srv.http_port), sftest.PATIENCE) as extra:
            extra.sendall(b"GET /id HTTP/1.1\r\nHost: a\r\n\r\n")
            assert closed_by_peer(extra, sftest.PATIENCE), "a fifth connection was served"
        counters, gauges = stats(srv)
        assert counters["http_connections_refused"] >= 1, counters
        assert gauges["http_connections"] == 4 and gauges["http_max_connections"] == 4, gauges
        srv.wait_for(r"refusing HTTP ids connection: 4 connections open \(\[http\] "
                     r"max_connections\)")
        for c in kept:
            c.request("GET", "/ids?count=2")
            assert c.getresponse().status == 200
        kept.pop().close()
        wait_until(lambda: stats(srv)[1]["http_connections"] == 3, sftest.PATIENCE, "closed")
        assert request(srv, "/id")[0] == 200
        for c in kept:
            c.close()


def slow_sender_and_idle_connection():
    """A client trickling its request head a byte at a time is closed once the head has
    taken request_timeout_ms (libmicrohttpd's inactivity timeout alone would never close
    it), and counted; meanwhile others are served. A connection that sends nothing is idle,
    not slow: it is kept past the request timeout, and closed after idle_timeout_ms."""
    with HttpNode(["--set", "http.request_timeout_ms=1000",
                    "--set", "http.idle_timeout_ms=3000"]) as srv:
        idle = socket.create_connection(("127.0.0.1", srv.http_port), sftest.PATIENCE)
        slow = socket.create_connection(("127.0.0.1", srv.http_port), sftest.PATIENCE)
        started = time.time()
        closed = False
        head = b"GET /id?agent=slow HTTP/1.1\r\nHost: a\r\nX-Pad: " + b"p" * 1000
        for i in range(len(head)):
            try:
                slow.sendall(head[i:i + 1])
            except OSError:
                closed = True
                break
            if request(srv, "/id")[0] != 200:
                raise AssertionError("another client was not served")
            if closed_by_peer(slow, 0.1):
                closed = True
                break
            assert time.time() - started < sftest.PATIENCE, "the slow sender is still served"
        took = time.time() - started
        assert closed, "the whole slow head went in"
        assert took >= 0.9, "closed after %.2f s, before request_timeout_ms" % took
        assert stats(srv)[0]["http_request_timeouts"] >= 1
        srv.wait_for(r"its request head took over 1000 ms \(\[http\] request_timeout_ms\)")
        # The idle one outlives twice the request timeout; a request on it is answered.
        time.sleep(max(0.0, started + 2.0 - time.time()))
        idle.sendall(b"GET /id HTTP/1.1\r\nHost: a\r\n\r\n")
        assert idle.recv(4096).startswith(b"HTTP/1.1 200 "), "the idle connection was closed"
        waited = time.time()
        assert closed_by_peer(idle, sftest.PATIENCE), "an idle connection was never closed"
        assert time.time() - waited >= 2.0, "closed before idle_timeout_ms"
        idle.close()
        slow.close()
        print("   slow sender closed after %.2f s" % took)


def oversized_requests():
    """A request line or a header block past max_request_size (8192 bytes) is refused with
    414 or 431 and its connection closed; raised, the same requests are answered."""
    line = b"GET /id?agent=" + b"a" * 9000 + b" HTTP/1.1\r\nHost: a\r\n\r\n"
    block = b"GET /id HTTP/1.1\r\nHost: a\r\n" + b"".join(
        b"X-Pad-%d: %s\r\n" % (i, b"v" * 90) for i in range(100)) + b"\r\n"

    def send(srv, data, closed):
        """The status of the answer to data; whether the connection is closed after it
        (waited for), or kept."""
        with socket.create_connection(("127.0.0.1", srv.http_port), sftest.PATIENCE) as s:
            s.sendall(data)
            status = read_answers(s, 1)[0][0]
            assert closed == closed_by_peer(s, sftest.PATIENCE if closed else 0.2), status
            return status

    with HttpNode() as srv:
        assert send(srv, line, True) == 414
        assert send(srv, block, True) == 431
        assert request(srv, "/id")[0] == 200
    with HttpNode(["--set", "http.max_request_size=65536"]) as srv:
        assert send(srv, line, False) == 400  # the agent is too long now
        assert send(srv, block, False) == 200


def keep_alive_off_and_a_body():
    """keep_alive = false: each answer says Connection: close and the connection closes. A
    request with a body (no route takes one) is answered without reading it, and closed."""
    with HttpNode(["--set", "http.keep_alive=false"]) as srv:
        with socket.create_connection(("127.0.0.1", srv.http_port), sftest.PATIENCE) as s:
            s.sendall(b"GET /id HTTP/1.1\r\nHost: a\r\n\r\n")
            r = http.client.HTTPResponse(s)
            r.begin()
            assert r.status == 200 and r.getheader("Connection") == "close" and r.read()
            assert closed_by_peer(s, sftest.PATIENCE)
    with HttpNode() as srv:
        with socket.create_connection(("127.0.0.1", srv.http_port), sftest.PATIENCE) as s:
            s.sendall(b"GET /id HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\nxyz")
            r = http.client.HTTPResponse(s)
            r.begin()
            assert r.status == 200 and ID_JSON.fullmatch(r.read().decode())
            assert closed_by_peer(s, sftest.PATIENCE)


def unsent_answers_budget():
    """With max_output_buffer at its least (1 MiB) and clients that never read, answers of
    ids that would not fit are refused 503 overloaded with Retry-After and counted, before
    any id is made; once the readers read, ids are served again."""
    with HttpNode(["--set", "http.max_output_buffer=1048576",
                    "--set", "snowflake.max_batch_size=40000"]) as srv:
        stalled = []
        refused = None
        try:
            for _ in range(64):
                s = socket.create_connection(("127.0.0.1", srv.http_port), sftest.PATIENCE)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                stalled.append(s)
                s.sendall(b"GET /ids?count=40000 HTTP/1.1\r\nHost: a\r\n\r\n")
                status, headers, body = request(srv, "/ids?count=40000")
                if status == 503:
                    refused = (status, headers, body)
                    break
            assert refused is not None, "64 stalled answers and never over the budget"
            reason = assert_error(refused, 503, "overloaded", "max_output_buffer, 1048576 bytes")
            assert refused[1]["retry-after"] == "1", refused[1]
            counters, gauges = stats(srv)
            assert counters["http_output_budget_refusals"] >= 1, counters
            assert gauges["http_output_buffered_bytes"] <= 1048576 + 64 * 4096, gauges
            print("   refused after %d stalled answers: %s" % (len(stalled), reason))
        finally:
            for s in stalled:
                s.close()
        wait_until(lambda: request(srv, "/ids?count=40000")[0] == 200, sftest.PATIENCE,
                   "served again")


def descriptors_fitted_and_run_out():
    """Under `ulimit -n 256` [http] max_connections is lowered to what fits, logged once; and
    with the running node's limit lowered further, so that accept() runs out of
    descriptors, the listener rests instead of spinning, says so at most about once a
    second, and serves again once the limit is back."""
    raise_own_nofile(2000)
    with HttpNode(prefix=["prlimit", "--nofile=256:256", "--"]) as srv:
        m = srv.wait_for(r"\[http\] max_connections = 16384 does not fit the open-file limit "
                         r"of (\d+) .* less (\d+) descriptors kept .* serving at most (\d+) "
                         r"connections")
        limit, kept, fit = (int(g) for g in m.groups())
        gauges = stats(srv)[1]
        assert gauges["http_max_connections"] == fit, gauges
        # Both ports' connections together leave the kept descriptors free: ZooKeeper's
        # session and the admin endpoint must not run out when both ports are full.
        both = gauges["max_connections"] + fit
        assert limit <= 256 and both + kept <= limit, (m.group(0), gauges)  # valgrind keeps a few
    with HttpNode() as srv:
        pid, soft = str(srv.proc.pid), soft_nofile(srv.proc.pid)
        subprocess.run(["prlimit", "--pid", pid, "--nofile=64:"], check=True)
        socks = open_many(srv.http_port, 200)
        try:
            assert_quiet_while(srv, 3.0, 0.5, 10)
            srv.wait_for(r"accept on HTTP ids port \d+ failed: Too many open files; \d+ "
                         r"connections open; not accepting for 100 ms")
        finally:
            close_all(socks)
        subprocess.run(["prlimit", "--pid", pid, "--nofile=%d:" % soft], check=True)
        wait_until(lambda: request(srv, "/id", timeout=5)[0] == 200, sftest.PATIENCE,
                   "served again")


def clock_backwards_is_503():
    """The clock stepped back (libfaketime): /id, /ids and Leaf's path answer 503
    invalid_system_clock with Retry-After and the generator's words; stepped forward again,
    ids come again, still increasing."""
    require_faketime()
    clock = FakeClock()
    try:
        with HttpNode(env=clock.env()) as srv:
            before = int(json.loads(request(srv, "/id")[2])["id"])
            clock.set("-5s")
            for path in ("/id", "/ids?count=3&format=text", "/api/snowflake/get/clock"):
                got = request(srv, path)
                assert_error(got, 503, "invalid_system_clock", "Clock moved backwards")
                assert got[1]["retry-after"] == "1", got[1]
            assert stats(srv)[0]["clock_errors"] >= 3
            clock.set("+0")
            after = int(json.loads(request(srv, "/id")[2])["id"])
            assert after > before, (before, after)
    finally:
        clock.remove()


# ---- registered in ZooKeeper ---------------------------------------------------------

def ok_answer(got):
    """got, a request()'s (status, headers, body), when it is a 200; else None."""
    return got if got[0] == 200 else None


def fenced_503_then_200():
    """A registered node whose ZooKeeper goes away answers 503 with Retry-After and the
    fence's reason, as /health says it (HEAD too), on a port that stays open; once
    ZooKeeper is back it serves 200 again under the same worker id."""
    srv = HttpNode(zookeeper=(ZK.hosts, "/http-fence"), worker_id=9, session_ms=2000).start()
    try:
        # Waited for, not asked once: a busy machine may fence a 2 s session for a moment.
        got = wait_until(lambda: ok_answer(request(srv, "/id")), sftest.PATIENCE, "200")
        assert decode(int(json.loads(got[2])["id"]))[2] == 9, got
        ZK.stop()
        try:
            wait_until(lambda: request(srv, "/id")[0] == 503, sftest.PATIENCE, "503 while fenced")
            got = request(srv, "/id?format=text")
            reason = assert_error(got, 503, "service_unavailable", "ZooKeeper")
            assert got[1]["retry-after"] == "1", got[1]
            health = srv.http("/health")
            assert health[0] == 503 and "ZooKeeper" in health[1], health
            assert request(srv, "/id", "HEAD")[:2][0] == 503
            assert_error(request(srv, "/api/snowflake/get/leaf"), 503, "service_unavailable",
                         "ZooKeeper")
            print("   while fenced: %s" % reason)
        finally:
            ZK.start()
        wait_until(lambda: request(srv, "/id")[0] == 200, sftest.PATIENCE, "200 again")
        got = wait_until(lambda: ok_answer(request(srv, "/api/snowflake/get/back")),
                         sftest.PATIENCE, "200 on the Leaf route")
        assert decode(int(got[2]))[2] == 9, got
    finally:
        srv.stop()


def unique_across_ports_registered():
    """A node registered in ZooKeeper under load on both ports at once."""
    srv = HttpNode(zookeeper=(ZK.hosts, "/http-load"), worker_id=WORKER).start()
    try:
        ids = load_both_ports(srv)
        assert_own_ids(sorted(ids))
        print("   %d ids from 8 clients on both ports of a registered node, none twice"
              % len(ids))
    finally:
        srv.stop()


def main():
    sftest.require_server()
    r = sftest.Runner("test_http")
    with HttpNode() as srv:
        for check in (json_and_text_shapes, leaf_caller, keep_alive_and_pipelining,
                      every_error_status, head_makes_no_ids, figures_on_the_admin_endpoint):
            r.run(check, srv)
    for check in (unique_across_ports_standalone, connections_over_the_maximum,
                  slow_sender_and_idle_connection, oversized_requests,
                  keep_alive_off_and_a_body, unsent_answers_budget,
                  descriptors_fitted_and_run_out, clock_backwards_is_503):
        r.run(check)
    sftest.require_zookeeper_client()
    ZK.start()
    r.run(fenced_503_then_200)
    r.run(unique_across_ports_registered)
    r.finish()


if __name__ == "__main__":
    main()
