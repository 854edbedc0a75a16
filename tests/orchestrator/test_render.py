"""Tables printed by status and query: rich for short ones, aligned plain text for long ones."""

from __future__ import annotations

import pandas as pd

from orchestrator.terminal.output import RICH_ROWS, render
from orchestrator.terminal.tables import cell


def test_a_long_table_is_plain_aligned_text_with_every_row(capsys):
    n = RICH_ROWS + 50
    frame = pd.DataFrame({"run_id": range(n), "algorithm": ["sync"] * n,
                          "throughput": [1234.5 if i % 2 else None for i in range(n)]})
    render(frame, "table", title="runs")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"runs ({n} rows)" and lines[1].split() == ["run_id", "algorithm", "throughput"]
    assert len(lines) == 3 + n and set(lines[2]) <= {"-", " "}
    assert lines[3].split() == ["0", "sync", "-"] and lines[4].split() == ["1", "sync", cell(1234.5)]   # the cells rich shows
    assert len({len(line) for line in lines[1:]}) == 1   # numbers right-aligned: every line the same width


def test_a_short_table_is_drawn_by_rich(capsys):
    render(pd.DataFrame({"run_id": [1], "algorithm": ["sync"]}), "table", title="runs")
    out = capsys.readouterr().out
    assert "┃ run_id ┃ algorithm ┃" in out
