#!/usr/bin/python3
"""test_limits.py -- snowflaked under the limits operators have and clients that abuse
them: an open-file limit below the number of clients (raised, clamped, backed off, the
log bounded), more than 1,024 descriptors open while /health is asked, agents long or
many, deeply nested frames, and readers too slow to take their replies. Every server
runs on a free loopback port and is stopped however the test ends."""
import json
import os
import resource
import socket
import struct
import subprocess
import time

import sftest
from sftest import InvalidUserAgentError, Server, closed_by_peer, expect_raises

WORKER, DATACENTER = 5, 4


def raise_own_nofile(need):
    """Raises this process's soft open-file limit to at least need (from its hard
    limit); skips the test run when the hard limit is too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise AssertionError("the open-file hard limit %d is below the %d this test needs"
                             % (hard, need))
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def cpu_seconds(pid):
    """User plus system CPU seconds the process has used so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_field(pid, name, prefix, column):
    """The integer in the given column of the line of /proc/PID/NAME starting with prefix."""
    with open("/proc/%d/%s" % (pid, name)) as f:
        for line in f:
            if line.startswith(prefix):
                return int(line.split()[column])
    raise AssertionError("no %r line in /proc/%d/%s" % (prefix, pid, name))


def soft_nofile(pid):
    """The soft open-file limit of a running process."""
    return proc_field(pid, "limits", "Max open files", 3)


def open_many(port, n, patience=0.0):
    """Up to n connections to port (those the server drops at once count as opened); a
    connect is given 2 s, or what is left of patience seconds when that is more. The
    caller closes them."""
    deadline = time.time() + patience
    socks = []
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port),
                                         max(2.0, deadline - time.time()))
            socks.append(s)
        except OSError:
            pass
    return socks


def close_all(socks):
    for s in socks:
        s.close()


def assert_serving(srv, timeout=sftest.PATIENCE):
    """A fresh client gets an id within timeout: the server is up and serving."""
    deadline = time.time() + timeout
    while True:
        try:
            with srv.client(2.0) as api:
                assert api.get_id("infra-dm") > 0
                return
        except Exception:
            if time.time() > deadline:
                raise


def assert_quiet_while(srv, seconds, max_cpu, max_lines):
    """Over the next seconds the server uses at most max_cpu CPU seconds and writes at
    most max_lines log lines: it neither spins nor floods the log."""
    cpu0, lines0 = cpu_seconds(srv.proc.pid), len(srv.lines)
    time.sleep(seconds)
    cpu = cpu_seconds(srv.proc.pid) - cpu0
    lines = len(srv.lines) - lines0
    assert cpu <= max_cpu, ("snowflaked used %.2f CPU seconds in %.0f s (bound %.2f): it spins; "
                            "last log lines:\n%s" % (cpu, seconds, max_cpu,
                                                    "\n".join(srv.lines[-5:])))
    assert lines <= max_lines, ("snowflaked wrote %d log lines in %.0f s (bound %d); last:\n%s"
                                % (lines, seconds, max_lines, "\n".join(srv.lines[-5:])))


# ---- 1: descriptors -------------------------------------------------------------------

def test_nofile_raised_toward_hard_limit():
    """A soft open-file limit below the hard one is raised at start."""
    with Server(prefix=["prlimit", "--nofile=512:4096", "--"], worker_id=WORKER,
                datacenter_id=DATACENTER) as srv:
        assert soft_nofile(srv.proc.pid) == 4096, open("/proc/%d/limits" % srv.proc.pid).read()


def test_descriptor_exhaustion_clamped():
    """With `ulimit -n` 256 (soft and hard) and 600 clients, max_connections is clamped
    to what fits (logged once), the server neither spins nor floods its log, /health
    still answers, and it serves once the clients leave."""
    raise_own_nofile(2000)
    with Server(prefix=["prlimit", "--nofile=256:256", "--"], admin=True, worker_id=WORKER,
                datacenter_id=DATACENTER) as srv:
        m = srv.wait_for(r"max_connections = 16384 does not fit .* serving at most (\d+)")
        cap = int(m.group(1))
        assert 16 <= cap < 256, m.group(0)
        socks = open_many(srv.port, 600)
        try:
            assert_quiet_while(srv, 3.0, 0.5, 20)
            status, body = srv.http("/health")
            assert status == 200 and "serving" in body, (status, body)
        finally:
            close_all(socks)
        assert_serving(srv)
        clamps = [line for line in srv.lines if "does not fit" in line]
        assert len(clamps) == 1, clamps


