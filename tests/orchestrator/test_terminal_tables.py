"""Issue 54, item 5: the terminal's tables. Both compares show their axes in the registry's
order; a command workload's sweep table shows its command shortened, with an ellipsis, and stays
within 120 columns."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from orchestrator.terminal.tables import SWEEP_TABLE_WIDTH, print_sweep_table, registry_order, shorten
from results_db import connect
from results_db.store.runs import PlannedRun, register_runs
from results_db.store.schema import Run
from workloads.spec import RunSpec

from conftest import scalestudy


def test_registry_order_puts_fields_first_in_their_declared_order():
    assert registry_order(["threads_per_node", "params.x", "nodes", "workers_per_node", "algorithm"]) == \
        ["nodes", "workers_per_node", "threads_per_node", "algorithm", "params.x"]


def _header(stdout: str) -> list[str]:
    line = next(line for line in stdout.splitlines() if "nodes" in line and "┃" in line)
    return [cell.strip() for cell in line.strip("┃ ").split("┃")]


def test_both_compares_show_the_axes_in_one_order(tmp_path):
    """The single-study compare put threads (and the baseline's axis) elsewhere than --against did."""
    from test_report import add_runs

    url = f"sqlite:///{tmp_path / 'c.db'}"
    engine = connect(url)
    for study, factor in (("a", 1.0), ("b", 1.1)):
        add_runs(engine, study, [{"nodes": n, "workers_per_node": w, "threads_per_node": t, "seed": s,
                                  "throughput": factor * (100 * n * w + 7 * t + s)}
                                 for n in (1, 2) for w in (1, 2) for t in (2, 4) for s in range(3)])
    raw = scalestudy("compare", "--study", "a", "--db", url, "--format", "csv", cwd=tmp_path)
    assert raw.stdout.splitlines()[0].startswith("workers_per_node,threads_per_node,nodes")   # the control
    single = scalestudy("compare", "--study", "a", "--db", url, cwd=tmp_path)
    against = scalestudy("compare", "--study", "a", "--against", "b", "--db", url, cwd=tmp_path)
    assert single.returncode == 0 and against.returncode == 0, single.stderr + against.stderr
    axes = ["nodes", "workers/node", "threads/node"]
    assert _header(single.stdout)[:3] == axes and _header(against.stdout)[:3] == axes


def test_a_command_sweeps_table_shortens_the_command_and_fits_120_columns(tmp_path, capsys):
    engine = connect(f"sqlite:///{tmp_path / 't.db'}")
    command = ("python", "examples/ddp_gloo/train.py", "--batch-size", "32", "--epochs", "2",
               "--learning-rate", "0.01", "--report-every", "10")
    plans = [PlannedRun(f"k{i}", dataclasses.replace(RunSpec(study="cmd"), workload_kind="command", command=command,
                                                      nodes=n, workers_per_node=2, threads_per_node=2,
                                                      params={"size": s}).to_dict(), "/nowhere")
             for i, (n, s) in enumerate([(1, 128), (2, 256), (1, 1024)])]
    ids = [d.run_id for d in register_runs(engine, "cmd", plans)]
    with Session(engine) as s, s.begin():
        for i in ids:
            s.execute(update(Run).where(Run.id == i).values(
                status="done", throughput=1234.5 * i, train_seconds=12.3,
                metrics={"final_loss_printed": 0.123 * i, "validation_accuracy": 0.9, "tokens_per_second": 5e5}))
    print_sweep_table(engine, ids, "study cmd: this sweep's runs")
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= SWEEP_TABLE_WIDTH, out
    # the same command on every row: in the caption, shortened with an ellipsis
    assert "command=python examples/ddp_gloo/train.…" in " ".join(out.split()), out
    assert "metrics.final_loss_printed" in out and "3704" in out
    for absent in ("compute", "top-1", "model"):   # our loop's, not a command's
        assert absent not in out
    # one run: a row per field, not a column per field folded to slivers
    print_sweep_table(engine, ids[:1], "one")
    one = capsys.readouterr().out
    assert max(len(line) for line in one.splitlines()) <= SWEEP_TABLE_WIDTH, one
    assert "│ command " in one and "python examples/ddp_gloo/train.…" in one and "│ metrics.final_loss_printed" in one


@pytest.mark.parametrize("text, width, shown", [("echo hi", 32, "echo hi"), ("a" * 40, 10, "a" * 9 + "…")])
def test_shorten(text, width, shown):
    assert shorten(text, width) == shown
