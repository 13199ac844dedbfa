"""prefork.py -- what test_gunicorn.py and test_uwsgi.py share: a pre-fork server (Debian's
gunicorn or uWSGI) serving idapp.py, whose master makes the Fenced handle before the fork, on
a free loopback port; an HTTP load that collects ids from its workers; and the checks both
servers must pass:
  - load: at least 1 M ids over the 4 workers, no id twice, each worker's ids under a pair
    of its own (its node in ZooKeeper names its pid), distinct from the master's and from
    every other worker's;
  - a worker killed with SIGKILL: the server starts another, which claims a pair of its own
    and serves; no id of it is one of the dead worker's (nor any other's);
  - recycling (max requests): workers come and go, each releases its pair as it exits, so
    every node in ZooKeeper is a live process's, and a stop leaves none.
Every server is stopped (its whole process group) however the test ends."""
import array
import atexit
import http.client
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import sfpy_test
from sfpy_test import sftest, wait_until

APP_DIR = sfpy_test.HERE
WORKERS = 4
# Each request carries BATCHES x next_ids(1000); 1 M ids take MILLION_REQUESTS of them.
BATCHES = 5
MILLION_REQUESTS = 200
_servers = []


def _stop_all():
    for server in list(_servers):
        server.kill()


atexit.register(_stop_all)


