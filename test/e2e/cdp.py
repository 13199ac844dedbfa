"""cdp.py -- headless Chromium driven over the DevTools protocol on a pipe
(--remote-debugging-pipe: JSON messages ending in NUL on descriptors 3 and 4), with nothing
but the standard library: open a page, wait for what its script draws, read the layout,
take a screenshot. The tests wait on what the page shows, with generous limits, instead of
a fixed time budget. Needs Debian's chromium: missing, the test fails and says so."""
import base64
import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

# The flags that work headless as root, on a machine with no GPU and no way out.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe"]


def place_pipe_ends(read_end, write_end):
    """Puts read_end on 3 and write_end on 4, where --remote-debugging-pipe expects them,
    whatever numbers they have: copies above 4 first, as a plain dup2 of one could close the
    other when it already sits where the first goes (their numbers depend on what the process
    holds: make's jobserver, for one)."""
    read_copy = fcntl.fcntl(read_end, fcntl.F_DUPFD, 5)
    write_copy = fcntl.fcntl(write_end, fcntl.F_DUPFD, 5)
    os.dup2(read_copy, 3)
    os.dup2(write_copy, 4)
    os.close(read_copy)
    os.close(write_copy)


class Browser:
    """One Chromium with a throwaway profile and one page; always closed by close()."""

    def __init__(self, width=1000, height=900):
        path = shutil.which("chromium")
        if path is None:
            print("chromium is not installed: apt-get install chromium (scripts/deps test)")
            raise SystemExit(1)
        self.profile = tempfile.mkdtemp(prefix="sf-chromium-")
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()

        def place_fds():
            place_pipe_ends(to_browser_r, from_browser_w)

        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [path] + FLAGS + ["--user-data-dir=" + self.profile,
                              "--window-size=%d,%d" % (width, height), "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, pass_fds=(3, 4),
            preexec_fn=place_fds, start_new_session=True)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.out = to_browser_w
        self.inp = from_browser_r
        self.next_id = 0
        self.replies = {}
        self.cond = threading.Condition()
        self.closed = False
        threading.Thread(target=self._read, daemon=True).start()
        self.width, self.height = width, height
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"],
                                 flatten=True)["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width,
                  height=height, deviceScaleFactor=1, mobile=False)

    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self.inp, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self.cond:
                    self.closed = True
                    self.cond.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                doc = json.loads(msg)
                if "id" in doc:
                    with self.cond:
                        self.replies[doc["id"]] = doc
                        self.cond.notify_all()

    def call(self, method, session=False, timeout=60, **params):
        """Sends one command (to the page when session) and returns its result."""
        with self.cond:
            self.next_id += 1
            n = self.next_id
        msg = {"id": n, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self.out, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        with self.cond:
            while n not in self.replies:
                if self.closed:
                    raise AssertionError("chromium closed the pipe during %s; its log:\n%s"
                                         % (method, self.output()))
                left = deadline - time.time()
                if left <= 0:
                    raise AssertionError("no answer to %s within %d s" % (method, timeout))
                self.cond.wait(left)
            doc = self.replies.pop(n)
        if "error" in doc:
            raise AssertionError("%s failed: %s" % (method, doc["error"]))
        return doc["result"]

    def open(self, url):
        """Loads url in the page."""
        res = self.call("Page.navigate", session=True, url=url)
        assert not res.get("errorText"), "cannot load %s: %s" % (url, res)

    def eval(self, expression):
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        res = self.call("Runtime.evaluate", session=True, expression=expression,
                        returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise AssertionError("%s threw: %s" % (expression, res["exceptionDetails"]))
        return res["result"].get("value")

    def wait(self, expression, what, timeout=60):
        """Waits until expression is truthy in the page; returns its value."""
        deadline = time.time() + timeout
        value = None
        while time.time() < deadline:
            try:
                value = self.eval(expression)
            except AssertionError:  # the page is still loading
                value = None
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError("not %s within %d s (last: %r); page text:\n%s"
                             % (what, timeout, value, self.text()[:3000]))

    def text(self):
        try:
            return self.eval("document.body ? document.body.innerText : ''") or ""
        except AssertionError as e:
            return str(e)

    def screenshot(self, path):
        """Saves the whole window as a PNG at path; returns its size in bytes."""
        data = base64.b64decode(self.call("Page.captureScreenshot", session=True,
                                          format="png")["data"])
        with open(path, "wb") as f:
            f.write(data)
        return len(data)

    def output(self):
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")[-3000:]

    def close(self):
        """Ends the browser and its whole process group, and removes the profile."""
        try:
            if self.proc.poll() is None:
                try:
                    self.call("Browser.close", timeout=10)
                except AssertionError:
                    pass
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            for fd in (self.out, self.inp):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self.log.close()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
