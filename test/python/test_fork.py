#!/usr/bin/python3
"""test_fork.py -- the module across fork(), with a real ZooKeeper: a multiprocessing.Pool
(the fork start method) whose workers use the parent's Fenced handle, each with a pair of its
own; a child that calls os._exit, one that execs (no descriptor of the parent's or its own
session survives the exec), one that closes the inherited handle, before and after claiming;
the parent keeps its pair, its node and its ids through all of them. With on_fork='refuse' a
child gets FencedError naming the fork; a Generator refuses in a child; a Client opens its
own. Not under a sanitizer (see sfpy_test.require_module)."""
import contextlib
import multiprocessing
import os
import sys
import threading
import time

import sfpy_test
from sfpy_test import sftest, wait_until

snowflake = sfpy_test.require_module(forks=True)
sftest.require_zookeeper_client()
ZK = sftest.ZooKeeper()
DC = 4
# Sessions long enough that a node left by a child that did not close its handle stays
# for the whole check: what the checks see gone was released, not expired.
SESSION_MS = 60000
HANDLE = None  # the parent's handle, inherited by the pool's workers


def new_path():
    new_path.n = getattr(new_path, "n", 0) + 1
    return "/py-fork-%d" % new_path.n


def fenced(path, **kwargs):
    kwargs.setdefault("session_timeout_ms", SESSION_MS)
    return snowflake.Fenced(ZK.hosts, path=path, datacenter_id=DC, **kwargs)


@contextlib.contextmanager
def parent_handle(**kwargs):
    """(h, zk, path): a handle of this process on a fresh path and a kazoo client, both
    closed however the check ends."""
    path = new_path()
    zk = ZK.client()
    h = None
    try:
        h = fenced(path, **kwargs)
        yield h, zk, path
    finally:
        if h is not None:
            h.close()
        zk.stop()


def in_child(body):
    """Runs body() in a fork() child; returns what it returned (through a pipe, repr'd and
    eval'd) or raises what it raised, as an AssertionError naming it. The child ends with
    os._exit: no atexit handler of the parent's test runs there."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = "ok " + repr(body())
        except BaseException as e:  # noqa: BLE001 - sent to the parent
            out = "error %s: %s" % (type(e).__name__, e)
        os.write(w, out.encode())
        os.close(w)
        os._exit(0)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (status, text)
    if not text.startswith("ok "):
        raise AssertionError("child %d: %s" % (pid, text))
    return eval(text[3:])  # noqa: S307 - our own child's repr


def parent_holds(h, zk, path, worker):
    """The parent still serves as worker, and ZooKeeper still says so."""
    assert h.serving and h.worker_id == worker, h.health()
    nodes = sfpy_test.worker_nodes(zk, path)
    assert nodes.get(worker) == os.getpid(), "the parent's node %d: %r" % (worker, nodes)
    ids = h.next_ids(100)
    assert {sfpy_test.pair(i) for i in ids} == {(DC, worker)}
    return nodes


def pool_task(n):
    """In a pool worker: ids from the inherited handle, with the pid and the pair held."""
    ids = HANDLE.next_ids(1000)
    return os.getpid(), HANDLE.worker_id, ids


def check_pool():
    global HANDLE
    with parent_handle() as (h, zk, path):
        HANDLE = h
        worker = h.worker_id
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(4) as pool:
            results = pool.map(pool_task, range(40), chunksize=1)
            pids = {pid for pid, _, _ in results}
            nodes = parent_holds(h, zk, path, worker)
            # Each worker holds its own pair: its node names its pid, its ids carry it.
            held = {}
            for pid, wid, ids in results:
                assert held.setdefault(pid, wid) == wid, "pool worker %d changed pair" % pid
                assert {sfpy_test.pair(i) for i in ids} == {(DC, wid)}, (pid, wid)
                assert nodes.get(wid) == pid, "worker id %d: node %r, pid %d" % (wid, nodes, pid)
            assert len(set(held.values())) == len(held) and worker not in held.values(), held
            assert len(pids) >= 2, "the pool used %d worker(s)" % len(pids)
            every = [i for _, _, ids in results for i in ids] + h.next_ids(1000)
            sfpy_test.check_unique(every, "the pool and its parent")
            pool.terminate()
        parent_holds(h, zk, path, worker)


def check_child_exits():
    with parent_handle() as (h, zk, path):
        worker = h.worker_id
        before = h.next_id()
        # A child that claims its own pair and leaves with os._exit: nothing it had was
        # the parent's, so nothing of the parent's goes with it.
        child_pid, child_worker, child_ids = in_child(
            lambda: (os.getpid(), h.worker_id if h.next_id() else -1, h.next_ids(500)))
        assert child_worker != worker and {sfpy_test.pair(i) for i in child_ids} == \
            {(DC, child_worker)}
        nodes = parent_holds(h, zk, path, worker)
        assert nodes.get(child_worker) == child_pid, nodes  # held until its session expires
        # A child that never claims, and leaves with os._exit.
        assert in_child(lambda: os.getpid()) > 0
        parent_holds(h, zk, path, worker)
        after = h.next_id()
        assert after > before and sfpy_test.pair(after) == (DC, worker)


EXEC_SCRIPT = """
import os, sys
sockets = []
for fd in os.listdir('/proc/self/fd'):
    try:
        target = os.readlink('/proc/self/fd/' + fd)
    except OSError:
        continue
    if target.startswith('socket:') or target.startswith('anon_inode:'):
        sockets.append('%s -> %s' % (fd, target))
