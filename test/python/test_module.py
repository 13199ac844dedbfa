#!/usr/bin/python3
"""test_module.py -- the Python module `snowflake` in one process, against a real ZooKeeper and
a real snowflaked: Generator, Fenced and Client, every argument error (each naming the value
and the allowed range, in the C library's words), the codecs against the `snowflake` command's
answers, threads, close() while calls run, a start that fails or is interrupted, fencing while
ZooKeeper is frozen, a handle released at the interpreter's exit, and the type stub and
docstrings against what the module takes. Every process and server is stopped however it
ends."""
import ast
import gc
import inspect
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

import sfpy_test
from sfpy_test import sftest, wait_until

snowflake = sfpy_test.require_module()
sftest.require_zookeeper_client()
ZK = sftest.ZooKeeper()
HEADER = os.path.join(sftest.TOP_SRCDIR, "src", "zk", "snowflake_zk.h")
STUB = os.path.join(sftest.TOP_SRCDIR, "src", "python", "snowflake.pyi")
CLI = sftest.SNOWFLAKE_CLI


def expect(exc_type, func, *args, must=(), **kwargs):
    """The exception of exc_type func raises, whose message holds every string of must."""
    try:
        result = func(*args, **kwargs)
    except exc_type as e:
        for part in must:
            assert part in str(e), "%r does not say %r" % (str(e), part)
        return e
    raise AssertionError("%s(%r, %r) returned %r, expected %s" % (
        getattr(func, "__name__", func), args, kwargs, result, exc_type.__name__))


def paths():
    """A fresh worker id path for a check."""
    paths.n = getattr(paths, "n", 0) + 1
    return "/py-module-%d" % paths.n


def fenced(path, **kwargs):
    kwargs.setdefault("session_timeout_ms", sftest.STEADY_SESSION_MS)
    kwargs.setdefault("datacenter_id", 3)
    return snowflake.Fenced(ZK.hosts, path=path, **kwargs)


# ---- Generator -----------------------------------------------------------------------

def check_generator():
    g = snowflake.Generator(datacenter_id=1, worker_id=7)
    assert (g.datacenter_id, g.worker_id, g.epoch_ms) == (1, 7, snowflake.TWITTER_EPOCH_MS)
    assert repr(g) == "snowflake.Generator(datacenter_id=1, worker_id=7)", repr(g)
    one = [g.next_id() for _ in range(10000)]
    sfpy_test.check_increasing(one, "next_id")
    assert {sfpy_test.pair(i) for i in one} == {(1, 7)}
    sfpy_test.near_now(one[-1])
    for n in (1, 1000, 4096, 4097, 1000000):  # above 4096: made with the GIL released
        batch = g.next_ids(n)
        assert len(batch) == n and batch[0] > one[-1], (n, len(batch))
        sfpy_test.check_increasing(batch, "next_ids(%d)" % n)
        one = batch
    stats = g.stats()
    assert stats["ids_generated"] == 10000 + 1 + 1000 + 4096 + 4097 + 1000000, stats
    assert stats["sequence_waits"] > 0, stats  # a million ids spans milliseconds
    positional = snowflake.Generator(2, 3)
    assert sfpy_test.pair(positional.next_id()) == (2, 3)
    epoch = snowflake.TWITTER_EPOCH_MS + 10 ** 9
    other = snowflake.Generator(4, 5, epoch_ms=epoch, random_first_sequence=True,
                                max_clock_backward_wait_ms=10)
    ids = [other.next_id() for _ in range(100)]
    sfpy_test.near_now(ids[0], epoch_ms=epoch)
    assert snowflake.decode(ids[0], epoch_ms=epoch).datacenter_id == 4
    # Random first sequences: ids taken a millisecond apart do not all start at 0.
    firsts = set()
    for _ in range(20):
        time.sleep(0.002)
        firsts.add(snowflake.decode(other.next_id()).sequence)
    assert len(firsts) > 1, firsts


def many_threads(source, batches, what):
    """8 threads at once on source, each 40 calls: next_id, and every fourth next_ids(n), n
    from batches in turn per thread; fails on any error or any id made twice."""
    out, errors = [[] for _ in range(8)], []

    def run(bucket, n):
        try:
            for i in range(40):
                bucket.extend(source.next_ids(n) if i % 4 == 0 else [source.next_id()])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(b, batches[k % len(batches)]))
               for k, b in enumerate(out)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    sfpy_test.check_unique([i for b in out for i in b], "8 threads on one " + what)


def check_generator_threads():
    many_threads(snowflake.Generator(9, 9), (5000, 100), "Generator")


