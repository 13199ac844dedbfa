#!/usr/bin/python3
"""test_monitoring.py -- what operators watch the fleet with, against real processes: the
alert rules pass promtool's checks and their unit tests (and a broken rule fails them); a live
node's /metrics passes `promtool check metrics`; every alert links its runbook, a heading of
deploy/monitoring/README; every metric the rules and the Grafana dashboard name is exported by
a live snowflaked registered in a real ZooKeeper (or by `snowflake-zk serve`), and every
metric exported has its decision in the README; the worker-id gauges follow the holders
ZooKeeper has; the status page (/) in headless Chromium, serving under load and in trouble
(ZooKeeper gone: the reason, since when, the stale count, the history kept on the node,
nothing moved), and the fleet page of `snowflake-zk serve` with three nodes, one fenced by its
clock (screenshots kept in the build tree); `snowflake-zk list --watch` redraws its table.
Needs Debian's prometheus (promtool), chromium and faketime: missing, the test fails and
says so."""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import urllib.error
import urllib.request

import cdp
import sftest
from sftest import Server, wait_until
from test_clock import FakeClock, require_faketime

PY = "/usr/bin/python3"
MONITORING = os.path.join(sftest.TOP_SRCDIR, "deploy", "monitoring")
RULES = os.path.join(MONITORING, "snowflake-rules.yml")
RULE_TESTS = os.path.join(MONITORING, "snowflake-rules.test.yml")
DASHBOARD = os.path.join(MONITORING, "snowflake-dashboard.json")
README = os.path.join(MONITORING, "README")
SHOTS = os.path.join(sftest.TOP_BUILDDIR, "test", "e2e")
TOOL = os.path.join(sftest.TOP_SRCDIR, "scripts", "snowflake-zk")
# Where each alert's runbook_url and the dashboard's runbook links lead (README, "Runbook
# links"): this base, then "#" and the alert's name in lower case.
RUNBOOKS = "https://snowflake.invalid/deploy/monitoring/README"
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
    """A started snowflaked taking an automatic worker id under path, with its admin port
    and the steady session."""
    args = ["--zookeeper", ZK.hosts, "--set", "snowflake.worker_id_path=%s" % path,
            "--set", "zookeeper.session_timeout_ms=%d" % sftest.STEADY_SESSION_MS] + list(extra)
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
    panels = dash["panels"] + [q for p in dash["panels"] for q in p.get("panels", [])]
    out = [(p["title"], t["expr"]) for p in panels for t in p.get("targets", [])]
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


def with_http_port(extra=()):
    """The flags of a node with its HTTP ids port on a free loopback port, and that port."""
    port = sftest.free_port()
    return ["--http-port", str(port), "--set", "http.bind_address=127.0.0.1"] + list(extra), port


