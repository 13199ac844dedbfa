#!/usr/bin/python3
"""test_event_loop.py -- each event loop snowflaked can run (event_loop = epoll, io_uring)
serves the same way under the loads that take different paths through a loop: frames
split over many receives, a frame dribbled a byte at a time, more connections sending at
once than io_uring has buffers, a client that pipelines without reading (its input held
back until its replies drain), SIGTERM with requests in flight; and where io_uring is forbidden (test/tools/no_uring, a seccomp filter as
container runtimes install), auto falls back to epoll and says why, while io_uring
refuses to start. Every process is stopped however the test ends."""
import os
import subprocess
import threading
import time

import sftest
from sftest import Server, Snowflake, encode_call
from thrift.protocol import TBinaryProtocol
from thrift.transport import TTransport

NO_URING = os.path.join(sftest.TOP_BUILDDIR, "test", "tools", "no_uring")
BENCH = os.path.join(sftest.TOP_BUILDDIR, "test", "tools", "bench_server")
LOOPS = ("epoll", "io_uring")


def loop_args(loop):
    return ["--set", "snowflake.event_loop=" + loop]


def read_replies(sock, count, kind):
    """Reads count replies to `kind` calls from a raw socket: their results in order."""
    proto = TBinaryProtocol.TBinaryProtocol(
        TTransport.TFramedTransport(sftest.SocketReader(sock)))
    results = []
    for i in range(count):
        _, _, seqid = proto.readMessageBegin()
        result = getattr(Snowflake, kind + "_result")()
        result.read(proto)
        proto.readMessageEnd()
        assert seqid == i + 1, "reply %d carries seqid %d" % (i + 1, seqid)
        assert result.success is not None, "reply %d: %r" % (i + 1, result)
        results.append(result.success)
    return results


def check_loop_named(srv, loop):
    srv_log = srv.log()
    assert "each its own %s loop" % loop in srv_log, "not on %s:\n%s" % (loop, srv_log)


def check_split_frames(srv):
    """3,000 get_id frames in one write: receives end inside frames, frames span them."""
    n = 3000
    payload = b"".join(encode_call(i + 1, lambda c: c.send_get_id("infra-dm"))
                       for i in range(n))
    with sftest.raw_connect(srv.port, 10) as s:
        s.sendall(payload)
        ids = read_replies(s, n, "get_id")
    assert all(b > a for a, b in zip(ids, ids[1:])), "ids not increasing"


def check_dribbled_frame(srv):
    """One get_ids frame sent a byte at a time."""
    frame = encode_call(1, lambda c: c.send_get_ids("infra-dm", 7))
    with sftest.raw_connect(srv.port) as s:
        for b in frame:
            s.sendall(bytes([b]))
            time.sleep(0.002)
        ids = read_replies(s, 1, "get_ids")[0]
    assert len(ids) == 7, ids


def check_pipelined_unread(srv):
    """100,000 requests written before any reply is read (the server stops reading this
    connection while 1 MiB of replies waits, then catches up); every reply arrives."""
    n = 100000
    frame = encode_call(1, lambda c: c.send_get_worker_id())
    with sftest.raw_connect(srv.port, 20) as s:
        done = []
        writer = threading.Thread(target=lambda: (s.sendall(frame * n), done.append(1)))
        writer.start()
        time.sleep(1.0)  # the replies back up meanwhile
        proto = TBinaryProtocol.TBinaryProtocol(
            TTransport.TFramedTransport(sftest.SocketReader(s)))
        for i in range(n):
            proto.readMessageBegin()
            result = Snowflake.get_worker_id_result()
            result.read(proto)
            proto.readMessageEnd()
            assert result.success == 1, "reply %d: %r" % (i + 1, result)
        writer.join(20)
        assert done, "the requests were not all written"


