#!/usr/bin/python3
"""test_monitoring.py -- what operators watch the fleet with, against real processes: the
alert rules pass promtool's checks and their unit tests (and a broken rule fails them); every
metric the rules and the Grafana dashboard name is exported by a live snowflaked registered in
a real ZooKeeper; the worker-id gauges follow the holders ZooKeeper has; the status page (/)
renders in headless Chromium with the node's state and an ids/s figure that moves under load
(a screenshot is kept in the build tree); `snowflake-zk list --watch` redraws its table.
Needs Debian's prometheus (promtool) and chromium: missing, the test fails and says so."""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import sftest
from sftest import Server, wait_until

PY = "/usr/bin/python3"
MONITORING = os.path.join(sftest.TOP_SRCDIR, "deploy", "monitoring")
RULES = os.path.join(MONITORING, "snowflake-rules.yml")
RULE_TESTS = os.path.join(MONITORING, "snowflake-rules.test.yml")
DASHBOARD = os.path.join(MONITORING, "snowflake-dashboard.json")
SCREENSHOT = os.path.join(sftest.TOP_BUILDDIR, "test", "e2e", "status-page.png")
ZK = sftest.ZooKeeper()
# Series Prometheus makes itself for every target, not the node.
PROMETHEUS_OWN = {"up"}
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and",
    "or", "unless", "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk",
    "bottomk", "quantile", "count_values", "group", "inf", "nan"}


def require_tool(name, package):
    """Fails the test, naming the Debian package, when a tool it drives is missing."""
    path = shutil.which(name)
    if path is None:
        print("%s is not installed: apt-get install %s (scripts/deps test)" % (name, package))
        raise SystemExit(1)
    return path


def run(argv, timeout=60, **kw):
    """(exit status, output) of a command, its whole process group killed on a timeout."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         errors="replace", start_new_session=True, **kw)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        raise AssertionError("%s ran over %d s; output:\n%s" % (argv[0], timeout, out))
    return p.returncode, out


def registered(path, extra=()):
    """A started snowflaked taking an automatic worker id under path, with its admin port."""
    args = ["--zookeeper", ZK.hosts, "--set", "snowflake.worker_id_path=%s" % path,
            "--set", "zookeeper.session_timeout_ms=4000"] + list(extra)
    return Server(args, admin=True, worker_id="auto").start()


def exported_names(metrics_text):
    """The metric names of a Prometheus text exposition, with each histogram's _bucket, _sum
    and _count series under their own names too."""
    names = set()
    for line in metrics_text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "histogram":
                names.update(name + s for s in ("_bucket", "_sum", "_count"))
        elif line and not line.startswith("#"):
            names.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
    return names


def promql_names(expr):
    """The metric names a PromQL expression reads: what is left once strings, label matchers
    and grouping lists, range and offset durations, Grafana's $variables, functions,
    keywords and numbers are taken out."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)       # strings (label values, le="0.5")
    e = re.sub(r"\{[^}]*\}", " ", e)                     # label matchers
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)                    # range selectors and subqueries
    e = re.sub(r"\$\w+|\$\{[^}]*\}", " ", e)             # dashboard variables
    names = set()
    # A name starts a token: the "m" of "5m" or the "e3" of "1e3" is no name.
    for m in re.finditer(r"(?<![\w.:])[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        word = m.group(0)
        if e[m.end():].lstrip().startswith("("):         # a function or an aggregation
            continue
        if word.lower() not in PROMQL_WORDS:
            names.add(word)
    return names


def rule_exprs():
    """(name, expr) of every recording and alerting rule: promtool's own JSON reading of
    the file would need a server, so the YAML is read with python3-yaml."""
    import yaml
    with open(RULES) as f:
        doc = yaml.safe_load(f)
    return [(r.get("record") or r["alert"], r["expr"])
            for g in doc["groups"] for r in g["rules"]]


def dashboard_exprs():
    """(panel title, expr) of every query of the dashboard, its variables' queries too."""
    with open(DASHBOARD) as f:
        dash = json.load(f)
    out = [(p["title"], t["expr"]) for p in dash["panels"] for t in p.get("targets", [])]
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.*),\s*\w+\)", q)
            out.append(("variable " + v["name"], m.group(1) if m else q))
    return out


