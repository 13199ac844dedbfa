#!/usr/bin/env python3
"""test_call_paths.py -- holds src/ to the direction of its calls, read from the compiler's call
graph (scripts/call-paths, gcc -fcallgraph-info): inside each module no two files call each
other, but for the registry's state machine, whose parts report to it (sf_reg_step) and
which each part's opening comment names; and a claim and a renewal, followed through the
code, enter at most 7 files, none more than twice. Prints every breach and exits 1 on any.
Needs the build tree for the generated headers (top_builddir, else build/)."""
import glob
import importlib.machinery
import importlib.util
import os
import sys
import tempfile

TOP = os.environ.get("top_srcdir") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BUILD = os.environ.get("top_builddir") or os.path.join(TOP, "build")

# The files of one module (or of one folder of small modules), each checked on its own.
MODULES = {
    "the registry": ["src/zk/registry*.c", "src/zk/zkbatch.c"],
    "libsnowflake-zk": ["src/zk/embedded*.c", "src/zk/fence.c"],
    "the server": ["src/server/*.c"],
    "libsnowflake-client": ["src/client/*.c"],
    "the Thrift clients": ["src/rpc/*.c"],
    "the command-line tool": ["src/cli/*.c"],
    "the Python module": ["src/python/*.c"],
    "libsnowflake": ["src/lib/*.c"],
    "the shared pieces": ["src/common/*.c"],
}
# The one loop allowed: the state machine (registry.c) and the parts that report to it.
STATE_MACHINE = "src/zk/registry.c"
STATE_MACHINE_INPUT = "sf_reg_step"
# A claim and a renewal followed from their entry points through the registry.
WALKS = {"a claim": "sf_registry_claim", "a renewal": "sf_reg_renew_if_due"}
WALK_SOURCES = ["src/zk/registry*.c", "src/zk/zkbatch.c", "src/common/*.c"]
MAX_FILES, MAX_ENTRIES = 7, 2


def load_tool():
    path = os.path.join(TOP, "scripts", "call-paths")
    loader = importlib.machinery.SourceFileLoader("call_paths", path)
    spec = importlib.util.spec_from_loader("call_paths", loader)
    tool = importlib.util.module_from_spec(spec)
    loader.exec_module(tool)
    return tool


def sources(patterns):
    found = []
    for pattern in patterns:
        found += sorted(glob.glob(os.path.join(TOP, pattern)))
    return found


def opening_comment(rel):
    text = open(os.path.join(TOP, rel)).read()
    return text[:text.find("*/")] if text.startswith("/*") else ""


def check_pairs(tool, tmp):
    problems = []
    for name, patterns in MODULES.items():
        defs, edges = tool.graph(BUILD, sources(patterns), tmp)
        defs.pop("__indirect_call", None)
        both = tool.pairs(defs, edges)
        for a, b in sorted(k for k in both if k[0] < k[1]):
            loop = STATE_MACHINE in (a, b)
            part = b if a == STATE_MACHINE else a
            up = both[(part, STATE_MACHINE)] if loop else []
            if loop and all(c.endswith(("-> " + STATE_MACHINE_INPUT, "-> sf_reg_queue"))
                            for c in up):
                if STATE_MACHINE_INPUT not in opening_comment(part):
                    problems.append("%s: reports to the state machine but its opening comment "
                                    "does not name the loop (%s)" % (part, STATE_MACHINE_INPUT))
                continue
            problems.append("%s: %s and %s call each other (%s; %s)" % (
                name, a, b, "; ".join(both[(a, b)]), "; ".join(both[(b, a)])))
    return problems


def check_walks(tool, tmp):
    problems = []
    defs, edges = tool.graph(BUILD, sources(WALK_SOURCES), tmp)
    for name, root in WALKS.items():
        root = next((d for d in defs if d == root or d.endswith(":" + root)), None)
        if root is None:
            problems.append("%s: %s is defined in none of %s" % (name, WALKS[name],
                                                                 " ".join(WALK_SOURCES)))
            continue
        files, entries, _ = tool.walk(defs, edges, [root])
        if len(files) > MAX_FILES:
            problems.append("%s enters %d files (at most %d): %s" % (
                name, len(files), MAX_FILES, " ".join(files)))
        for path, n in sorted(entries.items()):
            if n > MAX_ENTRIES:
                problems.append("%s enters %s %d times (at most %d)" % (name, path, n,
                                                                      MAX_ENTRIES))
        print("call paths: %s: %d files, at most %d entries into one" % (
            name, len(files), max(entries.values(), default=0)))
    return problems


def main():
    tool = load_tool()
    with tempfile.TemporaryDirectory() as tmp:
        problems = check_pairs(tool, tmp) + check_walks(tool, tmp)
    for p in problems:
        print("call paths: " + p)
    print("call paths: %d modules, %d problems" % (len(MODULES), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
