"""What the papers state, beside what a study's runs measured: the report's "paper vs this run".

Each claim is one number a paper states (a speedup of one algorithm over another, an
accuracy), with its source (section, figure or table) and the settings it was measured at.
``paper_vs_run`` finds, among a study's runs, those that match the claim's own axes
(algorithm, injected delay), and gives this run's number beside the paper's with the
settings that differ (ranks, model, emulated compute): a claim is compared, never assumed.

Our ``sync`` stands for the papers' synchronous SGD (Deep500's allreduce SGD and Horovod: ours
is Horovod's design, fused allreduces overlapped with backprop); a speedup here is a ratio of
rounds per second (the paper's steps/s, ``runs.rounds_per_second``), with the spread of the
ratio of means over repeats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from . import confidence

EAGER_PAPER = "Li, Ben-Nun, Di Girolamo, Alistarh, Hoefler, PPoPP'20"


@dataclass(frozen=True)
class PaperClaim:
    study: str                     # the study preset that reproduces it (its study_name)
    source: str                    # paper, section / figure / table
    what: str                      # the claim in words
    metric: str                    # one of METRICS
    value: float
    match: dict[str, Any] = field(default_factory=dict)       # this run's axes that must equal these
    baseline: dict[str, Any] = field(default_factory=dict)    # speedup: the runs divided by
    settings: str = ""             # the paper's settings, in words
    target: float | None = None    # seconds_to_loss: the validation loss to reach


# what a claim's number is: "speedup" (rounds/s over the baseline's), "top1" (final test top-1),
# "rate" (rounds per second: the paper's steps/s), "seconds_to_loss" (wall seconds until the first
# evaluation at or below the claim's target validation loss; the runs' evaluations are needed)
METRICS = ("speedup", "top1", "rate", "seconds_to_loss")

HYPERPLANE_TARGET_MSE = 4.7   # sec. 7.2.1, Fig. 10b


def _hyperplane_claims(study: str, scale: float) -> list[PaperClaim]:
    """Sec. 7.2.1, Fig. 10a/10b: hyperplane regression, one process of 8 delayed 200/300/400 ms each
    step. ``scale``: the study's time scale (1: the paper's; 0.25: every time x 1/4, so rates are
    the paper's x 4 and times / 4; speedups are scale-free)."""
    src = f"{EAGER_PAPER}, sec. 7.2.1"
    hp = ("hyperplane regression, one-layer MLP of 8,193 parameters, 32,768 points, 8 processes, batch 2,048, one "
          "process drawn each step")
    scaled = "" if scale == 1 else f" (the paper's x {1 / scale:g}: this study's times are x {scale:g})"
    timed = "" if scale == 1 else f" (the paper's x {scale:g}: this study's times are x {scale:g})"
    out = []
    for delay, sync_rate, sync_seconds in ((200, 1.64, 468.9), (300, 1.41, 545.1), (400, 1.23, 625.3)):
        d = delay * scale
        at = {"imbalance_delay_ms": d}
        words = f"{hp}, {delay} ms" + ("" if scale == 1 else f" (here {d:g} ms)")
        out += [
            PaperClaim(study, f"{src}, Fig. 10a", f"synch-SGD steps/s at {d:g} ms{scaled}", "rate",
                       round(sync_rate / scale, 4), {"algorithm": "sync", **at}, {}, words),
            PaperClaim(study, f"{src}, Fig. 10a", f"eager-SGD (solo) steps/s at {d:g} ms{scaled}", "rate",
                       round(2.45 / scale, 4), {"algorithm": "eager_solo", **at}, {}, words),
            PaperClaim(study, f"{src}, Fig. 10a (ratio of its rates)",
                       f"eager-SGD (solo) over synch-SGD at {d:g} ms (2.45 vs {sync_rate} steps/s)", "speedup",
                       round(2.45 / sync_rate, 3), {"algorithm": "eager_solo", **at}, {"algorithm": "sync"}, words),
            PaperClaim(study, f"{src}, Fig. 10b",
                       f"synch-SGD seconds to validation MSE {HYPERPLANE_TARGET_MSE} at {d:g} ms{timed}",
                       "seconds_to_loss", round(sync_seconds * scale, 3), {"algorithm": "sync", **at}, {}, words,
                       HYPERPLANE_TARGET_MSE)]
    out.append(PaperClaim(study, f"{src}, Fig. 10b",
                          f"eager-SGD (solo) seconds to validation MSE {HYPERPLANE_TARGET_MSE}{timed}",
                          "seconds_to_loss", round(312 * scale, 3), {"algorithm": "eager_solo"}, {},
                          f"{hp}, 200-400 ms" + ("" if scale == 1 else f" (here {200 * scale:g}-{400 * scale:g} ms)"),
                          HYPERPLANE_TARGET_MSE))
    return out


