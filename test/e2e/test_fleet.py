#!/usr/bin/python3
"""test_fleet.py -- a fleet's start on one ZooKeeper server: 128 libsnowflake-zk holders
(test/tools/scale_holders, one process, one thread per holder) started at once over four
datacenter paths, automatic datacenter and worker ids. All of them serve, each with a
(datacenter, worker) pair of its own, and each path's epoch record was written by its
first holder, not once per claim: a claim reads the record and writes it only when it is
missing, so holders that start together do not queue on one node. Then every session is
lost at once (the process frozen until ZooKeeper has expired them all) and all claim again:
all serve again, pairs distinct, the records still not written per claim. The times are printed; scripts/scale measures a
fleet of 1,024 against an ensemble."""
import os
import signal
import subprocess
import threading
import time

import sftest

HOLDERS = 128
PATHS = 4
SESSION_MS = 6000
ZK = sftest.ZooKeeper()


class Fleet:
    """The holders' process and what it reports (its output format: scale_holders.c)."""

    def __init__(self):
        tool = os.path.join(sftest.TOP_BUILDDIR, "test", "tools", "scale_holders")
        paths = ",".join("%d=/fleet-dc%d" % (d, d) for d in range(PATHS))
        self.lock = threading.Lock()
        self.started, self.failed, self.serving, self.fenced = {}, {}, {}, {}
        self.logs = []
        self.proc = subprocess.Popen([tool, ZK.hosts, paths, str(HOLDERS), str(HOLDERS),
                                      str(SESSION_MS)], env=sftest.clean_env(),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     bufsize=1)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            ev, _, rest = line.rstrip("\n").partition(" ")
            parts = rest.split(" ")
            with self.lock:
                if ev == "started":
                    self.started[parts[0]] = int(parts[2])
                elif ev == "failed":
                    self.failed[parts[0]] = rest
                elif ev == "serving":
                    self.serving[parts[0]] = (int(parts[1]), int(parts[2]), int(parts[3]))
                elif ev == "fenced":
                    self.fenced[parts[0]] = int(parts[1])
                elif ev == "log":
                    self.logs.append(rest)

    def send(self, word):
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()

    def pairs(self):
        """The (datacenter, worker) pair each holder serves with now."""
        with self.lock:
            return {name: (dc, w) for name, (_, dc, w) in self.serving.items()
                    if self.fenced.get(name, -1) < self.serving[name][0]}

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            try:
                self.send("stop")
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def now_ms():
    return int(time.monotonic() * 1000)


def assert_all_serving_distinct(fleet, since_ms, what):
    """Waits until every holder serves with a transition to serving at or after since_ms;
    returns the seconds from since_ms to the last one. Fails on a pair held twice."""
    def all_serving():
        with fleet.lock:
            if fleet.failed:
                raise AssertionError("starts failed: %s" % sorted(fleet.failed.items())[:3])
            since = all(ms >= since_ms for ms, _, _ in fleet.serving.values())
        # A holder fenced meanwhile (a lease late on a busy machine) counts once it serves
        # again. The pairs checked are the ones that passed: read again, one could be fenced.
        pairs = fleet.pairs()
        return pairs if since and len(pairs) == HOLDERS else None
    pairs = sftest.wait_until(all_serving, 2 * sftest.PATIENCE, "all %d holders serving %s"
                              % (HOLDERS, what))
    held = sorted(pairs.values())
    twice = [p for i, p in enumerate(held) if i and held[i - 1] == p]
    assert not twice, "pairs held twice %s: %s" % (what, twice[:5])
    with fleet.lock:
        return (max(ms for ms, _, _ in fleet.serving.values()) - since_ms) / 1000.0


def assert_epoch_not_written_per_claim(zk):
    """Each path's record ("epoch_ms MS" in PATH-state) was written by its first holder, not
    once per claim. A claim writes it again only for a stamp it could not get from a node of
    its own (its create's answer lost with the connection, which a busy machine can make
    more often): a quarter of the path's claims at most, where one per claim would be 32
    and more."""
    for d in range(PATHS):
        data, stat = zk.get("/fleet-dc%d-state" % d)
        assert data == b"epoch_ms %d" % sftest.TWITTER_EPOCH_MS, data
        assert 1 <= stat.version <= HOLDERS // PATHS // 4, (
            "/fleet-dc%d-state was written %d times by %d holders (once is enough: the others "
            "read it)" % (d, stat.version, HOLDERS // PATHS))


def cold_start_then_every_session_lost():
    zk = ZK.client()
    fleet = Fleet()
    try:
        time.sleep(0.5)  # the process is up and waiting for "go"
        go = now_ms()
        fleet.send("go")
        took = assert_all_serving_distinct(fleet, go, "after a cold start")
        with fleet.lock:
            starts = sorted(fleet.started.values())
        print("     cold start: %d holders over %d paths all serving after %.2f s, one start "
              "p50 %.2f s, max %.2f s" % (HOLDERS, PATHS, took, starts[len(starts) // 2] / 1000.0,
                                          starts[-1] / 1000.0), flush=True)
        assert_epoch_not_written_per_claim(zk)

        os.kill(fleet.proc.pid, signal.SIGSTOP)
        frozen = time.monotonic()
        sftest.wait_until(lambda: all(not zk.get_children("/fleet-dc%d" % d)
                                      for d in range(PATHS)),
                          SESSION_MS / 1000.0 + 2 * sftest.PATIENCE,
                          "every holder's worker node gone with its session")
        resumed = now_ms()
        os.kill(fleet.proc.pid, signal.SIGCONT)
        took = assert_all_serving_distinct(fleet, resumed, "after every session was lost")
        print("     sessions lost (frozen %.1f s): all %d serving again %.2f s after resuming"
              % (time.monotonic() - frozen - took, HOLDERS, took), flush=True)
        assert_epoch_not_written_per_claim(zk)
    finally:
        fleet.stop()
        zk.stop()
        zk.close()
    assert fleet.proc.returncode == 0, "scale_holders exited with %d" % fleet.proc.returncode


def main():
    sftest.require_zookeeper_client()
    # Every holder connects from 127.0.0.1: past ZooKeeper's default of 60 connections from
    # one address the rest would be refused.
    with open(os.path.join(ZK.dir, "extra.cfg"), "w") as f:
        f.write("maxClientCnxns=0\n")
    ZK.start()
    r = sftest.Runner("test_fleet")
    r.run(cold_start_then_every_session_lost)
    r.finish()


if __name__ == "__main__":
    main()
