#!/usr/bin/python3
"""test_server.py -- snowflaked end to end through Apache Thrift's Python
library: the original four methods, get_ids, user agents, pipelining, 100
concurrent connections, every input limit, the admin HTTP endpoints, SIGTERM
and configuration errors. Each server runs on a free loopback port and is
stopped however the test ends."""
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time

import sftest
from sftest import (InvalidRequestError, InvalidUserAgentError, Server, Snowflake,
                    TBinaryProtocol, TTransport, closed_by_peer, decode, expect_raises,
                    encode_call, raw_connect)

WORKER, DATACENTER = 7, 3
BAD_AGENTS = ["", "1", "1asdf", "a b", "ab_c"]


def assert_serving(srv):
    """A fresh client still gets ids: the server survived whatever came before."""
    with srv.client() as api:
        first = api.get_id("infra-dm")
        batch = api.get_ids("infra-dm", 3)
    assert len(batch) == 3 and first < batch[0] < batch[1] < batch[2], (first, batch)


def strictly_increasing(ids):
    return all(a < b for a, b in zip(ids, ids[1:]))


# ---- the original four methods and get_ids ----------------------------------

def test_original_methods(srv):
    with srv.client() as api:
        assert api.get_worker_id() == WORKER
        assert api.get_datacenter_id() == DATACENTER
        before = int(time.time() * 1000)
        ts = api.get_timestamp()
        after = int(time.time() * 1000)
        assert before - 1000 <= ts <= after + 1000, (before, ts, after)
        id_ = api.get_id("infra-dm")
        ms, dc, worker, _ = decode(id_)
        assert (dc, worker) == (DATACENTER, WORKER), decode(id_)
        assert before - 1000 <= ms <= int(time.time() * 1000) + 1000, (before, ms)


def test_non_strict_client(srv):
    """A client that writes the old non-strict header (no version word: Thrift's
    strictWrite=false, which legacy clients may use) is answered on every method, as the
    original's server, which read with strictRead off, answered it."""
    sock = sftest.TSocket.TSocket("127.0.0.1", srv.port)
    sock.setTimeout(5000)
    transport = TTransport.TFramedTransport(sock)
    protocol = TBinaryProtocol.TBinaryProtocol(transport, strictRead=False, strictWrite=False)
    api = Snowflake.Client(protocol)
    transport.open()
    try:
        assert api.get_worker_id() == WORKER
        assert api.get_datacenter_id() == DATACENTER
        assert api.get_timestamp() > 0
        ids = [api.get_id("legacy-client") for _ in range(3)] + api.get_ids("legacy-client", 3)
        assert strictly_increasing(ids), ids
        assert all(decode(i)[1:3] == (DATACENTER, WORKER) for i in ids), ids
        expect_raises(InvalidUserAgentError, api.get_id, "1bad")
        assert api.get_id("legacy-client") > ids[-1]
    finally:
        transport.close()


def test_get_id_increases(srv):
    with srv.client() as api:
        ids = [api.get_id("infra-dm") for _ in range(500)]
    assert strictly_increasing(ids)


def test_get_ids_sizes(srv):
    last = 0
    with srv.client() as api:
        for n in (1, 2, 7, 4096, 4097, 10000):
            ids = api.get_ids("infra-dm", n)
            assert len(ids) == n, (n, len(ids))
            assert strictly_increasing(ids), n
            assert len(set(ids)) == n, n
            assert ids[0] > last, (n, ids[0], last)
            assert all(decode(i)[1:3] == (DATACENTER, WORKER) for i in ids), n
            last = ids[-1]
        assert api.get_id("infra-dm") > last


def test_get_ids_bad_count(srv):
    with srv.client() as api:
        for n in (0, -1, 10001, 2**31 - 1):
            e = expect_raises(InvalidRequestError, api.get_ids, "infra-dm", n)
            assert "10000" in e.message, (n, e.message)
        assert len(api.get_ids("infra-dm", 1)) == 1  # same connection still usable
    assert_serving(srv)


