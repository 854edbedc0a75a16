"""eager-SGD's hyperplane regression as a study (issue 52): the data, the mean-squared-error
objective, padded compute, time to a target loss, the presets and the paper's numbers."""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import pytest
import torch
from sqlalchemy import update
from sqlalchemy.orm import Session

from orchestrator.errors import ConfigError
from orchestrator.sweep.runspec import build_run_spec
from results_db import connect
from results_db.store import query
from results_db.analysis.paper_claims import CLAIMS, loss_target, paper_vs_run
from results_db.store.runs import PlannedRun, register_runs
from results_db.store.schema import Eval, Run
from workloads import objective
from workloads.data import hyperplane, load_dataset
from workloads.emulation import ComputeProfile, emulate_compute, pad_compute, shipped_profile
from workloads.models import build_model
from workloads.registry import DATASETS, MODELS, dataset_task
from workloads.spec import RunSpec

from conftest import scalestudy

PRESETS = ("eager_sgd_paper_hyperplane", "eager_sgd_paper_hyperplane_quarter")


# -- the data and the objective -------------------------------------------------------------------

def test_the_hyperplane_is_the_papers_size_a_regression_and_the_same_every_time():
    data = load_dataset("hyperplane")
    assert data.x_train.shape == (32_768, 8_192) and data.y_train.shape == (32_768,)
    assert data.x_test.shape == (4_096, 8_192) and data.x_train.dtype == data.y_train.dtype == torch.float32
    assert data.num_classes is None and data.kind == "regression" and data.task == "regression"
    assert MODELS["hyperplane_mlp"] == DATASETS["hyperplane"][0] == data.kind
    assert dataset_task("hyperplane") == "regression" and dataset_task("digits") == "classification"
    model = build_model("hyperplane_mlp", data.input_shape, data.num_classes, seed=0)
    assert sum(p.numel() for p in model.parameters()) == 8_193        # the paper's 8,193 parameters
    again = load_dataset("hyperplane")
    assert torch.equal(again.x_train[:64], data.x_train[:64]) and torch.equal(again.y_test, data.y_test)
    other = hyperplane(n=64, features=16, n_test=8, seed=1)
    assert not torch.equal(other.x_train, hyperplane(n=64, features=16, n_test=8, seed=2).x_train)
    assert torch.equal(other.y_train, hyperplane(n=64, features=16, n_test=8, seed=1).y_train)


def test_the_mse_objective_against_numpy_and_least_squares_at_the_noise_floor():
    """A closed-form least-squares fit to the training points, scored by the objective on the held-out
    points: the validation MSE of OLS with noise variance 1 is 1 + d / (n - d - 1) in expectation."""
    n, d = 4096, 64
    data = hyperplane(n=n, features=d, n_test=4096, seed=5)
    x = np.c_[data.x_train.double().numpy(), np.ones(n)]
    coef, *_ = np.linalg.lstsq(x, data.y_train.double().numpy(), rcond=None)
    model = build_model("hyperplane_mlp", data.input_shape, None, seed=0)
    with torch.no_grad():
        model.fc.weight.copy_(torch.tensor(coef[:-1], dtype=torch.float32)[None])
        model.fc.bias.fill_(float(coef[-1]))
        out = model(data.x_test)
    correct, summed, count = objective.scores(out, data.y_test)
    assert correct is None and count == 4096 and math.isnan(objective.top1(correct, count))
    expected = 1 + d / (n - d - 1)
    assert summed / count == pytest.approx(expected, rel=0.08)
    by_hand = float(np.mean((out.numpy().ravel() - data.y_test.numpy()) ** 2))
    assert summed / count == pytest.approx(by_hand, rel=1e-5)
    assert float(objective.loss(out, data.y_test)) == pytest.approx(by_hand, rel=1e-5)
    # the untrained model is far from the plane: |w*|^2 + b*^2 + 1, about d
    with torch.no_grad():
        start = objective.scores(build_model("hyperplane_mlp", (d,), None, seed=0)(data.x_test), data.y_test)
    assert start[1] / start[2] > 20 * expected
    # classification is as it was: integer labels, cross-entropy, top-1
    logits, labels = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0]]), torch.tensor([0, 0, 0])
    c, s, k = objective.scores(logits, labels)
    assert (c, k) == (2, 3) and s == pytest.approx(float(torch.nn.functional.cross_entropy(logits, labels,
                                                                                           reduction="sum")))
    with pytest.raises(ValueError, match="one per value"):
        objective.loss(torch.zeros(4, 2), torch.zeros(4))


