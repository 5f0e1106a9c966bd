"""The import graph of the iglu_np package, and its cycles.

A static scan (``ast``, nothing is imported): every ``import`` and ``from ... import``
statement of every module under ``iglu_np/``, at module level or inside a function or
class (a lazy import is an edge like any other), relative imports resolved. An edge
``a -> b`` means module ``a`` names module ``b`` (``from .backends import host_arrays`` is an
edge to ``iglu_np.backends.host_arrays``; ``from .._spec import REGISTRY`` to ``iglu_np._spec``).
The parent packages that Python runs on the way (``iglu_np/__init__.py``) are not edges:
every submodule would otherwise be in a cycle with its package. Dynamic imports
(``importlib.import_module`` of a computed name) are not seen.

    python tools/import_graph.py            # the cycles; exit status 1 if there is one
    python tools/import_graph.py --edges    # also every edge
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = "iglu_np"


def modules(root: Path = ROOT) -> dict:
    """Module name -> file for every ``.py`` file of the package."""
    out = {}
    for f in sorted((root / PKG).rglob("*.py")):
        parts = list(f.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


def _resolve(mod: str, is_pkg: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def edges(mods: dict) -> dict:
    """Module -> sorted list of (imported module, line) within the package."""
    graph = {}
    for mod, f in mods.items():
        is_pkg = f.name == "__init__.py"
        found = {}
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, is_pkg, node.level, node.module)
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    targets.append(sub if sub in mods else base)
            for t in targets:
                # ``import iglu_np.backends.cpu.ufuncs``: the deepest package module named
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != mod and (t == PKG or t.startswith(PKG + ".")):
                    found.setdefault(t, node.lineno)
        graph[mod] = sorted(found.items())
    return graph


def cycles(graph: dict) -> list:
    """The strongly connected components with more than one module (Tarjan), each as a
    sorted list of modules."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w, _ in graph.get(v, ()):
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
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def a_cycle(graph: dict, comp: list) -> list:
    """One closed path through the component ``comp`` (for the message)."""
    members = set(comp)
    start = comp[0]
    path, seen = [start], {start}
    prev = {start: None}
    todo = [start]
    while todo:  # BFS back to start
        v = todo.pop(0)
        for w, _ in graph[v]:
            if w == start:
                p = [v]
                while prev[p[-1]] is not None:
                    p.append(prev[p[-1]])
                return list(reversed(p)) + [start]
            if w in members and w not in seen:
                seen.add(w)
                prev[w] = v
                todo.append(w)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--edges", action="store_true", help="print every edge too")
    args = ap.parse_args(argv)
    graph = edges(modules())
    if args.edges:
        for m, ts in graph.items():
            for t, line in ts:
                print(f"{m} -> {t}  (line {line})")
    found = cycles(graph)
    n_edges = sum(len(v) for v in graph.values())
    print(f"{len(graph)} modules, {n_edges} import edges (lazy imports included)")
    if not found:
        print("no import cycle")
        return 0
    for comp in found:
        lines = {(a, b): ln for a in comp for b, ln in graph[a]}
        cyc = a_cycle(graph, comp)
        steps = " -> ".join(cyc)
        where = ", ".join(f"{a}:{lines[(a, b)]}" for a, b in zip(cyc, cyc[1:]))
        print(f"import cycle among {len(comp)} modules: {steps}  ({where})")
        for x, y in sorted(lines):
            print(f"    {x} -> {y}  (line {lines[(x, y)]})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