def http_get(port, path):
    """The status of GET path on a node's HTTP ids port."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def live_metrics(path):
    """/metrics of a live node registered in ZooKeeper under path with an audit log and its
    HTTP ids port on, after it handed out an id on each port and refused one over HTTP."""
    with tempfile.TemporaryDirectory(prefix="sf-mon-") as tmp:
        args, port = with_http_port(["--set", "audit.sink=file",
                                     "--set", "audit.file=%s" % os.path.join(tmp, "audit")])
        srv = registered(path, args)
        try:
            with srv.client() as api:
                api.get_id("monitoring")
            srv.wait_for(r"HTTP ids on http://127\.0\.0\.1:%d/" % port)
            assert http_get(port, "/id?agent=monitoring") == 200
            assert http_get(port, "/ids?count=0") == 400
            status, body = srv.http("/metrics")
        finally:
            srv.stop()
    assert status == 200, (status, body)
    return body


class OpsServe:
    """`snowflake-zk serve` on a free loopback port (the fleet page, ZooKeeper's figures),
    stopped by stop() however the test ends."""

    def __init__(self, path, admins=()):
        self.port = sftest.free_port()
        argv = [PY, TOOL, "--zookeeper", ZK.hosts, "--path", path, "serve", "--port",
                str(self.port)]
        for a in admins:
            argv += ["--admin", a]
        env = dict(os.environ, top_builddir=sftest.TOP_BUILDDIR)
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True, env=env)
        # Its line once it listens; kazoo may log a dropped connection before it (stderr is
        # here too), and the tool goes on. End of output means it exited.
        before = []
        while True:
            line = self.proc.stdout.readline()
            if not line or "snowflake-zk serve: the fleet page" in line:
                break
            before.append(line)
        assert line, "".join(before) + self._rest()
        self.url = "http://127.0.0.1:%d" % self.port

    def _rest(self):
        self.stop()
        return self.proc.stdout.read()

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return r.read().decode()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode


def every_queried_metric_is_exported():
    """Every metric name in every rule expression and every dashboard query is in /metrics
    of a live node registered in ZooKeeper with an audit log, in /zookeeper/metrics of
    `snowflake-zk serve` (ZooKeeper's own figures, names zookeeper_*), or is made by
    Prometheus (up) or by a recording rule of the rules file (one of which is a constant)."""
    exprs = rule_exprs() + dashboard_exprs()
    recorded = {name for name, _ in rule_exprs() if ":" in name}
    exported = exported_names(live_metrics("/mon-names"))
    serve = OpsServe("/mon-names")
    try:
        zk_body = serve.get("/zookeeper/metrics")
    finally:
        assert serve.stop() == 0
    assert "zookeeper_up{" in zk_body and 'state="standalone"} 1' in zk_body, zk_body
    exported |= exported_names(zk_body)
    assert "snowflake_worker_ids_free" in exported, sorted(exported)  # the parse itself works
    checked = set()
    missing = []
    for where, expr in exprs:
        names = promql_names(expr)
        assert names or re.fullmatch(r"vector\([0-9.]+\)", expr), \
            "no metric name found in %s: %r" % (where, expr)
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


def promtool_check_metrics_on_live_node():
    """`promtool check metrics` has nothing to say about /metrics of a live registered node,
    nor about `snowflake-zk serve`'s /zookeeper/metrics; and it does object to a name in ms,
    so the check can fail."""
    promtool = require_tool("promtool", "prometheus")
    body = live_metrics("/mon-lint")
    serve = OpsServe("/mon-lint")
    try:
        zk_body = serve.get("/zookeeper/metrics")
    finally:
        assert serve.stop() == 0
    for what, text in (("a node's /metrics", body), ("/zookeeper/metrics", zk_body)):
        p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0 and not (p.stdout + p.stderr).strip(), \
            "promtool check metrics on %s: exit %d\n%s%s" % (what, p.returncode, p.stdout, p.stderr)
    bad = "# HELP x_latency_ms x\n# TYPE x_latency_ms gauge\nx_latency_ms 1\n"
    p = subprocess.run([promtool, "check", "metrics"], input=bad, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0 and "abbreviated units" in p.stdout + p.stderr, (p.returncode, p.stdout)
    for name in ("process_open_fds", "process_max_fds", "process_resident_memory_bytes",
                 "process_start_time_seconds", "snowflake_build_info",
                 "snowflake_peer_clock_skew_seconds", "snowflake_zookeeper_session_state"):
        assert re.search(r"^%s[ {]" % name, body, re.M), "no %s in:\n%s" % (name, body)
    assert re.search(r'^snowflake_build_info\{version="[^"]+",commit="[0-9a-f]{7,}(-dirty)?",', body,
                     re.M) or 'commit="unknown"' in body, body
    print("   %d lines of a node, %d of ZooKeeper's, no complaint" % (
        len(body.splitlines()), len(zk_body.splitlines())))


def runbooks_are_linked():
    """Every alert has a summary, a description and a runbook_url: the runbooks' base and
    the alert's name in lower case, a heading of deploy/monitoring/README; the dashboard's
    links use the same base (its runbooks variable) and lead to headings too."""
    import yaml
    with open(RULES) as f:
        doc = yaml.safe_load(f)
    with open(README) as f:
        headings = {line[4:].strip().lower() for line in f if line.startswith("### ")}
    alerts = [r for g in doc["groups"] for r in g["rules"] if "alert" in r]
    for r in alerts:
        a = r["annotations"]
        assert a.get("summary") and a.get("description"), r["alert"]
        assert a.get("runbook_url") == "%s#%s" % (RUNBOOKS, r["alert"].lower()), (r["alert"], a)
        assert r["alert"].lower() in headings, "no runbook heading for %s" % r["alert"]
    not_serving = next(r for r in alerts if r["alert"] == "SnowflakeNotServing")
    assert "snowflake_not_serving_reason" in not_serving["annotations"]["description"]
    with open(DASHBOARD) as f:
        dash = json.load(f)
    var = next(v for v in dash["templating"]["list"] if v["name"] == "runbooks")
    assert var["query"] == RUNBOOKS, var
    links = [link["url"] for p in dash["panels"] for link in p.get("links", [])]
    assert len(links) >= 10, links
    for url in links:
        assert url.startswith("${runbooks}#") and url.split("#")[1] in headings, url
    print("   %d alerts, %d panel links, each to a heading" % (len(alerts), len(links)))


def every_exported_metric_has_a_decision():
    """Each metric a live node exports has its line in the README's "Metrics" section: the
    rule or panel it feeds, or why nothing."""
    names = exported_names(live_metrics("/mon-decisions"))
    base = {n for n in names if not any(n.endswith(x) and n[:-len(x)] in names
                                        for x in ("_bucket", "_sum", "_count"))}
    with open(README) as f:
        text = f.read()
    section = text[text.index("\nMetrics\n-------"):text.index("\nRunbooks\n--------")]
    listed = set(re.findall(r"^    ([a-z_]+)\s", section, re.M))
    missing = sorted(base - listed)
    assert not missing, "exported but not decided on in the README: %s" % missing
    print("   %d metrics, each decided on" % len(base))


def dashboard_has_rows():
    """The dashboard comes in rows, "Fleet" first with the "N of M nodes serving" stat at the
    top; its serving timeline maps only the serving series to serving/not serving, not up."""
    with open(DASHBOARD) as f:
        dash = json.load(f)
    panels = sorted(dash["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    rows = [p["title"] for p in panels if p["type"] == "row"]
    assert rows[0] == "Fleet" and len(rows) >= 5, rows
    assert panels[1]["type"] == "stat" and "N of M" in panels[1]["title"], panels[1]
    assert {t["legendFormat"] for t in panels[1]["targets"]} == {"serving", "of nodes"}
    timeline = next(p for p in panels if p["type"] == "state-timeline" and
                    any(t["expr"].startswith("up{") for t in p["targets"]))
    up_ref = next(t["refId"] for t in timeline["targets"] if t["expr"].startswith("up{"))
    override = next(o for o in timeline["fieldConfig"]["overrides"]
                    if o["matcher"] == {"id": "byFrameRefID", "options": up_ref})
    texts = json.dumps(override)
    assert "admin up" in texts and "serving" not in texts, override
    titles = " ".join(p["title"] for p in panels)
    for what in ("refused", "skew", "ZooKeeper"):
        assert what in titles, (what, titles)


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
    """A client asking for ids in batches on its own thread until stopped. A node with a
    short session may fence for a moment on a busy machine (its port closes, connections
    drop): the client connects again, as a real one does, and goes on."""

    def __init__(self, srv):
        self.srv = srv
        self.stopped = threading.Event()
        self.error = None
        self.ids = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            while not self.stopped.is_set():
                try:
                    with self.srv.client() as api:
                        while not self.stopped.is_set():
                            self.ids += len(api.get_ids("status-page", 50))
                            time.sleep(0.002)
                except (sftest.ServiceUnavailable, sftest.TTransport.TTransportException,
                        OSError):
                    self.stopped.wait(0.2)
        except Exception as e:  # reported by stop()
            self.error = e

    def stop(self):
        self.stopped.set()
        self.thread.join(10)
        assert self.error is None, "the load client failed: %r" % self.error


def shot(browser, name):
    """A screenshot of the browser's window kept in the build tree as name; its path."""
    path = os.path.abspath(os.path.join(SHOTS, name))
    os.makedirs(SHOTS, exist_ok=True)
    if os.path.exists(path):
        os.remove(path)
    size = browser.screenshot(path)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n" and size > 10000, size
    print("   screenshot: %s (%d bytes)" % (path, size))
    return path


def text_of(element_id):
    """A JavaScript expression: the text of the element with that id."""
    return "document.getElementById(%s).textContent" % json.dumps(element_id)


# The boxes that must not move when the state's reason changes: x, y, width, height.
LAYOUT = """JSON.stringify(["statebox", "worker", "slotcard", "chart", "histogram", "counters"]
    .map(id => { const r = document.getElementById(id).getBoundingClientRect();
                 return [id, Math.round(r.x), Math.round(r.y), Math.round(r.width),
                         Math.round(r.height)]; }))"""


def pipe_ends_land_on_3_and_4():
    """The browser's pipe ends reach 3 and 4 from any numbers, also the ones where a copy
    of one would close the other (read end on 11, write end on 10). In a child, so that the
    test's own descriptors stay as they are."""
    for read_at, write_at in ((3, 4), (4, 3), (9, 10), (11, 10), (10, 11), (5, 6)):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                r, w = os.pipe()
                for fd, at in ((r, 40), (w, 41), (40, read_at), (41, write_at)):
                    os.dup2(fd, at)
                    if fd not in (read_at, write_at):
                        os.close(fd)
                cdp.place_pipe_ends(read_at, write_at)
                os.write(4, b"x")
                code = 0 if os.read(3, 1) == b"x" else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, \
            "read end on %d, write end on %d: 3 and 4 are not one pipe" % (read_at, write_at)


def status_page_in_chromium():
    """/ in a real browser while a client asks for ids: the tab and the heading name the
    node's host:port, the page shows the state, the worker and datacenter ids, uptime,
    worker ids left under the path, the session, the HTTP ids port, a chart with axes and
    the latency histogram, links the machine-readable paths; and the ids/s figure shows the
    load this test makes (waited for, not sampled twice). A screenshot is kept."""
    args, http_port = with_http_port()
    srv = registered("/mon-page", args)
    load = Load(srv)
    try:
        with srv.client() as api:
            worker, datacenter = api.get_worker_id(), api.get_datacenter_id()
        node = "127.0.0.1:%d" % srv.port
        with cdp.Browser() as b:
            b.open("http://127.0.0.1:%d/" % srv.admin_port)
            b.wait(text_of("state") + ' === "serving"', "serving shown")
            rate = b.wait("Number(%s.replace(/,/g, '')) > 0 && %s" % (text_of("rate"), text_of("rate")),
                          "the load's ids/s shown")
            print("   ids/s shown under the test's load: %s" % rate)
            assert node in b.eval("document.title") and "serving" in b.eval("document.title"), \
                b.eval("document.title")
            assert b.eval(text_of("node")) == node, b.eval(text_of("node"))
            assert b.eval(text_of("worker")) == str(worker)
            assert b.eval(text_of("datacenter")) == str(datacenter)
            assert re.fullmatch(r"(\d+d )?(\d+h )?\d+m \d+s", b.eval(text_of("uptime")))
            assert b.eval(text_of("slots")) == "31 of 32", b.eval(text_of("slots"))
            assert b.eval(text_of("slotpath")) == "/mon-page"
            assert b.eval(text_of("session")) == "connected"
            assert b.eval(text_of("httpport")) == str(http_port), b.eval(text_of("httpport"))
            assert b.eval(text_of("since")).startswith("since "), b.eval(text_of("since"))
            assert b.eval(text_of("error")) == ""
            axes = b.eval(text_of("axes"))
            assert "-10 min" in axes and "now" in axes and "ids/s" in axes, axes
            b.wait("document.getElementById('line').getAttribute('points').split(' ').length >= 2",
                   "the ids/s chart drawn")
            b.wait("document.querySelectorAll('#histogram rect').length > 0", "the histogram")
            links = b.eval("[...document.querySelectorAll('a')].map(a => a.getAttribute('href'))")
            for path in ("/metrics", "/state.json", "/history.json", "/stats.json", "/health"):
                assert path in links, (path, links)
            shot(b, "status-page.png")
        with urllib.request.urlopen("http://127.0.0.1:%d/favicon.ico" % srv.admin_port,
                                    timeout=30) as r:
            assert r.status == 200 and r.read(4) == b"\0\0\1\0", "not an icon"
    finally:
        load.stop()
        srv.stop()


def status_page_in_trouble():
    """The page of a node whose ZooKeeper goes away while the page is open: it says "not
    serving (zookeeper_unreachable)" with the node's words and since when, the tab says NOT
    SERVING, the worker ids count is marked stale, the HTTP ids port (not set) says off, and
    nothing on the page moved. Opened
    afresh during the incident, the chart shows the minutes before it, kept on the node, with
    the time not served marked. A screenshot is kept."""
    srv = registered("/mon-trouble")
    load = Load(srv)
    zk_down = False
    try:
        node = "127.0.0.1:%d" % srv.port
        url = "http://127.0.0.1:%d/" % srv.admin_port
        with cdp.Browser() as b:
            b.open(url)
            b.wait(text_of("state") + ' === "serving" && Number(%s.replace(/,/g, "")) > 0'
                   % text_of("rate"), "serving under load shown")
            before = b.eval(LAYOUT)
            load.stop()
            ZK.stop()
            zk_down = True
            state = b.wait("%s.startsWith('not serving') && %s" % (text_of("state"), text_of("state")),
                           "not serving shown")
            assert state == "not serving (zookeeper_unreachable)", state
            reason = b.wait(text_of("reason"), "the reason shown")
            assert "ZooKeeper" in reason, reason
            b.wait("document.getElementById('slotcard').classList.contains('stale')",
                   "the worker ids count marked stale")
            assert "stale" in b.eval(text_of("slotnote")), b.eval(text_of("slotnote"))
            assert b.eval(text_of("httpport")) == "off", b.eval(text_of("httpport"))
            assert b.eval(text_of("since")).startswith("since "), b.eval(text_of("since"))
            title = b.eval("document.title")
            assert node in title and "NOT SERVING" in title, title
            after = b.eval(LAYOUT)
            assert before == after, "the page moved when the reason came:\n%s\n%s" % (before, after)
            print("   shown: %r, %r; nothing moved: %s" % (state, reason, after))
            # Opened afresh during the incident: the node's last minutes are there at once.
            b.open(url)
            # At least five samples: the node samples once a second, and may have been up for
            # less than that when ZooKeeper went; the page redraws each second.
            line = "(document.getElementById('line').getAttribute('points') || '')"
            points = b.wait("%s.startsWith('not serving') && %s.split(' ').length >= 5 && %s"
                            % (text_of("state"), line, line),
                            "the chart drawn with five samples on a fresh load").split()
            # The node samples once a second: the first sample not served may come after the
            # state did, and the page draws it at its next refresh.
            b.wait("document.querySelectorAll('#fenced rect').length > 0",
                   "the time not served marked")
            rates = [float(p.split(",")[1]) for p in points]
            assert min(rates) < max(rates), "the load before the outage does not show: %s" % rates
            shot(b, "status-page-in-trouble.png")
    finally:
        load.stop()
        srv.stop()
        if zk_down:
            ZK.start()


def fleet_page_in_chromium():
    """`snowflake-zk serve`'s page with three nodes of one path, one of them fenced by the live
    clock check (its clock moved 4 s ahead): every worker id of the path has a row; the two
    others serve, the one under load with its ids/s; the fenced one says not serving,
    clock_skew, since when, and its clock offset; free ids show as free; the heading says 2
    of 3. A screenshot is kept."""
    require_faketime()
    clock = FakeClock()
    env = dict(clock.env(), FAKETIME_DONT_FAKE_MONOTONIC="1")
    path = "/mon-fleet"
    nodes, load, serve = [], None, None
    try:
        for worker, node_env in ((1, None), (2, None), (3, env)):
            srv = Server(["--zookeeper", ZK.hosts, "--set", "snowflake.worker_id_path=%s" % path,
                          "--set", "zookeeper.session_timeout_ms=4000",
                          "--set", "zookeeper.max_peer_skew_ms=1500"], env=node_env,
                         admin=True, worker_id=worker, wait_serving=False).start()
            nodes.append(srv)
        for worker, srv in enumerate(nodes, 1):
            srv.wait_for(r"serving ids as worker id %d" % worker, 60)
        load = Load(nodes[0])
        clock.set("+4s")
        wait_until(lambda: "max_peer_skew_ms" in nodes[2].http("/health")[1], 60,
                   "node 3 fenced by its clock")
        serve = OpsServe(path, ["127.0.0.1:%d" % n.admin_port for n in nodes])
        with cdp.Browser(1200, 1000) as b:
            b.open(serve.url + "/")
            row = "document.getElementById('id-%d')"
            b.wait("%s && %s.className === 'fenced' && %s.textContent.includes('clock_skew')"
                   % ((row % 3,) * 3), "node 3 shown not serving for clock_skew")
            b.wait("%s && Number(%s.querySelector('.rate').textContent.replace(/,/g, '')) > 0"
                   % (row % 1, row % 1), "node 1's ids/s shown")
            assert b.eval(text_of("serving")) == "2 of 3", b.eval(text_of("serving"))
            for worker, srv in enumerate(nodes, 1):
                cells = b.eval("[...%s.cells].map(c => c.textContent)" % (row % worker))
                assert cells[1] == "127.0.0.1:%d" % srv.port, cells
                assert cells[7] != "-", "no floor shown for worker id %d: %s" % (worker, cells)
                if worker < 3:
                    assert cells[2] == "serving", cells
                else:
                    assert cells[2] == "not serving" and "max_peer_skew_ms" in cells[3], cells
                    assert cells[4] != "-", cells  # since when
                    offset = int(cells[5].replace(" ms", ""))
                    assert 2500 <= offset <= 5500, "node 3's clock offset shown: %s" % cells
            assert b.eval("document.querySelectorAll('tr.free').length") == 29
            # The page shows a refresh's failed read (of ZooKeeper, or of the server behind
            # the page) until the next refresh reads again; on a busy machine one can time
            # out. Healthy, the page is clean again within a refresh or two.
            b.wait("%s === ''" % text_of("zookeeper"), "the page without a ZooKeeper error")
            print("   node 3: %s" % b.eval("[...%s.cells].map(c => c.textContent)" % (row % 3)))
            shot(b, "fleet-page.png")
    finally:
        if load is not None:
            load.stop()
        if serve is not None:
            assert serve.stop() == 0
        clock.set("+0")
        for srv in nodes:
            srv.stop()
        clock.remove()


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
            lines, deadline = [], time.time() + sftest.PATIENCE
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


def ops_tool_watch_rides_out_a_zookeeper_stall():
    """snowflake-zk list --watch --json goes on drawing after ZooKeeper stood still for 2 s
    (a collection pause, an election, a loaded host): a stall shorter than the tool's
    session delays a table, it does not end the command."""
    path = "/mon-watch-stall"
    zk = ZK.client()
    try:
        zk.ensure_path(path)
    finally:
        zk.stop()
    p = subprocess.Popen([PY, TOOL, "--zookeeper", ZK.hosts, "--path", path, "--json",
                          "list", "--watch"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        first = p.stdout.readline()  # it draws before the stall
        assert first.strip(), "no first table: %s" % p.stderr.read()
        ZK.freeze(2.0)
        after = [p.stdout.readline() for _ in range(3)]
        p.send_signal(signal.SIGINT)
        rest, err = p.communicate(timeout=sftest.PATIENCE)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 0 and "Traceback" not in err, (p.returncode, err)
    docs = [json.loads(line) for line in [first] + after if line.strip()]
    assert len(docs) == 4 and all(d["path"] == path for d in docs), (docs, err)


def main():
    sftest.require_server()
    sftest.require_zookeeper_client()
    r = sftest.Runner("test_monitoring")
    r.run(promtool_checks_and_rule_tests)
    r.run(broken_rule_fails_its_tests)
    r.run(promql_parsing_finds_names)
    r.run(pipe_ends_land_on_3_and_4)
    try:
        ZK.start()
    except AssertionError as e:
        print("FAIL the test's ZooKeeper: %s" % e)
        r.failed += 1
        r.finish()
    r.run(runbooks_are_linked)
    r.run(dashboard_has_rows)
    r.run(promtool_check_metrics_on_live_node)
    r.run(every_queried_metric_is_exported)
    r.run(every_exported_metric_has_a_decision)
    r.run(worker_id_gauges_follow_zookeeper)
    r.run(status_page_in_chromium)
    r.run(status_page_in_trouble)
    r.run(fleet_page_in_chromium)
    r.run(ops_tool_watch_redraws)
    r.run(ops_tool_watch_json_lines)
    r.run(ops_tool_watch_rides_out_a_zookeeper_stall)
    r.finish()


if __name__ == "__main__":
    main()
