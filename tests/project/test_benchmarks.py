"""Every benchmark times through the one harness (``benchmarks/harness.py``): its rounds
interleaved, its figures a median with their spread, a ratio taken per round. A benchmark
with a loop of its own would report numbers the others do not mean."""

from __future__ import annotations

import ast
import sys

import pytest

from conftest import REPO

BENCHMARKS = sorted((REPO / "benchmarks").glob("bench_*.py"))
ROUNDS = {"interleave", "time_cli", "interleaved_mpi_times"}   # the harness's ways to take rounds

sys.path.insert(0, str(REPO / "benchmarks"))
import harness  # noqa: E402


def _shape(path) -> tuple[bool, bool, set[str]]:
    """Whether the file imports the harness, whether it takes ``--repeats``, and which of the
    harness's round-takers it calls."""
    tree = ast.parse(path.read_text())
    imports = any(isinstance(n, ast.ImportFrom) and n.module == "harness" for n in ast.walk(tree))
    repeats = any(isinstance(n, ast.Constant) and n.value == "--repeats" for n in ast.walk(tree))
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return imports, repeats, calls & ROUNDS


def test_every_benchmark_takes_its_rounds_through_the_harness():
    assert len(BENCHMARKS) >= 20
    strays = []
    for path in BENCHMARKS:
        imports, repeats, rounds = _shape(path)
        if not imports or (repeats and not rounds):
            strays.append(path.name)
    assert strays == []


def test_the_check_finds_a_benchmark_with_a_loop_of_its_own(tmp_path):
    """The control: a benchmark that repeats by hand, as eight of them did before."""
    planted = tmp_path / "bench_planted.py"
    planted.write_text("import argparse, time\nap = argparse.ArgumentParser()\nap.add_argument('--repeats')\n"
                       "from harness import median\nxs = []\nfor _ in range(5):\n    t0 = time.perf_counter()\n"
                       "    xs.append(time.perf_counter() - t0)\nprint(median(xs))\n")
    imports, repeats, rounds = _shape(planted)
    assert imports and repeats and not rounds


def test_rounds_alternate_and_ratios_pair_the_rounds_that_ran_side_by_side(capsys):
    order = []
    samples = harness.interleave({"A": lambda: order.append("A") or 2.0, "B": lambda: order.append("B") or 1.0}, 3)
    assert order == ["A", "B"] * 3 and samples == {"A": [2.0] * 3, "B": [1.0] * 3}
    assert "round 3/3: A=2, B=1" in capsys.readouterr().out
    assert harness.per_round([2.0, 3.0], [1.0, 2.0]) == [2.0, 1.5]
    with pytest.raises(ValueError, match="per round"):
        harness.per_round([2.0, 3.0], [1.0])
    assert harness.summary([1.0, 3.0, 2.0], 1, " s") == "2.0 s (1.0–3.0)"
    assert list(harness.trees("/x")) == ["before", "after"] and list(harness.trees(None)) == ["after"]


def _current_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    current = text[text.index("## Current figures"):text.index("## History")]
    tables, header = [], None
    for line in current.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if header is None:
            header = cells
            tables.append((header, []))
        elif not line.startswith("|---"):
            tables[-1][1].append(cells)
    return tables


CELL = 200   # characters: a number, its spread and a few words; a caveat goes to the history


def _paragraphs(tables) -> list[str]:
    """Rows whose cells (the command aside) are paragraphs, or that hold no figure."""
    long = []
    for header, rows in tables:
        assert "command" in header and "date" in header, header
        for row in rows:
            assert len(row) == len(header), row[0]
            figures = [c for h, c in zip(header, row) if h not in ("command", "date")][1:]
            assert any(ch.isdigit() for c in figures for ch in c) or row[1].startswith("not measured"), row[0]
            long += [f"{row[0][:50]}…: {h} {len(c)}" for h, c in zip(header, row) if h != "command" and len(c) > CELL]
    return long


def test_current_figures_are_cells_to_scan():
    """Every cell of the current figures (the command aside) holds a figure, not a paragraph,
    and every row has a figure with a digit in it and a baseline cell."""
    tables = _current_tables((REPO / "benchmarks" / "RESULTS.md").read_text())
    assert len(tables) >= 9
    assert _paragraphs(tables) == []


def test_the_cell_check_finds_a_paragraph():
    """The control: a row whose figure cell carries its caveat, as eight eager-SGD rows did."""
    planted = ("## Current figures\n\n| what | figure | baseline | command | date |\n|---|---|---|---|---|\n"
               f"| a rate | **1.46** [1.43, 1.49], {'and why it falls short of the paper ' * 8} | sync | `x` | d |\n"
               "\n## History\n")
    assert len(_paragraphs(_current_tables(planted))) == 1
