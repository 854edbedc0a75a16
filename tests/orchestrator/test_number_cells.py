"""How the terminal's tables print numbers (issue 62): a value beside its interval or spread to the
digits that spread supports, a column of floats to one number of decimals, a short run's time and a
small cost as what they are, a model parameter with its unit. Each checked against the rule worked
by hand."""

from __future__ import annotations

from orchestrator.cli.plan_cmd import hours_text
from orchestrator.terminal.tables import column_cells, duration_text, interval_cell, spread_cell
from perf_model.terms import param_text


def test_an_interval_and_a_spread_set_the_digits():
    # width 1.1143: its 2 significant digits end at the first decimal (1 - floor(log10 1.11) = 1)
    assert interval_cell(0.5669, 0.2377, 1.352) == "0.6 [0.2, 1.4]"
    assert interval_cell(1.5512, 1.3201, 1.8734) == "1.55 [1.32, 1.87]"   # width 0.55: 2 decimals
    assert spread_cell(14095.0, 905.3) == "14100 ± 910"                  # sd 905 -> tens
    assert spread_cell(0.41503, 0.0123) == "0.415 ± 0.012"
    assert interval_cell(2.0, float("nan"), float("nan")) == "2"            # no interval: the plain cell


def test_a_column_of_floats_has_one_number_of_decimals():
    assert column_cells([0.415, 0.41503, 0.07799]) == ["0.4150", "0.4150", "0.0780"]
    assert column_cells([12535.2, 9305.0]) == ["12535", "9305"]           # >= 1000: whole numbers
    assert column_cells([0.5, 0.00001]) == ["0.5000", "1e-05"]            # too small to show: its own digits
    assert column_cells([None, 3, "x"]) == ["-", "3", "x"]


def test_a_short_run_and_a_small_cost_are_not_zero():
    assert duration_text(0.05) == "0.05 s" and duration_text(3.2) == "3.2 s" and duration_text(45) == "45 s"
    assert hours_text(1.4e-05) == "0.000014" and hours_text(0.25) == "0.25" and hours_text(0.0) == "-"


def test_a_model_parameter_has_its_unit():
    assert param_text("latency", 1.2e-05) == "latency=12 us"
    assert param_text("bandwidth", 6.557e8) == "bandwidth=0.6557 GB/s"
    assert param_text("c0", 0.01996) == "c0=19.96 ms"
    assert param_text("alpha", 0.5) == "alpha=0.5"
    assert param_text("cpus_per_host", 2.0) == "cpus_per_host=2 CPUs"


def test_the_summary_shows_each_runs_own_seed_in_run_order(tmp_path):
    """Issue 62: the summary folded ``seed`` into "in every row: seed=0" where the repeats had run
    with seeds 0, 1000, 2000 (``RunSpec.run_seed``). ``with_run_seed`` shows the seed used, the
    rows in run-id order; a command workload's repeats (the seed not varied) keep theirs."""
    import dataclasses

    from results_db import connect
    from results_db.store import run_rows
    from results_db.store.runs import PlannedRun, register_runs
    from workloads.spec import RunSpec

    engine = connect(f"sqlite:///{tmp_path / 's.db'}")
    base = RunSpec(study="s", site="local")
    plans = [PlannedRun(f"k{r}", dataclasses.replace(base, repeat=r, seed=7, seed_per_repeat=r > 0).to_dict(), "/x")
             for r in (2, 0, 1)]
    plans.append(PlannedRun("c", dataclasses.replace(base, repeat=1, seed=7, seed_per_repeat=False).to_dict(), "/x"))
    register_runs(engine, "s", plans)
    table = run_rows.run_rows(engine, study="s", columns=["run_id", "seed", "repeat"])
    shown = run_rows.with_run_seed(engine, table)
    assert shown.column("run_id") == sorted(shown.column("run_id"))
    by_id = {i: (s, r) for i, s, r in shown.rows}
    assert sorted(by_id.values()) == [(7, 0), (7, 1), (1007, 1), (2007, 2)]
    engine.dispose()
