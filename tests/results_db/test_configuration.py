"""One definition of a configuration (results_db/analysis/configuration.py): the sweep's repeats on
demand, compare, regression, the figures' grouping and the artifact's axes agree on which runs are
repeats of one configuration, on a study whose repeats differ in their seed, their repeat index and
fields outside the grouping (which steps and ranks their timeline recorded, whether repeats vary
the seed)."""

from __future__ import annotations

import dataclasses

import pandas as pd
from sqlalchemy import update
from sqlalchemy.orm import Session

from orchestrator.sweep.repeats_on_demand import configuration_key
from orchestrator.sweep.runspec import run_key
from results_db import connect
from results_db.analysis import compare, configuration, regression
from results_db.store import query
from results_db.store.runs import PlannedRun, register_runs
from results_db.store.schema import Run
from workloads.spec import RunSpec

BASE = RunSpec(study="cfg", nodes=1, workers_per_node=2, threads_per_node=2, batch_size=16, timeline=True)
# three configurations (batch 16 and 32; a parameter's two values at batch 16), three repeats each,
# whose repeats differ in seed, repeat index, timeline window and ranks, and seed_per_repeat
CONFIGS = [{"batch_size": 16, "params": {"act": "relu"}}, {"batch_size": 32, "params": {"act": "relu"}},
           {"batch_size": 16, "params": {"act": "gelu"}}]
OUTSIDE = [{"timeline_steps": "", "timeline_ranks": 0, "seed_per_repeat": True},
           {"timeline_steps": "0-3", "timeline_ranks": 1, "seed_per_repeat": True},
           {"timeline_steps": "2-5", "timeline_ranks": 2, "seed_per_repeat": False}]


def _specs() -> list[RunSpec]:
    return [dataclasses.replace(BASE, repeat=r, seed=11 * r + 3, **config, **OUTSIDE[r])
            for config in CONFIGS for r in range(3)]


def _study(tmp_path) -> tuple[object, pd.DataFrame]:
    engine = connect(f"sqlite:///{tmp_path / 'cfg.db'}")
    specs = _specs()
    decisions = register_runs(engine, "cfg", [PlannedRun(run_key(s), s.to_dict(), "/nowhere") for s in specs])
    with Session(engine) as s, s.begin():
        for i, d in enumerate(decisions):
            s.execute(update(Run).where(Run.id == d.run_id).values(status="done", throughput=100.0 + 10 * (i // 3) + i % 3))
    return engine, query.runs(engine, study="cfg")


def test_every_reader_of_a_configuration_finds_the_same_three_of_three_repeats(tmp_path):
    specs = _specs()
    assert len({run_key(s) for s in specs}) == 9                       # nine runs of their own
    # the sweep's repeats on demand, before anything ran
    by_sweep = pd.Series([configuration_key(s) for s in specs]).value_counts()
    assert sorted(by_sweep) == [3, 3, 3]
    engine, runs = _study(tmp_path)
    # the stored runs grouped on the configuration's axes (what the figures and the artifact read)
    plain = configuration.hashable(query.expand_json(runs, "params"))
    axes = [a for a in configuration.config_axes(plain) if a in plain]
    assert sorted(plain.groupby(axes, dropna=False).size()) == [3, 3, 3]
    varying = [a for a in axes if plain[a].nunique(dropna=False) > 1]
    assert varying == ["batch_size", "params.act"]                      # the artifact's swept axes
    # compare: each configuration's repeats averaged
    frame = compare.compare(engine, "batch_size=16", study="cfg")
    assert sorted(frame["repeats"]) == [3, 3, 3]
    assert sorted(frame["throughput_mean"]) == [101.0, 111.0, 121.0]
    # regression: a study against itself matches each configuration, three repeats a side
    change = regression.compare_sets(runs, runs)
    assert len(change) == 3 and set(change["a_repeats"]) == {3} and set(change["b_repeats"]) == {3}
    engine.dispose()


def test_the_control_the_old_rule_split_repeats_on_fields_grouping_leaves_out():
    """Until issue 60 the sweep's rule was the run's key with seed and repeat zeroed: it split each
    configuration's repeats by timeline window and seed_per_repeat, where compare saw three."""
    old = pd.Series([run_key(dataclasses.replace(s, repeat=0, seed=0)) for s in _specs()]).value_counts()
    assert sorted(old) == [1] * 9
