"""Fitting the model's terms (``perf_model.terms``) to measurements, one term at a time.

Each ``fit_*`` takes a plain DataFrame (what the query API returns, reshaped by
``perf_model.study``), returns the fitted parameters with their quality (residuals on the
points it was fitted to), and raises ``FitError`` with the reason when the data cannot
determine the term, rather than return a number that means nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares, nnls

from .terms import (allreduce_messages, allreduce_seconds, compute_seconds, expected_max_normal, injected_wait_sample,
                    oversubscription_seconds, sample_quantiles)

MAX_ALPHA = 1.5
ONE_BATCH = "one batch size"   # the note that marks a constant compute term


class FitError(ValueError):
    """The data cannot determine a term; the message says what is missing."""


@dataclass(frozen=True)
class Quality:
    """Residuals (measured - fitted) on the points fitted: how many, their RMS in seconds,
    and the largest relative one."""
    points: int
    rms_seconds: float
    max_relative: float

    @classmethod
    def of(cls, measured: np.ndarray, fitted: np.ndarray) -> "Quality":
        r = measured - fitted
        rel = np.abs(r) / np.where(np.abs(measured) > 0, np.abs(measured), 1.0)
        return cls(int(len(r)), float(np.sqrt(np.mean(r * r))) if len(r) else 0.0,
                   float(rel.max()) if len(r) else 0.0)


@dataclass(frozen=True)
class Term:
    """One fitted term: its parameters, its quality, and what was assumed for lack of data."""
    name: str
    params: dict[str, float]
    quality: Quality
    notes: tuple[str, ...] = field(default_factory=tuple)
    distribution: tuple[float, ...] = ()   # straggler: quantiles of a rank's compute around its mean

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "params": self.params, "quality": asdict(self.quality), "notes": list(self.notes)}
        if self.distribution:
            out["distribution"] = list(self.distribution)
        return out


def _distinct(frame: pd.DataFrame, column: str) -> list:
    return sorted(frame[column].dropna().unique().tolist())


def fit_compute(samples: pd.DataFrame) -> Term:
    """C(b, t) = c0 + b c1 t**-alpha from ``batch``, ``threads``, ``seconds`` (one row per
    measured step or per run). alpha is searched on a grid, then refined; c0, c1 are linear
    least squares for each alpha, bounded at zero."""
    batches, threads = _distinct(samples, "batch"), _distinct(samples, "threads")
    if len(batches) < 2:
        raise FitError(f"need >= 2 batch sizes to fit the compute term (have: {', '.join(map(str, batches)) or 'none'})")
    b = samples["batch"].to_numpy(float)
    t = samples["threads"].to_numpy(float)
    y = samples["seconds"].to_numpy(float)
    notes: list[str] = []

    def linear(alpha: float) -> tuple[np.ndarray, float]:   # relative residuals, as for allreduce
        x = np.column_stack([np.ones_like(b), b * t ** (-alpha)]) / y[:, None]
        coef, _ = nnls(x, np.ones_like(y))
        return coef, float(np.sum((x @ coef - 1) ** 2))

    if len(threads) < 2:
        alpha = 0.0
        notes.append(f"one thread count ({threads[0]:g}): alpha not fitted, taken as 0 (no thread dependence)")
        (c0, c1), _ = linear(0.0)
    else:
        grid = np.linspace(0.0, MAX_ALPHA, 301)
        alpha = float(grid[int(np.argmin([linear(a)[1] for a in grid]))])
        (c0, c1), _ = linear(alpha)
        refined = least_squares(lambda p: compute_seconds(b, t, *p) / y - 1, x0=[c0, c1, alpha],
                                bounds=([0.0, 0.0, 0.0], [np.inf, np.inf, MAX_ALPHA]))
        c0, c1, alpha = (float(v) for v in refined.x)
    fitted = compute_seconds(b, t, c0, c1, alpha)
    return Term("compute", {"c0": float(c0), "c1": float(c1), "alpha": float(alpha)}, Quality.of(y, fitted),
                tuple(notes))


def fit_compute_constant(samples: pd.DataFrame) -> Term:
    """C as one number, the median of the points, when they hold one batch size (a study of
    rank counts at a fixed batch, the common case): c1 = 0, so the term does not extrapolate
    in the batch; a note says where it holds."""
    if samples.empty:
        raise FitError("need >= 1 run with measured steps to fit the compute term")
    y = samples["seconds"].to_numpy(float)
    c = float(np.median(y))
    batches = ", ".join(f"{b:g}" for b in _distinct(samples, "batch"))
    threads = ", ".join(f"{t:g}" for t in _distinct(samples, "threads"))
    return Term("compute", {"c0": c, "c1": 0.0, "alpha": 0.0}, Quality.of(y, np.full_like(y, c)),
                (f"{ONE_BATCH} ({batches}): C measured there only (threads {threads}), not fitted as a "
                 "function of batch and threads; predictions hold at that batch",))


def is_constant_compute(term: dict[str, Any]) -> bool:
    """A stored compute term fitted at one batch size (``fit_compute_constant``): it holds there only."""
    return bool(term.get("params", {}).get("c1", 0.0) == 0.0 and
                any(note.startswith(ONE_BATCH) for note in term.get("notes", [])))


def fit_compute_any(samples: pd.DataFrame) -> Term:
    """``fit_compute``, or ``fit_compute_constant`` where the points hold one batch size."""
    if len(_distinct(samples, "batch")) < 2:
        return fit_compute_constant(samples)
    return fit_compute(samples)


def fit_allreduce(samples: pd.DataFrame) -> Term:
    """A(n, P) = 2 ceil(log2 P) lat + 2(P-1)/P n / bw from ``bytes``, ``ranks``, ``seconds`` (one row
    per fused collective, timed from the last rank's start).

    Fitted on log residuals, log A(n, P) - log seconds, with a robust (soft L1) loss, lat
    and 1/bw kept >= 0 (searched as logs): on a shared machine a collective's time varies by
    factors, not by a fixed amount (on this 2-core VM 8 ranks' 40 KB reductions take 0.5 to
    18 ms), and a least-squares fit in seconds or in relative error lets a few slow points
    drive the latency to zero. Started from non-negative least squares on relative residuals
    (the model is linear in lat and 1/bw)."""
    multi = samples[samples["ranks"] > 1]
    counts = _distinct(multi, "ranks")
    if len(counts) < 2:
        raise FitError(f"need >= 2 rank counts to fit the allreduce term (have: {', '.join(map(str, counts)) or 'none'})")
    p = multi["ranks"].to_numpy(float)
    n = multi["bytes"].to_numpy(float)
    y = multi["seconds"].to_numpy(float)
    x = np.column_stack([allreduce_messages(p), 2 * (p - 1) / p * n])
    (lat0, inv0), _ = nnls(x / y[:, None], np.ones_like(y))
    floor = 1e-15    # the logs need a start above zero; a term the data does not want ends near it
    # a latency start that explains a fraction of the fastest collective, where NNLS gave none
    start = np.log([max(lat0, float(np.min(y)) / (4 * float(np.max(x[:, 0]))), floor), max(inv0, floor)])
    refined = least_squares(lambda th: np.log(x @ np.exp(th)) - np.log(y), x0=start, loss="soft_l1",
                            f_scale=0.5)
    lat, inverse_bw = (float(v) for v in np.exp(refined.x))
    notes = []
    if inverse_bw * float(np.max(n)) < 1e-3 * float(np.median(y)):
        notes.append("bandwidth unbounded by the data (the bytes explain none of the time)")
    bandwidth = float(1.0 / inverse_bw) if inverse_bw > 0 else float("inf")
    fitted = allreduce_seconds(n, p, lat, bandwidth)
    return Term("allreduce", {"latency": lat, "bandwidth": bandwidth}, Quality.of(y, fitted), tuple(notes))


def fit_straggler(compute: pd.DataFrame) -> Term:
    """sigma, the spread of one rank's compute from step to step, from ``run_id``, ``step``,
    ``rank``, ``seconds``: the pooled standard deviation around each run's mean; and the
    distribution itself (``sample_quantiles``). Its quality compares, per multi-rank run, the
    measured mean of max - mean over ranks per step with the predicted wait, the larger of
    sigma e(P) and the sample's expected maximum (``injected_wait_sample``)."""
    per_run = compute.groupby("run_id")["seconds"]
    centred = compute["seconds"] - per_run.transform("mean")
    dof = len(compute) - compute["run_id"].nunique()
    if dof < 2:
        raise FitError("need >= 2 step records per run to fit the straggler term")
    sigma = float(np.sqrt(np.sum(centred ** 2) / dof))
    quantiles = sample_quantiles(centred)
    measured, predicted = [], []
    for _, run in compute.groupby("run_id"):
        ranks = run["rank"].nunique()
        if ranks < 2:
            continue
        by_step = run.groupby("step")["seconds"]
        measured.append(float((by_step.max() - by_step.mean()).mean()))
        predicted.append(max(sigma * expected_max_normal(ranks), injected_wait_sample(ranks, 0, 0.0, quantiles)))
    notes = () if measured else ("no multi-rank run: the penalty sigma e(P) is not checked against a measurement",)
    return Term("straggler", {"sigma": sigma}, Quality.of(np.array(measured), np.array(predicted)), notes,
                tuple(quantiles))


def fit_hidden(step_stats: pd.DataFrame) -> Term:
    """h, the mean share of the allreduce time hidden behind backprop (``hidden_fraction``)."""
    h = step_stats["hidden_fraction"].dropna().to_numpy(float)
    if not len(h):
        return Term("overlap", {"hidden": 0.0}, Quality(0, 0.0, 0.0),
                    ("no timeline: nothing hidden assumed (run with timeline=true to measure it)",))
    mean = float(h.mean())
    return Term("overlap", {"hidden": mean}, Quality.of(h, np.full_like(h, mean)))


def fit_participation(rounds: pd.DataFrame) -> Term:
    """eager-SGD: the expected fresh, stale and null shares of a partial round's
    contributions (synchronous rounds left out), from ``fresh``, ``stale``, ``null``."""
    partial = rounds[~rounds["synchronous"].astype(bool)]
    if partial.empty:
        raise FitError("need eager-SGD runs with partial rounds to fit participation")
    total = (partial["fresh"] + partial["stale"] + partial["null"]).to_numpy(float)
    shares = {k: partial[k].to_numpy(float) / total for k in ("fresh", "stale", "null")}
    params = {k: float(v.mean()) for k, v in shares.items()}
    return Term("participation", params, Quality.of(shares["fresh"], np.full_like(shares["fresh"], params["fresh"])))


def fit_oversubscription(points: pd.DataFrame, per_algorithm: bool = False) -> Term:
    """q in O(P) = e q (r - 1)^+ ceil(log2 P) (``terms.oversubscription_seconds``) from
    ``algorithm``, ``ranks``, ``ranks_per_core``, ``residual`` (and ``step``, the measured mean
    step, the yardstick of the quality's relative residual; ``exposure`` e,
    ``terms.crowding_exposure``, 1 where absent): one row per multi-rank run, its
    measured mean step less what the other terms predict for it
    (``perf_model.oversubscription``). Least squares through zero: q = sum(x y) / sum(x x)
    with x = e (r - 1)^+ ceil(log2 P), so runs where every rank had a core (x = 0) do not move it.

    One q for the host, from every algorithm's crowded runs (param ``q``): the wait for a
    core is the host's, and a study holds one or two crowded runs per algorithm, too few to
    fit each its own (fitted so, q ranged 0.2-3.5 ms between two repeats of the validation,
    benchmarks/RESULTS.md). ``per_algorithm`` fits one per algorithm instead (``q_<algorithm>``;
    the validation's counterfactual). A negative q (the other terms already predict too
    much) is kept at 0 with a note: a host cannot speed ranks up by crowding them."""
    if points.empty:
        raise FitError("need >= 1 multi-rank run to fit the oversubscription term")
    x_all = oversubscription_seconds(points["ranks"].to_numpy(float), points["ranks_per_core"].to_numpy(float), 1.0)
    if "exposure" in points:
        x_all = x_all * points["exposure"].to_numpy(float)
    points = points.assign(x=x_all, key="q")
    if per_algorithm:
        points = points.assign(key="q_" + points["algorithm"].astype(str))
    if not (points["x"] > 0).any():
        most = float(points["ranks_per_core"].max())
        raise FitError(f"need runs with more ranks than cores on a host to fit the oversubscription term (at most "
                       f"{most:g} rank(s) per core here): every rank had a core, and predictions assume one")
    params: dict[str, float] = {}
    notes: list[str] = []
    measured, fitted, steps = [], [], []
    for key, group in points.groupby("key"):
        crowded = group[group["x"] > 0]
        if crowded.empty:
            notes.append(f"{key}: no run with more ranks than cores; taken as 0")
            continue
        x, y = crowded["x"].to_numpy(float), crowded["residual"].to_numpy(float)
        q = float(np.dot(x, y) / np.dot(x, x))
        if q < 0:
            notes.append(f"{key}: fitted {q * 1e3:.3g} ms < 0 (the other terms over-predict), kept at 0")
            q = 0.0
        params[str(key)] = q
        measured.extend(y)
        fitted.extend(q * x)
        steps.extend((crowded["step"] if "step" in crowded else crowded["residual"]).to_numpy(float))
    if "exposure" in points:
        # says q was fitted per collective waited through: a fit stored before the exposure (no
        # such param) was fitted as if every step were synchronous, and is predicted so
        params["by_exposure"] = 1.0
    r = np.array(measured) - np.array(fitted)
    # relative to the step, not to the residual (which may be near 0)
    quality = Quality(int(len(r)), float(np.sqrt(np.mean(r * r))) if len(r) else 0.0,
                      float(np.max(np.abs(r) / np.abs(np.array(steps)))) if len(r) else 0.0)
    return Term("oversubscription", params, quality, tuple(notes))