print(' '.join(sockets) or 'none')
"""


def exec_child(h, claim_first):
    """A fork() child that (having claimed its own pair, or not) execs a program listing its
    open sockets and event descriptors; returns that list."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            if claim_first:
                h.next_id()
            os.dup2(w, 1)
            os.execv(sys.executable, [sys.executable, "-c", EXEC_SCRIPT])
        finally:
            os._exit(1)
    os.close(w)
    out = b""
    while True:
        b = os.read(r, 4096)
        if not b:
            break
        out += b
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    return out.decode().strip()


def check_child_execs():
    with parent_handle() as (h, zk, path):
        worker = h.worker_id
        for claim_first in (False, True):
            left = exec_child(h, claim_first)
            assert left == "none", "descriptors survived the exec (claimed %s): %s" % (
                claim_first, left)
            parent_holds(h, zk, path, worker)


def check_child_closes():
    with parent_handle() as (h, zk, path):
        worker = h.worker_id
        # Closed without claiming: the child's copy is freed, the parent's pair untouched.
        assert in_child(lambda: h.close() or h.closed) is True
        parent_holds(h, zk, path, worker)

        def claim_then_close():
            wid = h.worker_id if h.next_id() else -1
            nodes_then = sfpy_test.worker_nodes(zk_child(), path)
            h.close()
            return wid, nodes_then
        child_worker, nodes_then = in_child(claim_then_close)
        assert child_worker != worker and child_worker in nodes_then
        nodes = parent_holds(h, zk, path, worker)
        assert child_worker not in nodes, "the child's close() left its node: %r" % nodes
        assert nodes == {worker: os.getpid()}, nodes


def zk_child():
    """A kazoo client made in a child (the parent's has threads that do not exist there)."""
    return ZK.client()


def check_child_threads_claim_once():
    with parent_handle() as (h, zk, path):
        worker = h.worker_id

        def many():
            out, errors = [], []

            def one():
                try:
                    out.extend(h.next_ids(50))
                except Exception as e:  # noqa: BLE001 - returned
                    errors.append(str(e))
            threads = [threading.Thread(target=one) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            nodes = sfpy_test.worker_nodes(zk_child(), path)
            h.close()
            return errors, sorted({sfpy_test.pair(i) for i in out}), len(out), nodes
        errors, pairs, n, nodes = in_child(many)
        assert not errors and n == 400, (errors, n)
        assert len(pairs) == 1 and pairs[0][1] != worker, pairs
        assert len(nodes) == 2, "the child's threads claimed more than once: %r" % nodes
        parent_holds(h, zk, path, worker)


def check_refuse():
    with parent_handle(on_fork="refuse") as (h, zk, path):
        worker = h.worker_id

        def refused(handle):
            got = []
            for call in (handle.next_id, lambda: handle.next_ids(10), handle.claim):
                try:
                    call()
                    got.append("served")
                except snowflake.FencedError as e:
                    got.append(str(e))
            return got, handle.worker_id, handle.serving
        got, wid, serving = in_child(lambda: refused(h))
        for message in got:
            assert "fork()" in message and "pid %d" % os.getpid() in message, message
        assert wid == -1 and serving is False
        nodes = parent_holds(h, zk, path, worker)
        assert nodes == {worker: os.getpid()}, nodes
        # A lazy handle made in the parent and never started: refused too, and holds none.
        lazy = fenced(path, on_fork="refuse", lazy=True)
        assert "fork()" in in_child(lambda: refused(lazy)[0][0])
        assert sfpy_test.worker_nodes(zk, path) == {worker: os.getpid()}
        lazy.close()


def check_lazy_master():
    """A lazy handle made before the fork: the master holds no pair, each child its own."""
    with parent_handle(lazy=True) as (h, zk, path):
        pairs = [in_child(lambda: (h.claim(), h.worker_id, h.close())[1]) for _ in range(3)]
        assert all(p >= 0 for p in pairs), pairs
        assert sfpy_test.worker_nodes(zk, path) == {}, "a child's close() left its node"
        assert h.worker_id == -1 and not h.serving


def check_generator_in_child():
    g = snowflake.Generator(1, 2)
    g.next_id()
    msg = in_child(lambda: expect_error(g.next_id))
    assert "fork()" in msg and "pid %d" % os.getpid() in msg, msg
    assert "fork()" in in_child(lambda: expect_error(lambda: g.next_ids(5)))
    assert sfpy_test.pair(g.next_id()) == (1, 2)  # the parent's goes on


def expect_error(call):
    try:
        call()
    except snowflake.Error as e:
        return str(e)
    return "served"


def check_client_in_child():
    with sftest.Server(worker_id=6, datacenter_id=7) as node:
        c = snowflake.Client(servers="127.0.0.1:%d" % node.port, timeout_ms=60000)
        try:
            first = c.next_id()
            child = in_child(lambda: (c.next_id(), c.next_ids(20), c.close())[:2])
            assert sfpy_test.pair(child[0]) == (7, 6) and len(child[1]) == 20
            after = c.next_id()  # the parent's connections were not the child's
            assert after > first and sfpy_test.pair(after) == (7, 6)
        finally:
            c.close()


def main():
    ZK.start()
    r = sftest.Runner("test_fork")
    for check in (check_pool, check_child_exits, check_child_execs, check_child_closes,
                  check_child_threads_claim_once, check_refuse, check_lazy_master,
                  check_generator_in_child, check_client_in_child):
        r.run(check)
    r.finish()


if __name__ == "__main__":
    main()
