#!/usr/bin/python3
"""test_audit.py -- the audit log against a real scribe receiver generated from
thrift/scribe.thrift (framed transport, binary protocol): every id handed out arrives as
one AuditLogEntry {id, useragent, tag}, base64 of its binary serialization plus a newline,
in category "snowflake"; nothing is lost while the receiver is down or at SIGTERM; under
overload the drops are counted; the JSON-lines file sink holds the same. Every process and
receiver is stopped however the test ends."""
import base64
import json
import os
import signal
import subprocess
import tempfile
import threading
import time

import sftest
from sftest import Server, wait_until

from scribe_thrift import Scribe  # noqa: E402  (generated at build time)
from scribe_thrift.ttypes import ResultCode  # noqa: E402
from snowflake_thrift.ttypes import AuditLogEntry  # noqa: E402
from thrift.protocol import TBinaryProtocol  # noqa: E402
from thrift.server import TServer  # noqa: E402
from thrift.transport import TSocket, TTransport  # noqa: E402


class Receiver:
    """A scribe server on a loopback port: decodes every message it gets; answers
    TRY_LATER while refusing is set. hold(n) makes the nth call wait for release() before
    it answers; that call is the last one refused."""

    def __init__(self, port=0):
        self.entries = []
        self.refused = {}  # id -> tag of entries answered TRY_LATER
        self.categories = set()
        self.bad = []
        self.calls = 0
        self.refusing = False
        self.delay_s = 0.0  # how long each Log call takes to answer
        self.arrived = 0
        self.held_call = 0
        self.at_hold = threading.Event()
        self.released = threading.Event()
        self.lock = threading.Lock()
        self.sock = TSocket.TServerSocket(host="127.0.0.1", port=port)
        self.sock.listen()
        self.port = self.sock.handle.getsockname()[1]
        server = TServer.TThreadedServer(Scribe.Processor(self), self.sock,
                                         TTransport.TFramedTransportFactory(),
                                         TBinaryProtocol.TBinaryProtocolFactory(),
                                         daemon=True)
        server.serverTransport.listen = lambda: None  # already listening
        threading.Thread(target=self._serve, args=(server,), daemon=True).start()

    def _serve(self, server):
        try:
            server.serve()
        except Exception:  # the socket was closed: the receiver is stopped
            pass

    def hold(self, n):
        self.held_call = n

    def release(self):
        self.released.set()

    def Log(self, messages):
        with self.lock:
            self.arrived += 1
            held = self.arrived == self.held_call
        if held:
            self.at_hold.set()
            self.released.wait(sftest.PATIENCE)
        time.sleep(self.delay_s)
        with self.lock:
            # One answer for the whole call: the test may clear refusing while a call is
            # being read, and an entry counted refused in a call answered OK is lost.
            refusing = self.refusing
            self.calls += 1
            for m in messages:
                self.categories.add(m.category)
                if not m.message.endswith("\n"):
                    self.bad.append(m.message)
                    continue
                raw = base64.b64decode(m.message[:-1])
                entry = AuditLogEntry()
                entry.read(TBinaryProtocol.TBinaryProtocol(TTransport.TMemoryBuffer(raw)))
                if refusing:
                    self.refused[entry.id] = entry.tag
                else:
                    self.entries.append(entry)
            answer = ResultCode.TRY_LATER if refusing else ResultCode.OK
            if held:
                self.refusing = False
            return answer

    def count(self):
        with self.lock:
            return len(self.entries)

    def close(self):
        self.sock.close()


def audited(receiver, port, extra=()):
    args = ["--set", "audit.sink=scribe", "--set", "audit.scribe_host=127.0.0.1",
            "--set", "audit.scribe_port=%d" % port] + list(extra)
    return Server(args, admin=True).start()


def counters(server):
    status, body = server.http("/stats.json")
    assert status == 200, (status, body)
    data = json.loads(body)
    return data["counters"], data["gauges"]


def take_ids(server, singles, batches, batch=1000):
    """singles get_id calls (agent audit-one) and batches get_ids calls (audit-many)."""
    ids = {}
    with server.client(sftest.PATIENCE) as api:  # a busy server may answer late
        for _ in range(singles):
            ids[api.get_id("audit-one")] = "audit-one"
        for _ in range(batches):
            for i in api.get_ids("audit-many", batch):
                ids[i] = "audit-many"
    return ids


