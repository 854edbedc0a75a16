"""The code keeps its shape: no import cycle, no private name borrowed across modules, no
import against the layers (``scripts/code_shape.py`` measures them), and one home for the
run-folder contract and for what each scheduler and launcher means."""

from __future__ import annotations

import ast
import re
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import code_shape  # noqa: E402


def test_no_import_cycle_no_private_import_no_layer_crossed():
    graph, private = code_shape.import_graph()
    assert code_shape.cycles(graph) == []
    assert private == []
    assert code_shape.layer_violations(graph) == []
    assert code_shape.sql_text() == []


def test_no_function_is_longer_than_80_lines():
    [(lines, where)] = code_shape.longest_functions(top=1)
    assert lines <= 80, where


def test_the_results_rooms_hold_their_floors(tmp_path):
    """The control: a statistic that imports the store, a store module that imports the report,
    and SQL written as text in the report and in an analysis are found; an analysis reading the
    store and ``fig.text`` (matplotlib's) are not."""
    for package in code_shape.PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    for room in ("stats", "store", "analysis", "report"):
        (tmp_path / "results_db" / room).mkdir()
        (tmp_path / "results_db" / room / "__init__.py").write_text("")
    (tmp_path / "results_db" / "stats" / "interval.py").write_text("from ..store import query\n")
    (tmp_path / "results_db" / "stats" / "power.py").write_text("from results_db import connect\n")
    (tmp_path / "results_db" / "store" / "query.py").write_text("import results_db.report.page\n")
    (tmp_path / "results_db" / "analysis" / "compare.py").write_text(
        "from results_db.store import query\nfrom results_db.stats import interval\nQ = 'SELECT id FROM runs'\n")
    (tmp_path / "results_db" / "report" / "page.py").write_text(
        "from sqlalchemy import text\nimport results_db.analysis.compare\nrows = text('SELECT 1')\n"
        "def f(fig):\n    fig.text(0.1, 0.2, 'select a note from the figure')\n")
    graph, _ = code_shape.import_graph(tmp_path)
    assert sorted(code_shape.layer_violations(graph)) == [("results_db.stats.interval", "results_db.store.query"),
                                                          ("results_db.stats.power", "results_db"),
                                                          ("results_db.store.query", "results_db.report.page")]
    assert code_shape.sql_text(tmp_path) == ["results_db/analysis/compare.py:3", "results_db/report/page.py:3"]


def test_the_checker_finds_what_it_should(tmp_path):
    """The checks can fail: a planted cycle, a private import and a layer crossed are found."""
    for package in code_shape.PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "orchestrator" / "a.py").write_text("from .b import _helper\n")
    (tmp_path / "orchestrator" / "b.py").write_text("def f():\n    from . import a\n")
    (tmp_path / "workloads" / "w.py").write_text("from typing import TYPE_CHECKING\nimport results_db.x\n"
                                                 "if TYPE_CHECKING:\n    import orchestrator.a\n")
    (tmp_path / "results_db" / "x.py").write_text("")
    for room in ("pools", "sweep"):
        (tmp_path / "orchestrator" / room).mkdir()
        (tmp_path / "orchestrator" / room / "__init__.py").write_text("")
    (tmp_path / "orchestrator" / "sweep" / "app.py").write_text("")
    (tmp_path / "orchestrator" / "pools" / "preload.py").write_text("from ..sweep import app\n")
    graph, private = code_shape.import_graph(tmp_path)
    assert code_shape.cycles(graph) == [["orchestrator.a", "orchestrator.b"]]
    assert private == [("orchestrator.a", "orchestrator.b", "_helper")]
    # the TYPE_CHECKING import is not an edge; the plain one crosses the layers
    assert sorted(code_shape.layer_violations(graph)) == [("orchestrator.pools.preload", "orchestrator.sweep.app"),
                                                          ("workloads.w", "results_db.x")]


def _literals(pattern: str, roots=("orchestrator", "workloads", "results_db", "perf_model")) -> list[str]:
    """Where a string literal matching ``pattern`` is written in the packages' code."""
    found = []
    for root in roots:
        for path in (REPO / root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(pattern, node.value):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_the_run_folder_contract_is_spelled_once():
    """File names of the run folder live in workloads/run_folder.py alone (messages aside)."""
    for name in ("result.json", "spec.json", "job.json", "workload.log", "command.txt", "failure.json",
                 "result.report.json"):
        assert _literals(re.escape(name)) == [f"workloads/run_folder.py:{_line(name)}"], name


def _line(literal: str) -> int:
    text = (REPO / "workloads" / "run_folder.py").read_text().splitlines()
    return next(i for i, line in enumerate(text, 1) if f'= "{literal}"' in line)


def test_scheduler_and_launcher_knowledge_lives_in_their_tables():
    """No code outside site/ compares a site's provider or launcher with a name: what a
    scheduler or an MPI launcher means is a class in site/schedulers.py or site/launchers.py."""
    offenders = []
    for path in (REPO / "orchestrator").rglob("*.py"):
        if path.parent.name == "site":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) and \
                    node.left.attr in ("provider", "mpi_launcher"):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


def test_catch_up_modes_are_compared_only_in_their_declaration():
    """What each eager-SGD catch-up mode implies is read from workloads/catch_up.py: no code
    compares a catch-up value with a mode's name (``catch_up == "paper"``, ``.catch_up in
    ("apply_all", "latest")``; ``attempts == "latest"`` is another word). The control: such a
    comparison, planted, is found."""
    from workloads.catch_up import CATCH_UP

    def names(node):
        if isinstance(node, ast.Constant):
            return {node.value}
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return {e.value for e in node.elts if isinstance(e, ast.Constant)}
        return set()

    def compared(tree):
        return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Compare)
                and "catch_up" in ast.unparse(node)
                and any(names(side) & set(CATCH_UP) for side in (node.left, *node.comparators))]

    assert compared(ast.parse("if self.options.catch_up in ('apply_all', 'latest'):\n    pass\n"
                              "mode = shape.get('catch_up', 'lockstep') != 'lockstep'\n")) == [1, 3]
    offenders = [f"{path.relative_to(REPO)}:{line}" for root in ("workloads", "perf_model", "orchestrator", "results_db")
                 for path in (REPO / root).rglob("*.py") for line in compared(ast.parse(path.read_text()))]
    assert offenders == []