def check_generator_arguments():
    G = snowflake.Generator
    expect(ValueError, G, 32, 1, must=("datacenter id 32", "0..31"))
    expect(ValueError, G, -1, 1, must=("datacenter id -1", "0..31"))
    expect(ValueError, G, 1, 32, must=("worker id 32", "0..31"))
    expect(ValueError, G, 2 ** 70, 1, must=("datacenter_id = %d" % 2 ** 70, "0..31"))
    expect(ValueError, G, 1, -2 ** 70, must=("worker_id = %d" % -2 ** 70, "0..31"))
    expect(ValueError, G, 1, 1, epoch_ms=-1, must=("epoch -1", "allowed 0"))
    # An epoch ahead of the clock: libsnowflake takes it, and refuses the ids.
    future = G(1, 1, epoch_ms=int(time.time() * 1000) + 86400000)
    e = expect(snowflake.ClockError, future.next_id)
    assert e.behind_ms is None and isinstance(e, snowflake.Error), e
    expect(ValueError, G, 1, 1, max_clock_backward_wait_ms=60001, must=("60001", "0..60000"))
    expect(ValueError, G, 1, 1, max_clock_backward_wait_ms=-1, must=("-1", "0..60000"))
    expect(TypeError, G, "1", 1, must=("datacenter_id", "integer"))
    expect(TypeError, G, 1, must=("worker_id",))
    expect(TypeError, G, 1, 1, 0)  # epoch_ms is a keyword
    expect(TypeError, G, 1, 1, nope=1)
    g = G(1, 1)
    expect(ValueError, g.next_ids, 0, must=("count = 0", "1..1000000"))
    expect(ValueError, g.next_ids, 1000001, must=("count = 1000001", "1..1000000"))
    expect(ValueError, g.next_ids, -5, must=("count = -5", "1..1000000"))
    expect(TypeError, g.next_ids, "3", must=("count", "integer"))


# ---- the codecs, against the C command line ------------------------------------------