def promtool_checks_and_rule_tests():
    """promtool check rules and test rules pass; the tests print their result."""
    promtool = require_tool("promtool", "prometheus")
    rc, out = run([promtool, "check", "rules", RULES])
    print(out, end="")
    assert rc == 0 and "SUCCESS" in out, out
    rc, out = run([promtool, "test", "rules", os.path.basename(RULE_TESTS)], cwd=MONITORING)
    print(out, end="")
    assert rc == 0 and "SUCCESS" in out, out


def broken_rule_fails_its_tests():
    """The rule tests can fail: with the fenced-node alert's expression turned into one
    that never fires, promtool test rules reports it."""
    promtool = require_tool("promtool", "prometheus")
    with tempfile.TemporaryDirectory(prefix="sf-rules-") as tmp:
        with open(RULES) as f:
            rules = f.read()
        assert "expr: snowflake_serving == 0" in rules
        with open(os.path.join(tmp, os.path.basename(RULES)), "w") as f:
            f.write(rules.replace("expr: snowflake_serving == 0", "expr: snowflake_serving == 2"))
        shutil.copy(RULE_TESTS, tmp)
        rc, out = run([promtool, "test", "rules", os.path.basename(RULE_TESTS)], cwd=tmp)
    assert rc != 0 and "SnowflakeNotServing" in out, (rc, out)


def every_queried_metric_is_exported():
    """Every metric name in every rule expression and every dashboard query is in /metrics
    of a live node registered in ZooKeeper with an audit log, or is made by Prometheus (up)
    or by a recording rule of the rules file."""
    exprs = rule_exprs() + dashboard_exprs()
    recorded = {name for name, _ in rule_exprs() if ":" in name}
    with tempfile.TemporaryDirectory(prefix="sf-mon-") as tmp:
        srv = registered("/mon-names", ["--set", "audit.sink=file",
                                        "--set", "audit.file=%s" % os.path.join(tmp, "audit")])
        try:
            with srv.client() as api:
                api.get_id("monitoring")
            status, body = srv.http("/metrics")
        finally:
            srv.stop()
    assert status == 200, (status, body)
    exported = exported_names(body)
    assert "snowflake_worker_ids_free" in exported, body  # the parse itself works
    checked = set()
    missing = []
    for where, expr in exprs:
        names = promql_names(expr)
        assert names, "no metric name found in %s: %r" % (where, expr)
        checked |= names
        missing += ["%s (in %s)" % (n, where) for n in sorted(names)
                    if n not in exported and n not in PROMETHEUS_OWN and n not in recorded]
    assert not missing, "named but not exported by snowflaked: %s\nexported: %s" % (
        ", ".join(missing), " ".join(sorted(exported)))
    print("   %d expressions name %d metrics, each exported or recorded: %s"
          % (len(exprs), len(checked), " ".join(sorted(checked))))


def promql_parsing_finds_names():
    """The name parser finds what a query reads, and nothing else."""
    got = promql_names('histogram_quantile(0.99, sum by (method, le) (rate('
                       'snowflake_request_duration_seconds_bucket{job=~"$job", method=~"get_ids?"}'
                       '[5m]))) / on (job) group_left up offset 5m > bool 0.5')
    assert got == {"snowflake_request_duration_seconds_bucket", "up"}, got
    assert promql_names("min by (job, path) (snowflake_worker_ids_free) <= 4") == {
        "snowflake_worker_ids_free"}
    assert promql_names('snowflake_connections / snowflake_max_connections > 0.9') == {
        "snowflake_connections", "snowflake_max_connections"}


def gauges(srv, path):
    """(taken, free) of the worker-id gauges of srv for path, or None while absent."""
    _, body = srv.http("/metrics")
    label = re.escape('{path="%s"}' % path)
    taken = re.search(r"^snowflake_worker_ids_taken%s (\d+)$" % label, body, re.M)
    free = re.search(r"^snowflake_worker_ids_free%s (\d+)$" % label, body, re.M)
    return (int(taken.group(1)), int(free.group(1))) if taken and free else None