def test_user_agents(srv):
    with srv.client() as api:
        assert api.get_id("infra-dm") > 0
        assert len(api.get_ids("infra-dm", 2)) == 2
        for agent in BAD_AGENTS:
            e = expect_raises(InvalidUserAgentError, api.get_id, agent)
            assert e.message, agent
            expect_raises(InvalidUserAgentError, api.get_ids, agent, 5)
            assert api.get_id("infra-dm") > 0, agent
    assert_serving(srv)


# ---- pipelining and concurrency ---------------------------------------------

def test_pipelined(srv):
    calls = []
    for i in range(60):
        kind = ("get_id", "get_worker_id", "get_ids", "get_timestamp")[i % 4]
        calls.append(kind)
    senders = {
        "get_id": lambda c: c.send_get_id("infra-dm"),
        "get_worker_id": lambda c: c.send_get_worker_id(),
        "get_ids": lambda c: c.send_get_ids("infra-dm", 10),
        "get_timestamp": lambda c: c.send_get_timestamp(),
    }
    payload = b"".join(encode_call(i + 1, senders[k]) for i, k in enumerate(calls))
    client = sftest.Client(srv.port)
    try:
        client.socket.handle.sendall(payload)  # every request before any answer
        ids = []
        for i, kind in enumerate(calls):
            name, _, seqid = client.protocol.readMessageBegin()
            assert (name, seqid) == (kind, i + 1), (name, seqid, kind, i + 1)
            result = getattr(Snowflake, kind + "_result")()
            result.read(client.protocol)
            client.protocol.readMessageEnd()
            assert result.success is not None, (kind, result)
            if kind == "get_id":
                ids.append(result.success)
            elif kind == "get_ids":
                ids.extend(result.success)
            elif kind == "get_worker_id":
                assert result.success == WORKER
        assert strictly_increasing(ids), "pipelined answers out of order"
    finally:
        client.close()


def test_100_concurrent_connections(srv):
    clients = [sftest.Client(srv.port, 10.0) for _ in range(100)]
    results = [None] * 100
    errors = []
    barrier = threading.Barrier(100)

    def work(i):
        try:
            barrier.wait(10)
            api = clients[i].api
            got = [api.get_id("infra-dm") for _ in range(20)]
            got += api.get_ids("infra-dm", 50)
            results[i] = got
        except Exception as e:  # reported below with the connection number
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(100)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        for c in clients:
            c.close()
    assert not errors, errors[:5]
    every = [i for r in results for i in r]
    assert len(every) == 100 * 70, len(every)
    assert len(set(every)) == len(every), "duplicate ids across connections"
    assert all(strictly_increasing(r) for r in results)


# ---- admin HTTP --------------------------------------------------------------

def flatten(obj, out=None):
    """Leaf name -> value of a nested JSON object (counters may be grouped)."""
    out = {} if out is None else out
    for key, value in obj.items():
        if isinstance(value, dict):
            flatten(value, out)
        else:
            out[key] = value
    return out


def stats(srv):
    status, body = srv.http("/stats.json")
    assert status == 200, (status, body)
    return flatten(json.loads(body))