def cli(*args):
    out = subprocess.run([CLI] + [str(a) for a in args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=60)
    assert out.returncode == 0, "snowflake %s: %s" % (" ".join(map(str, args)), out.stderr)
    return out.stdout.split()


def sample_ids():
    """Ids over the whole range: the ends, powers of two and random ones."""
    rng = random.Random(50)
    ids = [0, 1, 4095, 4096, 2 ** 22 - 1, 2 ** 22, 2 ** 62, 2 ** 63 - 1]
    ids += [2 ** k - 1 for k in range(1, 64, 7)] + [2 ** k for k in range(0, 63, 5)]
    ids += [rng.randrange(2 ** 63) for _ in range(200)]
    ids += snowflake.Generator(31, 31).next_ids(50)
    return ids


def check_codecs_against_cli():
    ids = sample_ids()
    for epoch in (snowflake.TWITTER_EPOCH_MS, 0):
        out = subprocess.run([CLI, "decode", "--json", "--epoch", str(epoch)] +
                             [str(i) for i in ids], stdout=subprocess.PIPE, text=True,
                             timeout=60, check=True).stdout
        for i, line in zip(ids, out.splitlines()):
            c = json.loads(line)
            d = snowflake.decode(i, epoch_ms=epoch)
            assert c["id"] == i and d == (c["timestamp_ms"], c["datacenter_id"],
                                          c["worker_id"], c["sequence"]), (i, d, c)
            assert (d.time_ms, d.datacenter_id, d.worker_id, d.sequence) == tuple(d)
            assert snowflake.compose(*d, epoch_ms=epoch) == i
    for alphabet in ("base32", "base58", "base62"):
        texts = cli("encode", "--" + alphabet, *ids)
        assert [snowflake.encode(i, alphabet) for i in ids] == texts, alphabet
        assert [snowflake.parse(t, alphabet) for t in texts] == ids, alphabet
    # base32 reads both cases and Crockford's aliases, as the C reading does.
    assert snowflake.parse("0000000000O1l", "base32") == snowflake.parse("0000000000011", "base32")
    assert snowflake.parse(snowflake.encode(2 ** 40, "base32").lower(), "base32") == 2 ** 40
    for fields in ((1700000000000, 1, 2, 3), (snowflake.TWITTER_EPOCH_MS, 0, 0, 0),
                   (snowflake.TWITTER_EPOCH_MS + 2 ** 41 - 1, 31, 31, 4095)):
        expected = int(cli("compose", "--time", fields[0], "--datacenter", fields[1],
                           "--worker", fields[2], "--sequence", fields[3])[0])
        assert snowflake.compose(*fields) == expected, fields
        assert tuple(snowflake.decode(expected)) == fields
    for start, end in ((1700000000000, 1700000000001), (snowflake.TWITTER_EPOCH_MS,) * 2,
                       (1800000000000, 1900000000000)):
        c = json.loads(subprocess.run([CLI, "range", "--json", str(start), str(end)],
                                      stdout=subprocess.PIPE, text=True, check=True).stdout)
        assert snowflake.id_range(start, end) == (c["lo"], c["hi"]), (start, end, c)
    lo, hi = snowflake.id_range(1700000000000, 1700000000000)
    assert snowflake.decode(lo) == (1700000000000, 0, 0, 0)
    assert snowflake.decode(hi) == (1700000000000, 31, 31, 4095)
    assert snowflake.Decoded._fields == ("time_ms", "datacenter_id", "worker_id", "sequence")
    assert snowflake.decode(0)._asdict()["time_ms"] == snowflake.TWITTER_EPOCH_MS


def check_codec_errors():
    expect(ValueError, snowflake.decode, -1, must=("id -1 is negative", "0..9223372036854775807"))
    expect(ValueError, snowflake.decode, 2 ** 63, must=("id = %d" % 2 ** 63, "0..9223372036854775807"))
    expect(ValueError, snowflake.decode, 1, epoch_ms=-1, must=("epoch -1", "0..4102444800000"))
    expect(ValueError, snowflake.decode, 1, epoch_ms=2 ** 64, must=("0..4102444800000",))
    expect(TypeError, snowflake.decode, 1.5, must=("id", "integer"))
    expect(TypeError, snowflake.decode, "1")
    t = 1700000000000
    expect(ValueError, snowflake.compose, t, 32, 0, 0, must=("datacenter id 32", "0..31"))
    expect(ValueError, snowflake.compose, t, 0, 32, 0, must=("worker id 32", "0..31"))
    expect(ValueError, snowflake.compose, t, 0, 0, 4096, must=("sequence 4096", "0..4095"))
    expect(ValueError, snowflake.compose, t, 0, -1, 0, must=("worker id -1", "0..31"))
    expect(ValueError, snowflake.compose, 0, 0, 0, 0,
           must=("timestamp 0 ms", "1288834974657..3487858230208"))
    expect(ValueError, snowflake.compose, 2 ** 70, 0, 0, 0,
           must=("time_ms = %d" % 2 ** 70, "1288834974657..3487858230208"))
    expect(ValueError, snowflake.compose, t, 0, 0, 2 ** 70, must=("sequence", "0..4095"))
    expect(ValueError, snowflake.encode, 1, "base64",
           must=("'base64'", "base32, base58, base62"))
    expect(ValueError, snowflake.encode, -1, "base62", must=("-1",))
    expect(ValueError, snowflake.parse, "1", "base10", must=("base10", "base32, base58, base62"))
    expect(ValueError, snowflake.parse, "1a!", "base62", must=("'!'", "1a!"))
    expect(ValueError, snowflake.parse, "", "base62")
    expect(ValueError, snowflake.parse, "zzzzzzzzzzzz", "base62", must=("zzzzzzzzzzzz",))
    expect(ValueError, snowflake.parse, "1\0", "base62", must=("NUL",))
    expect(TypeError, snowflake.parse, b"1", "base62")
    expect(ValueError, snowflake.id_range, t + 1, t, must=("after", str(t)))
    expect(ValueError, snowflake.id_range, 0, t, must=("from 0 ms", "1288834974657"))
    expect(ValueError, snowflake.id_range, t, 2 ** 80, must=("end_ms", "3487858230208"))


def check_module():
    assert issubclass(snowflake.FencedError, snowflake.Error)
    assert issubclass(snowflake.ClockError, snowflake.Error)
    assert issubclass(snowflake.StartError, snowflake.Error)
    assert issubclass(snowflake.UnavailableError, snowflake.Error)
    assert issubclass(snowflake.Error, Exception)
    assert snowflake.TWITTER_EPOCH_MS == sftest.TWITTER_EPOCH_MS
    assert (snowflake.MAX_WORKER_ID, snowflake.MAX_DATACENTER_ID,
            snowflake.MAX_SEQUENCE, snowflake.MAX_IDS) == (31, 31, 4095, 1000000)
    snowflake.set_zookeeper_logging(False)


# ---- Fenced ----------------------------------------------------------------------------

def int_options():
    """libsnowflake-zk's integer options, read from its header: (name, lo, hi, default)."""
    text = open(HEADER).read()
    block = text[text.index("#define SFZ_INT_OPTIONS(X)"):]
    block = block[:block.index("typedef struct sfz_options")]
    found = re.findall(r"X\((\w+),\s*([\w-]+),\s*([\w-]+),\s*([\w-]+)\)", block)
    names = {"SFZ_ON_FORK_REFUSE": 0, "SFZ_ON_FORK_CLAIM": 1}
    return [(n, int(names.get(lo, lo)), int(names.get(hi, hi)), int(names.get(d, d)))
            for n, lo, hi, d in found]


def check_fenced_arguments():
    options = int_options()
    assert len(options) >= 9 and options[0][0] == "session_timeout_ms", options
    sig = inspect.signature(snowflake.Fenced).parameters
    F = snowflake.Fenced
    hosts = "127.0.0.1:1"  # checked before anything connects
    for name, lo, hi, default in options:
        if name == "on_fork":
            assert sig[name].default == "claim", sig[name]
            continue
        assert sig[name].default == default, (name, sig[name].default, default)
        assert "%s: " % name in F.__doc__ and "(%d..%d, default %d)" % (lo, hi, default) in \
            F.__doc__, name
        for bad in (lo - 1, hi + 1, 2 ** 40, -2 ** 70):
            if name == "max_peer_skew_ms" and bad == hi + 1:
                continue  # refused first for want of query_peer, below
            expect(ValueError, F, hosts, **{name: bad},
                   must=("%s = %d is outside %d..%d" % (name, bad, lo, hi),))
    expect(ValueError, F, hosts, max_peer_skew_ms=5, must=("max_peer_skew_ms 5", "query_peer"))
    expect(ValueError, F, hosts, on_fork="both", must=("on_fork = 'both'", "'claim' or 'refuse'"))
    expect(ValueError, F, hosts, on_fork=1, must=("on_fork = 1",))
    expect(ValueError, F, hosts, worker_id=32, must=("worker_id 32", "0..31"))
    expect(ValueError, F, hosts, worker_id=-2, must=("worker_id -2", "0..31"))
    expect(ValueError, F, hosts, datacenter_id=32, must=("datacenter_id 32", "0..31"))
    expect(ValueError, F, hosts, datacenter_id=2 ** 64, must=("datacenter_id = %d" % 2 ** 64,
                                                              "-1..31"))
    expect(ValueError, F, hosts, datacenter_id=-1, must=("datacenter_paths is empty",))
    expect(ValueError, F, hosts, datacenter_id=-1, datacenter_paths="1=/a,1=/b",
           must=("'1=/b'", "datacenter named twice"))
    expect(ValueError, F, hosts, datacenter_id=1, datacenter_paths="1=/a",
           must=("datacenter_id -1",))
    expect(ValueError, F, hosts, datacenter_id=-1, worker_id=3, datacenter_paths="1=/a",
           must=("worker_id 3",))
    expect(ValueError, F, hosts, path="relative", must=("path 'relative'", "absolute"))
    expect(ValueError, F, hosts, epoch_ms=4102444800001, must=("epoch_ms 4102444800001",
                                                               "0..4102444800000"))
    expect(ValueError, F, hosts, epoch_ms=int(time.time() * 1000) + 86400000,
           must=("in the future",))
    expect(ValueError, F, hosts, max_clock_backward_wait_ms=60001, must=("60001", "0..60000"))
    expect(ValueError, F, hosts, auth="nocolon", must=("auth",))
    expect(ValueError, F, hosts, holder="x" * 300, must=("holder",))
    expect(ValueError, F, "nohostport", must=("zookeeper",))
    expect(ValueError, F, hosts, path="/a\0b", must=("NUL",))
    expect(TypeError, F, must=("zookeeper",))
    expect(TypeError, F, hosts, "/path", must=("positional",))
    expect(TypeError, F, hosts, zookeeper=hosts, must=("zookeeper",))
    expect(TypeError, F, hosts, nope=1, must=("'nope'",))
    expect(TypeError, F, hosts, path=5, must=("path", "str"))
    expect(TypeError, F, hosts, session_timeout_ms="10000", must=("session_timeout_ms",))


def check_fenced():
    path = paths()
    zk = ZK.client()
    try:
        with fenced(path) as h:
            assert h.serving and h.datacenter_id == 3 and 0 <= h.worker_id <= 31, h.health()
            assert sfpy_test.worker_nodes(zk, path) == {h.worker_id: os.getpid()}
            ids = [h.next_id() for _ in range(20000)]
            sfpy_test.check_increasing(ids, "Fenced.next_id")
            assert {sfpy_test.pair(i) for i in ids} == {(3, h.worker_id)}
            for n in (1, 1000, 4096, 4097, 200000):
                batch = h.next_ids(n)
                assert len(batch) == n and batch[0] > ids[-1]
                sfpy_test.check_increasing(batch, "Fenced.next_ids(%d)" % n)
                ids = batch
            health = h.health()
            assert health["serving"] is True and health["reason"] == "none", health
            assert health["session"] == "connected" and health["worker_id"] == h.worker_id
            assert set(health) == {"serving", "reason", "message", "since_ms", "session",
                                   "reconnects", "sessions_expired", "start_tries",
                                   "next_try_ms", "worker_id", "datacenter_id"}, health
            assert "serving" in repr(h) and "worker_id=%d" % h.worker_id in repr(h)
            expect(ValueError, h.next_ids, 0, must=("count = 0", "1..1000000"))
            expect(ValueError, h.next_ids, 1000001, must=("1..1000000",))
            assert not h.closed
        assert h.closed and repr(h) == "<snowflake.Fenced closed>"
        assert sfpy_test.worker_nodes(zk, path) == {}, "close() left the node"
        h.close()  # idempotent
        for call in (h.next_id, lambda: h.next_ids(5), h.health, lambda: h.worker_id,
                     lambda: h.serving, lambda: h.datacenter_id):
            expect(snowflake.Error, call, must=("closed",))
        # Collected without close(): the pair is released.
        other = fenced(path)
        assert len(sfpy_test.worker_nodes(zk, path)) == 1
        del other
        gc.collect()
        assert sfpy_test.worker_nodes(zk, path) == {}, "a collected handle kept its node"
    finally:
        zk.stop()


def check_fenced_lazy():
    path = paths()
    zk = ZK.client()
    try:
        h = fenced(path, lazy=True)
        assert not h.serving and h.worker_id == -1 and h.health()["reason"] == "starting"
        assert sfpy_test.worker_nodes(zk, path) == {}, "a lazy handle claimed at once"
        # Eight threads make the first call at once: one start, one pair, every id under it.
        barrier, out, errors = threading.Barrier(8), [], []

        def first():
            try:
                barrier.wait()
                out.extend(h.next_ids(100))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
        threads = [threading.Thread(target=first) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert {sfpy_test.pair(i) for i in out} == {(3, h.worker_id)}
        sfpy_test.check_unique(out, "lazy first calls")
        assert sfpy_test.worker_nodes(zk, path) == {h.worker_id: os.getpid()}
        h.close()
        assert sfpy_test.worker_nodes(zk, path) == {}
        # claim() makes the start now, without an id.
        c = fenced(path, lazy=True)
        c.claim()
        assert c.serving and len(sfpy_test.worker_nodes(zk, path)) == 1
        c.close()
    finally:
        zk.stop()


def check_fenced_threads():
    h = fenced(paths())
    many_threads(h, (10000, 1000), "Fenced")
    # close() while threads are inside batches made with the GIL released: each call
    # returns its ids or an error, and close() waits for them.
    stop, results = threading.Event(), []

    def batches():
        while not stop.is_set():
            try:
                results.append(len(h.next_ids(400000)))
            except snowflake.Error as e:
                results.append(str(e))
                return
    threads = [threading.Thread(target=batches) for _ in range(3)]
    for t in threads:
        t.start()
    wait_until(lambda: len(results) >= 1, sftest.PATIENCE, "a batch made")
    h.close()
    stop.set()
    for t in threads:
        t.join(sftest.PATIENCE)
        assert not t.is_alive(), "a call did not return after close()"
    refusals = [r for r in results if isinstance(r, str)]
    assert all("closed" in r or "stopping" in r for r in refusals), refusals


def check_fenced_start_failure():
    # Nothing listens there: the try fails (after the registry's wait for an answer), and
    # start_timeout_ms ends the start.
    nowhere = "127.0.0.1:%d" % sftest.free_port()
    began = time.time()
    e = expect(snowflake.StartError, snowflake.Fenced, nowhere, path="/x",
               session_timeout_ms=1000, start_timeout_ms=1000, start_retry_wait_ms=100,
               must=(nowhere, "start_timeout_ms = 1000"))
    assert time.time() - began < 30, "the start took %.0f s" % (time.time() - began)
    assert isinstance(e, snowflake.Error)
    # A lazy start that fails (the static id is taken) raises at each call, each a start
    # afresh: once the id is free, the next call serves.
    path = paths()
    holder = fenced(path, worker_id=5)
    lazy = fenced(path, worker_id=5, claim_retries=0, start_timeout_ms=1, lazy=True)
    for _ in range(2):
        expect(snowflake.StartError, lazy.next_id, must=("5",))
        assert not lazy.serving and lazy.worker_id == -1
    holder.close()
    assert sfpy_test.pair(lazy.next_id()) == (3, 5)
    lazy.close()
    # close() stops a lazy start under way in another thread.
    slow = snowflake.Fenced(nowhere, path="/x", start_timeout_ms=0, lazy=True)
    got = []
    t = threading.Thread(target=lambda: got.append(expect(snowflake.StartError, slow.next_id)))
    t.start()
    wait_until(lambda: slow.health()["start_tries"] >= 1, sftest.PATIENCE, "trying")
    began = time.time()
    slow.close()
    t.join(sftest.PATIENCE)
    assert not t.is_alive() and got and "stopped" in str(got[0]), got
    assert time.time() - began < 30


def check_start_interrupted():
    """Ctrl-C during a start that would try for ever: KeyboardInterrupt, promptly."""
    script = ("import sys, snowflake; sys.stdout.write('starting\\n'); sys.stdout.flush(); "
              "snowflake.Fenced('127.0.0.1:%d', start_timeout_ms=0)" % sftest.free_port())
    proc = subprocess.Popen([sys.executable, "-c", script], env=sfpy_test.module_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "starting"
        time.sleep(1)  # inside the start's tries
        began = time.time()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=sftest.PATIENCE)
        assert "KeyboardInterrupt" in err, err
        assert time.time() - began < 20, "took %.0f s" % (time.time() - began)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def check_fenced_while_zookeeper_frozen():
    h = fenced(paths(), session_timeout_ms=2000)
    worker = h.worker_id
    h.next_id()
    fenced_seen = []

    def freeze():
        ZK.freeze(4)
    t = threading.Thread(target=freeze)
    t.start()
    try:
        deadline = time.time() + 10
        while time.time() < deadline and not fenced_seen:
            try:
                h.next_id()
            except snowflake.FencedError as e:
                fenced_seen.append(str(e))
            time.sleep(0.01)
    finally:
        t.join()
    assert fenced_seen, "ids kept coming while ZooKeeper was frozen past the lease"
    assert not isinstance(fenced_seen[0], snowflake.StartError)
    wait_until(lambda: h.serving, sftest.PATIENCE, "serving again")
    assert sfpy_test.pair(h.next_id())[0] == 3
    h.close()
    assert worker >= 0


def check_exit_releases():
    """A handle left open is closed at the interpreter's exit: its node goes at once, not at
    its session's expiry (60 s here)."""
    path = paths()
    script = ("import logging, snowflake\nlogging.basicConfig(level=logging.INFO)\n"
              "h = snowflake.Fenced(%r, path=%r, datacenter_id=3, "
              "session_timeout_ms=60000)\nprint(h.worker_id, flush=True)\n"
              "keep = [h, snowflake.Fenced(%r, path=%r, datacenter_id=3, lazy=True, "
              "session_timeout_ms=60000)]\nkeep[1].next_id()\nprint('ok', flush=True)\n"
              % (ZK.hosts, path, ZK.hosts, path))
    out = subprocess.run([sys.executable, "-c", script], env=sfpy_test.module_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         timeout=sftest.PATIENCE)
    assert out.returncode == 0 and out.stdout.split()[-1] == "ok", out.stderr
    zk = ZK.client()
    try:
        assert sfpy_test.worker_nodes(zk, path) == {}, "the exit left nodes"
    finally:
        zk.stop()
    # The handles' lines reach the logger "snowflake" (basicConfig's format names it), also
    # those of the stops made at the exit.
    assert "INFO:snowflake:claimed worker id" in out.stderr, out.stderr
    assert out.stderr.count("INFO:snowflake:released worker id") == 2, out.stderr


# ---- Client ----------------------------------------------------------------------------

def agent_count(server, agent):
    status, body = server.http("/stats.json")
    assert status == 200, body
    return json.loads(body)["counters"].get("ids_generated_" + agent, 0)


def check_client():
    with sftest.Server(admin=True, worker_id=4, datacenter_id=5) as node:
        servers = "127.0.0.1:%d" % node.port
        with snowflake.Client(servers=servers, timeout_ms=60000) as c:
            one = c.next_id()
            assert sfpy_test.pair(one) == (5, 4)
            batch = c.next_ids(500)
            assert len(batch) == 500 and batch[0] > one
            sfpy_test.check_increasing(batch, "Client.next_ids")
            c.next_id(agent="web")
            c.next_ids(7, agent="web")
            assert agent_count(node, "web") == 8
            assert agent_count(node, "snowflake-client") == 501
            expect(ValueError, c.next_id, agent="9bad", must=("agent '9bad'",))
            expect(ValueError, c.next_ids, 0, must=("count = 0", "1..1000000"))
            stats = c.stats()
            assert stats["calls"] == 4 and stats["ids"] == 509 and stats["servers"] == 1, stats
        expect(snowflake.Error, c.next_id, must=("closed",))
        c.close()
        # Prefetched ids were asked for under the client's agent: another's never get them.
        with snowflake.Client(servers=servers, prefetch=100, prefetch_batch=50,
                              timeout_ms=60000) as p:
            wait_until(lambda: p.next_id() and p.stats()["prefetched"] > 0, sftest.PATIENCE,
                       "prefetched ids")
            before = p.stats()["prefetched"]
            p.next_id(agent="other")
            assert p.stats()["prefetched"] == before
            assert agent_count(node, "other") == 1
    nowhere = "127.0.0.1:%d" % sftest.free_port()
    with snowflake.Client(servers=nowhere, timeout_ms=300) as down:
        expect(snowflake.UnavailableError, down.next_id, must=(nowhere,))


# Run in a process of its own (no other threads but the ones it makes): a thread that
# watches /proc/self/task from before the first handle is made, and reads the blocked signals
# of every thread that appears (a lazy start's, a Fenced handle's, the ZooKeeper client's, a
# Client's prober, prefetcher and discovery); it prints what it saw as JSON.
THREADS_SCRIPT = r"""
import json, os, signal, sys, threading, snowflake
zk, servers, path = sys.argv[1:4]
FAULTS = {signal.SIGKILL, signal.SIGSTOP, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE,
          signal.SIGILL, signal.SIGTRAP, signal.SIGSYS}
ASYNC = [s for s in range(1, signal.SIGRTMAX + 1)
         if (s < 32 or s >= signal.SIGRTMIN) and s not in FAULTS]

def unblocked(tid):
    try:
        with open("/proc/self/task/%s/status" % tid) as f:
            mask = int([l for l in f if l.startswith("SigBlk:")][0].split()[1], 16)
    except (OSError, IndexError):
        return None  # gone meanwhile
    return [signal.Signals(s).name if s < 32 else "SIGRT%d" % s for s in ASYNC
            if not mask >> (s - 1) & 1]

done, seen, base = threading.Event(), {}, {str(os.getpid())}
def watch():
    base.add(str(threading.get_native_id()))  # the watcher, a thread of the program's
    while True:
        last = done.is_set()
        for tid in set(os.listdir("/proc/self/task")) - base - set(seen):
            got = unblocked(tid)
            if got is not None:
                seen[tid] = got
        if last:
            return
        done.wait(0.002)
watcher = threading.Thread(target=watch)
watcher.start()
h = snowflake.Fenced(zk, path=path, datacenter_id=3, lazy=True, session_timeout_ms=10000)
h.next_id()
c = snowflake.Client(servers=servers, prefetch=100, prefetch_batch=50, timeout_ms=60000)
c.next_id()
d = snowflake.Client(zookeeper=zk, path=path + "-servers", timeout_ms=300)
done.set()
watcher.join()
print(json.dumps(seen))
h.close(); c.close(); d.close()
"""


def check_library_threads_take_no_process_signal():
    """No thread the module's handles start takes a signal sent to the process: it is handled
    on a thread of the program's, as its handler may need (uWSGI's stop handler exits and
    then waits for the Python lock that its main thread keeps). Every such thread blocks
    every signal but the faults, which belong to the thread that causes them."""
    with sftest.Server(worker_id=4, datacenter_id=5) as node:
        out = subprocess.run([sys.executable, "-c", THREADS_SCRIPT, ZK.hosts,
                              "127.0.0.1:%d" % node.port, paths()],
                             env=sfpy_test.module_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, timeout=sftest.PATIENCE)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    # A Fenced handle alone runs four: its notifier and registry, the ZooKeeper client's two.
    assert len(seen) >= 4, "threads seen: %r; stderr:\n%s" % (seen, out.stderr)
    taking = ["thread %s: %s%s" % (tid, " ".join(sigs[:8]), " ..." if len(sigs) > 8 else "")
              for tid, sigs in sorted(seen.items()) if sigs]
    assert not taking, "%d of the %d threads the handles started take process signals: %s" % (
        len(taking), len(seen), "; ".join(taking))


def check_client_arguments():
    C = snowflake.Client
    expect(ValueError, C, must=("exactly one of servers",))
    expect(ValueError, C, servers="a:1", zookeeper="b:2", must=("both are set",))
    expect(ValueError, C, servers="", must=("servers is empty",))
    expect(ValueError, C, servers="a:1", timeout_ms=0, must=("timeout_ms = 0 is outside 1..600000",))
    expect(ValueError, C, servers="a:1", timeout_ms=10 ** 12,
           must=("timeout_ms = %d is outside 1..600000" % 10 ** 12,))
    expect(ValueError, C, servers="a:1", try_timeout_ms=2000,
           must=("try_timeout_ms = 2000 is outside 1..1000",))
    expect(ValueError, C, servers="a:1", connections_per_server=1025, must=("1..1024",))
    expect(ValueError, C, servers="a:1", prefetch=-1, must=("prefetch = -1", "0..1000000"))
    expect(ValueError, C, servers="a:1", agent="-x", must=("agent '-x'",))
    expect(ValueError, C, servers="a:1", epoch_ms=-1, must=("epoch_ms -1", "0..4102444800000"))
    expect(ValueError, C, servers="nocolon", must=("nocolon",))
    expect(TypeError, C, "a:1")
    expect(TypeError, C, servers=1, must=("servers",))


# ---- the stub and the docstrings ---------------------------------------------------------

def stub_signatures():
    """{name: [(parameter, kind, default source)]} of the stub's functions and methods."""
    tree = ast.parse(open(STUB).read())
    out = {}

    def params(fn):
        a = fn.args
        got = []
        pos = a.posonlyargs + a.args
        defaults = [None] * (len(pos) - len(a.defaults)) + a.defaults
        for p, d in zip(pos, defaults):
            if p.arg != "self":
                got.append((p.arg, "pos", None if d is None else ast.unparse(d)))
        for p, d in zip(a.kwonlyargs, a.kw_defaults):
            got.append((p.arg, "kw", None if d is None else ast.unparse(d)))
        return got
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = params(node)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    out["%s.%s" % (node.name, item.name)] = params(item)
    return out


def runtime_params(obj):
    got = []
    for p in inspect.signature(obj).parameters.values():
        if p.name == "self":
            continue
        kind = "kw" if p.kind == p.KEYWORD_ONLY else "pos"
        default = None if p.default is p.empty else repr(p.default)
        got.append((p.name, kind, default))
    return got


def check_stub_and_docs():
    stubs = stub_signatures()
    objects = {"decode": snowflake.decode, "compose": snowflake.compose,
               "encode": snowflake.encode, "parse": snowflake.parse,
               "id_range": snowflake.id_range,
               "set_zookeeper_logging": snowflake.set_zookeeper_logging,
               "Generator.__init__": snowflake.Generator, "Fenced.__init__": snowflake.Fenced,
               "Client.__init__": snowflake.Client}
    for cls in (snowflake.Generator, snowflake.Fenced, snowflake.Client):
        for name, member in vars(cls).items():
            if callable(member) and not name.startswith("_"):
                objects["%s.%s" % (cls.__name__, name)] = getattr(cls, name)
    for name, obj in objects.items():
        assert name in stubs, "the stub lacks %s" % name
        want = [(p, k, d) for p, k, d in runtime_params(obj)]
        have = stubs[name]
        # The stub writes the epoch default by its name, the runtime by its value.
        have = [(p, k, repr(snowflake.TWITTER_EPOCH_MS) if d == "TWITTER_EPOCH_MS" else d)
                for p, k, d in have]
        assert have == want, "%s: stub %r, module %r" % (name, have, want)
        assert obj.__doc__ and len(obj.__doc__) > 40, "%s has no docstring" % name
    text = open(STUB).read()
    for attr in ("worker_id", "datacenter_id", "serving", "closed", "epoch_ms"):
        assert re.search(r"def %s\(self\)" % attr, text), "the stub lacks %s" % attr
    for exc in ("Error", "FencedError", "ClockError", "StartError", "UnavailableError",
                "Decoded"):
        assert re.search(r"^class %s\b" % exc, text, re.M), "the stub lacks %s" % exc
    doc = snowflake.Fenced.__doc__
    for name in inspect.signature(snowflake.Fenced).parameters:
        assert "\n  %s: " % name in doc, "Fenced's docstring does not explain %s" % name
    for word in ("on_fork", "fork()", "lazy", "FencedError", "StartError", "close()"):
        assert word in doc, word


def main():
    ZK.start()
    r = sftest.Runner("test_module")
    for check in (check_module, check_generator, check_generator_threads,
                  check_generator_arguments, check_codecs_against_cli, check_codec_errors,
                  check_fenced_arguments, check_fenced, check_fenced_lazy,
                  check_fenced_threads, check_fenced_start_failure, check_start_interrupted,
                  check_fenced_while_zookeeper_frozen, check_exit_releases, check_client,
                  check_library_threads_take_no_process_signal, check_client_arguments,
                  check_stub_and_docs):
        r.run(check)
    r.finish()


if __name__ == "__main__":
    main()