# -- padded compute ---------------------------------------------------------------------------------

def _step(model, x, y):
    """One training step's forward and backward; their seconds and the gradients."""
    model.zero_grad()
    t0 = time.perf_counter()
    out = model(x)
    loss = objective.loss(out, y)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, [p.grad.clone() for p in model.parameters()]


def test_padded_compute_lasts_the_profile_with_real_gradients_and_emulated_gives_zeros():
    torch.set_num_threads(1)
    data = hyperplane(n=256, features=64, n_test=64, seed=3)
    x, y = data.x_train[:32], data.y_train[:32]
    profile = ComputeProfile((0.05,), (0.10,), {}, {})
    plain = build_model("hyperplane_mlp", (64,), None, seed=0)
    padded = build_model("hyperplane_mlp", (64,), None, seed=0)
    pad = pad_compute(padded, profile, seed=0, rank=0)
    seen = []   # when an engine's hook (after accumulation) sees each gradient
    for p in padded.parameters():
        p.register_post_accumulate_grad_hook(lambda p: seen.append(time.perf_counter()))
    plain_forward, plain_backward, reference = _step(plain, x, y)
    plain_step = plain_forward + plain_backward   # this machine's own step, busy or not: the margin's base
    for _ in range(3):
        seen.clear()
        start = time.perf_counter()
        forward, backward, grads = _step(padded, x, y)
        assert forward >= 0.05 and backward >= 0.10 and forward + backward >= 0.15
        assert forward + backward < 0.15 + plain_step + 0.1   # held to the profile, not beyond it
        assert max(seen) - start >= 0.15                # the engines see the last gradient at the profiled end
        for g, r in zip(grads, reference):              # the real math: the unpadded model's gradients
            assert torch.allclose(g, r) and g.abs().sum() > 0
    assert len(pad.drawn) == 3 and pad.overran == 0
    with torch.no_grad():                               # an evaluation is computed, not held
        t0 = time.perf_counter()
        plain.eval()
        plain(data.x_test)
        plain_eval = time.perf_counter() - t0           # the same evaluation unpadded, measured here
        t0 = time.perf_counter()
        padded.eval()
        padded(data.x_test)
        padded.train()
        assert time.perf_counter() - t0 < plain_eval + 0.04   # a held forward would add its 0.05 s
    emulated = build_model("hyperplane_mlp", (64,), None, seed=0)   # the control: emulated compute sleeps
    emulate_compute(emulated, profile, seed=0, rank=0, sample_input=x)
    forward, backward, grads = _step(emulated, x, y)
    assert forward + backward >= 0.15 and all(g.abs().sum() == 0 for g in grads)


@pytest.mark.sweep
def test_compute_choices_are_checked_in_one_line(tmp_path):
    base = {"study_name": "h", "model": "hyperplane_mlp", "dataset": "hyperplane", "batch_size": 256}
    spec = build_run_spec({**base, "compute": "padded", "compute_profile": "paper_hyperplane"})
    assert spec.compute == "padded" and spec.compute_profile == str(shipped_profile("paper_hyperplane"))
    for bad, field in (({"compute": "fast"}, "compute"), ({"compute": "padded"}, "compute_profile"),
                       ({"compute": "real", "compute_profile": "paper_hyperplane"}, "compute_profile"),
                       ({"compute": "padded", "compute_profile": "paper_hyperplane", "batch_size": 64},
                        "compute_profile")):
        with pytest.raises(ConfigError) as err:
            build_run_spec({**base, **bad})
        assert err.value.field == field
    with pytest.raises(ConfigError, match="takes regression inputs"):
        build_run_spec({**base, "dataset": "digits"})
    proc = scalestudy("sweep", "study=eager_sgd_paper_hyperplane", "compute=fast", "--dry-run", cwd=tmp_path)
    assert proc.returncode == 2 and "compute" in proc.stderr and "fast" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    proc = scalestudy("sweep", "study=eager_sgd_paper_hyperplane", "compute_profile=nope.json", "--dry-run",
                      cwd=tmp_path)
    assert proc.returncode == 2 and "compute_profile" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_the_shipped_profiles_are_the_papers_derived_step():
    for name, step in (("paper_hyperplane", 0.410), ("paper_hyperplane_quarter", 0.1025)):
        profile = ComputeProfile.load(shipped_profile(name))
        assert profile.forward[0] + profile.backward[0] == pytest.approx(step)
        assert profile.source["model"] == "hyperplane_mlp" and "Fig. 10a" in profile.source["from"]
    # the derivation: sync's step is C + D, eager-SGD's C
    for rate, delay in ((1.64, 0.2), (1.41, 0.3), (1.23, 0.4), (2.45, 0.0)):
        assert 1 / rate - delay == pytest.approx(0.410, abs=0.005)


