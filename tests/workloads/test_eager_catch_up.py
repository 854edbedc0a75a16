"""eager-SGD's catch-ups on real MPI ranks: the paper's mechanism and the extensions beside it.

The rates here are a mechanism's signature, not a speed measurement: the compute is emulated
(sleeps), so a delayed rank's cost is known, and the check is a ratio between runs of one
test, each against a control that must fail it (``lockstep``, the earlier mechanism, carries
its delays). The measured figures are in benchmarks/RESULTS.md (bench_eager_catch_up.py).
"""

from __future__ import annotations

import json

import pytest

from workloads.emulation import ComputeProfile

from conftest import REPO, mpiexec, write_spec

COMPUTE_S = 0.05          # each step's emulated forward + backward


@pytest.mark.mpi
@pytest.mark.parametrize("ranks, mode", [(3, "solo"), (4, "majority")])
def test_partial_allreduce_catch_up_loses_nothing_and_skips(ranks, mode):
    """With catch-up, a straggler takes every completed round at once and computes none of
    them; every rank still sees every round once, in order, and the sum of all reduced
    rounds equals the sum of every gradient computed (exact, integer-valued)."""
    proc = mpiexec(ranks, str(REPO / "tests" / "mpi_programs" / "check_partial.py"), mode, "catch_up",
                   timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"OK {mode} {ranks} ranks" in proc.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("catch_up", ["paper", "apply_all", "latest", "lockstep"])
def test_each_catch_up_follows_the_hand_worked_schedule(catch_up):
    """Two ranks, one late for 0.6 s at its step 1: which gradients reach which round, what each
    rank applies and computes, nothing lost or counted twice (tests/mpi_programs/check_schedule.py
    works the schedule out by hand in its docstring)."""
    proc = mpiexec(2, str(REPO / "tests" / "mpi_programs" / "check_schedule.py"), "solo", catch_up, timeout=120)
    assert proc.returncode == 0 and f"OK solo {catch_up}" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.mpi
def test_eager_evaluates_without_waiting_for_the_late_ranks():
    """Each rank scores its own model on its shard and sends the scores to rank 0, which neither
    waits for a late rank nor writes an epoch before every rank's is in; with one model on every
    rank the result is the collective's (tests/mpi_programs/check_evaluation.py)."""
    proc = mpiexec(3, str(REPO / "tests" / "mpi_programs" / "check_evaluation.py"), timeout=120)
    assert proc.returncode == 0 and "OK 3 ranks" in proc.stdout, proc.stdout + proc.stderr


def _profile(tmp_path) -> str:
    path = tmp_path / "sleepy.json"
    if not path.exists():
        path.write_text(ComputeProfile((COMPUTE_S * 0.25,), (COMPUTE_S * 0.75,), {},
                                       {"model": "small_cnn", "note": "test: sleep-dominated"}).to_json())
    return str(path)


def _run_all(tmp_path, ranks: int, runs: dict[str, dict], emulated: bool = True) -> dict[str, tuple[dict, list]]:
    """Training runs in turn, in one MPI job (one start-up for all: tests/mpi_programs/
    train_specs.py); per run its result and every rank's metrics records. Emulated compute
    sleeps and computes zero gradients: the drift test computes for real (a small model, its
    steps dominated by the injected sleep)."""
    compute = {"compute": "emulated", "compute_profile": _profile(tmp_path)} if emulated else {}
    specs = [write_spec(tmp_path / name, workers_per_node=ranks, threads_per_node=ranks, model="small_cnn",
                        dataset="digits", batch_size=8, epochs=1, **{"steps_per_epoch": 30, **compute, **fields})
             for name, fields in runs.items()]
    proc = mpiexec(ranks, str(REPO / "tests" / "mpi_programs" / "train_specs.py"), *map(str, specs), timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = {}
    for name in runs:
        records = [[json.loads(line) for line in (tmp_path / name / "metrics" / f"rank-{r}.jsonl").read_text()
                    .splitlines()] for r in range(ranks)]
        out[name] = json.loads((tmp_path / name / "result.json").read_text()), records
    return out


DELAY = {"imbalance_kind": "injected", "imbalance_ranks": 1, "imbalance_delay_ms": COMPUTE_S * 1000}
STRAGGLER = {"imbalance_kind": "fixed", "imbalance_delay_ms": COMPUTE_S * 1000}
STEPS = 60


def _simulated(kind: str, ranks: int, catch_up: bool) -> float:
    """The mechanism's rate under this imbalance over its rate without (perf_model.eager_rounds)."""
    from perf_model.eager_rounds import solo_round_rate
    from workloads.imbalance import DelayInjector

    delays = DelayInjector(kind, 1, COMPUTE_S * 1000, -1, 1.0, 0, ranks)
    return (solo_round_rate(delays, COMPUTE_S, STEPS, catch_up)
            / solo_round_rate(DelayInjector("none", 1, 0, -1, 1.0, 0, ranks), COMPUTE_S, STEPS))


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_eager_solo_rate_does_not_carry_the_delay_while_sync_slows_by_it(tmp_path, ranks):
    """A straggler sleeps D = C every step. eager_solo's rounds per second stay within 0.1 of
    the simulated mechanism's 0.97 of its rate without one (the last, synchronous round waits
    once; carrying the delay would give 0.5). At 2 ranks, the controls: sync falls to about
    C / (C + D); lockstep (every rank computes every round, as before) carries the delays and fails the same check; and with one
    rank of P drawn each step (eager-SGD's injection) the rank that leads a round meets a delay
    of its own half the time, so no mechanism keeps the rate (simulated: 0.75 of it with
    catch-up, 0.65 lockstep): the measured ratios follow the simulation
    (perf_model.eager_rounds), each within 0.1. Sync and the controls run at 2 ranks only (8 ranks'
    start-up alone is ~25 s on this 2-core machine); the runs of a size share one MPI job."""
    runs = {"eager": {}, "eager_straggler": STRAGGLER}
    if ranks == 2:
        runs.update(sync={"algorithm": "sync"}, sync_straggler={"algorithm": "sync", **STRAGGLER},
                    lockstep_straggler={"eager_catch_up": "lockstep", **STRAGGLER},
                    eager_injected=DELAY, lockstep_injected={"eager_catch_up": "lockstep", **DELAY})
    done = _run_all(tmp_path, ranks, {name: {"algorithm": "eager_solo", "steps_per_epoch": STEPS, **fields}
                                      for name, fields in runs.items()})
    rate = {name: result["rounds_per_second"] for name, (result, _) in done.items()}
    print(f"rounds per second at {ranks} ranks: {rate}")
    # the simulated mechanism keeps 0.97 of the rate, carrying the delay would keep 0.5: within
    # 0.1 of the simulation, as every ratio here (a fixed 0.9 failed once under CI's load at 0.89)
    carried = _simulated("fixed", ranks, catch_up=False)
    assert rate["eager_straggler"] / rate["eager"] >= _simulated("fixed", ranks, catch_up=True) - 0.1 > carried, rate
    if ranks == 2:
        assert rate["sync_straggler"] <= 0.75 * rate["sync"], rate      # C/(C+D) = 0.5, less the comm it shares
        # the check can fail: lockstep carries the delay
        assert rate["lockstep_straggler"] / rate["eager"] < _simulated("fixed", ranks, True) - 0.1, rate
        for name, catch_up in (("eager_injected", True), ("lockstep_injected", False)):
            expected = _simulated("injected", ranks, catch_up)
            assert rate[name] / rate["eager"] == pytest.approx(expected, abs=0.1), (name, expected, rate)


@pytest.mark.mpi
def test_catch_up_apply_all_keeps_models_identical_latest_drifts(tmp_path):
    """The models are compared at the final synchronous round, before it averages them (the
    run's only one: resync_epochs=0). ``paper``: every rank computes every step and the late
    rank applies the latest result, so it drifts until the last step's resync to rank 0's model,
    after which every rank holds the same. ``apply_all``: a rank that skipped rounds applied every
    result it missed, so no rank drifted (drift 0);
    ``latest`` (the paper's receive buffer): a rank that skipped drifted; ``lockstep``: nobody
    skipped, drift 0. Skipping ranks computed fewer gradients than rounds, and the stored
    rates say so."""
    drift, gradients = {}, {}
    done = _run_all(tmp_path, 4, {c: {"algorithm": "eager_solo", "eager_catch_up": c, "resync_epochs": 0, **DELAY}
                                  for c in ("apply_all", "latest", "lockstep", "paper")}, emulated=False)
    for catch_up, (result, records) in done.items():
        steps = [sorted(r["step"] for r in rank if r.get("type") == "step") for rank in records]
        rounds = [[r["round"] for r in rank if r.get("type") == "contribution" and r.get("local") != "resync"]
                  for rank in records]
        assert all(seen == list(range(30)) for seen in rounds)          # every rank took every round, in order
        gradients[catch_up] = result["gradients"]
        assert gradients[catch_up] == sum(len(s) for s in steps)
        assert result["gradients_per_second"] == pytest.approx(result["gradients"] / result["train_seconds"])
        assert result["throughput"] == pytest.approx(result["gradients"] * 8 / result["train_seconds"])
        drift[catch_up] = max(r["drift"] for rank in records for r in rank
                              if r.get("type") == "contribution" and r.get("drift") is not None)
        if catch_up == "latest":   # the three rates reach the database, each in its own column
            from results_db import connect
            from results_db.store import query
            from results_db.ingest.folder import ingest_run
            from results_db.store.runs import PlannedRun, register_runs
            from workloads.spec import RunSpec

            engine = connect(f"sqlite:///{tmp_path / 'r.db'}")
            [d] = register_runs(engine, "eager", [PlannedRun("k", RunSpec.load(tmp_path / catch_up / "spec.json")
                                                             .to_dict(), str(tmp_path / catch_up))])
            ingest_run(engine, d.run_id, tmp_path / catch_up)
            row = query.runs(engine, study="eager").iloc[0]
            assert row["rounds_per_second"] == pytest.approx(result["rounds_per_second"])
            assert row["gradients_per_second"] == pytest.approx(result["gradients_per_second"])
            assert row["rounds_per_second"] * 4 > row["gradients_per_second"]      # a rank skipped rounds
            assert (row["eager_catch_up"], row["resync_epochs"], row["sync_every"]) == ("latest", 0, 0)
            assert row["classes"] == 10          # digits: top-1 at chance is 0.1
    assert gradients["lockstep"] == 4 * 30 and gradients["paper"] == 4 * 30   # every rank computes every step
    assert gradients["apply_all"] < 4 * 30 and gradients["latest"] < 4 * 30
    assert drift["apply_all"] == 0.0 and drift["lockstep"] == 0.0
    assert drift["latest"] > 0.0, drift
    # the paper's mechanism: the late rank applied the latest result, so its model drifted from
    # rank 0's, and the re-synchronisation (rank 0's weights and momentum) removed it on every rank
    resyncs = [r for rank in done["paper"][1] for r in rank if r.get("type") == "contribution"
               and r.get("local") == "resync"]
    assert len(resyncs) == 4 and drift["paper"] > 0.0 and all(r["agreed"] for r in resyncs), resyncs


def test_resync_period_follows_the_paper_in_epochs_and_steps_where_asked():
    from workloads.spec import RunSpec

    assert RunSpec().resync_epochs == 10 and RunSpec().sync_every == 0     # the authors' scripts: 10 epochs
    assert RunSpec(resync_epochs=2).resync_period(24) == 48
    assert RunSpec(resync_epochs=2, sync_every=5).resync_period(24) == 5
    assert RunSpec(resync_epochs=0).resync_period(24) == 0


def test_a_catch_up_swept_beside_sync_does_not_run_sync_twice():
    """eager_catch_up=paper,apply_all with algorithm=sync,eager_solo: sync reads no catch-up, so
    its runs keep one key (the default), while each eager mode is a run of its own; a bad value is
    still refused for sync."""
    from orchestrator.errors import ConfigError
    from orchestrator.sweep.runspec import build_run_spec, run_key

    keys = {(a, c): run_key(build_run_spec({"study_name": "k", "algorithm": a, "eager_catch_up": c}))
            for a in ("sync", "eager_solo") for c in ("paper", "apply_all")}
    assert keys[("sync", "paper")] == keys[("sync", "apply_all")]
    assert keys[("eager_solo", "paper")] != keys[("eager_solo", "apply_all")]
    with pytest.raises(ConfigError, match="eager_catch_up"):
        build_run_spec({"study_name": "k", "algorithm": "sync", "eager_catch_up": "bogus"})
