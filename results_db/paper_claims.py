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

EAGER_PAPER = "Li, Ben-Nun, Di Girolamo, Alistarh, Hoefler, PPoPP'20"


@dataclass(frozen=True)
class PaperClaim:
    study: str                     # the study preset that reproduces it (its study_name)
    source: str                    # paper, section / figure / table
    what: str                      # the claim in words
    metric: str                    # "speedup" (rounds/s over the baseline's) or "top1" (final test top-1)
    value: float
    match: dict[str, Any] = field(default_factory=dict)       # this run's axes that must equal these
    baseline: dict[str, Any] = field(default_factory=dict)    # speedup: the runs divided by
    settings: str = ""             # the paper's settings, in words


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
    return tuple(out)


CLAIMS = _claims()


def _select(runs: pd.DataFrame, match: dict[str, Any]) -> pd.DataFrame:
    keep = pd.Series(True, index=runs.index)
    for axis, value in match.items():
        if axis not in runs.columns:
            return runs.iloc[0:0]
        keep &= runs[axis] == value
    return runs[keep]


def _settings(runs: pd.DataFrame) -> str:
    """This run's settings where they may differ from the paper's."""
    parts = []
    for axis, name in (("world_size", "ranks"), ("model", "model"), ("dataset", "data"), ("compute", "compute"),
                       ("batch_size", "batch per rank"), ("epochs", "epochs")):
        if axis in runs.columns and runs[axis].notna().any():
            values = sorted({str(v) for v in runs[axis].dropna()})
            parts.append(f"{name} {'/'.join(values)}")
    return ", ".join(parts)


def paper_vs_run(runs: pd.DataFrame, study_preset: str) -> pd.DataFrame:
    """One row per claim of ``study_preset``: the paper's number, this study's (mean, and for a
    speedup the spread of the ratio over repeats: min–max of each repeat over the baseline's
    mean), how many runs, and both settings. ``runs``: finished runs (``query.runs``)."""
    rows = []
    for claim in (c for c in CLAIMS if c.study == study_preset):
        mine = _select(runs, claim.match)
        ours, spread, note = math.nan, "", ""
        if claim.metric == "top1":
            values = mine["final_top1"].dropna() if "final_top1" in mine else pd.Series(dtype=float)
            if len(values):
                ours, spread = float(values.mean()), f"{values.min():.3f}–{values.max():.3f}"
            else:
                note = "not measured (emulated compute computes no accuracy)" if (
                    "compute" in mine and (mine["compute"] == "emulated").any()) else "no finished run"
        else:
            base = _select(runs, {**{k: v for k, v in claim.match.items() if k != "algorithm"}, **claim.baseline})
            rate, base_rate = (mine.get("rounds_per_second", pd.Series(dtype=float)).dropna(),
                               base.get("rounds_per_second", pd.Series(dtype=float)).dropna())
            if len(rate) and len(base_rate):
                ours = float(rate.mean() / base_rate.mean())
                spread = f"{rate.min() / base_rate.mean():.2f}–{rate.max() / base_rate.mean():.2f}"
            else:
                note = "no finished runs of both"
        rows.append({"claim": claim.what, "source": claim.source, "paper": claim.value, "this_run": ours,
                     "spread": spread, "runs": len(mine), "paper_settings": claim.settings,
                     "this_run_settings": _settings(mine) if len(mine) else "", "note": note,
                     "metric": claim.metric})
    return pd.DataFrame(rows)