def test_descriptor_exhaustion_at_run_time():
    """The open-file limit lowered under a running server (so accept() fails with
    EMFILE): the listener backs off instead of spinning, the failure is logged at most
    about once a second with the count suppressed, and the server serves again once the
    clients leave."""
    raise_own_nofile(2000)
    with Server(worker_id=WORKER, datacenter_id=DATACENTER) as srv:
        pid = str(srv.proc.pid)
        soft = soft_nofile(srv.proc.pid)
        subprocess.run(["prlimit", "--pid", pid, "--nofile=128:"], check=True)
        socks = open_many(srv.port, 400)
        try:
            assert_quiet_while(srv, 3.0, 0.5, 10)
            srv.wait_for(r"accept on port \d+ failed: Too many open files")
        finally:
            close_all(socks)
        subprocess.run(["prlimit", "--pid", pid, "--nofile=%d:" % soft], check=True)
        assert_serving(srv)
        socks = open_many(srv.port, 300)  # a second wave reports what was suppressed
        try:
            srv.wait_for(r"accept on port \d+ failed: .*\d+ similar lines? suppressed", 5)
        except AssertionError:
            pass  # no second failure is needed when the first wave was short
        finally:
            close_all(socks)


# ---- 5: the admin endpoint past 1,024 descriptors -------------------------------------

def test_admin_health_past_1024_descriptors():
    """/health and /stats.json answer while 1,100 Thrift connections are open, so the
    admin endpoint's own sockets are numbered above 1,024 (where select() cannot go)."""
    raise_own_nofile(4000)
    with Server(prefix=["prlimit", "--nofile=4096:4096", "--"], admin=True,
                worker_id=WORKER, datacenter_id=DATACENTER) as srv:
        # Every connect is accepted here, if late: one that waits for a server busy
        # accepting the others is given time rather than counted as refused.
        socks = open_many(srv.port, 1100, sftest.PATIENCE)
        try:
            assert len(socks) == 1100, len(socks)
            deadline = time.time() + sftest.PATIENCE
            while True:  # the server takes a moment to accept them all
                status, body = srv.http("/stats.json")
                if json.loads(body)["gauges"]["connections"] >= 1100:
                    break
                assert time.time() < deadline, body
                time.sleep(0.1)
            for _ in range(5):
                status, body = srv.http("/health")
                assert status == 200 and body == "serving\n", (status, body)
        finally:
            close_all(socks)


# ---- 2: user agents -------------------------------------------------------------------

def test_agent_length_limit():
    """An agent longer than max_useragent_length (default 255) is refused with
    InvalidUserAgentError naming the limit; one of 255 characters is served."""
    with Server(worker_id=WORKER, datacenter_id=DATACENTER) as srv:
        with srv.client(sftest.PATIENCE) as api:  # a busy server may answer late
            assert api.get_id("a" * 255) > 0
            e = expect_raises(InvalidUserAgentError, api.get_id, "a" * 256)
            assert "255" in e.message and "max_useragent_length" in e.message, e.message
            assert len(e.message) < 400, len(e.message)
            e = expect_raises(InvalidUserAgentError, api.get_ids, "b" * 60000, 2)
            assert "max_useragent_length" in e.message and len(e.message) < 400, e.message[:300]


def test_agent_cardinality_bounded():
    """Past max_tracked_useragents distinct agents, ids are counted under one 'other'
    counter, a gauge says how many agents were not tracked, and the stats answers stay
    bounded in size."""
    with Server(env={"SNOWFLAKE_MAX_TRACKED_USERAGENTS": "50"}, admin=True,
                worker_id=WORKER, datacenter_id=DATACENTER) as srv:
        with srv.client(sftest.PATIENCE) as api:  # a busy server may answer late
            for i in range(200):
                assert api.get_id("agent-%d" % i) > 0
            for i in range(10):  # tracked agents go on being counted by name
                assert api.get_id("agent-0") > 0
        status, body = srv.http("/stats.json")
        stats = json.loads(body)
        per_agent = [k for k in stats["counters"] if k.startswith("ids_generated_agent-")]
        assert len(per_agent) == 50, (len(per_agent), per_agent[:5])
        assert stats["counters"]["ids_generated_agent-0"] == 11, stats["counters"]
        assert stats["counters"]["ids_generated_other_agents"] == 150, stats["counters"]
        assert stats["gauges"]["useragents_tracked"] == 50, stats["gauges"]
        assert 140 <= stats["gauges"]["useragents_untracked"] <= 160, stats["gauges"]
        status, metrics = srv.http("/metrics")
        assert metrics.count('snowflake_ids_generated_by_agent_total{agent=') == 50
        assert "snowflake_ids_generated_other_agents_total 150" in metrics, metrics[-2000:]


# ---- 3: nesting ----------------------------------------------------------------------