def _claims() -> tuple[PaperClaim, ...]:
    r50 = "ResNet-50 on ImageNet, 64 processes (P100 GPUs), batch 8,192, 4 processes drawn each step"
    r32 = "ResNet-32 on CIFAR-10, 8 processes, batch 512, every process delayed 50-400 ms, shifted each step"
    lstm = "LSTM on UCF101 (Inception v3 features), 8 processes, batch 128, inherent imbalance"
    sync = {"algorithm": "sync"}
    out = []
    for delay, deep500, horovod in ((300, 1.25, 1.14), (460, 1.29, 1.27)):
        out += [PaperClaim("eager_sgd_paper_resnet50", f"{EAGER_PAPER}, sec. 7.2.2, Fig. 11a",
                           f"eager-SGD (solo) over synch-SGD (Deep500) at {delay} ms", "speedup", deep500,
                           {"algorithm": "eager_solo", "imbalance_delay_ms": delay}, sync, f"{r50}, {delay} ms"),
                PaperClaim("eager_sgd_paper_resnet50", f"{EAGER_PAPER}, sec. 7.2.2, Fig. 11a",
                           f"eager-SGD (solo) over synch-SGD (Horovod) at {delay} ms", "speedup", horovod,
                           {"algorithm": "eager_solo", "imbalance_delay_ms": delay}, sync, f"{r50}, {delay} ms")]
    out += [
        PaperClaim("eager_sgd_paper_resnet50", f"{EAGER_PAPER}, sec. 7.2.2, Table 2",
                   "eager-SGD (solo) over the asynchronous parameter server at 460 ms (1.19 vs 0.45 step/s)",
                   "speedup", 2.64, {"algorithm": "eager_solo", "imbalance_delay_ms": 460},
                   {"algorithm": "async_ps"}, f"{r50}, 460 ms"),
        PaperClaim("eager_sgd_paper_resnet50", f"{EAGER_PAPER}, sec. 7.2.2", "top-1 test accuracy, eager-SGD (solo)",
                   "top1", 0.752, {"algorithm": "eager_solo"}, {}, f"{r50}, 90 epochs, mean of 300 and 460 ms"),
        PaperClaim("eager_sgd_paper_resnet50", f"{EAGER_PAPER}, sec. 7.2.2", "top-1 test accuracy, synch-SGD (Horovod)",
                   "top1", 0.758, {"algorithm": "sync"}, {}, f"{r50}, 90 epochs"),
        PaperClaim("eager_sgd_paper_resnet32", f"{EAGER_PAPER}, sec. 7.2.3, Fig. 12",
                   "eager-SGD (majority) over synch-SGD (Horovod), to the end of training (11,128 s vs 8,607 s)",
                   "speedup", 1.29, {"algorithm": "eager_majority"}, sync, f"{r32}, 190 epochs"),
        PaperClaim("eager_sgd_paper_resnet32", f"{EAGER_PAPER}, sec. 7.2.3, Fig. 12",
                   "eager-SGD (solo) over synch-SGD (Horovod), to the end of training (11,128 s vs 3,534 s), at 58.0 % "
                   "top-1 against 92.6 %", "speedup", 3.15, {"algorithm": "eager_solo"}, sync, f"{r32}, 190 epochs"),
        PaperClaim("eager_sgd_paper_resnet32", f"{EAGER_PAPER}, sec. 7.2.3, Fig. 12",
                   "top-1 test accuracy, eager-SGD (solo)", "top1", 0.580, {"algorithm": "eager_solo"}, {}, r32),
        PaperClaim("eager_sgd_paper_resnet32", f"{EAGER_PAPER}, sec. 7.2.3, Fig. 12",
                   "top-1 test accuracy, eager-SGD (majority)", "top1", 0.900, {"algorithm": "eager_majority"}, {},
                   r32),
        PaperClaim("eager_sgd_paper_resnet32", f"{EAGER_PAPER}, sec. 7.2.3, Fig. 12",
                   "top-1 test accuracy, synch-SGD (Horovod)", "top1", 0.926, sync, {}, r32),
        PaperClaim("eager_sgd_paper_lstm", f"{EAGER_PAPER}, sec. 7.3, Fig. 13", "eager-SGD (solo) over Horovod",
                   "speedup", 1.64, {"algorithm": "eager_solo"}, sync, f"{lstm}, 50 epochs"),
        PaperClaim("eager_sgd_paper_lstm", f"{EAGER_PAPER}, sec. 7.3, Fig. 13", "eager-SGD (majority) over Horovod",
                   "speedup", 1.27, {"algorithm": "eager_majority"}, sync, f"{lstm}, 50 epochs"),
        PaperClaim("eager_sgd_paper_lstm", f"{EAGER_PAPER}, sec. 7.3", "top-1 test accuracy, eager-SGD (solo)", "top1",
                   0.606, {"algorithm": "eager_solo"}, {}, f"{lstm}, mean of 4 trainings"),
        PaperClaim("eager_sgd_paper_lstm", f"{EAGER_PAPER}, sec. 7.3", "top-1 test accuracy, Horovod", "top1",
                   0.696, sync, {}, f"{lstm}, mean of 4 trainings"),
    ]
    out += _hyperplane_claims("eager_sgd_paper_hyperplane", 1.0)
    out += _hyperplane_claims("eager_sgd_paper_hyperplane_quarter", 0.25)
    return tuple(out)