@pytest.mark.parametrize("preset", PRESETS)
def test_the_presets_plan_here(tmp_path, preset):
    proc = scalestudy("sweep", f"study={preset}", "--dry-run", f"hydra.sweep.dir={tmp_path / 'mr'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # 3 delays x 3 seeds x (sync, eager_solo's paper and apply_all): 27 runs (36 jobs, sync's twice)
    assert proc.stdout.count("    launch: ") == 27 and "model=hyperplane_mlp" in proc.stdout
    assert proc.stdout.count("the same run as #") == 9
    assert loss_target(preset) == 4.7


# -- time to a target loss, the report and the paper's numbers ----------------------------------------

def _add_runs(engine, study: str, rows: list[dict]) -> list[int]:
    """Runs of ``study`` through the real API, each done with its rate and its evaluations
    [(epoch, wall, loss)] (no top-1: a regression)."""
    plans = [PlannedRun(f"{study}-{i}", RunSpec(study=study, model="hyperplane_mlp", dataset="hyperplane",
                                                 workers_per_node=8, batch_size=256, compute="padded",
                                                 imbalance_kind="injected", algorithm=r["algorithm"],
                                                 imbalance_delay_ms=r["delay"], seed=r.get("seed", 0)).to_dict(),
                        f"/runs/{i}", {}) for i, r in enumerate(rows)]
    ids = [d.run_id for d in register_runs(engine, study, plans)]
    with Session(engine) as s, s.begin():
        for run_id, r in zip(ids, rows):
            s.execute(update(Run).where(Run.id == run_id).values(
                status="done", throughput=2048 * r["rate"], rounds_per_second=r["rate"], classes=None,
                final_top1=None, final_loss=r["evals"][-1][2], hosts="n1"))
            for epoch, wall, loss in r["evals"]:
                s.add(Eval(run_id=run_id, epoch=epoch, wall=wall, top1=None, loss=loss, samples_seen=2048 * 16))
    return ids


EVALS = {   # (algorithm, delay) -> (rounds/s, evals); by hand: the first loss <= 4.7 and its wall
    ("sync", 200): (1.6, [(0, 10.0, 900.0), (1, 20.0, 9.0), (2, 30.0, 4.7), (3, 40.0, 2.0)]),       # 30 s
    ("sync", 400): (1.2, [(0, 14.0, 900.0), (1, 28.0, 5.0), (2, 42.0, 4.71), (3, 56.0, 4.69)]),     # 56 s
    ("eager_solo", 200): (2.4, [(0, 7.0, 800.0), (1, 14.0, 4.0), (2, 21.0, 3.0)]),                  # 14 s
    ("eager_solo", 400): (2.5, [(0, 7.0, 800.0), (1, 14.0, float("nan")), (2, 21.0, 6.0)]),         # never
}


@pytest.fixture
def regression_study(tmp_path):
    url = f"sqlite:///{tmp_path / 'h.db'}"
    engine = connect(url)
    ids = _add_runs(engine, "eager_sgd_paper_hyperplane", [{"algorithm": a, "delay": d, "rate": rate, "evals": e}
                                                           for (a, d), (rate, e) in EVALS.items()])
    return engine, url, ids


def test_time_to_loss_against_a_hand_written_sequence(regression_study):
    engine, _, ids = regression_study
    table = query.time_to_loss(engine, ids, 4.7)
    assert table["seconds"].tolist()[:3] == [30.0, 56.0, 14.0] and math.isnan(table["seconds"].iloc[3])
    assert table["epoch"].tolist()[:3] == [2, 3, 1] and table["samples"].iloc[0] == 2048 * 16
    assert query.time_to_loss(engine, ids, 1000.0)["seconds"].tolist() == [10.0, 14.0, 7.0, 7.0]
    assert query.time_to_accuracy(engine, ids, 0.5)["seconds"].isna().all()     # no top-1 reaches anything
    frame = pd.DataFrame({"run_id": [7, 7, 7], "epoch": [2, 0, 1], "wall": [3.0, 1.0, 2.0],
                          "loss": [1.0, 3.0, 1.5], "top1": [None] * 3, "samples_seen": [None] * 3})
    assert query.first_reaching(frame, [7], 2.0, "loss")["seconds"].tolist() == [2.0]   # ordered by epoch


def test_the_report_reads_seconds_to_validation_mse_and_sets_the_paper_beside(regression_study, tmp_path):
    from results_db.report.figures import derived
    from results_db.report.figures.data import load_study
    from results_db.report.html_report import build_report

    engine, url, _ = regression_study
    sr = load_study(engine, "eager_sgd_paper_hyperplane")
    assert derived.default_target(engine, sr) is None and derived.default_loss_target(engine, sr) == 4.7
    report = build_report(engine, "eager_sgd_paper_hyperplane", tmp_path / "rep", url)
    page = report.index.read_text()
    assert "seconds to validation MSE ≤ 4.7" in page and "final validation MSE" in page
    assert "final top-1 accuracy" not in page
    table = report.configurations.set_index("config")
    sync200 = table.loc[[c for c in table.index if "sync" in c and "200" in c][0]]
    assert sync200["ttl_seconds_mean"] == 30.0 and sync200["target_loss"] == 4.7
    assert table["ttl_reached"].tolist().count(0) == 1                           # eager at 400: never
    figures = {r.name: r for r in report.figures}
    assert not figures["time_to_loss"].skipped and not figures["loss_vs_time"].skipped
    assert figures["accuracy_vs_epoch"].skipped                                  # no top-1 to draw
    paper = pd.read_csv(tmp_path / "rep" / "paper-vs-this-run.csv").set_index("claim")
    rate = paper.loc["synch-SGD steps/s at 200 ms"]
    assert rate["paper"] == 1.64 and rate["this_run"] == pytest.approx(1.6)
    assert paper.loc["synch-SGD seconds to validation MSE 4.7 at 200 ms", "this_run"] == 30.0
    assert paper.loc["synch-SGD seconds to validation MSE 4.7 at 400 ms", "paper"] == 625.3
    eager = paper.loc["eager-SGD (solo) seconds to validation MSE 4.7"]
    assert eager["paper"] == 312 and eager["this_run"] == 14.0 and eager["note"] == "1 of 2 runs reached it"
    speedup = paper.loc["eager-SGD (solo) over synch-SGD at 400 ms (2.45 vs 1.23 steps/s)"]
    assert speedup["paper"] == pytest.approx(2.45 / 1.23, abs=1e-3) and speedup["this_run"] == pytest.approx(2.5 / 1.2)
    assert "2.45 steps/s" in page and "625.3 s" in page
    # the study may name another target
    other = build_report(engine, "eager_sgd_paper_hyperplane", tmp_path / "rep2", url, loss_target=900.0)
    assert "seconds to validation MSE ≤ 900" in other.index.read_text()


def test_the_quarter_studys_claims_are_the_papers_scaled():
    full = {c.what: c for c in CLAIMS if c.study == "eager_sgd_paper_hyperplane"}
    quarter = {c.what: c for c in CLAIMS if c.study == "eager_sgd_paper_hyperplane_quarter"}
    assert len(full) == len(quarter) == 13
    assert full["synch-SGD steps/s at 200 ms"].value == 1.64 and full["synch-SGD steps/s at 200 ms"].source.endswith(
        "Fig. 10a")
    q = quarter["synch-SGD steps/s at 50 ms (the paper's x 4: this study's times are x 0.25)"]
    assert q.value == pytest.approx(1.64 * 4) and q.match["imbalance_delay_ms"] == 50
    assert quarter["eager-SGD (solo) seconds to validation MSE 4.7 (the paper's x 0.25: this study's times are "
                   "x 0.25)"].value == pytest.approx(78.0)
    speedups = sorted(c.value for c in quarter.values() if c.metric == "speedup")
    assert speedups == sorted(c.value for c in full.values() if c.metric == "speedup")    # scale-free
    runs = pd.DataFrame([{"run_id": 1, "status": "done", "algorithm": "sync", "imbalance_delay_ms": 50,
                          "rounds_per_second": 6.0, "world_size": 8}])
    table = paper_vs_run(runs, "eager_sgd_paper_hyperplane_quarter").set_index("claim")
    assert table.loc[q.what, "this_run"] == 6.0
    assert table.loc["eager-SGD (solo) seconds to validation MSE 4.7 (the paper's x 0.25: this study's times are "
                     "x 0.25)", "note"] == "no finished run"
