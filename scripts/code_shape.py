"""The shape of the code, measured: import cycles, private names imported across modules,
imports against the layers, and the longest functions.

    python scripts/code_shape.py [--top N]

Reads the packages with ``ast`` (nothing is imported). Every import counts, a function's
own included, except those under ``if TYPE_CHECKING:`` (annotations only, never run).
The layers (ARCHITECTURE.md): ``workloads`` imports neither ``results_db``, ``perf_model`` nor
``orchestrator``; ``results_db`` and ``perf_model`` never import ``orchestrator``; within it,
``orchestrator.pools`` never imports ``orchestrator.sweep``. Inside ``results_db`` the rooms stand on
floors: ``stats`` (imports nothing of the project) under ``store`` under ``analysis``, over which
``ingest`` and ``report`` stand apart, ``publish`` on top; and the rooms above the store write no
SQL text (``sql_text``).
``tests/project/test_code_shape.py`` holds the project to zero cycles, zero private imports and the
layers.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("orchestrator", "workloads", "results_db", "perf_model", "hydra_plugins")
# package (or room of one) -> what it may not import. The pools run the sweep's tasks, and
# know of them only the module name the driver hands over (--preload), never by import
ROOMS = ("results_db.stats", "results_db.store", "results_db.analysis", "results_db.ingest", "results_db.report",
         "results_db.publish")
FORBIDDEN = {"workloads": ("orchestrator", "results_db", "perf_model"),
             "results_db": ("orchestrator",), "perf_model": ("orchestrator",),
             "orchestrator.pools": ("orchestrator.sweep",),
             # the GPU check starts runs as a sweep does, with nothing of a sweep
             "orchestrator.gpu_check": ("orchestrator.sweep", "orchestrator.pools", "results_db", "perf_model"),
             "results_db.stats": ("workloads", "perf_model", "hydra_plugins",
                                  *[r for r in ROOMS if r != "results_db.stats"]),
             "results_db.store": ("results_db.analysis", "results_db.ingest", "results_db.report", "results_db.publish"),
             "results_db.analysis": ("results_db.ingest", "results_db.report", "results_db.publish"),
             "results_db.ingest": ("results_db.report", "results_db.publish"),
             "results_db.report": ("results_db.ingest", "results_db.publish")}
# the rooms that read the store through its query API: no SQL written as text in them
NO_SQL_TEXT = ("results_db.analysis", "results_db.report", "results_db.publish")
# a statement as SQL is written by hand, in capitals (prose such as "select a run from the list" is not)
_SQL = re.compile(r"^\s*(SELECT\s.+\sFROM\s|INSERT\s+INTO\s|UPDATE\s+\w+\s+SET\s|DELETE\s+FROM\s|"
                  r"(CREATE|ALTER|DROP)\s+(TABLE|INDEX)\s|PRAGMA\s)", re.S)


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _typing_only(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            skipped.update(id(n) for branch in node.body for n in ast.walk(branch))
    return skipped


def import_graph(root: Path = ROOT) -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """module -> the project modules it imports; and (importer, module, name) of every private
    name (``_x``) imported from another module."""
    mods = modules(root)

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    private = []
    for module, path in mods.items():
        tree = ast.parse(path.read_text())
        skipped = _typing_only(tree)
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = resolve(alias.name)
                    if target and target != module:
                        graph[module].add(target)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    full = ".".join(base + ([node.module] if node.module else []))
                else:
                    full = node.module or ""
                for alias in node.names:
                    target = resolve(f"{full}.{alias.name}") if f"{full}.{alias.name}" in mods else resolve(full)
                    if target and target != module:
                        graph[module].add(target)
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            private.append((module, target, alias.name))
    return graph, private


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


# what a room may not import by that exact name (its package's ``__init__``, which ``_under`` cannot
# name without naming every room under it)
FORBIDDEN_EXACT = {"results_db.stats": ("results_db",)}


def layer_violations(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return [(m, t) for m, targets in graph.items() for t in sorted(targets)
            if any(_under(m, k) and any(_under(t, f) for f in banned) for k, banned in FORBIDDEN.items())
            or any(_under(m, k) and t in exact for k, exact in FORBIDDEN_EXACT.items())]


def _text_call(node: ast.AST) -> bool:
    """``text("...")`` or ``text(f"...")``: SQLAlchemy's raw SQL (matplotlib's ``fig.text(x, y, s)``
    starts with a number)."""
    return isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "text" \
        and bool(node.args) and (isinstance(node.args[0], ast.JoinedStr) or
                                 isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str))


def sql_text(root: Path = ROOT) -> list[str]:
    """Where a room above the store writes SQL by hand: a string that reads as a statement, or
    SQLAlchemy's ``text(...)``."""
    found = []
    for module, path in modules(root).items():
        if not any(_under(module, room) for room in NO_SQL_TEXT):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _SQL.match(node.value):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
            elif _text_call(node):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def longest_functions(root: Path = ROOT, top: int = 10) -> list[tuple[int, str]]:
    rows = []
    for module, path in modules(root).items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                rows.append((node.end_lineno - node.lineno + 1, f"{path.relative_to(root)}:{node.lineno} {node.name}"))
    return sorted(rows, reverse=True)[:top]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=5, help="longest functions to list (default 5)")
    args = parser.parse_args(argv)
    graph, private = import_graph()
    found = cycles(graph)
    layers = layer_violations(graph)
    print(f"modules: {len(graph)}")
    print(f"import cycles: {len(found)}")
    for group in found:
        print("  " + " <-> ".join(group))
    print(f"private names imported across modules: {len(private)}")
    for module, target, name in private:
        print(f"  {module} imports {target}.{name}")
    print(f"imports against the layers: {len(layers)}")
    for module, target in layers:
        print(f"  {module} imports {target}")
    handwritten = sql_text()
    print(f"SQL written as text above the store: {len(handwritten)}")
    for where in handwritten:
        print(f"  {where}")
    print("longest functions (lines):")
    for lines, where in longest_functions(top=args.top):
        print(f"  {lines:4d}  {where}")
    return 1 if found or private or layers or handwritten else 0


if __name__ == "__main__":
    sys.exit(main())
