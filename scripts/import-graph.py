#!/usr/bin/env python3
"""The import graph of the workspace's crates, counted as bench/README reports it.

    scripts/import-graph.py [--list]

For each crate under host/ (and bench/, xtask/): its source files as nodes, an edge from
a file to each file it names through `crate::…` paths (in `use` lines and in code, tests
included), and

- file cycles: sets of files that reach each other (strongly connected components of
  more than one file, a `mod.rs` and its own children left out: a parent naming its
  child and back is how Rust modules nest);
- imports that run back up: `crate::NAME` paths whose first segment is not one of the
  root's modules, i.e. items reached through the crate root rather than where they
  live (re-exports and items defined in lib.rs).

Comments are skipped; it reads text, so a path spelled in a string counts too (rare).
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATH = re.compile(r"\bcrate::((?:[A-Za-z_][A-Za-z0-9_]*::)*[A-Za-z_][A-Za-z0-9_]*|\{[^}]*\})")
BRACED = re.compile(r"\buse\s+crate::\{([^;]*)\};", re.S)


def crates():
    for manifest in sorted(ROOT.glob("host/*/Cargo.toml")) + [ROOT / "bench/Cargo.toml", ROOT / "xtask/Cargo.toml"]:
        src = manifest.parent / "src"
        if src.is_dir():
            yield manifest.parent.relative_to(ROOT), src


def module_file(src, segments):
    """The file of the longest module path among `segments` that exists."""
    for n in range(len(segments), 0, -1):
        base = src.joinpath(*segments[:n])
        for candidate in (base.with_suffix(".rs"), base / "mod.rs"):
            if candidate.is_file():
                return candidate
    return None


def root_file(src):
    for name in ("lib.rs", "main.rs"):
        if (src / name).is_file():
            return src / name
    return None


def root_modules(src):
    root = root_file(src)
    if root is None:
        return set()
    return set(re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_0-9]+)", root.read_text(), re.M))


def code(text):
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def paths(text):
    """Every `crate::a::b` path of a file, braces in `use crate::{…}` expanded."""
    text = code(text)
    found = []
    for group in BRACED.findall(text):
        for item in re.split(r",\s*(?![^{]*\})", group):
            item = item.strip()
            if item:
                head = re.match(r"([A-Za-z_][A-Za-z0-9_]*)", item)
                if head:
                    found.append([head.group(1)] + re.findall(r"::([A-Za-z_][A-Za-z0-9_]*)", item[len(head.group(1)):])[:1])
    text = BRACED.sub("", text)
    for m in PATH.finditer(text):
        if m.group(1).startswith("{"):
            continue
        found.append(m.group(1).split("::"))
    return found


def sccs(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def nests(a, b):
    """Whether one file is the other's parent module (mod.rs and a child of its folder)."""
    for p, c in ((a, b), (b, a)):
        if p.name in ("mod.rs", "lib.rs", "main.rs") and p.parent in c.parents:
            return True
    return False


def main():
    listing = "--list" in sys.argv
    total_cycles = total_up = 0
    for crate, src in crates():
        mods = root_modules(src)
        root = root_file(src)
        graph, up = {}, []
        for file in sorted(src.rglob("*.rs")):
            edges = set()
            for segments in paths(file.read_text()):
                if segments[0] not in mods:
                    if file != root and segments[0] not in ("self", "super"):
                        up.append((file, "::".join(segments)))
                    continue
                target = module_file(src, segments)
                if target and target != file and not nests(file, target):
                    edges.add(target)
            graph[file] = edges
        cycles = [c for c in sccs(graph) if len(c) > 1]
        total_cycles += len(cycles)
        total_up += len(up)
        if cycles or up:
            print(f"{crate}: {len(cycles)} file cycles, {len(up)} imports through the root")
        if listing:
            for c in cycles:
                print("  cycle:", " ↔ ".join(str(f.relative_to(src)) for f in sorted(c)))
            for f, p in up:
                print(f"  up: {f.relative_to(src)}: crate::{p}")
    print(f"total: {total_cycles} file cycles, {total_up} imports through a crate root")


if __name__ == "__main__":
    main()