CLAIMS = _claims()


def loss_target(study: str) -> float | None:
    """The validation loss a study's paper measures time to (its ``seconds_to_loss`` claims'
    target), or None: the report's default target for that study's time to loss."""
    return next((c.target for c in CLAIMS if c.study == study and c.metric == "seconds_to_loss"), None)


def select_runs(runs: pd.DataFrame, match: dict[str, Any]) -> pd.DataFrame:
    keep = pd.Series(True, index=runs.index)
    for axis, value in match.items():
        if axis not in runs.columns:
            return runs.iloc[0:0]
        keep &= runs[axis] == value
    return runs[keep]


def settings_of(runs: pd.DataFrame) -> str:
    """This run's settings where they may differ from the paper's."""
    parts = []
    for axis, name in (("world_size", "ranks"), ("model", "model"), ("dataset", "data"), ("compute", "compute"),
                       ("batch_size", "batch per rank"), ("epochs", "epochs")):
        if axis in runs.columns and runs[axis].notna().any():
            values = sorted({str(v) for v in runs[axis].dropna()})
            parts.append(f"{name} {'/'.join(values)}")
    return ", ".join(parts)


# -- this study's runs beside the claims ---------------------------------------------------------
#
# For a claim of one algorithm over another (a speedup), three ratios, each with its interval over
# the repeats (``confidence.ratio_estimate``: from 3 repeats a side; with fewer, the range of each
# repeat over the baseline's mean): rounds per second (the paper's steps/s: one process's step
# counter; under ``paper``, ``lockstep`` and sync every rank takes every step), gradients per
# second (under ``apply_all`` and ``latest`` a late rank skips rounds, and rounds/s overstates the
# work), and time to the paper's target (a validation loss, or the baseline's stated top-1) as a
# speedup, the baseline's seconds over this mode's. A claim of a rate, a time or an accuracy gives
# this run's mean with its range over the runs. Each eager-SGD claim is answered once per
# ``eager_catch_up`` mode the study ran: the paper's own mechanism and the extensions side by side.

COLUMNS = ["claim", "source", "mode", "paper", "this_run", "spread", "rounds", "gradients", "time_to_target", "runs",
           "paper_settings", "this_run_settings", "note", "metric"]


def _ratio_text(mine: pd.Series, base: pd.Series) -> tuple[float, str]:
    """(mean ratio, "1.48 [1.41, 1.55]" or "1.48 (1.40–1.57)") of ``mine`` over ``base``."""
    mine, base = mine.dropna(), base.dropna()
    if mine.empty or base.empty or base.mean() == 0:
        return math.nan, ""
    est = confidence.ratio_estimate(mine, base)
    if est.reason:
        return est.ratio, (f"{est.ratio:.2f} ({mine.min() / base.mean():.2f}–{mine.max() / base.mean():.2f}, "
                           f"{len(mine)}/{len(base)} runs: {est.reason})")
    return est.ratio, f"{est.ratio:.2f} [{est.low:.2f}, {est.high:.2f}]"


def _seconds(runs: pd.DataFrame, evals: pd.DataFrame | None, target: tuple[str, float] | None) -> pd.Series:
    """Per run, seconds to the target (NaN: not reached, or no evaluations)."""
    from .query import first_reaching

    if runs.empty or evals is None or target is None:
        return pd.Series(dtype=float)
    column, value = target
    reached = first_reaching(evals, [int(i) for i in runs["run_id"]], value, column)
    return reached.set_index("run_id")["seconds"].reindex([int(i) for i in runs["run_id"]])


