#!/usr/bin/env python3
"""test_layout.py -- holds src/ to its layout: no file over 600 lines, each file opening
with a comment that names it, no include cycle between modules (x.c, x.h and x_internal.h
are one module), and the folders layered: lib below common, common below zk and rpc, rpc
below the client library, those below the programs. Prints every breach and exits 1 on any."""
import os
import re
import sys

MAX_LINES = 600
# A folder may include only from itself and the folders listed for it.
LAYERS = {
    "lib": set(),
    "common": {"lib"},
    "zk": {"lib", "common"},
    "rpc": {"lib", "common"},
    "server": {"lib", "common", "rpc", "zk"},
    "client": {"lib", "common", "rpc"},
    "cli": {"lib", "common", "rpc", "client"},
}
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
    problems, graph = [], {}
    for rel in sources(src):
        text = open(os.path.join(src, rel), encoding="utf-8").read()
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
            tfolder = target.split(os.sep)[0] if os.sep in target else "."
            if tfolder != folder and tfolder not in LAYERS.get(folder, set()):
                problems.append(f"src/{rel}: includes src/{target}, but {folder}/ may only use "
                                f"{', '.join(sorted(LAYERS.get(folder, ()))) or 'nothing'}")
            if module(target) != module(rel):
                graph.setdefault(module(rel), set()).add(module(target))
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