def check_sigterm_answers_in_flight(srv):
    """SIGTERM with 20 get_ids(1000) received: every one answered, exit 0."""
    payload = b"".join(encode_call(i + 1, lambda c: c.send_get_ids("infra-dm", 1000))
                       for i in range(20))
    s = sftest.raw_connect(srv.port, 10)
    try:
        s.sendall(payload)
        # Made, not yet read by the client: a request read after SIGTERM is refused
        # "stopping", and a connection not yet held by a thread is closed unanswered.
        sftest.wait_until(lambda: srv.ids_made("infra-dm") == 20000, sftest.PATIENCE,
                          "20 batches made")
        srv.proc.send_signal(15)
        batches = read_replies(s, 20, "get_ids")
        assert all(len(b) == 1000 for b in batches)
        assert srv.wait_exit(sftest.PATIENCE) == 0, srv.log()
    finally:
        s.close()


def check_more_connections_than_buffers(loop):
    """600 connections on one thread, get_id back to back: more requests arrive in one
    turn than io_uring has receive buffers (256), and every one is answered."""
    with Server(loop_args(loop) + ["--threads", "1"]) as srv:
        out = subprocess.run([BENCH, "--port", str(srv.port), "--connections", "600",
                              "--seconds", "2"], capture_output=True, text=True, timeout=60)
        fields = dict(f.split("=", 1) for f in out.stdout.split() if "=" in f)
        assert out.returncode == 0 and fields.get("errors") == "0", out.stdout + out.stderr
        assert int(fields.get("calls", "0")) >= 600, out.stdout


def test_each_loop_serves():
    for loop in LOOPS:
        with Server(loop_args(loop)) as srv:
            check_loop_named(srv, loop)
            with srv.client() as api:
                assert api.get_worker_id() == 1 and len(api.get_ids("infra-dm", 1000)) == 1000
            for check in (check_split_frames, check_dribbled_frame, check_pipelined_unread):
                try:
                    check(srv)
                except Exception as e:
                    raise AssertionError("%s on %s: %s" % (check.__name__, loop, e)) from e
        srv = Server(loop_args(loop), admin=True).start()
        try:
            check_sigterm_answers_in_flight(srv)
        finally:
            srv.stop()
        check_more_connections_than_buffers(loop)


def test_auto_falls_back_to_epoll_where_io_uring_is_forbidden():
    with Server(loop_args("auto"), prefix=[NO_URING]) as srv:
        log = srv.log()
        assert ("io_uring is unavailable (io_uring_setup failed: Operation not permitted): "
                "serving on epoll") in log, log
        check_loop_named(srv, "epoll")
        with srv.client() as api:
            assert api.get_id("infra-dm") > 0


def test_io_uring_refused_where_forbidden():
    argv = [NO_URING, sftest.SNOWFLAKED, "--bind", "127.0.0.1", "--port", "0",
            "--admin-port", "0", "--worker-id", "1"] + loop_args("io_uring")
    proc = subprocess.run(argv, env=sftest.clean_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=sftest.PATIENCE)
    assert proc.returncode != 0, "served without io_uring:\n" + proc.stderr
    for words in ("event_loop = io_uring", "Operation not permitted", "epoll or auto"):
        assert words in proc.stderr, "%r not named:\n%s" % (words, proc.stderr)
    assert "each its own" not in proc.stderr, proc.stderr


def test_unknown_loop_refused():
    argv = [sftest.SNOWFLAKED, "--port", "0", "--admin-port", "0"] + loop_args("kqueue")
    proc = subprocess.run(argv, env=sftest.clean_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=sftest.PATIENCE)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "[snowflake] event_loop = 'kqueue'" in proc.stderr, proc.stderr
    assert "auto, epoll or io_uring" in proc.stderr, proc.stderr


def main():
    sftest.require_server()
    if not os.access(NO_URING, os.X_OK):
        print("%s is not built (make check builds it)" % NO_URING)
        raise SystemExit(1)
    r = sftest.Runner("test_event_loop")
    for test in (test_each_loop_serves, test_auto_falls_back_to_epoll_where_io_uring_is_forbidden,
                 test_io_uring_refused_where_forbidden, test_unknown_loop_refused):
        r.run(test)
    r.finish()


if __name__ == "__main__":
    main()