def nested_get_id_frame(depth, agent="infra-dm"):
    """A framed get_id call whose arguments carry, besides the agent, an unknown field
    (id 99) holding structs nested depth deep: 3 bytes a level on the wire."""
    name = b"get_id"
    body = struct.pack(">Ii", 0x80010001, len(name)) + name + struct.pack(">i", 1)
    body += struct.pack(">bh", 11, 1) + struct.pack(">i", len(agent)) + agent.encode()
    body += struct.pack(">bh", 12, 99)
    body += struct.pack(">bh", 12, 1) * (depth - 1)
    body += b"\x00" * depth  # closes every nested struct
    body += b"\x00"          # ends the arguments
    return struct.pack(">i", len(body)) + body


def test_deep_nesting_refused():
    """With max_frame_size raised to 1 MiB, a frame nesting structs 200,000 deep closes
    that connection (it used to overflow the stack and kill the server); nesting within
    the limit is still skipped and answered."""
    with Server(env={"SNOWFLAKE_MAX_FRAME_SIZE": "1048576"}, worker_id=WORKER,
                datacenter_id=DATACENTER) as srv:
        with sftest.raw_connect(srv.port, sftest.PATIENCE) as s:  # the answer's wait
            s.sendall(nested_get_id_frame(32))
            head = s.recv(4)
            assert len(head) == 4, head
        with sftest.raw_connect(srv.port, 10.0) as s:
            s.sendall(nested_get_id_frame(200000))
            assert closed_by_peer(s, 10.0), "a 200,000-deep frame was not refused"
        assert srv.proc.poll() is None, "snowflaked died:\n" + srv.log()
        srv.wait_for(r"nest")
        assert_serving(srv)


def vm_peak_kib(pid):
    """The process's peak virtual memory (VmPeak), KiB."""
    return proc_field(pid, "status", "VmPeak:", 1)


def call_claiming_string(where):
    """A framed call of a few dozen bytes holding one string whose length claims
    2 GiB - 1 bytes: the method name, get_id's agent, or an unknown string field (which
    the server skips)."""
    huge = struct.pack(">i", 0x7FFFFFFF)
    head = struct.pack(">I", 0x80010001)
    if where == "name":
        body = head + huge + b"get_id"
    else:
        name = b"get_id"
        body = head + struct.pack(">i", len(name)) + name + struct.pack(">i", 1)
        if where == "agent":
            body += struct.pack(">bh", 11, 1) + huge + b"agent"
        else:
            body += struct.pack(">bh", 11, 1) + struct.pack(">i", 5) + b"agent"
            body += struct.pack(">bh", 11, 42) + huge + b"x"
    return struct.pack(">i", len(body)) + body


