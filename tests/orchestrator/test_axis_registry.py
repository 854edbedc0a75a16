"""One registry of a run's fields: every layer derives from it, and a migrated database agrees.

Fails when someone adds a field to one place and not the others — the drift that once
made ``compare`` average runs that differed only in momentum.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import update
from sqlalchemy.orm import Session

from orchestrator.sweep import schema as config_schema
from orchestrator.terminal.output import SUMMARY_COLUMNS
from orchestrator.terminal.tables import SWEEP_COLUMNS
from orchestrator.sweep.runspec import build_run_spec, run_key
from results_db import connect
from results_db.analysis import compare, configuration
from results_db.store import query
from results_db.report.figures import render_study
from results_db.store.runs import PlannedRun, register_runs
from results_db.store.schema import Base, Run, Step, runs_table
from workloads.spec import CONFIG_FIELDS, FIELDS, IDENTITY_FIELDS, RunSpec

from conftest import scalestudy


def test_every_layer_derives_from_the_registry():
    names = [f.name for f in FIELDS]
    assert names == [f.name for f in dataclasses.fields(RunSpec)]
    columns = {c.name for c in runs_table.columns}
    for f in FIELDS:
        assert (f.name in columns) == f.column, f.name
        if f.column:
            assert f.name in query.RUN_COLUMNS, f.name
    # runs that differ only in these are repeats of one configuration: the seed, the repeat index,
    # whether repeats vary the seed, and which steps and ranks their timeline recorded (each still a
    # run of its own)
    repeats_of_one = {f.name for f in FIELDS if f.identity and not f.grouping}
    assert repeats_of_one == {"seed", "repeat", "seed_per_repeat", "timeline_steps", "timeline_ranks"}
    assert set(configuration.CONFIG_AXES) == set(IDENTITY_FIELDS) - repeats_of_one == set(CONFIG_FIELDS)
    for table in (SUMMARY_COLUMNS, SWEEP_COLUMNS):
        assert "seed" in table and all(c in query.RUN_COLUMNS for c in table)
    # the Hydra schema holds exactly the registry's config keys, the workload keys, the sweep settings
    # and the retry policy's counts, and the repeats-on-demand rule's keys
    expected = {f.config for f in FIELDS if f.config} | {f"workload.{k}" for k in config_schema.WORKLOAD_KEYS} \
        | set(config_schema.SETTINGS) | {f"retries.{k}" for k in config_schema.RETRY_KEYS} \
        | {f"repeats.{k}" for k in config_schema.REPEAT_KEYS}
    assert set(config_schema.config_keys()) == expected


def test_defaults_live_in_one_place():
    """The Hydra schema's defaults are the spec's (threads_per_node follows workers_per_node; the study is required)."""
    schema = config_schema.SweepConfig()
    for f in FIELDS:
        if not f.config:
            continue
        head, _, rest = f.config.partition(".")
        value = getattr(getattr(schema, head), rest) if rest else getattr(schema, head)
        if f.name == "study":
            assert value == "???"
        elif f.name == "threads_per_node":
            assert value == "${workers_per_node}"
        elif f.name == "device":   # resolved per site: cuda where the site declares GPUs, else the spec's cpu
            assert value == "auto" and f.default == "cpu"
        else:
            assert value == (list(f.default) if isinstance(f.default, tuple) else f.default), f.name
    # a spec built from the schema's defaults alone equals RunSpec's defaults
    built = build_run_spec({"study_name": "d"})
    assert dataclasses.replace(built, study="") == RunSpec()


def _v1_run_key(spec: RunSpec) -> str:
    """run_key as the first release computed it (its own field list, written out here)."""
    fields = ("site", "nodes", "workers_per_node", "threads_per_node", "batch_size", "algorithm", "model", "dataset",
              "epochs", "steps_per_epoch", "lr", "momentum", "seed", "fusion_threshold_mb", "cycle_time_ms",
              "timeline", "device", "sync_every", "imbalance_kind", "imbalance_ranks", "imbalance_delay_ms",
              "imbalance_rank", "imbalance_sigma")
    blob = json.dumps({f: getattr(spec, f) for f in fields}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def test_run_keys_of_older_runs_do_not_change_and_new_fields_count_when_set():
    base = {"study_name": "k", "nodes": 2, "workers_per_node": 2, "batch_size": 16, "momentum": 0.5}
    spec = build_run_spec(base)
    # sync_every was 10 then (steps); runs that do not read it (all but eager-SGD's) keep their keys
    assert run_key(spec) == _v1_run_key(dataclasses.replace(spec, sync_every=10))
    keys = {run_key(spec)}
    for change in ({"params": {"hidden": 128}}, {"repeat": 1}, {"momentum": 0.9}, {"steps_per_epoch": 5},
                   {"imbalance": {"kind": "fixed", "sigma": 2.0}}, {"timeline": True}, {"engine_thread": False}):
        keys.add(run_key(build_run_spec({**base, **change})))
    assert len(keys) == 8
    # not part of a run's identity: where the data lies, the time limit, the study
    assert run_key(build_run_spec({**base, "run_timeout": 10.0, "study_name": "other"})) == run_key(spec)


@pytest.mark.parametrize("db_kind", ["sqlite", "postgresql"])
def test_a_migrated_database_matches_the_models(tmp_path, db_kind, request):
    """Alembic's own comparison of a database migrated from scratch with the ORM's tables."""
    url = f"sqlite:///{tmp_path / 'm.db'}" if db_kind == "sqlite" else request.getfixturevalue("postgres_url")
    if db_kind == "postgresql":
        from conftest import _fresh_postgres

        _fresh_postgres(url)
    engine = connect(url)
    with engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diffs == [], diffs
    engine.dispose()


def _runs_differing_in(engine, field_changes: list[dict], throughputs: list[float]) -> None:
    """Finished runs with those throughputs, each with two step records of its two ranks
    (forward time = throughput / 1000, so the step breakdown tells configurations apart)."""
    plans = []
    for i, change in enumerate(field_changes):
        spec = dataclasses.replace(RunSpec(study="reg", nodes=1, workers_per_node=2, threads_per_node=2,
                                           batch_size=16, timeline=False), **change)
        plans.append(PlannedRun(f"r{i}", spec.to_dict(), "/nowhere"))
    decisions = register_runs(engine, "reg", plans)
    with Session(engine) as s, s.begin():
        for d, thr in zip(decisions, throughputs):
            s.execute(update(Run).where(Run.id == d.run_id).values(status="done", throughput=thr))
            s.add_all([Step(run_id=d.run_id, rank=r, step=k, epoch=0, samples=16, t_start=float(k), data=0.0,
                            forward=thr / 1000, backward=0.0, comm_wait=0.0, update=0.0)
                       for r in (0, 1) for k in (0, 1, 2)])


@pytest.mark.parametrize("field, values", [("momentum", (0.5, 0.9)), ("params", ({"hidden": 128}, {"hidden": 256}))])
@pytest.mark.sweep
def test_runs_differing_only_in_one_field_are_two_configurations(db_url, tmp_path, field, values):
    engine = connect(db_url)
    # two seeds per value: repeats average, the two values never do
    changes = [{field: v, "seed": s} for v in values for s in (0, 1)]
    _runs_differing_in(engine, changes, [100.0, 110.0, 200.0, 220.0])
    axis = "params.hidden" if field == "params" else field
    frame = compare.compare(engine, "algorithm=sync", study="reg")
    assert sorted(frame["throughput_mean"]) == [105.0, 210.0] and list(frame["repeats"]) == [2, 2]
    assert axis in frame.columns
    grouped = compare.aggregate(engine, [axis], {"throughput": ["mean", "count"]}, study="reg")
    assert sorted(grouped["throughput_mean"]) == [105.0, 210.0]
    # every figure that groups configurations keeps them apart
    results = {r.name: r for r in render_study(engine, "reg", tmp_path / "figs")}
    assert not results["step_time_breakdown"].skipped
    breakdown = pd.read_csv(tmp_path / "figs" / "step_time_breakdown.csv")
    assert len(breakdown) == 2 and sorted(breakdown["forward"].round(4)) == [0.105, 0.21]  # pooled over seeds, per config
    manifest = json.loads((tmp_path / "figs" / "manifest.json").read_text())
    assert axis in manifest["varying_axes"]
    if field == "params":
        drawn = pd.read_csv(tmp_path / "figs" / "throughput_vs_param_hidden.csv")
        assert sorted(drawn["throughput_mean"]) == [105.0, 210.0]
    # the where filter reads the field's column, typed
    value = values[0]["hidden"] if field == "params" else values[0]
    assert len(query.runs(engine, study="reg", where=f"{axis}={value}")) == 2
    out = scalestudy("query", "--study", "reg", "--group-by", axis, "--format", "csv", "--db", db_url, cwd=tmp_path)
    assert out.returncode == 0 and len(out.stdout.strip().splitlines()) == 3, out.stderr
    engine.dispose()


def test_text_and_mixed_parameters_are_axes_too(tmp_path):
    """A text parameter swept at three values is drawn on a categorical axis; values that
    pandas would call equal (1, 1.0, True) but run_key tells apart stay apart."""
    engine = connect(f"sqlite:///{tmp_path / 'r.db'}")
    _runs_differing_in(engine, [{"params": {"act": a}} for a in ("relu", "gelu", "tanh")] +
                       [{"params": {"act": v}} for v in (1, 1.0, True)], [10.0, 20.0, 30.0, 40.0, 50.0, 60.0])
    results = {r.name: r for r in render_study(engine, "reg", tmp_path / "figs")}
    assert not results["throughput_vs_param_act"].skipped
    drawn = pd.read_csv(tmp_path / "figs" / "throughput_vs_param_act.csv")
    assert sorted(drawn["throughput_mean"]) == [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]
    frame = compare.aggregate(engine, ["params.act"], {"throughput": ["count"]}, study="reg")
    assert len(frame) == 6
    assert len(query.runs(engine, where="params.act=gelu")) == 1


def _profile_file() -> str:
    """A compute profile of the default configuration (small_cnn, batch 32, 1 thread), for ``compute``."""
    import tempfile

    from workloads.emulation import ComputeProfile

    path = Path(tempfile.mkdtemp(prefix="axis-profile-")) / "p.json"
    path.write_text(ComputeProfile((0.01,), (0.02,), {}, {"model": "small_cnn", "batch_size": 32,
                                                          "threads_per_worker": 1}).to_json())
    return str(path)


def _non_default(f) -> object:
    """A valid value different from the field's default, for the build test below."""
    special = {"site": "local_slurm", "algorithm": "ddp", "model": "resnet20", "dataset": "synthetic_images",
               "device": "cpu", "imbalance_kind": "fixed", "workload_kind": "command", "study": "other",
               "dataset_path": "/data/x", "threads_per_node": 2, "workers_per_node": 2, "imbalance_rank": 0,
               "params": {"x": 1}, "run_timeout": 30.0, "timeline": True, "steps_per_epoch": 5,
               "compute": "emulated", "compute_profile": "set below", "data_path": "torch_distributed",
               "eager_catch_up": "latest", "timeline_steps": "3-4"}
    if f.name in special:
        return special[f.name]
    if f.type is bool:
        return not f.default
    if f.type in (int, float):
        return f.type(f.default + 2)
    raise AssertionError(f"give test_every_config_field_reaches_the_spec a value for {f.name}")


