"""sftest.py -- shared parts of the end-to-end tests: start and always stop a
real snowflaked on a free loopback port, talk to it through the Python client
generated from thrift/snowflake.thrift, and count passes and failures."""
import atexit
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request

TOP_BUILDDIR = os.environ.get("top_builddir", ".")
TOP_SRCDIR = os.environ.get("top_srcdir", ".")
SNOWFLAKED = os.path.join(TOP_BUILDDIR, "src", "snowflaked")
SNOWFLAKE_CLI = os.path.join(TOP_BUILDDIR, "src", "snowflake")
LIBTOOL = os.path.join(TOP_BUILDDIR, "libtool")
TWITTER_EPOCH_MS = 1288834974657
SKIP = 77  # automake's exit status for a skipped test
# How long a test waits for something that should happen (a server listening, a log line, a
# state): generous, because build farms and laptops run the suite on busy machines, and a
# wait on an event costs nothing more when the event comes at once. A test that checks how
# fast something happens measures it instead of waiting less.
PATIENCE = 60.0
# The ZooKeeper session of a test node that no check fences by outlasting it. On a loaded
# machine a request unanswered for 2/3 of a 1-4 s session drops the connection: the node's
# start fails ("operation timeout"), or it fences for a moment and a check that found it
# serving meets a closed port or a refusal.
STEADY_SESSION_MS = 10000

sys.path.insert(0, os.path.join(TOP_BUILDDIR, "thrift", "gen-py"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from free_port import free_port  # noqa: E402,F401  (the tests and zk-server.sh share it)
from snowflake_thrift import Snowflake  # noqa: E402  (generated at build time)
from snowflake_thrift.ttypes import (  # noqa: E402,F401
    InvalidRequestError, InvalidSystemClock, InvalidUserAgentError, ServiceUnavailable)
from thrift.protocol import TBinaryProtocol  # noqa: E402
from thrift.transport import TSocket, TTransport  # noqa: E402

_running = []
_started = []  # the servers the running check started, for its logs should it fail


def _stop_all():
    """Stops every server still running when the test exits, however it exits."""
    for server in list(_running):
        try:
            server.stop()
        except Exception as e:  # a report from one server must not spare the others
            print("while stopping a server at exit: %s" % e)


atexit.register(_stop_all)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))


def require_server():
    """Skips the test (exit 77) when this build has no snowflaked to test."""
    if not os.access(SNOWFLAKED, os.X_OK):
        print("%s is not built: nothing to test against" % SNOWFLAKED)
        sys.exit(SKIP)


def require_zookeeper_client():
    """Fails the test, saying what to install, when python3-kazoo is missing: the tests
    that register nodes read and write ZooKeeper through it."""
    try:
        import kazoo  # noqa: F401
    except ImportError:
        print("python3-kazoo is not installed: apt-get install python3-kazoo")
        raise SystemExit(1)