def assert_exactly(receiver, ids):
    """The receiver got exactly one entry per id, with the agent that got it."""
    got = {}
    for e in receiver.entries:
        assert e.id not in got, "id %d audited twice" % e.id
        got[e.id] = e
    assert set(got) == set(ids), "audited %d ids, handed out %d; missing %r, extra %r" % (
        len(got), len(ids), sorted(set(ids) - set(got))[:5], sorted(set(got) - set(ids))[:5])
    for i, agent in ids.items():
        assert got[i].useragent == agent, (i, got[i].useragent, agent)
    assert len({e.tag for e in receiver.entries}) > len(ids) // 2, "tags are not random"
    assert receiver.categories == {"snowflake"}, receiver.categories
    assert not receiver.bad, "messages without the newline: %r" % receiver.bad[:3]


def entries_match_ids_handed_out():
    """get_id and get_ids, 3,050 ids: each arrives once, with its agent and a random tag;
    the counters say all were sent and none dropped."""
    rec = Receiver()
    s = audited(rec, rec.port)
    try:
        ids = take_ids(s, 50, 3)
        # The receiver stores a batch before the server has read its answer: wait for
        # the server's own count, not the receiver's.
        wait_until(lambda: counters(s)[0]["audit_sent"] >= len(ids), sftest.PATIENCE, "all audited")
        assert_exactly(rec, ids)
        c, g = counters(s)
        assert c["audit_sent"] == len(ids) and c["audit_dropped"] == 0, c
        assert c["scribe_enqueue_failures"] == 0 and g["audit_queue_length"] == 0, (c, g)
    finally:
        s.stop()
        rec.close()


def receiver_down_then_up():
    """Ids handed out while scribe is down stay queued (failures counted, nothing
    dropped) and all arrive once it is up."""
    port = sftest.free_port()
    s = audited(None, port)
    rec = None
    try:
        ids = take_ids(s, 200, 0)
        wait_until(lambda: counters(s)[0]["audit_send_failures"] > 0, sftest.PATIENCE, "a failure counted")
        c, g = counters(s)
        assert g["audit_queue_length"] == 200 and c["audit_dropped"] == 0, (c, g)
        rec = Receiver(port)
        wait_until(lambda: counters(s)[0]["audit_sent"] >= len(ids), sftest.PATIENCE,
                   "delivered once scribe is up")
        assert_exactly(rec, ids)
    finally:
        s.stop()
        if rec is not None:
            rec.close()


def overload_drops_are_counted():
    """With queue_size 100 and scribe answering TRY_LATER, a get_ids of 1,000 is dropped
    whole from the log and counted (the call still gets its ids), 50 more ids wait (sent
    again after each refusal with the tags they were made with); once scribe takes them
    they arrive and sent + dropped equals the ids handed out."""
    rec = Receiver()
    rec.refusing = True
    s = audited(rec, rec.port, ["--set", "audit.queue_size=100"])
    try:
        dropped = take_ids(s, 0, 1)  # handed out although the log cannot take them
        kept = take_ids(s, 50, 0)
        wait_until(lambda: counters(s)[0]["audit_send_failures"] > 0, sftest.PATIENCE,
                   "a refused Log call counted")
        c, g = counters(s)
        assert c["audit_dropped"] == 1000 and c["scribe_enqueue_failures"] == 1000, c
        assert g["audit_queue_length"] == 50 and c["audit_send_failures"] > 0, (c, g)
        rec.refusing = False
        wait_until(lambda: counters(s)[0]["audit_sent"] >= 50, sftest.PATIENCE, "the queued ids delivered")
        assert_exactly(rec, kept)
        again = [e for e in rec.entries if e.id in rec.refused]
        assert again and all(rec.refused[e.id] == e.tag for e in again), \
            "an entry sent again carries another tag"
        c, _ = counters(s)
        assert c["audit_sent"] + c["audit_dropped"] == len(kept) + len(dropped), c
    finally:
        s.stop()
        rec.close()


def delivered_at_sigterm():
    """Entries still queued at SIGTERM are delivered before the process exits."""
    rec = Receiver()
    rec.refusing = True
    s = audited(rec, rec.port)
    try:
        ids = take_ids(s, 20, 1)
        wait_until(lambda: rec.calls > 0, sftest.PATIENCE, "a Log call refused")
        rec.refusing = False
        assert s.stop() == 0, s.log()
        assert_exactly(rec, ids)
    finally:
        s.stop()
        rec.close()