def worker_id_gauges_follow_zookeeper():
    """Both nodes of a path count both holders; a holder that ZooKeeper gains (an embedded
    program's node) or loses (a node stopped) shows in the other's gauges; a child that
    is not a worker id is not counted. A standalone node exports no such gauge."""
    path = "/mon-slots"
    a = registered(path)
    b = registered(path)
    try:
        wait_until(lambda: gauges(a, path) == (2, 30) and gauges(b, path) == (2, 30), sftest.PATIENCE,
                   "2 taken, 30 free on both nodes")
        zk = ZK.client()
        try:
            zk.create(path + "/31", b"embedded pid=1 host=test datacenter=2", ephemeral=True)
            zk.create(path + "/031", b"not a worker id", ephemeral=True)
            wait_until(lambda: gauges(a, path) == (3, 29), sftest.PATIENCE, "the embedded holder counted")
            b.stop()
            wait_until(lambda: gauges(a, path) == (2, 30), sftest.PATIENCE, "the stopped node's id free again")
        finally:
            zk.stop()
            zk.close()
        wait_until(lambda: gauges(a, path) == (1, 31), sftest.PATIENCE, "the embedded holder gone")
    finally:
        a.stop()
        b.stop()
    with Server(admin=True) as alone:
        _, body = alone.http("/metrics")
        assert "snowflake_worker_ids_" not in body, body


class Load:
    """A client asking for ids in batches on its own thread until stopped."""

    def __init__(self, srv):
        self.srv = srv
        self.stopped = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            with self.srv.client() as api:
                while not self.stopped.is_set():
                    api.get_ids("status-page", 50)
                    time.sleep(0.002)
        except Exception as e:  # reported by stop()
            self.error = e

    def stop(self):
        self.stopped.set()
        self.thread.join(10)
        assert self.error is None, "the load client failed: %r" % self.error


def chromium(url, *args):
    """Headless Chromium on url (root in CI, hence --no-sandbox) with a throwaway profile,
    given time for the page's script to fetch and draw: its output."""
    browser = require_tool("chromium", "chromium")
    with tempfile.TemporaryDirectory(prefix="sf-chromium-") as profile:
        rc, out = run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                       "--user-data-dir=%s" % profile, "--virtual-time-budget=4000"] +
                      list(args) + [url], timeout=120)
    assert rc == 0, "chromium exit status %d:\n%s" % (rc, out[-3000:])
    return out


def element_text(dom, element_id):
    m = re.search(r'id="%s"[^>]*>([^<]*)<' % element_id, dom)
    assert m, "no element #%s in the rendered page:\n%s" % (element_id, dom[:3000])
    return m.group(1)


def status_page_in_chromium():
    """/ in a real browser: the rendered DOM names the state, the worker and datacenter ids
    the node holds, its uptime and worker ids left, draws the ids/s chart and the latency
    histogram, links the machine-readable paths; the ids/s figure is non-zero and differs
    between two loads while a client asks for ids. A screenshot is kept."""
    srv = registered("/mon-page")
    load = Load(srv)
    try:
        with srv.client() as api:
            worker, datacenter = api.get_worker_id(), api.get_datacenter_id()
        url = "http://127.0.0.1:%d/" % srv.admin_port
        rates = []
        for _ in range(2):
            dom = chromium(url, "--dump-dom")
            assert element_text(dom, "state") == "serving", dom[:3000]
            assert element_text(dom, "worker") == str(worker), dom[:3000]
            assert element_text(dom, "datacenter") == str(datacenter), dom[:3000]
            assert re.fullmatch(r"(\d+d )?(\d+h )?\d+m \d+s", element_text(dom, "uptime")), dom
            assert element_text(dom, "slots") == "31 of 32", dom[:3000]
            assert element_text(dom, "slotpath") == "/mon-page", dom[:3000]
            assert element_text(dom, "error") == "", dom[:3000]
            points = re.search(r'id="line"[^>]*points="([^"]*)"', dom).group(1).split()
            assert len(points) >= 2, "the ids/s chart has %d points:\n%s" % (len(points), dom)
            assert "<rect" in re.search(r'<svg id="histogram".*?</svg>', dom, re.S).group(0), dom
            for path in ("/metrics", "/stats.json", "/stats.txt", "/health", "/server_info.json"):
                assert 'href="%s"' % path in dom, path
            rates.append(int(element_text(dom, "rate").replace(",", "")))
        print("   ids/s shown on two loads: %s" % rates)
        assert all(r > 0 for r in rates) and rates[0] != rates[1], rates
        os.makedirs(os.path.dirname(SCREENSHOT), exist_ok=True)
        if os.path.exists(SCREENSHOT):
            os.remove(SCREENSHOT)
        chromium(url, "--window-size=1000,900", "--screenshot=%s" % os.path.abspath(SCREENSHOT))
        with open(SCREENSHOT, "rb") as f:
            png = f.read()
        assert png.startswith(b"\x89PNG") and len(png) > 10000, len(png)
        print("   screenshot: %s (%d bytes)" % (os.path.abspath(SCREENSHOT), len(png)))
    finally:
        load.stop()
        srv.stop()


