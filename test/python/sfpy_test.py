"""sfpy_test.py -- what the tests of the Python module `snowflake` share: the module imported
from the build tree (or the test skipped, saying why), the environment a server's Python
processes need to import it, the worker nodes a path holds in ZooKeeper (and their holders'
pids), and the checks every test makes of the ids it got. sftest.py (test/e2e) gives the
rest: the throwaway ZooKeeper, snowflaked, the runner of checks."""
import glob
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import sftest  # noqa: E402

MODULE_DIR = os.path.join(os.path.abspath(sftest.TOP_BUILDDIR), "src", "python", ".libs")
# configure's --enable-sanitizers: the module is then built with AddressSanitizer, which
# /usr/bin/python3 (not built with it) can load only with the runtime preloaded.
SANITIZED = os.environ.get("sanitizers") == "yes"
SKIP = sftest.SKIP
TWITTER_EPOCH_MS = sftest.TWITTER_EPOCH_MS


def _asan_runtime():
    """The AddressSanitizer runtime the module was linked with (ldd names it)."""
    so = glob.glob(os.path.join(MODULE_DIR, "snowflake*.so"))[0]
    out = subprocess.run(["ldd", so], stdout=subprocess.PIPE, text=True).stdout
    for line in out.splitlines():
        if "libasan" in line and "=>" in line:
            return line.split("=>")[1].split()[0]
    return None


def require_module(forks=False):
    """The module `snowflake` of this build. Exits 77 (skipped), saying why, when the build
    has none (configure found no python3-dev), or when the build is sanitized and the test
    forks (the sanitizer's allocator lock may be held by another thread at the fork, and the
    child hang on it). A sanitized build's module is loaded with the sanitizer's runtime
    preloaded: the test runs itself again so, without leak checks (the interpreter keeps
    its memory to the end by design)."""
    if not glob.glob(os.path.join(MODULE_DIR, "snowflake*.so")):
        print("%s holds no snowflake module: configure found no python3-dev "
              "(apt-get install python3-dev), so there is nothing to test" % MODULE_DIR)
        sys.exit(SKIP)
    if SANITIZED and forks:
        print("this build is sanitized (--enable-sanitizers) and this test forks: under "
              "AddressSanitizer a child may inherit its allocator's lock held; skipped "
              "(the unsanitized build runs it)")
        sys.exit(SKIP)
    if SANITIZED and "SFPY_ASAN_RUNTIME" not in os.environ:
        runtime = _asan_runtime()
        if runtime is None:
            print("the sanitized module names no libasan (ldd): cannot load it")
            sys.exit(SKIP)
        env = dict(os.environ, SFPY_ASAN_RUNTIME=runtime,
                   SFPY_ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", ""))
        env.update(_preload(env))
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    if SANITIZED:  # preloaded into this process; its children get what they need
        os.environ.pop("LD_PRELOAD", None)
        os.environ["ASAN_OPTIONS"] = os.environ["SFPY_ASAN_OPTIONS"]
    sys.path.insert(0, MODULE_DIR)
    import snowflake
    return snowflake


def _preload(env):
    """What a Python process that loads a sanitized module needs: the runtime preloaded, and
    no leak report (the interpreter keeps its memory to the end by design)."""
    return {"LD_PRELOAD": env["SFPY_ASAN_RUNTIME"],
            "ASAN_OPTIONS": env.get("SFPY_ASAN_OPTIONS", "") + ":detect_leaks=0"}


def module_env(extra=None):
    """The environment of a Python process that imports the module (a server's master and
    workers): PYTHONPATH names the build tree's."""
    env = sftest.clean_env(extra)
    env["PYTHONPATH"] = MODULE_DIR + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if SANITIZED:
        env.update(_preload(env))
    return env


def worker_nodes(zk, path):
    """{worker id: holder pid} of the worker nodes under path now (kazoo client zk); an
    embedded holder's node reads "embedded pid=<pid> host=<host> datacenter=<id>"."""
    if not zk.exists(path):
        return {}
    from kazoo.exceptions import NoNodeError
    nodes = {}
    for child in zk.get_children(path):
        try:
            data, _ = zk.get("%s/%s" % (path, child))
        except NoNodeError:  # released between the listing and the read
            continue
        fields = dict(f.split("=", 1) for f in data.decode().split()[1:] if "=" in f)
        nodes[int(child)] = int(fields["pid"])
    return nodes


def alive(pid):
    """True while process pid exists (and is not a zombie)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def decode(id_):
    """(unix_ms, datacenter, worker, sequence) of an id, from the bit layout alone."""
    return sftest.decode(id_)


def pair(id_):
    """The (datacenter, worker) pair an id was made under."""
    return decode(id_)[1:3]


def check_increasing(ids, what):
    """Fails unless ids are strictly increasing (as one batch of one generator is)."""
    for a, b in zip(ids, ids[1:]):
        if not a < b:
            raise AssertionError("%s: %d then %d: not strictly increasing" % (what, a, b))


def check_unique(ids, what):
    """Fails, naming a repeated id, unless every id of ids is distinct."""
    seen = set()
    for i in ids:
        if i in seen:
            raise AssertionError("%s: id %d handed out twice (%r)" % (what, i, decode(i)))
        seen.add(i)
    return seen


def wait_until(cond, timeout, what):
    """cond() true within timeout s, else fails naming what (polled every 50 ms)."""
    sftest.wait_until(cond, timeout, what)


def near_now(id_, epoch_ms=TWITTER_EPOCH_MS, slack_ms=600000):
    """Fails unless the id's timestamp is within slack_ms of the local clock."""
    ms = (id_ >> 22) + epoch_ms
    now = time.time() * 1000
    assert abs(ms - now) < slack_ms, "id %d is from %d, the clock says %d" % (id_, ms, now)