def slow_sink_delivered_at_sigterm():
    """At SIGTERM the queue is delivered while the sink takes it, however long that takes:
    socket_timeout_ms bounds a sink that takes nothing, not one that is slow. Here each
    Log call of 50 entries takes 0.5 s, 10 s in all, with a 5 s socket timeout: each
    answer has seconds to spare on a busy machine, and a stop bounded by the timeout
    would still lose half."""
    rec = Receiver()
    rec.delay_s = 0.5
    rec.refusing = True
    s = audited(rec, rec.port, ["--set", "audit.socket_timeout_ms=5000",
                                "--set", "audit.batch_size=50"])
    try:
        ids = take_ids(s, 0, 1)
        wait_until(lambda: rec.calls > 0, sftest.PATIENCE, "a Log call refused")
        rec.refusing = False
        assert s.stop() == 0, s.log()
        assert_exactly(rec, ids)
    finally:
        s.stop()
        rec.close()


def sink_back_during_backoff_delivered_at_sigterm():
    """A sink that refused long enough for the sender to back off for seconds, and takes
    entries again when the node is stopped: the stop ends the backoff and delivers, rather
    than wait the backoff out past socket_timeout_ms and drop the queue."""
    rec = Receiver()
    rec.refusing = True
    s = audited(rec, rec.port, ["--set", "audit.socket_timeout_ms=2500"])
    try:
        ids = take_ids(s, 20, 0)
        # Refused attempts back off 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, then 5 s at most: after
        # the seventh the sender waits 5 s, twice the 2.5 s the stop allows. The 2.5 s is
        # also how long the sink may take to answer the delivery, on a busy machine.
        wait_until(lambda: rec.calls >= 7, sftest.PATIENCE, "seven Log calls refused")
        rec.refusing = False
        assert s.stop() == 0, s.log()
        assert_exactly(rec, ids)
    finally:
        s.stop()
        rec.close()


def refused_as_the_stop_begins_retried():
    """The sink refuses the delivery that was in flight when the stop began, then takes
    entries again: the stop retries soon after that refusal, rather than wait out a backoff
    longer than the time the stop allows and drop the queue."""
    rec = Receiver()
    rec.refusing = True
    # Calls 1-6 are refused and back off 0.1 to 3.2 s; after the seventh the backoff is 5 s,
    # as long as the stop allows.
    rec.hold(7)
    s = audited(rec, rec.port, ["--set", "audit.socket_timeout_ms=5000"])
    try:
        ids = take_ids(s, 20, 0)
        assert rec.at_hold.wait(sftest.PATIENCE), "no seventh Log call; %d calls" % rec.calls
        s.proc.send_signal(signal.SIGTERM)
        s.wait_for("audit log: delivering 20 queued entries before stopping")
        rec.release()
        assert s.stop() == 0, s.log()
        assert_exactly(rec, ids)
    finally:
        rec.release()
        s.stop()
        rec.close()


def file_sink_holds_every_id():
    """sink = file: one JSON object per id, appended."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "audit.jsonl")
        s = Server(["--set", "audit.sink=file", "--set", "audit.file=%s" % path],
                   admin=True).start()
        try:
            ids = take_ids(s, 30, 2)
        finally:
            assert s.stop() == 0, s.log()
        with open(path) as f:
            lines = [json.loads(line) for line in f]
        got = {e["id"]: e["useragent"] for e in lines}
        assert len(lines) == len(ids) and got == ids, (len(lines), len(ids))
        assert len({e["tag"] for e in lines}) > len(ids) // 2


def bad_settings_refused():
    """A bad sink or a missing file is refused at start, naming the key and what is
    allowed."""
    for args, text in ((["--set", "audit.sink=kafka"], "allowed none, scribe or file"),
                       (["--set", "audit.sink=file"], "[audit] sink = file needs [audit] file"),
                       (["--set", "audit.queue_size=0"], "queue_size")):
        s = Server(args)
        out = subprocess.run(s.argv, env=s.env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=30)
        assert out.returncode != 0 and text in out.stdout, (args, out.returncode, out.stdout)


def main():
    sftest.require_server()
    r = sftest.Runner("test_audit")
    r.run(entries_match_ids_handed_out)
    r.run(receiver_down_then_up)
    r.run(overload_drops_are_counted)
    r.run(delivered_at_sigterm)
    r.run(slow_sink_delivered_at_sigterm)
    r.run(sink_back_during_backoff_delivered_at_sigterm)
    r.run(refused_as_the_stop_begins_retried)
    r.run(file_sink_holds_every_id)
    r.run(bad_settings_refused)
    r.finish()


if __name__ == "__main__":
    main()