def clean_env(extra=None):
    """The test's environment without inherited SNOWFLAKE_* settings, but for
    SNOWFLAKE_EVENT_LOOP: the suite runs once per event loop."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SNOWFLAKE_") or k == "SNOWFLAKE_EVENT_LOOP"}
    env.update(extra or {})
    return env


class Server:
    """One snowflaked process on 127.0.0.1 with --port 0; .port is the port it
    reports in its "listening on ADDR:PORT" line. Use as a context manager."""

    def __init__(self, args=(), env=None, admin=False, prefix=(), worker_id=1,
                 datacenter_id=2, wait_serving=True):
        self.admin_port = free_port() if admin else 0
        # SNOWFLAKED_WRAPPER runs every server under a tool, e.g. valgrind;
        # stop() then fails the test on any error the tool reports.
        self.wrapper = shlex.split(os.environ.get("SNOWFLAKED_WRAPPER", ""))
        self.env = clean_env(env)
        self.argv = list(prefix) + self._launcher(self.env.pop("LD_PRELOAD", None)) + [
            SNOWFLAKED, "--bind", "127.0.0.1", "--port", "0",
            "--admin-port", str(self.admin_port)] + list(args)
        if worker_id is not None:  # None: leave it to the file or the environment
            self.argv += ["--worker-id", str(worker_id)]
        if datacenter_id is not None:
            self.argv += ["--datacenter-id", str(datacenter_id)]
        self.wait_serving = wait_serving
        self.exit_read = False  # the test read how the server exited (wait_exit)
        self.proc = None
        self.port = None
        self.lines = []
        self._listening = threading.Event()

    def _launcher(self, preload):
        """What runs SNOWFLAKED: the wrapper, and a library to preload into snowflaked
        alone. SNOWFLAKED is libtool's wrapper script; preloaded into that script's
        shell, libfaketime lets one subshell remove the semaphore the next one opens,
        and the script fails now and then. libtool's execute mode runs the real
        program instead, through env, which sets the preload for it alone."""
        if not preload:
            return self.wrapper
        env = ["env", "LD_PRELOAD=" + preload]
        if self.wrapper[1:2] == ["--mode=execute"]:
            return self.wrapper[:2] + env + self.wrapper[2:]
        return [LIBTOOL, "--mode=execute"] + env + self.wrapper

    def start(self, timeout=PATIENCE):
        self.proc = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, errors="replace")
        _running.append(self)
        _started.append(self)
        threading.Thread(target=self._read_log, name="sf-log-%d" % id(self), daemon=True).start()
        if not self._listening.wait(timeout):
            self.stop()
            raise AssertionError("snowflaked did not log 'listening on' within %.0f s; log:\n%s"
                                 % (timeout, self.log()))
        if self.admin_port:
            self._wait_admin(timeout)
        if self.wait_serving:
            self._wait_serving(timeout)
        return self

    def _wait_serving(self, timeout):
        """The server listens before it holds a worker id (peers must be able
        to ask it during registration), so a test that wants ids waits until
        get_worker_id reports one."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with self.client(timeout=1.0) as api:
                    if api.get_worker_id() >= 0:
                        return
            except (TTransport.TTransportException, OSError):
                pass
            time.sleep(0.02)
        self.stop()
        raise AssertionError("snowflaked did not hold a worker id within %.0f s; log:\n%s"
                             % (timeout, self.log()))

    def _read_log(self):
        """Collects the log lines and notes the port of the "listening on" line."""
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            m = re.search(r"listening on [^\s:]+:(\d+)", line)
            if m and self.port is None:
                self.port = int(m.group(1))
                self._listening.set()
        self.proc.stderr.close()  # the server is gone: its descriptor goes now, not at GC

    def _wait_admin(self, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.admin_port), 5.0):
                    return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        self.stop()
        raise AssertionError("admin port %d did not open within %.0f s; log:\n%s"
                             % (self.admin_port, timeout, self.log()))

    def log(self):
        return "\n".join(self.lines)

    def wait_for(self, pattern, timeout=PATIENCE):
        """The first match of the regular expression pattern in the log, waiting up to
        timeout seconds; fails naming the pattern if it never appears or the server exits."""
        deadline = time.time() + timeout
        while True:
            for line in list(self.lines):
                m = re.search(pattern, line)
                if m:
                    return m
            if time.time() >= deadline or (self.proc.poll() is not None and
                                           not self._log_open()):
                raise AssertionError("no log line matching %r within %.0f s (exit status %r); "
                                     "log:\n%s" % (pattern, timeout, self.proc.poll(), self.log()))
            time.sleep(0.05)

    def _log_open(self):
        """True while the log reader may still add lines."""
        return any(t.name == "sf-log-%d" % id(self) for t in threading.enumerate())

    def wait_exit(self, timeout=PATIENCE):
        """The exit status once the server exits by itself; fails if it still runs after
        timeout seconds (it is then stopped)."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError("snowflaked still runs after %.0f s; log:\n%s"
                                 % (timeout, self.log()))
        deadline = time.time() + 5
        while self._log_open() and time.time() < deadline:
            time.sleep(0.02)
        if self in _running:
            _running.remove(self)
        self.exit_read = True
        return rc

    def stop(self, sig=signal.SIGTERM, timeout=PATIENCE):
        """Signals the server and waits; kills it if it does not exit in time. Returns its
        exit status. How it exited is checked (see _check_exit) unless the test read it
        with wait_exit."""
        if self.proc is None:
            return None
        sent, killed = None, False
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            sent = sig
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                killed = True
        if self in _running:
            _running.remove(self)
        self._check_wrapper_report()
        self._check_exit(sent, killed, timeout)
        return self.proc.returncode

    def _check_exit(self, sent, killed, timeout):
        """Fails the test, with the server's last lines, when it died of a signal nobody
        sent it (a crash), exited non-zero after SIGTERM or SIGINT, exited non-zero by
        itself without the test asking (wait_exit), or had to be killed."""
        if self.exit_read:
            return
        self.exit_read = True
        rc = self.proc.returncode
        why = None
        if killed:
            why = "did not stop within %.0f s of signal %d: killed" % (timeout, sent)
        elif rc < 0 and -rc != sent:
            why = "died of signal %d (%s)" % (-rc, signal.Signals(-rc).name)
        elif rc > 0 and sent in (signal.SIGTERM, signal.SIGINT):
            why = "exited with status %d after %s" % (rc, signal.Signals(sent).name)
        elif rc > 0 and sent is None:
            why = "exited by itself with status %d" % rc
        if why is None:
            return
        deadline = time.time() + 5
        while self._log_open() and time.time() < deadline:
            time.sleep(0.02)
        raise AssertionError("snowflaked %s; its last lines:\n%s"
                             % (why, "\n".join(self.lines[-30:])))

    def _check_wrapper_report(self):
        """Under valgrind (--error-exitcode=99), any error it reports fails
        the test."""
        if not self.wrapper:
            return
        time.sleep(0.1)  # let the log reader take the last lines
        if self.proc.returncode == 99:
            raise AssertionError("%s reported errors (exit 99); log:\n%s"
                                 % (self.wrapper[0], self.log()))
        for line in self.lines:
            m = re.search(r"ERROR SUMMARY: (\d+) errors", line)
            if m and int(m.group(1)) > 0:
                raise AssertionError("%s reported errors; log:\n%s"
                                     % (self.wrapper[0], self.log()))

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def client(self, timeout=5.0):
        return Client(self.port, timeout)

    def http(self, path, timeout=PATIENCE):
        """(status, body) of GET path on the admin port."""
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.admin_port, path),
                                        timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def ids_made(self, agent):
        """The ids handed out so far under agent, from the admin port's counters."""
        status, body = self.http("/stats.json")
        assert status == 200, (status, body)
        return json.loads(body)["counters"].get("ids_generated_" + agent, 0)