def status_page_shows_not_serving():
    """A node that lost ZooKeeper says so on the page, with the reason /health gives."""
    srv = registered("/mon-fenced")
    try:
        ZK.stop()
        wait_until(lambda: srv.http("/health")[0] == 503, sftest.PATIENCE, "fenced")
        reason = srv.http("/health")[1].replace("not serving: ", "").strip()
        dom = chromium("http://127.0.0.1:%d/" % srv.admin_port, "--dump-dom")
        assert element_text(dom, "state") == "not serving", dom[:3000]
        assert element_text(dom, "reason").strip(), dom[:3000]
        print("   reason on the page: %r (/health: %r)" % (element_text(dom, "reason"), reason))
    finally:
        srv.stop()
        ZK.start()


def ops_tool_watch_redraws():
    """snowflake-zk list --watch printed the table again a second after the first, each time
    with the live node as the holder of its worker id, and exited 0 when interrupted."""
    path = "/mon-watch"
    srv = registered(path)
    try:
        with srv.client() as api:
            worker = api.get_worker_id()
        tool = os.path.join(sftest.TOP_SRCDIR, "scripts", "snowflake-zk")
        p = subprocess.Popen([PY, tool, "--zookeeper", ZK.hosts, "--path", path, "list",
                              "--watch"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
        try:
            # Its start (Python, kazoo, the session) may take seconds on a busy machine: wait
            # for the second table, then interrupt it.
            marker = "snowflake-zk list %s at " % path
            lines, deadline = [], time.time() + 30
            while time.time() < deadline and "".join(lines).count(marker) < 2:
                line = p.stdout.readline()
                if not line:
                    break
                lines.append(line)
            p.send_signal(signal.SIGINT)
            rest, _ = p.communicate(timeout=10)
            out = "".join(lines) + rest
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        assert p.returncode == 0, (p.returncode, out)
        frames = out.split("snowflake-zk list %s at " % path)[1:]
        assert len(frames) >= 2, "%d tables within 30 s:\n%s" % (len(frames), out)
        holder = "127.0.0.1:%d" % srv.port
        for frame in frames[:-1]:  # the last may be cut short by the interrupt
            assert re.search(r"^%d\s+%s\s" % (worker, re.escape(holder)), frame, re.M), frame
            assert "free: " in frame, frame
        print("   %d tables before the interrupt" % len(frames))
    finally:
        srv.stop()


def ops_tool_watch_json_lines():
    """snowflake-zk list --watch --json: nothing but one JSON document a line, each with
    the live node holding its worker id."""
    path = "/mon-watch-json"
    srv = registered(path)
    try:
        with srv.client() as api:
            worker = api.get_worker_id()
        tool = os.path.join(sftest.TOP_SRCDIR, "scripts", "snowflake-zk")
        p = subprocess.Popen([PY, tool, "--zookeeper", ZK.hosts, "--path", path, "--json",
                              "list", "--watch"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            lines = [p.stdout.readline(), p.stdout.readline()]
            p.send_signal(signal.SIGINT)
            rest, err = p.communicate(timeout=10)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        assert p.returncode == 0, (p.returncode, err)
        docs = [json.loads(line) for line in lines + rest.splitlines() if line.strip()]
        assert len(docs) >= 2, (lines, rest)
        for doc in docs:
            held = {h["worker_id"] for h in doc["held"]}
            assert doc["path"] == path and worker in held, doc
    finally:
        srv.stop()


def main():
    sftest.require_server()
    sftest.require_zookeeper_client()
    r = sftest.Runner("test_monitoring")
    r.run(promtool_checks_and_rule_tests)
    r.run(broken_rule_fails_its_tests)
    r.run(promql_parsing_finds_names)
    try:
        ZK.start()
    except AssertionError as e:
        print("FAIL the test's ZooKeeper: %s" % e)
        r.failed += 1
        r.finish()
    r.run(every_queried_metric_is_exported)
    r.run(worker_id_gauges_follow_zookeeper)
    r.run(status_page_in_chromium)
    r.run(status_page_shows_not_serving)
    r.run(ops_tool_watch_redraws)
    r.run(ops_tool_watch_json_lines)
    r.finish()


if __name__ == "__main__":
    main()