def _modes(runs: pd.DataFrame, claim: PaperClaim) -> list[Any]:
    """The eager-SGD modes the study ran for this claim's eager algorithm (one None where the claim
    is not of eager-SGD, or the runs do not say)."""
    algorithm = claim.match.get("algorithm", "")
    if not str(algorithm).startswith("eager") or "eager_catch_up" not in runs.columns:
        return [None]
    found = sorted({m for m in select_runs(runs, claim.match)["eager_catch_up"].dropna()})
    return found or [None]


def study_target(study: str, runs: pd.DataFrame) -> tuple[str, float] | None:
    """What "time to the paper's target" means for this study: its claims' validation loss
    (``seconds_to_loss``), or the final top-1 a claim states for its baseline, where one does."""
    loss = next((c.target for c in CLAIMS if c.study == study and c.metric == "seconds_to_loss"), None)
    if loss is not None:
        return ("loss", loss)
    top1 = [c.value for c in CLAIMS if c.study == study and c.metric == "top1" and c.match.get("algorithm") == "sync"]
    return ("top1", top1[0]) if top1 else None


def paper_vs_run(runs: pd.DataFrame, study: str, evals: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per claim of ``study`` and eager-SGD mode (module docstring)."""
    target = study_target(study, runs)
    rows = []
    for claim in (c for c in CLAIMS if c.study == study):
        for mode in _modes(runs, claim):
            mine = select_runs(runs, claim.match)
            if mode is not None:
                mine = mine[mine["eager_catch_up"] == mode]
            row: dict[str, Any] = {"claim": claim.what, "source": claim.source, "mode": mode or "", "paper": claim.value,
                                   "this_run": math.nan, "spread": "", "rounds": "", "gradients": "",
                                   "time_to_target": "", "runs": len(mine), "paper_settings": claim.settings,
                                   "this_run_settings": settings_of(mine) if len(mine) else "", "note": "",
                                   "metric": claim.metric}
            if mine.empty:
                row["note"] = "no finished run"
            elif claim.metric == "speedup":
                base = select_runs(runs, {**{k: v for k, v in claim.match.items() if k != "algorithm"}, **claim.baseline})
                if base.empty:
                    row["note"] = "no finished run of the baseline"
                else:
                    row["this_run"], row["rounds"] = _ratio_text(_col(mine, "rounds_per_second"),
                                                                 _col(base, "rounds_per_second"))
                    row["spread"] = row["rounds"]
                    _, row["gradients"] = _ratio_text(_col(mine, "gradients_per_second"),
                                                      _col(base, "gradients_per_second"))
                    t_mine, t_base = _seconds(mine, evals, target), _seconds(base, evals, target)
                    if len(t_mine.dropna()) and len(t_base.dropna()):   # a time: the baseline's over this one's
                        _, row["time_to_target"] = _ratio_text(1 / t_mine, 1 / t_base)
                    elif target is not None:
                        row["time_to_target"] = "not reached" if evals is not None and not _emulated(mine) else \
                            "not measured (emulated compute)"
            elif claim.metric == "rate":
                _mean_range(row, _col(mine, "rounds_per_second"), 2)
                g = (_col(mine, "gradients_per_second") / _col(mine, "world_size")).dropna()
                row["gradients"] = f"{g.mean():.2f} per rank ({g.min():.2f}–{g.max():.2f})" if len(g) else ""
            elif claim.metric == "seconds_to_loss":
                seconds = _seconds(mine, evals, ("loss", claim.target)).dropna()
                if seconds.empty:
                    row["note"] = "not measured (emulated compute computes no loss)" if _emulated(mine) else \
                        f"not reached ({len(mine)} runs)"
                else:
                    _mean_range(row, seconds, 1)
                    if len(seconds) < len(mine):
                        row["note"] = f"{len(seconds)} of {len(mine)} runs reached it"
            else:   # top1
                values = mine["final_top1"].dropna() if "final_top1" in mine else pd.Series(dtype=float)
                if values.empty:
                    row["note"] = "not measured (emulated compute computes no accuracy)" if _emulated(mine) else \
                        "no accuracy recorded"
                else:
                    _mean_range(row, values, 3)
            rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def _col(runs: pd.DataFrame, name: str) -> pd.Series:
    """A column of the runs as numbers (NaN where the runs lack it: older rows, made-up tables)."""
    return pd.to_numeric(runs[name], errors="coerce") if name in runs else pd.Series(math.nan, index=runs.index)


def _mean_range(row: dict, values: pd.Series, digits: int) -> None:
    values = values.dropna()
    if len(values):
        row["this_run"] = float(values.mean())
        row["spread"] = f"{values.min():.{digits}f}–{values.max():.{digits}f}"


def _emulated(runs: pd.DataFrame) -> bool:
    return "compute" in runs and bool((runs["compute"] == "emulated").all())