def gives_an_id(server, agent="sftest"):
    """Whether server hands out an id now: False when it refuses with ServiceUnavailable or
    the connection fails (a registered node's port is closed while it does not serve). Any
    other answer (a refused agent, say) is the caller's mistake and raises."""
    try:
        with server.client(timeout=2.0) as api:
            api.get_id(agent)
    except (ServiceUnavailable, TTransport.TTransportException, OSError):
        return False
    return True


class Client:
    """The generated Python client over a framed, binary-protocol socket."""

    def __init__(self, port, timeout=5.0):
        self.socket = TSocket.TSocket("127.0.0.1", port)
        self.socket.setTimeout(timeout * 1000)
        self.transport = TTransport.TFramedTransport(self.socket)
        self.protocol = TBinaryProtocol.TBinaryProtocol(self.transport)
        self.api = Snowflake.Client(self.protocol)
        self.transport.open()

    def close(self):
        self.transport.close()

    def __enter__(self):
        return self.api

    def __exit__(self, *exc):
        self.close()


class SocketReader:
    """A Thrift transport over a plain socket, to read replies to raw bytes."""

    def __init__(self, sock):
        self.sock = sock

    def isOpen(self):
        return True

    def read(self, n):
        return self.sock.recv(n)

    def readAll(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("connection closed after %d of %d bytes" % (len(buf), n))
            buf += chunk
        return buf

    def write(self, data):
        self.sock.sendall(data)

    def flush(self):
        pass


def encode_call(seqid, send):
    """The framed bytes of one request, made by the generated client's send_*."""
    buf = TTransport.TMemoryBuffer()
    client = Snowflake.Client(TBinaryProtocol.TBinaryProtocol(TTransport.TFramedTransport(buf)))
    client._seqid = seqid
    send(client)
    return buf.getvalue()


def raw_connect(port, timeout=5.0):
    """A plain socket, for bytes no Thrift client would send."""
    s = socket.create_connection(("127.0.0.1", port), timeout)
    s.settimeout(timeout)
    return s


def closed_by_peer(sock, timeout=5.0):
    """True if the server closes the connection (EOF or reset) within timeout,
    discarding anything it sends first."""
    sock.settimeout(timeout)
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            if sock.recv(4096) == b"":
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    return False


def decode(id_):
    """(unix_ms, datacenter, worker, sequence) of an id."""
    return ((id_ >> 22) + TWITTER_EPOCH_MS, (id_ >> 17) & 31, (id_ >> 12) & 31, id_ & 4095)


class Runner:
    """Runs named checks, prints each failure, and ends with the summary line
    "NAME: N passed, M failed"; the exit status is non-zero on any failure."""

    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failed = 0

    def run(self, func, *args):
        """Runs one check; the servers it started and left running are stopped when it
        ends, whether it passed or failed, so that no check sees another's leftovers (a
        registered node's worker id, say)."""
        label = func.__name__
        started = time.time()
        before = list(_running)
        # Only this check's: a list kept over a whole suite would keep every server's log
        # pipe open, and a suite starts more servers than 1,024 descriptors allow.
        del _started[:]
        try:
            func(*args)
            self._stop_leftovers(before)
            self.passed += 1
            print("ok   %s (%.2f s)" % (label, time.time() - started), flush=True)
        except Exception:  # one failing check must not hide the others
            self.failed += 1
            print("FAIL %s" % label, flush=True)
            traceback.print_exc(file=sys.stdout)
            self._print_logs(list(_started))
            try:
                self._stop_leftovers(before)
            except Exception as e:
                print("while stopping the servers it left: %s" % e)

    @staticmethod
    def _print_logs(servers, last=40):
        """The end of the log of every server the failed check started (also those it
        stopped itself), which is what says why a wait ran out."""
        for server in servers:
            status = server.proc.poll() if server.proc else None
            print("---- snowflaked port %s (exit status %s), last %d log lines:"
                  % (server.port, "running" if status is None else status, last))
            print("\n".join(server.lines[-last:]))

    @staticmethod
    def _stop_leftovers(before):
        """Stops the servers started since before was taken; a report of the wrapper
        (valgrind) about one of them fails the check."""
        problems = []
        for server in [s for s in _running if s not in before]:
            try:
                server.stop()
            except Exception as e:  # a report from one server must not spare the others
                problems.append(str(e))
        if problems:
            raise AssertionError("; ".join(problems))

    def finish(self):
        _stop_all()
        print("%s: %d passed, %d failed" % (self.name, self.passed, self.failed))
        sys.exit(1 if self.failed else 0)


def wait_until(cond, timeout, what):
    """Polls cond() every 50 ms until it is true, and returns what it returned; fails with
    "not <what>" after timeout s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("not %s within %.0f s" % (what, timeout))


def freeze(pid, timeout=PATIENCE):
    """Stops every thread of pid with SIGSTOP and waits until the kernel reports them all
    stopped: kill() only queues the signal, and a thread still running could answer."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.time() + timeout
    while time.time() < deadline:
        states = []
        for task in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/stat" % (pid, task)) as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        if all(state in ("T", "t") for state in states):
            return
        time.sleep(0.01)
    raise AssertionError("process %d did not stop within %.0f s" % (pid, timeout))


def expect_raises(exc_type, func, *args):
    """Calls func and returns the exception of exc_type it raises; fails otherwise."""
    try:
        result = func(*args)
    except exc_type as e:
        return e
    raise AssertionError("%s%r returned %r, expected %s" % (getattr(func, "__name__", func),
                                                            args, result, exc_type.__name__))


class NotifySocket:
    """A datagram socket in a temporary directory; every message that arrives is kept
    with its arrival time (monotonic seconds)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sf-notify-")
        self.path = os.path.join(self.dir, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.1)
        self.messages = []
        self.cond = threading.Condition()
        self.closing = False
        self.thread = threading.Thread(target=self._receive, daemon=True)
        self.thread.start()

    def _receive(self):
        while not self.closing:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            with self.cond:
                self.messages.append((time.monotonic(), data.decode()))
                self.cond.notify_all()

    def wait_for(self, predicate, timeout, start=0):
        """Waits for the first message from index start on that satisfies predicate;
        returns (index, arrival time, message) or fails listing what arrived."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for i in range(start, len(self.messages)):
                    if predicate(self.messages[i][1]):
                        return i, self.messages[i][0], self.messages[i][1]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("no such notify message in %.0f s; received: %r"
                                         % (timeout, self.texts()))
                self.cond.wait(left)

    def texts(self):
        with self.cond:
            return [m for _, m in self.messages]

    def close(self):
        self.closing = True
        self.thread.join(5)
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class ZooKeeper:
    """A throwaway ZooKeeper server (test/tools/zk-server.sh) on a free loopback port with its
    data in a temporary directory; always stopped when the test exits. .hosts is
    "127.0.0.1:PORT"; stop() and start() keep the port and the data."""

    def __init__(self):
        self.script = os.path.join(TOP_SRCDIR, "test", "tools", "zk-server.sh")
        self.dir = tempfile.mkdtemp(prefix="sf-zk-")
        self.hosts = None
        atexit.register(self.remove)

    def start(self):
        out = subprocess.run(["sh", self.script, "start", self.dir], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, timeout=180)
        if out.returncode != 0:
            raise AssertionError("ZooKeeper did not start: %s" % out.stderr)
        self.hosts = out.stdout.strip().splitlines()[-1]
        return self

    def stop(self):
        subprocess.run(["sh", self.script, "stop", self.dir], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=30)

    def freeze(self, seconds):
        """Stops the server (SIGSTOP) for seconds, as a long collection pause or a loaded
        host would, and always lets it run again."""
        with open(os.path.join(self.dir, "pid")) as f:
            pid = int(f.read())
        try:
            freeze(pid)
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)

    def remove(self):
        """Stops the server and deletes its data."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def client(self):
        """A started kazoo client (Debian's python3-kazoo)."""
        from kazoo.client import KazooClient
        zk = KazooClient(hosts=self.hosts, timeout=10)
        zk.start(timeout=PATIENCE)  # a loaded ZooKeeper may take seconds to answer
        return zk