class Server:
    """One pre-fork server: argv run in a session of its own (so that the master and every
    worker can be stopped as one group), its output in a temporary file."""

    def __init__(self, name, argv, port, env):
        self.name, self.argv, self.port, self.env = name, argv, port, env
        self.log_file = tempfile.NamedTemporaryFile(prefix="sfpy-%s-" % name, suffix=".log")
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=self.log_file, stderr=subprocess.STDOUT,
                                     cwd=APP_DIR, start_new_session=True)
        _servers.append(self)
        deadline = time.time() + sftest.PATIENCE
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("%s exited with %s at start; log:\n%s"
                                     % (self.name, self.proc.returncode, self.log()))
            try:
                if self.get("/pid")[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("%s did not answer within %.0f s; log:\n%s"
                             % (self.name, sftest.PATIENCE, self.log()))

    @property
    def pid(self):
        return self.proc.pid

    def log(self, last=60):
        with open(self.log_file.name, errors="replace") as f:
            return "\n".join(f.read().splitlines()[-last:])

    def log_size(self):
        return os.path.getsize(self.log_file.name)

    def log_since(self, offset):
        with open(self.log_file.name, errors="replace") as f:
            f.seek(offset)
            return f.read()

    def get(self, path, timeout=sftest.PATIENCE):
        """(status, X-Pid, body) of GET path."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, r.getheader("X-Pid"), r.read()
        finally:
            conn.close()

    def stop(self, sig, timeout=sftest.PATIENCE):
        """Signals the master and waits for it (the group is killed if it does not exit)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                where = _group_waits(self.proc.pid)
                self.kill()
                raise AssertionError("%s did not stop within %.0f s of signal %d; where its "
                                     "processes waited:\n%s\nlog:\n%s"
                                     % (self.name, timeout, sig, where, self.log()))
        self.kill()  # any worker left behind by the master
        return self.proc.returncode

    def workers(self):
        """The pids of the master's live children: its workers, answered or not."""
        return {pid for pid, ppid, state in _processes() if ppid == self.pid and state != "Z"}

    def kill(self):
        if self in _servers:
            _servers.remove(self)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        # The workers are the master's children: once the group is gone they are reaped by
        # init; wait for them so that the next check's counts are not theirs.
        wait_until(lambda: not _group_alive(self.proc.pid), sftest.PATIENCE, "the group gone")


def _processes():
    """(pid, parent pid, state) of every process, from /proc."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:  # gone meanwhile
                continue
            yield int(entry), int(fields[1]), fields[0]


def _group(pgid):
    """(pid, parent pid, state) of every process of group pgid."""
    for pid, ppid, state in _processes():
        try:
            if os.getpgid(pid) == pgid:
                yield pid, ppid, state
        except ProcessLookupError:
            continue


def _group_alive(pgid):
    return any(state != "Z" for _, _, state in _group(pgid))


def _group_waits(pgid):
    """One line per process of the group: its pid, parent, state and the kernel function
    each of its threads waits in, which tells a worker idle in its loop (a signal it never
    handled) from one blocked in a call."""
    lines = []
    for pid, ppid, state in sorted(_group(pgid)):
        try:
            waits = []
            for task in sorted(os.listdir("/proc/%d/task" % pid), key=int):
                with open("/proc/%d/task/%s/wchan" % (pid, task)) as f:
                    waits.append(f.read() or "-")
        except OSError:
            continue
        lines.append("  pid %d (parent %d, state %s): threads in %s"
                     % (pid, ppid, state, ", ".join(waits)))
    return "\n".join(lines) or "  (no process left)"


class Ids:
    """Every id collected, by the worker pid that answered, checked for repeats as it comes."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seen = set()
        self.by_pid = {}
        self.errors = []

    def add(self, pid, body):
        ids = array.array("q")
        ids.frombytes(body)
        if sys.byteorder == "little":
            ids.byteswap()
        with self.lock:
            before = len(self.seen)
            self.seen.update(ids)
            if len(self.seen) != before + len(ids):
                dup = [i for i in ids if i in self.by_pid_ids()]
                raise AssertionError("an id handed out twice: %r" % dup[:3])
            self.by_pid.setdefault(pid, []).append(ids)

    def by_pid_ids(self):
        return {i for batches in self.by_pid.values() for b in batches for i in b}

    def pairs(self, pid):
        return {sfpy_test.pair(i) for b in self.by_pid.get(pid, []) for i in b}

    def count(self):
        return len(self.seen)


def load(server, ids, requests, batches=BATCHES, threads=WORKERS * 2, until=None):
    """requests GETs of /ids?batches=..., from threads at once (each on a connection of its
    own, as the sync workers close them), into ids; stops early once until() is true."""
    left = [requests]
    lock = threading.Lock()

    def run():
        while True:
            with lock:
                if left[0] <= 0 or (until is not None and until()):
                    return
                left[0] -= 1
            sent = time.time()
            try:
                status, pid, body = server.get("/ids?batches=%d" % batches)
            except OSError as e:  # a worker killed under the request: the next one goes on
                ids.errors.append("%s (after %.1f s, %s)" % (e, time.time() - sent,
                                                             time.strftime("%H:%M:%S")))
                continue
            if status != 200:
                ids.errors.append("%d %s" % (status, body[:300]))
                continue
            ids.add(int(pid), body)
    workers = [threading.Thread(target=run) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()


def assert_no_errors(ids, server, but=()):
    """No request failed, but those whose error starts with one of but; else fails with the
    first errors and the server's log."""
    errors = [e for e in ids.errors if not e.startswith(but)]
    assert not errors, "%r; the server's log:\n%s" % (errors[:5], server.log())


def worker_deaths(log):
    """The lines of a server's log that say a worker died of a signal (gunicorn and uWSGI
    each say it in their words)."""
    return [line for line in log.splitlines()
            if "terminated due to signal" in line or "killed by signal" in line]


def check_pairs(ids, nodes, master):
    """Each worker that answered holds a pair of its own, named in ZooKeeper by its pid, and
    carried by every id it gave; none is the master's."""
    by_worker = {}
    for pid in ids.by_pid:
        pairs = ids.pairs(pid)
        assert len(pairs) == 1, "worker %d gave ids under %r" % (pid, pairs)
        (dc, wid), = pairs
        # A dead worker's node lasts until its session expires, then goes.
        assert nodes.get(wid) == pid or (not sfpy_test.alive(pid) and wid not in nodes), \
            "worker %d's ids carry worker id %d, held by %r" % (pid, wid, nodes.get(wid))
        by_worker[pid] = wid
    master_ids = [w for w, p in nodes.items() if p == master]
    assert len(master_ids) == 1, "the master holds %r (nodes %r)" % (master_ids, nodes)
    assert master_ids[0] not in by_worker.values(), (master_ids, by_worker)
    assert len(set(by_worker.values())) == len(by_worker), by_worker
    return by_worker


class LeakWatch:
    """Polls a path's worker nodes on a thread of its own: a node still there GRACE_S after
    its holder died was not released (it waits for its session's expiry, a minute here)."""
    GRACE_S = 5

    def __init__(self, zk_server, path):
        self.zk = zk_server.client()
        self.path = path
        self.dead_since = {}
        self.leaks = set()
        self.polls = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _run(self):
        while not self.done.wait(0.2):
            now = time.time()
            for wid, pid in sfpy_test.worker_nodes(self.zk, self.path).items():
                if not sfpy_test.alive(pid):
                    if now - self.dead_since.setdefault(pid, now) > self.GRACE_S:
                        self.leaks.add((wid, pid))
            self.polls += 1

    def stop(self):
        self.done.set()
        self.thread.join()
        self.zk.stop()


class Scenario:
    """The checks on one kind of server. make(name, port, env, extra) returns its Server;
    stop_signal stops it cleanly; master_exits_python says whether its master runs Python's
    exit functions when it stops (uWSGI's does not: a handle its master started keeps its
    pair until its session expires)."""

    def __init__(self, make, stop_signal, zk, master_exits_python=True):
        self.make, self.stop_signal, self.zk = make, stop_signal, zk
        self.master_exits_python = master_exits_python

    def env(self, path, session_ms, lazy=False):
        return sfpy_test.module_env({"SFPY_ZOOKEEPER": self.zk.hosts, "SFPY_PATH": path,
                                     "SFPY_SESSION_MS": str(session_ms),
                                     "SFPY_LAZY": "1" if lazy else "0"})

    def stop_cleanly(self, server):
        """Stops the server with its stop signal: the master exits 0 and no worker dies of a
        signal on the way (gunicorn and uWSGI each log such a death in their words)."""
        offset = server.log_size()
        rc = server.stop(self.stop_signal)
        after = server.log_since(offset)
        assert rc == 0, "%s exited with %r at stop; its log:\n%s" % (server.name, rc, after)
        deaths = worker_deaths(after)
        assert not deaths, "a worker died at stop: %r; the log:\n%s" % (deaths, after)

    def check_stopped(self, server, zk, path, also_left=()):
        """Stops the server cleanly: every pair is released but those of also_left and, where
        the master runs no exit function, the master's."""
        master = server.pid
        self.stop_cleanly(server)
        left = sfpy_test.worker_nodes(zk, path)
        allowed = set(also_left)
        if not self.master_exits_python:
            allowed |= {w for w, p in left.items() if p == master}
        assert set(left) <= allowed, "left after the stop: %r" % left

    def check_lazy(self, path):
        """A lazy handle made in the master: the master holds no pair, each worker that makes
        ids one of its own, and a stop releases them all."""
        zk = self.zk.client()
        server = self.make("lazy", sftest.free_port(),
                           self.env(path, sftest.STEADY_SESSION_MS, lazy=True), ()).start()
        try:
            ids = Ids()
            load(server, ids, 100, batches=1)
            assert_no_errors(ids, server)
            nodes = sfpy_test.worker_nodes(zk, path)
            assert server.pid not in nodes.values(), "the lazy master holds %r" % nodes
            assert sorted(nodes.values()) == sorted(ids.by_pid), (nodes, list(ids.by_pid))
            for pid in ids.by_pid:
                (dc, wid), = ids.pairs(pid)
                assert nodes.get(wid) == pid, (pid, wid, nodes)
            self.stop_cleanly(server)
            assert sfpy_test.worker_nodes(zk, path) == {}, "the stop left nodes"
        finally:
            server.kill()
            zk.stop()

    def check_load_and_kill(self, path):
        zk = self.zk.client()
        server = self.make("load", sftest.free_port(), self.env(path, sftest.STEADY_SESSION_MS),
                           ()).start()
        try:
            ids = Ids()
            began = time.time()
            load(server, ids, MILLION_REQUESTS)
            # Until every worker has answered (the load spreads over them, but by chance).
            load(server, ids, 2000, batches=1, until=lambda: len(ids.by_pid) >= WORKERS)
            took = time.time() - began
            assert_no_errors(ids, server)
            assert ids.count() >= 1000000, ids.count()
            assert len(ids.by_pid) == WORKERS, "workers that answered: %r" % list(ids.by_pid)
            nodes = sfpy_test.worker_nodes(zk, path)
            by_worker = check_pairs(ids, nodes, server.pid)
            assert len(nodes) == WORKERS + 1, "nodes %r: the master and %d workers" % (
                nodes, WORKERS)
            print("%d ids from %d workers in %.1f s; master %d holds %r; workers %r"
                  % (ids.count(), len(ids.by_pid), took, server.pid,
                     [w for w, p in nodes.items() if p == server.pid], by_worker), flush=True)
            # SIGKILL a worker: another starts, claims a pair of its own, serves.
            victim = sorted(by_worker)[0]
            dead_wid = by_worker[victim]
            os.kill(victim, signal.SIGKILL)
            wait_until(lambda: not sfpy_test.alive(victim), sftest.PATIENCE, "the worker dead")
            before = set(ids.by_pid)
            load(server, ids, 5000, batches=1,
                 until=lambda: set(ids.by_pid) - before - {victim})
            new = set(ids.by_pid) - before
            assert new, "no new worker answered after the kill; log:\n%s" % server.log()
            nodes = sfpy_test.worker_nodes(zk, path)
            for pid in new:
                (dc, wid), = ids.pairs(pid)
                assert nodes.get(wid) == pid and wid != dead_wid, (pid, wid, dead_wid, nodes)
            # Its session not expired yet, the dead worker's node keeps its id from others.
            assert nodes.get(dead_wid) in (victim, None), nodes
            check_pairs(ids, nodes, server.pid)
            assert_no_errors(ids, server, but=("[Errno", "Remote"))
            # A clean stop releases every pair but the killed worker's (its session expires).
            self.check_stopped(server, zk, path, also_left={dead_wid})
        finally:
            server.kill()
            zk.stop()

    def check_respawn_after_master_logged(self, path):
        """A worker forked after the master's handle logged a line serves. The master sits in
        the server's own code once the application is loaded (uWSGI's runs no Python at all
        without --enable-threads), so a line bound for its logger waits there; a worker forked
        then must not inherit that wait. ZooKeeper paused past the session makes every handle
        log; a worker killed then is forked anew, and must answer.

        The new worker is told from the old ones by the process table, not by who answered
        before: an old worker the first requests missed would pass for it, and the stop then
        reach the master while it forks the new one. Both servers lose a stop signal that
        lands then on the worker being forked, and wait out their graceful timeout for it."""
        server = self.make("respawn", sftest.free_port(), self.env(path, 4000), ()).start()
        try:
            ids = Ids()
            load(server, ids, 40, batches=1)
            assert_no_errors(ids, server)
            self.zk.freeze(6)  # past the 4 s session: the master's handle says it is fenced
            old = server.workers()
            victim = sorted(ids.by_pid)[0]
            assert victim in old, (victim, old)
            os.kill(victim, signal.SIGKILL)
            wait_until(lambda: not sfpy_test.alive(victim), sftest.PATIENCE, "the worker dead")
            deadline = time.time() + sftest.PATIENCE
            while not set(ids.by_pid) - old and time.time() < deadline:
                load(server, ids, 40, batches=1, until=lambda: set(ids.by_pid) - old)
            assert set(ids.by_pid) - old, (
                "no worker forked after the master logged answered in %.0f s (workers before "
                "the kill %r, answered %r); the server's log:\n%s"
                % (sftest.PATIENCE, sorted(old), sorted(ids.by_pid), server.log()))
            deaths = worker_deaths(server.log_since(0))
            assert len(deaths) == 1 and str(victim) in deaths[0], (
                "worker %d was killed; the deaths the server logged: %r" % (victim, deaths))
            self.stop_cleanly(server)
        finally:
            server.kill()

    def check_recycling(self, path, max_requests_args):
        zk = self.zk.client()
        # A long session: a node an exiting worker did not release would stay for a minute.
        server = self.make("recycle", sftest.free_port(), self.env(path, 60000),
                           max_requests_args).start()
        try:
            ids = Ids()
            watch = LeakWatch(self.zk, path).start()
            try:
                load(server, ids, 200, batches=1)
                time.sleep(LeakWatch.GRACE_S + 1)  # the last exits' nodes judged too
            finally:
                watch.stop()
            assert_no_errors(ids, server)
            assert len(ids.by_pid) > WORKERS, "no worker was recycled: %r" % list(ids.by_pid)
            assert watch.polls > 10, watch.polls
            assert not watch.leaks, "nodes outlived their workers (not released): %r" % (
                watch.leaks,)
            nodes = sfpy_test.worker_nodes(zk, path)
            assert all(sfpy_test.alive(p) for p in nodes.values()), nodes
            assert len(nodes) <= WORKERS + 1, nodes
            print("%d workers served over the run; nodes now %r" % (len(ids.by_pid), nodes),
                  flush=True)
            self.check_stopped(server, zk, path)
        finally:
            server.kill()
            zk.stop()


def run_checks(name, make, stop_signal, recycle_args, master_exits_python=True):
    """The test of one kind of server: a throwaway ZooKeeper, then each check in turn (paths
    /py-NAME-...), counted and reported by sftest's runner."""
    zk = sftest.ZooKeeper()
    zk.start()
    scenario = Scenario(make, stop_signal, zk, master_exits_python)
    r = sftest.Runner("test_" + name)

    def check_load_and_kill():
        scenario.check_load_and_kill("/py-%s-load" % name)

    def check_max_requests():
        scenario.check_recycling("/py-%s-recycle" % name, recycle_args)

    def check_lazy_master():
        scenario.check_lazy("/py-%s-lazy" % name)
    def check_respawn_after_master_logged():
        scenario.check_respawn_after_master_logged("/py-%s-respawn" % name)
    for check in (check_load_and_kill, check_max_requests, check_lazy_master,
                  check_respawn_after_master_logged):
        r.run(check)
    r.finish()