@pytest.mark.parametrize("f", [f for f in FIELDS if f.config and f.name not in ("device",)], ids=lambda f: f.name)
def test_every_config_field_reaches_the_spec(f):
    """A field with a config key that build_run_spec forgot to read would be dropped
    silently; each must reach the spec, and change run_key exactly when it is identity."""
    base = {"study_name": "k"}
    if f.name in ("sync_every", "eager_catch_up"):   # read by eager-SGD only: other runs keep the default
        base["algorithm"] = "eager_solo"
    if f.name in ("timeline_steps", "timeline_ranks"):   # they sample a timeline: one must be on
        base["timeline"] = True
    if f.name == "seed_per_repeat":   # the first repeat trains with seed either way: a later one
        base["repeat"] = 1
    value = _non_default(f)
    head, _, rest = f.config.partition(".")
    change = {head: {rest: value}} if rest else {head: value}
    if f.name == "workload_kind":
        change = {"workload": {"kind": "command", "command": ["true"]}}
    if f.name.startswith("imbalance_") and f.name != "imbalance_kind":
        change = {"imbalance": {"kind": "fixed", rest: value}}
    if f.name == "site":
        change["nodes"] = 1
    if f.name in ("compute", "compute_profile"):
        profile = _profile_file()
        change, value = {"compute": "emulated", "compute_profile": profile}, \
            "emulated" if f.name == "compute" else profile
    before, after = build_run_spec(base), build_run_spec({**base, **change})
    expected = value if f.name != "study" else "other"
    assert getattr(after, f.name) == expected, f.name
    assert (run_key(before) != run_key(after)) == (f.identity or f.name.startswith("imbalance_")
                                                   or f.name == "workload_kind"), f.name