def test_admin(srv):
    status, _ = srv.http("/health")
    assert status == 200, status
    before = stats(srv)
    with srv.client() as api:
        for _ in range(10):
            api.get_id("stats-agent")
        api.get_ids("stats-agent", 5)
        expect_raises(InvalidUserAgentError, api.get_id, "a b")
    after = stats(srv)
    assert after["ids_generated"] - before.get("ids_generated", 0) >= 15, (before, after)
    assert after["ids_generated_stats-agent"] - before.get("ids_generated_stats-agent", 0) == 15
    assert after["exceptions"] - before.get("exceptions", 0) >= 1, (before, after)
    assert after["worker_id"] == WORKER and after["datacenter_id"] == DATACENTER, after
    conn_keys = [k for k in after if "connection" in k]
    assert conn_keys, "no connection counter in %s" % sorted(after)

    status, body = srv.http("/metrics")
    assert status == 200, status
    samples = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            m = re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)$", line)
            assert m, "not Prometheus text: %r" % line
            samples[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    generated = [v for k, v in samples.items() if "ids_generated" in k and "{" not in k]
    assert generated and max(generated) >= after["ids_generated"], (samples, after)

    status, _ = srv.http("/no-such-page")
    assert status == 404, status


OSTRICH_TIMING_KEYS = ["average", "count", "maximum", "minimum", "p25", "p50", "p75", "p90",
                      "p95", "p99", "p999", "p9999"]


def test_admin_timings_and_legacy_paths(srv):
    """Per-method timings as the original's admin service showed them (/stats.json
    "timings" and "metrics", /stats.txt and /stats), a Prometheus histogram per method,
    /ping and /server_info.json."""
    def timings():
        status, body = srv.http("/stats.json")
        assert status == 200, status
        doc = json.loads(body)
        assert doc["timings"] == doc["metrics"], doc
        return doc["timings"]

    before = timings()
    with srv.client() as api:
        for _ in range(20):
            api.get_id("timed-agent")
        api.get_ids("timed-agent", 3)
        api.get_worker_id()
    after = timings()
    assert sorted(after) == ["get_datacenter_id", "get_id", "get_ids", "get_timestamp",
                             "get_worker_id"], sorted(after)
    for method, calls in (("get_id", 20), ("get_ids", 1), ("get_worker_id", 1)):
        t = after[method]
        assert sorted(t) == sorted(OSTRICH_TIMING_KEYS), t
        assert t["count"] - before[method]["count"] == calls, (method, before, after)
        ordered = [t["minimum"]] + [t[p] for p in OSTRICH_TIMING_KEYS[4:]] + [t["maximum"]]
        assert ordered == sorted(ordered) and t["minimum"] >= 1, (method, t)
        assert t["minimum"] <= t["average"] <= t["maximum"], (method, t)

    for path in ("/stats.txt", "/stats"):
        status, body = srv.http(path)
        assert status == 200, (path, status)
        assert body.startswith("counters:\n") and "\ngauges:\n" in body, body
        assert re.search(r"^  ids_generated: \d+$", body, re.M), body
        m = re.search(r"^  get_id: \((.*)\)$", body, re.M)
        assert m, body
        assert [kv.split("=")[0] for kv in m.group(1).split(", ")] == OSTRICH_TIMING_KEYS, body

    status, body = srv.http("/metrics")
    assert status == 200, status
    buckets = [(float("inf") if le == "+Inf" else float(le), float(v)) for le, v in re.findall(
        r'^snowflake_request_duration_seconds_bucket\{method="get_id",le="([^"]+)"\} (\S+)$',
        body, re.M)]
    assert len(buckets) > 10 and buckets[-1][0] == float("inf"), body
    assert [le for le, _ in buckets] == sorted(le for le, _ in buckets), buckets
    assert [v for _, v in buckets] == sorted(v for _, v in buckets), buckets
    count = re.search(r'^snowflake_request_duration_seconds_count\{method="get_id"\} (\S+)$',
                      body, re.M)
    assert count and float(count.group(1)) == buckets[-1][1], (count, buckets[-1])

    assert srv.http("/ping") == (200, "pong\n")
    status, body = srv.http("/server_info.json")
    assert status == 200, status
    info = json.loads(body)
    assert info["name"] == "snowflaked" and re.match(r"^\d+\.\d+\.\d+$", info["version"]), info
    assert "thrift_c_glib" in info["build"], info
    now_ms = time.time() * 1000
    assert now_ms - 600000 < info["start_time_ms"] <= now_ms and info["uptime_ms"] >= 0, info
    assert info["start_time"].startswith(time.strftime("%Y-%m-%dT", time.gmtime(
        info["start_time_ms"] / 1000))), info


def test_admin_counts_refused_frames(srv):
    before = stats(srv)
    with raw_connect(srv.port) as s:
        s.sendall(struct.pack(">i", 1 << 30) + b"\0" * 64)
        assert closed_by_peer(s)
    after = stats(srv)
    moved = [k for k in after if "refused" in k and after[k] > before.get(k, 0)]
    assert moved, "no '*refused*' counter moved: %s" % sorted(after)


# ---- limits: every bad input closes that connection only --------------------

def test_oversized_frame(srv):
    with srv.client() as bystander:
        bystander.get_id("infra-dm")
        with raw_connect(srv.port) as s:
            s.sendall(struct.pack(">i", 1025) + b"\0" * 1025)
            assert closed_by_peer(s), "a frame over max_frame_size was not refused"
        with raw_connect(srv.port) as s:
            s.sendall(b"\xff\xff\xff\xff" + b"\0" * 8)  # a negative length
            assert closed_by_peer(s), "a negative frame length was not refused"
        assert bystander.get_id("infra-dm") > 0, "another client was disturbed"
    assert_serving(srv)


def test_garbage_bytes(srv):
    for junk in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                 struct.pack(">i", 16) + b"\x13\x37garbage-bytes!",
                 struct.pack(">i", 24) + b"\x80\x01\x00\x01\x00\x00\x00\x06get_id" + b"\xff" * 10):
        with raw_connect(srv.port) as s:
            s.sendall(junk)
            assert closed_by_peer(s), "garbage %r did not close the connection" % junk
        assert_serving(srv)


