#!/usr/bin/env python3
"""test_layout.py -- holds src/ to its layout: no file over 2,000 lines (a sanity bound, not a
budget: a file holds a module or a named part of one, whatever its length), each file opening
with a comment that names it, no include cycle between modules (x.c, x.h and x_internal.h
are one module), the folders layered (lib below common, common below zk and rpc, rpc below
the client library, those below the programs; the Python module on lib and the public headers
of zk and client alone), and inside a folder the parts that must not
know what is built on them: each includes only the modules listed for it and names nothing
the folder's other headers declare. Prints every breach and exits 1 on any."""
import os
import re
import sys

MAX_LINES = 2000
# A folder may include only from itself and the folders listed for it.
LAYERS = {
    "lib": set(),
    "common": {"lib"},
    "zk": {"lib", "common"},
    "rpc": {"lib", "common"},
    "server": {"lib", "common", "rpc", "zk"},
    "client": {"lib", "common", "rpc"},
    "cli": {"lib", "common", "rpc", "client"},
    "python": {"lib"},
}
# Besides its layers, a folder may include these headers only of a folder it is not layered
# on: the Python module builds on the three installed libraries, through their public headers,
# and on common/threads.h, which is inline and links nothing, so that the one thread it starts
# blocks the process's signals as every thread of the libraries does.
PUBLIC = {
    "python": {"zk/snowflake_zk.h", "client/snowflake_client.h", "common/threads.h"},
}
# Inside a folder: a module listed here may include only the modules listed for it, and may
# name (sf_...) nothing declared only in the folder's other headers, so that it cannot call
# up even through a prototype of its own. The server's event loop calls the handlers it is
# given, as Redis's ae.c does: it never names the connections or threads it serves.
BELOW = {
    "server/ratelog": {"common/clocks"},
    "server/json_text": set(),
    "server/fdlimit": set(),
    "server/uring": set(),
    "server/loop": {"server/uring"},
    "server/loop_epoll": {"server/loop"},
    "server/loop_uring": {"server/loop", "server/uring"},
}
NAME = re.compile(r"\bsf_\w+", re.I)
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(src):
    for folder, _, files in os.walk(src):
        for name in sorted(files):
            if name.endswith((".c", ".h")):
                yield os.path.relpath(os.path.join(folder, name), src)


def resolve(src, rel, inc):
    """The src-relative path an include names, or None for generated and system files."""
    for cand in (os.path.join(os.path.dirname(rel), inc), inc):
        if os.path.exists(os.path.join(src, cand)):
            return os.path.normpath(cand)
    return None


def module(rel):
    """x.c, x.h and x_internal.h (x's private half) are one module."""
    return re.sub(r"_internal$", "", os.path.splitext(rel)[0])


def check_below(src, texts, includes):
    """Breaches of BELOW: includes beyond the modules allowed, and names that only the
    folder's other headers declare."""
    problems = []
    for rel, text in sorted(texts.items()):
        mod = module(rel)
        if mod not in BELOW:
            continue
        allowed = BELOW[mod] | {mod}
        for target in includes[rel]:
            if module(target) not in allowed:
                problems.append(f"src/{rel}: includes src/{target}; {mod} may include only "
                                f"{', '.join(sorted(BELOW[mod])) or 'nothing of its folder'}")
        folder = os.path.dirname(rel)
        own, others = set(), set()
        for hrel, htext in texts.items():
            if not hrel.endswith(".h") or os.path.dirname(hrel) != folder:
                continue
            names = set(NAME.findall(htext))
            (own if module(hrel) in allowed else others).update(names)
        foreign = sorted((set(NAME.findall(text)) & others) - own)
        if foreign:
            problems.append(f"src/{rel}: names {', '.join(foreign[:5])}, which only other "
                            f"headers of {folder}/ declare; {mod} must not know them")
    return problems


def find_cycle(graph):
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def main():
    top = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("top_srcdir", ".")
    src = os.path.join(top, "src")
    problems, graph, texts, includes = [], {}, {}, {}
    for rel in sources(src):
        text = open(os.path.join(src, rel), encoding="utf-8").read()
        texts[rel] = text
        includes[rel] = []
        lines = text.count("\n")
        if lines > MAX_LINES:
            problems.append(f"src/{rel}: {lines} lines, more than {MAX_LINES}")
        base = os.path.basename(rel)
        if not text.startswith(f"/* {base} -- "):
            problems.append(f"src/{rel}: does not open with '/* {base} -- <its one job>'")
        folder = rel.split(os.sep)[0] if os.sep in rel else "."
        if folder not in LAYERS:
            problems.append(f"src/{rel}: in no known folder ({', '.join(sorted(LAYERS))})")
        for inc in INCLUDE.findall(text):
            target = resolve(src, rel, inc)
            if target is None:
                continue
            includes[rel].append(target)
            tfolder = target.split(os.sep)[0] if os.sep in target else "."
            if (tfolder != folder and tfolder not in LAYERS.get(folder, set()) and
                    target not in PUBLIC.get(folder, set())):
                allowed = sorted(LAYERS.get(folder, ())) + sorted(PUBLIC.get(folder, ()))
                problems.append(f"src/{rel}: includes src/{target}, but {folder}/ may only use "
                                f"{', '.join(allowed) or 'nothing'}")
            if module(target) != module(rel):
                graph.setdefault(module(rel), set()).add(module(target))
    problems += check_below(src, texts, includes)
    cycle = find_cycle(graph)
    if cycle:
        problems.append("include cycle between modules: " + " -> ".join(cycle))
    readme = os.path.join(top, "README")
    n = sum(1 for _ in open(readme, encoding="utf-8"))
    if n > 250:
        problems.append(f"README: {n} lines, more than 250 (the manual lives in doc/)")
    for p in problems:
        print("layout:", p)
    print(f"layout: {len(list(sources(src)))} files, {len(graph)} modules with includes, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
