"""Emulated compute: sleeps in place of forward and backward, real hooks, real MPI.

The unit tests drive ``EmulatedForward`` in this process (a real autograd pass, real
post-accumulate-grad hooks). The end-to-end test profiles a real run stored by a real
sweep and runs 8 emulated ranks of ``sync`` from it on this 2-core machine."""

from __future__ import annotations

import json
import statistics

import pytest
import torch
from torch import nn

from orchestrator.errors import ConfigError
from orchestrator.sweep.runspec import build_run_spec
from workloads.emulation import ComputeProfile, emulate_compute

from conftest import scalestudy


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def _profile(forward=(0.02,), backward=(0.06,), fractions=None, **source) -> ComputeProfile:
    return ComputeProfile(tuple(forward), tuple(backward), fractions or {}, {"model": "m", **source})


class FakeClock:
    """The emulator's clock, advanced only by its own sleeps: what it asks to sleep and when
    each gradient is handed over are then exact, on a loaded machine too (the end-to-end
    test below runs the real clock and real sleeps)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    import workloads.emulation

    fake = FakeClock()
    monkeypatch.setattr(workloads.emulation, "time", fake)
    return fake


def test_backward_hands_gradients_over_in_the_recorded_order_at_the_recorded_moments(clock):
    model = _model()
    # a recorded order that is not the reverse parameter order, so following it is visible
    fractions = {"2.bias": 0.1, "0.weight": 0.4, "2.weight": 0.7, "0.bias": 1.0}
    emulate_compute(model, _profile(fractions=fractions), seed=0, rank=0, sample_input=torch.zeros(2, 4))
    seen: list[tuple[str, float]] = []
    for name, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(lambda p, name=name: seen.append((name, clock.now)))
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    t0 = clock.now
    logits = model(x)
    assert logits.shape == (5, 3)
    assert clock.now - t0 == pytest.approx(0.02)              # forward slept its drawn time
    loss = nn.functional.cross_entropy(logits, y)
    tb = clock.now
    loss.backward()
    assert [n for n, _ in seen] == sorted(fractions, key=fractions.get)
    # each gradient at its recorded moment of the drawn 0.06 s: sleeps to deadlines from
    # backward's start (sleeping each fraction in turn would hand them over at 0.006, 0.03,
    # 0.072, 0.132 s)
    assert [t - tb for _, t in seen] == pytest.approx([f * 0.06 for f in sorted(fractions.values())])
    assert clock.now - tb == pytest.approx(0.06)
    for name, p in model.named_parameters():                 # real gradients of the real shapes
        assert p.grad is not None and p.grad.shape == p.shape and not p.grad.any()


def test_draws_come_from_the_recorded_steps_per_rank(clock):
    profile = _profile(forward=(0.002, 0.012), backward=(0.001, 0.001))

    def forward_draws(rank):
        model = _model()
        emulated = emulate_compute(model, profile, seed=3, rank=rank, sample_input=torch.zeros(2, 4))
        del clock.sleeps[:]
        for _ in range(16):
            model(torch.zeros(2, 4))
        return emulated.drawn, list(clock.sleeps)

    (d0, s0), (d1, s1) = forward_draws(0), forward_draws(1)
    # each forward slept the recorded step it drew, and nothing else
    for drawn, slept in ((d0, s0), (d1, s1)):
        assert len(drawn) == 16
        assert slept == pytest.approx([profile.forward[i] for i in drawn])
    # both recorded steps are drawn, and the two ranks draw differently (their own RNGs)
    assert set(d0) == {0, 1}
    assert d0 != d1
    assert forward_draws(0)[0] == d0   # and the same seed and rank draw the same again


def test_profile_file_round_trips_and_bad_ones_are_refused(tmp_path):
    p = _profile(forward=(0.1, 0.2), backward=(0.3, 0.4), fractions={"a": 0.5}, batch_size=8)
    path = tmp_path / "p.json"
    path.write_text(p.to_json())
    assert ComputeProfile.load(path) == p
    path.write_text(json.dumps({"schema": 1, "forward": [0.1], "backward": []}))
    with pytest.raises(ValueError, match="as many forward as backward"):
        ComputeProfile.load(path)
    with pytest.raises(ValueError, match="cannot read it"):
        ComputeProfile.load(tmp_path / "missing.json")


BASE = {"study_name": "emu", "model": "small_cnn", "dataset": "digits", "batch_size": 16}


def test_config_errors_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"compute_profile=None: compute=emulated needs a profile file"):
        build_run_spec({**BASE, "compute": "emulated"})
    with pytest.raises(ConfigError, match=r"compute='fake': unknown compute"):
        build_run_spec({**BASE, "compute": "fake"})
    with pytest.raises(ConfigError, match=r"compute_profile='x.json': is used only with compute=emulated"):
        build_run_spec({**BASE, "compute_profile": "x.json"})
    path = tmp_path / "p.json"
    path.write_text(ComputeProfile((0.1,), (0.2,), {}, {"model": "resnet20", "batch_size": 16,
                                                        "threads_per_worker": 1}).to_json())
    with pytest.raises(ConfigError, match=r"was recorded with model='resnet20' \(this run: 'small_cnn'\)"):
        build_run_spec({**BASE, "compute": "emulated", "compute_profile": str(path)})
    spec = build_run_spec({**BASE, "model": "resnet20", "dataset": "synthetic_images", "compute": "emulated",
                           "compute_profile": str(path)})
    assert spec.compute == "emulated" and spec.compute_profile == str(path.resolve())


@pytest.mark.mpi
def test_profile_a_real_run_then_run_eight_emulated_ranks(tmp_path):
    common = ["model=small_cnn", "dataset=digits", "batch_size=16", "epochs=1", "steps_per_epoch=30",
              "algorithm=sync", "nodes=1"]
    real = scalestudy("sweep", "study_name=emu", *common, "workers_per_node=1", "timeline=true",
                      f"hydra.sweep.dir={tmp_path / 'real'}", cwd=tmp_path)
    assert real.returncode == 0, real.stderr[-3000:]
    prof = scalestudy("profile", "1", "-o", "small.json", cwd=tmp_path)
    assert prof.returncode == 0, prof.stderr
    assert "tensors from the timeline" in prof.stdout
    profile = ComputeProfile.load(tmp_path / "small.json")
    assert len(profile.forward) == 25 and len(profile.ready_fraction) == 8   # small_cnn: 8 tensors
    emulated = scalestudy("sweep", "study_name=emu", *common, "workers_per_node=8", "threads_per_node=8",
                          "compute=emulated", "compute_profile=small.json", "timeline=true",
                          f"hydra.sweep.dir={tmp_path / 'emu'}", cwd=tmp_path)
    assert emulated.returncode == 0, emulated.stderr[-3000:]
    out = scalestudy("query", "--study", "emu", "--format", "json",
                     "--columns", "run_id,compute,world_size,final_top1,throughput", cwd=tmp_path)
    rows = {r["run_id"]: r for r in json.loads(out.stdout)}
    assert rows[1]["compute"] == "real" and rows[1]["final_top1"] is not None
    assert rows[2]["compute"] == "emulated" and rows[2]["world_size"] == 8
    assert rows[2]["final_top1"] is None and rows[2]["throughput"] > 0     # time measured, accuracy not
    # the emulated ranks slept the recorded times: per-step backward at least the profile's
    # (less a timer's slack), and real fused allreduces ran between them
    from results_db import connect
    from results_db.store import query

    engine = connect(f"sqlite:///{tmp_path / 'scalestudy.db'}")
    steps = query.steps(engine, [2])
    assert steps["rank"].nunique() == 8
    assert statistics.median(steps["backward"]) >= 0.9 * min(profile.backward)
    assert statistics.median(steps["forward"]) >= 0.9 * min(profile.forward)
    fused = query.events(engine, [2], phases=["allreduce"])
    assert len(fused) > 0 and fused["rank"].nunique() == 8


def test_unmeasured_or_diverged_values_are_written_as_null(tmp_path):
    """JSON has no NaN; the strict reader that ingests metrics files refuses it."""
    import orjson

    from workloads.metrics import MetricsWriter
    from workloads.run_folder import rank_metrics_file

    writer = MetricsWriter(tmp_path, 0)
    writer.eval(epoch=0, top1=float("nan"), loss=float("inf"), samples_seen=8)
    writer.close()
    record = orjson.loads(rank_metrics_file(tmp_path, 0).read_text().splitlines()[0])
    assert (record["top1"], record["loss"], record["samples_seen"]) == (None, None, 8)


def test_profiles_pool_runs_of_one_configuration(tmp_path):
    """Stored runs (made through the ORM): their steps pooled, each gradient's ready time the
    mean over them; a run of another batch size is refused by name."""
    import dataclasses

    from sqlalchemy import update
    from sqlalchemy.orm import Session

    from perf_model.profile import ProfileError, profile_of_runs
    from results_db import connect
    from results_db.store.runs import PlannedRun, register_runs
    from results_db.store.schema import Event, Run, Step
    from workloads.spec import RunSpec

    engine = connect(f"sqlite:///{tmp_path / 'p.db'}")
    plans = [PlannedRun(f"k{i}", dataclasses.replace(RunSpec(study="p"), batch_size=b, seed=i).to_dict(), "/x")
             for i, b in enumerate((16, 16, 32))]
    ids = [d.run_id for d in register_runs(engine, "p", plans)]
    with Session(engine) as s, s.begin():
        for run_id, scale in zip(ids, (1.0, 2.0, 1.0)):
            s.execute(update(Run).where(Run.id == run_id).values(status="done"))
            for k in range(8):
                t = 10.0 * k
                s.add(Step(run_id=run_id, rank=0, step=k, epoch=0, samples=16, t_start=t, data=0.0,
                           forward=0.01 * scale, backward=0.02 * scale, comm_wait=0.0, update=0.001))
                s.add(Event(run_id=run_id, rank=0, step=k, tensor="-", phase="backward", t0=t, t1=t + 0.02 * scale,
                            bytes=0))
                s.add(Event(run_id=run_id, rank=0, step=k, tensor="fc.weight", phase="grad_ready",
                            t0=t + 0.005 * scale * (1 if scale == 1 else 2), t1=t, bytes=4))
    pooled = profile_of_runs(engine, ids[:2], warmup=5)
    assert sorted(pooled.forward) == [0.01] * 3 + [0.02] * 3 and pooled.source["run_id"] == ids[:2]
    assert pooled.ready_fraction["fc.weight"] == pytest.approx((0.25 + 0.5) / 2)
    with pytest.raises(ProfileError, match=rf"run {ids[2]}: batch_size 32 \(run {ids[0]}: 16\)"):
        profile_of_runs(engine, [ids[0], ids[2]], warmup=5)