def test_unknown_and_empty_method_names(srv):
    """An unknown or empty method name gets Thrift's UNKNOWN_METHOD answer,
    and the server goes on serving."""
    from thrift.Thrift import TApplicationException, TMessageType
    for name in (b"no_such_method", b""):
        body = b"\x80\x01\x00\x01" + struct.pack(">i", len(name)) + name + struct.pack(">i", 7) + b"\x00"
        with raw_connect(srv.port) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            proto = TBinaryProtocol.TBinaryProtocol(
                TTransport.TFramedTransport(sftest.SocketReader(s)))
            _, mtype, seqid = proto.readMessageBegin()
            x = TApplicationException()
            x.read(proto)
            assert (mtype, seqid) == (TMessageType.EXCEPTION, 7), (mtype, seqid)
            assert x.type == TApplicationException.UNKNOWN_METHOD, (x.type, x.message)
        assert_serving(srv)


def test_frame_cut_short(srv):
    request = encode_call(1, lambda c: c.send_get_id("infra-dm"))
    with raw_connect(srv.port) as s:
        s.sendall(request[:len(request) // 2])  # the rest never comes
        assert closed_by_peer(s, 5.0), "an unfinished frame was never timed out"
    assert_serving(srv)
    with raw_connect(srv.port) as s:  # cut short by the client closing
        s.sendall(request[:10])
    assert_serving(srv)


def test_idle_timeout(srv):
    with raw_connect(srv.port) as s:
        started = time.time()
        assert closed_by_peer(s, 5.0), "an idle connection was never closed"
        assert time.time() - started >= 0.3, "closed before the idle timeout"
    client = sftest.Client(srv.port)
    try:
        assert client.api.get_id("infra-dm") > 0
        assert closed_by_peer(client.socket.handle, 5.0), "idle after a request: not closed"
    finally:
        client.close()
    assert_serving(srv)


def test_max_connections(srv):
    # The start-up check's own connection counts until its thread has seen it close.
    sftest.wait_until(lambda: stats(srv).get("connections") == 0, sftest.PATIENCE,
                      "the start-up check's connection closed")
    held = [sftest.Client(srv.port) for _ in range(8)]
    try:
        for c in held:
            assert c.api.get_id("infra-dm") > 0
        extra = None
        try:
            extra = sftest.Client(srv.port, 3.0)
            extra.api.get_id("infra-dm")
            raise AssertionError("a connection over max_connections was served")
        except (TTransport.TTransportException, OSError):
            pass
        finally:
            if extra is not None:
                extra.close()
        for c in held:  # those already connected are unaffected
            assert c.api.get_id("infra-dm") > 0
    finally:
        for c in held:
            c.close()
    deadline = time.time() + sftest.PATIENCE
    while True:
        try:
            assert_serving(srv)
            break
        except (TTransport.TTransportException, OSError):
            if time.time() > deadline:
                raise
            time.sleep(0.1)


# ---- SIGTERM -----------------------------------------------------------------

def test_sigterm_answers_in_flight_and_exits_0():
    srv = Server(worker_id=WORKER, datacenter_id=DATACENTER, admin=True).start()
    try:
        idle = raw_connect(srv.port)
        client = sftest.Client(srv.port)
        payload = b"".join(encode_call(i + 1, lambda c: c.send_get_ids("infra-dm", 1000))
                           for i in range(20))
        client.socket.handle.sendall(payload)
        # Made, not yet read by the client: a request read after SIGTERM is refused
        # "stopping", and a connection not yet held by a thread is closed unanswered.
        sftest.wait_until(lambda: srv.ids_made("infra-dm") == 20000, sftest.PATIENCE,
                          "20 batches made")
        srv.proc.send_signal(15)
        for i in range(20):
            _, _, seqid = client.protocol.readMessageBegin()
            result = Snowflake.get_ids_result()
            result.read(client.protocol)
            client.protocol.readMessageEnd()
            assert seqid == i + 1 and result.success is not None and len(result.success) == 1000, (seqid, result)
        rc = srv.proc.wait(sftest.PATIENCE)
        assert rc == 0, "exit status %s after SIGTERM; log:\n%s" % (rc, srv.log())
        client.close()
        idle.close()
        try:
            socket.create_connection(("127.0.0.1", srv.port), 1).close()
            raise AssertionError("still accepting after exit")
        except ConnectionRefusedError:
            pass
    finally:
        srv.stop()


# ---- configuration -----------------------------------------------------------

def run_config(args, env=None):
    """Runs snowflaked expecting it to refuse its settings: (status, stderr)."""
    argv = [sftest.SNOWFLAKED, "--bind", "127.0.0.1", "--port", "0", "--admin-port", "0"] + args
    proc = subprocess.run(argv, env=sftest.clean_env(env), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=sftest.PATIENCE)
    return proc.returncode, proc.stderr


def expect_config_error(args, env=None, must_name=()):
    rc, err = run_config(args, env)
    assert rc != 0, "accepted %r %r; log:\n%s" % (args, env, err)
    assert "listening on" not in err, "bound a port before refusing %r" % args
    for word in must_name:
        assert word in err, "%r not named for %r %r:\n%s" % (word, args, env, err)


def test_config_errors():
    tmp = tempfile.mkdtemp(prefix="sf-config-")
    try:
        expect_config_error(["--worker-id", "32"], must_name=("worker_id", "0..31", "32"))
        expect_config_error(["--datacenter-id", "-1"], must_name=("datacenter_id", "0..31"))
        expect_config_error([], {"SNOWFLAKE_WORKER_ID": "99"}, must_name=("worker_id", "0..31"))
        expect_config_error(["--port", "70000"], must_name=("port", "65535"))
        expect_config_error(["--port", "http"], must_name=("port", "65535"))
        expect_config_error(["--zookeeper", "127.0.0.1:1", "--set",
                             "snowflake.worker_id_path=/a//b"],
                            must_name=("worker_id_path", "'/a//b'", "empty component"))
        expect_config_error([], {"SNOWFLAKE_LOG_LEVEL": "verbose"},
                            must_name=("log_level", "verbose", "debug"))
        expect_config_error([], {"SNOWFLAKE_MAX_BATCH_SIZE": "0"},
                            must_name=("max_batch_size",))
        missing = os.path.join(tmp, "missing.conf")
        expect_config_error(["-c", missing], must_name=(missing,))
        expect_config_error(["--config", tmp], must_name=(tmp,))  # a directory: unreadable
        if os.geteuid() != 0:  # root reads mode-000 files anyway
            locked = os.path.join(tmp, "locked.conf")
            with open(locked, "w") as f:
                f.write("[snowflake]\nworker_id = 1\n")
            os.chmod(locked, 0)
            expect_config_error(["-c", locked], must_name=(locked,))
        broken = os.path.join(tmp, "broken.conf")
        with open(broken, "w") as f:
            f.write("[snowflake\nworker_id = 1\n")
        expect_config_error(["-c", broken], must_name=(broken,))
        wrong = os.path.join(tmp, "wrong.conf")
        with open(wrong, "w") as f:
            f.write("[snowflake]\nworker_id = seven\n")
        expect_config_error(["-c", wrong], must_name=("worker_id",))
    finally:
        shutil.rmtree(tmp)


def test_config_precedence():
    tmp = tempfile.mkdtemp(prefix="sf-config-")
    try:
        conf = os.path.join(tmp, "snowflake.conf")
        with open(conf, "w") as f:
            f.write("[snowflake]\nworker_id = 4\ndatacenter_id = 5\nmax_batch_size = 50\n")
        srv = Server(["-c", conf], worker_id=None, datacenter_id=None)
        with srv:
            with srv.client() as api:
                assert (api.get_worker_id(), api.get_datacenter_id()) == (4, 5)
                assert len(api.get_ids("infra-dm", 50)) == 50
                e = expect_raises(InvalidRequestError, api.get_ids, "infra-dm", 51)
                assert "50" in e.message, e.message
        srv = Server(["-c", conf], {"SNOWFLAKE_WORKER_ID": "6"}, worker_id=None,
                     datacenter_id=None)
        with srv:
            with srv.client() as api:
                assert api.get_worker_id() == 6, "the environment did not override the file"
                assert api.get_datacenter_id() == 5
        srv = Server(["-c", conf], {"SNOWFLAKE_WORKER_ID": "6"}, worker_id=9,
                     datacenter_id=None)
        with srv:
            with srv.client() as api:
                assert api.get_worker_id() == 9, "the flag did not override the environment"
    finally:
        shutil.rmtree(tmp)


def test_shipped_config_serves():
    conf = os.path.join(sftest.TOP_SRCDIR, "conf", "snowflake.conf")
    srv = Server(["-c", conf], worker_id=None, datacenter_id=None)
    with srv:
        assert_serving(srv)


def main():
    sftest.require_server()
    r = sftest.Runner("test_server")
    with Server(worker_id=WORKER, datacenter_id=DATACENTER, admin=True) as srv:
        for test in (test_original_methods, test_non_strict_client, test_get_id_increases,
                     test_get_ids_sizes,
                     test_get_ids_bad_count, test_user_agents, test_pipelined,
                     test_100_concurrent_connections, test_admin,
                     test_admin_timings_and_legacy_paths, test_admin_counts_refused_frames):
            r.run(test, srv)
    # The limits, but an idle timeout long enough that a loaded machine does not close the
    # bystander clients between their calls; the short one has a server of its own.
    limits = {"SNOWFLAKE_MAX_FRAME_SIZE": "1024", "SNOWFLAKE_IDLE_TIMEOUT_MS": "60000",
              "SNOWFLAKE_FRAME_TIMEOUT_MS": "700"}
    with Server(env=limits, worker_id=WORKER, datacenter_id=DATACENTER) as srv:
        for test in (test_oversized_frame, test_garbage_bytes,
                     test_unknown_and_empty_method_names, test_frame_cut_short):
            r.run(test, srv)
    with Server(env={"SNOWFLAKE_IDLE_TIMEOUT_MS": "700"}, worker_id=WORKER,
                datacenter_id=DATACENTER) as srv:
        r.run(test_idle_timeout, srv)
    with Server(env={"SNOWFLAKE_MAX_CONNECTIONS": "8"}, worker_id=WORKER,
                datacenter_id=DATACENTER, admin=True) as srv:
        r.run(test_max_connections, srv)
    for test in (test_sigterm_answers_in_flight_and_exits_0, test_config_errors,
                 test_config_precedence, test_shipped_config_serves):
        r.run(test)
    r.finish()


if __name__ == "__main__":
    main()
