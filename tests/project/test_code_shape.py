"""The code keeps its shape: no import cycle, no private name borrowed across modules, no
import against the layers (``scripts/code_shape.py`` measures them), and one home for the
run-folder contract and for what each scheduler and launcher means."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import code_shape  # noqa: E402


def test_no_import_cycle_no_private_import_no_layer_crossed():
    graph, private = code_shape.import_graph()
    assert code_shape.cycles(graph) == []
    assert private == []
    assert code_shape.layer_violations(graph) == []


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