def test_claimed_string_lengths_allocate_nothing():
    """A string's length is checked against what is left of its frame before anything is
    allocated for it: a 30-byte frame claiming a 2 GiB name, agent or skipped field closes
    its connection and leaves the server's address space as it was (it used to allocate
    the claimed size, which under a memory limit such as `ulimit -v` or a strict
    overcommit policy aborts the server)."""
    with Server(worker_id=WORKER, datacenter_id=DATACENTER) as srv:
        assert_serving(srv)
        before = vm_peak_kib(srv.proc.pid)
        for where in ("name", "agent", "skipped field"):
            with sftest.raw_connect(srv.port, 10.0) as s:
                s.sendall(call_claiming_string(where))
                assert closed_by_peer(s, 10.0), "a frame claiming a 2 GiB %s was answered" % where
            grown = vm_peak_kib(srv.proc.pid) - before
            assert grown < 256 * 1024, ("a frame claiming a 2 GiB %s grew the server's peak "
                                        "address space by %d MiB" % (where, grown // 1024))
        assert srv.proc.poll() is None, "snowflaked died:\n" + srv.log()
        assert_serving(srv)


def test_cli_refuses_deeply_nested_reply():
    """A fake server answers get_id with a reply nesting structs 200,000 deep in one
    frame: the CLI (and the peer check, which reads through the same protocol) reports a
    broken answer instead of overflowing its stack."""
    import threading
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]

    def fake_server():
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(10)
            head = conn.recv(4)
            if len(head) == 4:
                need = struct.unpack(">i", head)[0]
                while need > 0:
                    need -= len(conn.recv(need))
            name = b"get_id"
            depth = 200000
            body = struct.pack(">Ii", 0x80010002, len(name)) + name + struct.pack(">i", 0)
            body += struct.pack(">bh", 12, 99) + struct.pack(">bh", 12, 1) * (depth - 1)
            body += b"\x00" * (depth + 1)
            try:
                conn.sendall(struct.pack(">i", len(body)) + body)
                conn.recv(1)
            except OSError:
                pass

    t = threading.Thread(target=fake_server, daemon=True)
    t.start()
    try:
        out = subprocess.run([sftest.SNOWFLAKE_CLI, "--port", str(port), "--timeout-ms", "5000",
                              "id"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             timeout=30)
    finally:
        t.join(10)
        listener.close()
    assert out.returncode in (1, 3), ("the CLI ended with %d (a negative status is a signal); "
                                      "stderr: %s" % (out.returncode, out.stderr[:500]))
    assert "nested more than 64" in out.stderr, out.stderr[:500]


# ---- 4: slow readers -----------------------------------------------------------------

def pipelined_get_ids(n, count=10000):
    """n framed get_ids(count) calls, each answered with about count * 9 bytes."""
    name, agent = b"get_ids", b"infra-dm"
    out = b""
    for seq in range(n):
        body = struct.pack(">Ii", 0x80010001, len(name)) + name + struct.pack(">i", seq)
        body += struct.pack(">bh", 11, 1) + struct.pack(">i", len(agent)) + agent
        body += struct.pack(">bhi", 8, 2, count) + b"\x00"
        out += struct.pack(">i", len(body)) + body
    return out


def trickle_reader(port, rcvbuf=4096):
    """A connection with a small receive buffer that asks for many large replies."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", port))
    s.sendall(pipelined_get_ids(200))  # 18 MB: more than the kernel's buffers take
    return s


def test_write_progress_timeout():
    """A client that reads its replies a trickle at a time, fast enough to count as
    active but far too slow to take them, is closed after write_timeout_ms with a reset
    that drops what it had not read."""
    with Server(env={"SNOWFLAKE_WRITE_TIMEOUT_MS": "1000"}, worker_id=WORKER,
                datacenter_id=DATACENTER) as srv:
        s = trickle_reader(srv.port)
        try:
            s.settimeout(0.5)
            # Trickle until the server logs that it closed the connection: its timer may
            # run late on a busy machine, and reading fast before that would be the
            # progress that keeps the connection open. (The bytes buffered here stay
            # readable after the reset, for half a minute at this pace.) A server that
            # never closes it is caught below.
            deadline = time.time() + sftest.PATIENCE
            while time.time() < deadline and not any(  # 160 bytes a second
                    "write_timeout_ms" in line for line in list(srv.lines)):
                try:
                    if s.recv(16) == b"":
                        break
                except (ConnectionResetError, BrokenPipeError):
                    break
                except socket.timeout:
                    pass
                time.sleep(0.1)
            # Now read as fast as possible: a closed connection ends within the few
            # kilobytes still buffered here; an open one goes on sending 18 MB.
            drained, closed = 0, False
            deadline = time.time() + sftest.PATIENCE
            while time.time() < deadline and not closed:
                try:
                    chunk = s.recv(65536)
                    closed = chunk == b""
                    drained += len(chunk)
                except (ConnectionResetError, BrokenPipeError):
                    closed = True
                except socket.timeout:
                    pass
            assert closed and drained < 2 * 1024 * 1024, \
                "a trickling reader was never closed (%d bytes read fast after)" % drained
        finally:
            s.close()
        srv.wait_for(r"write_timeout_ms")
        assert_serving(srv)


def test_output_budget():
    """Past max_output_buffer bytes of replies waiting in total, the connections that
    hold the most are closed (one rate-limited log line) and the server serves on."""
    with Server(env={"SNOWFLAKE_MAX_OUTPUT_BUFFER": "4194304"}, admin=True,
                worker_id=WORKER, datacenter_id=DATACENTER) as srv:
        socks = []
        try:
            for _ in range(12):
                socks.append(trickle_reader(srv.port))
            deadline = time.time() + sftest.PATIENCE
            while True:
                stats = json.loads(srv.http("/stats.json")[1])
                if stats["counters"]["output_budget_closes"] >= 1:
                    break
                assert time.time() < deadline, "no reader was closed past the output budget"
                time.sleep(0.2)
            assert stats["gauges"]["output_buffered_bytes"] <= 4194304 + 2 * 1048576, \
                stats["gauges"]
        finally:
            close_all(socks)
        srv.wait_for(r"max_output_buffer")
        budget_lines = [line for line in srv.lines if "max_output_buffer" in line]
        assert len(budget_lines) <= 3, budget_lines
        assert_serving(srv)


def main():
    sftest.require_server()
    r = sftest.Runner("test_limits")
    for test in (test_nofile_raised_toward_hard_limit, test_descriptor_exhaustion_clamped,
                 test_descriptor_exhaustion_at_run_time, test_admin_health_past_1024_descriptors,
                 test_agent_length_limit, test_agent_cardinality_bounded,
                 test_deep_nesting_refused, test_claimed_string_lengths_allocate_nothing,
                 test_cli_refuses_deeply_nested_reply,
                 test_write_progress_timeout, test_output_budget):
        r.run(test)
    r.finish()


if __name__ == "__main__":
    main()
