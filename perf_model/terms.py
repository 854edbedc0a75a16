"""The performance model's terms, as plain functions a reader can check against the text.

A synchronous data-parallel step on P ranks, each with batch b and t threads, lasts

    T(P) = C(b, t) + S(P) + (1 - h) * A(n, P) + U

- C(b, t) = c0 + b * c1 * t**(-alpha): compute (forward + backward). c0 is what does not
  grow with the batch (kernel launches, Python, the layers' weights); c1 the seconds per
  sample on one thread; alpha how far threads help (1: perfectly, 0: not at all).
- S(P) = sigma * e(P): the straggler penalty. Each rank's compute varies step to step with
  standard deviation sigma; a synchronous step waits for the slowest of P, whose expected
  excess over the mean is sigma times e(P), the expected maximum of P standard normal
  draws (e(1) = 0, e(2) = 1/sqrt(pi), e(64) ~ 2.4). The mechanism behind both seed papers.
- A(n, P) = 2 ceil(log2 P) * lat + 2 (P - 1) / P * n / bw: the allreduce of n bytes as
  MPICH runs it for commutative operations beyond a few KB (Rabenseifner's): a
  reduce-scatter by recursive halving, then an allgather by recursive doubling, ceil(log2 P)
  messages in sequence each, each rank sending and receiving 2(P - 1)/P of the data in all.
  lat and bw are the per-message latency and the per-rank bandwidth. (A ring would pay
  2(P - 1) latencies: at 4,096 ranks 8,190 against 24.)
- h: the share of the allreduce hidden behind backprop (overlap), from the timeline.
- U: the weight update.
- O(P) = e q (r - 1)^+ ceil(log2 P), where r is ranks per hardware thread of a host: what a
  host with more ranks than hardware threads adds (``oversubscription_seconds``), e the
  collectives a step's ranks wait through together (``crowding_exposure``: 1 for a
  synchronous step). Zero where each rank has a core.

Throughput is P * b / T(P); efficiency (C + U) / T(P), against a rank that neither waits
nor communicates (``perf_model.predict``; without injected sleeps it is T(1) / T(P)).

eager-SGD does not wait for the slowest rank. With Solo allreduce a round fires when the
first rank arrives; a rank's expected wait is then the expected *minimum*, and the late
ranks' gradients join a later round: the stored rounds give the expected fresh, stale and
null shares of a round's contributions (``participation``). Every ``sync_every`` steps its
round is synchronous and the weights are averaged, one more allreduce of the model's bytes
that no backprop hides: A(n, P) / sync_every a step (``perf_model.predict``), which the
measured update (a median over steps) leaves out.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy.special import ndtr


def compute_seconds(batch, threads, c0: float, c1: float, alpha: float):
    """C(b, t) = c0 + b * c1 * t**(-alpha)."""
    return c0 + np.asarray(batch, dtype=float) * c1 * np.asarray(threads, dtype=float) ** (-alpha)


@lru_cache(maxsize=None)
def expected_max_normal(p: int) -> float:
    """e(P) = E[max of P independent standard normals] = integral of x * P * phi(x) * Phi(x)**(P-1),
    by the trapezoid rule on [-10, 10] (exact to ~1e-9 for P up to 10**6)."""
    if p < 1:
        raise ValueError(f"expected_max_normal: P={p}, expected >= 1")
    if p == 1:
        return 0.0
    x = np.linspace(-10.0, 10.0, 40001)
    f = x * p * np.exp(-x * x / 2) / math.sqrt(2 * math.pi) * ndtr(x) ** (p - 1)
    return float((f.sum() - (f[0] + f[-1]) / 2) * (x[1] - x[0]))


def straggler_seconds(ranks, sigma: float):
    """S(P) = sigma * e(P)."""
    return sigma * np.array([expected_max_normal(int(p)) for p in np.atleast_1d(ranks)]).reshape(np.shape(ranks))


def allreduce_messages(ranks):
    """2 ceil(log2 P): the messages in sequence of a reduce-scatter + allgather; 0 on one rank."""
    p = np.maximum(np.asarray(ranks, dtype=float), 1.0)
    return 2 * np.ceil(np.log2(p))


def allreduce_seconds(nbytes, ranks, latency: float, bandwidth: float):
    """A(n, P) = 2 ceil(log2 P) lat + 2 (P-1)/P * n / bw; zero on one rank."""
    p = np.asarray(ranks, dtype=float)
    n = np.asarray(nbytes, dtype=float)
    return np.where(p > 1, allreduce_messages(p) * latency + 2 * (p - 1) / np.maximum(p, 1) * n / bandwidth, 0.0)


def step_seconds(ranks, batch, threads, nbytes, *, c0: float, c1: float, alpha: float, sigma: float,
                 latency: float, bandwidth: float, hidden: float, update: float):
    """T(P) = C(b, t) + S(P) + (1 - h) A(n, P) + U."""
    return (compute_seconds(batch, threads, c0, c1, alpha) + straggler_seconds(ranks, sigma)
            + (1 - hidden) * allreduce_seconds(nbytes, ranks, latency, bandwidth) + update)


def oversubscription_seconds(ranks, ranks_per_core, q: float):
    """O(P) = q (r - 1)^+ ceil(log2 P): the time a host with r ranks per hardware thread adds
    to a step.

    Why this form: with more ranks than hardware threads, every rank that communicates or
    waits is runnable, and each of a round's ceil(log2 P) exchanges in sequence must wait
    for its peer to be given a core, about (r - 1) turns of the others. q is what one such
    wait costs a step (its collectives, rounds and engine wake-ups), fitted once for the
    host on the steps the other terms leave unexplained (``fit.fit_oversubscription``). On
    a host of 2 cores the median post-backward collective took 2.5, 7.9 and 18 ms at 8, 16
    and 32 ranks: 6, 8 and 10 messages (2 ceil(log2 P): q absorbs the 2) of (r - 1) x
    0.12-0.14 ms each. It is zero where every rank has a hardware thread (r <= 1), as a
    supercomputer's job gives; emulated ranks on a laptop need it."""
    p = np.maximum(np.asarray(ranks, dtype=float), 1.0)
    r = np.asarray(ranks_per_core, dtype=float)
    return q * np.maximum(r - 1.0, 0.0) * np.ceil(np.log2(p))


def crowding_exposure(algorithm: str, ranks, segment: int):
    """e in O(P) = e q (r - 1)^+ ceil(log2 P): how many collectives a step's ranks wait
    through together, counted in the synchronous step's one.

    Why: a crowded host slows a collective by the ranks that compete for its cores while it
    runs, and those are the ranks that have arrived and wait in it (an emulated rank that
    computes sleeps and leaves its core free). A synchronous step's collective finds every
    rank waiting: e = 1, the step q is fitted on. An eager-SGD round fires earlier: Solo at
    the first arrival, the others joining from their progress threads while they still
    compute (1/P of the ranks wait through it), Majority at its initiator's, when about half
    have arrived (1/2). One step in ``segment`` (``sync_every``) is instead a synchronous
    round followed by the weights' averaging, two collectives every rank waits through:
    e = (1 - 1/s) e_round + 2/s. Counting eager-SGD's rounds as synchronous (e = 1) put
    eager_solo's crowding at 32 ranks on 2 cores at 148 ms, where the other terms left 45 ms
    of its measured step unexplained (validation run D, benchmarks/RESULTS.md)."""
    p = np.maximum(np.asarray(ranks, dtype=float), 1.0)
    if algorithm not in ("eager_solo", "eager_majority"):
        return np.ones_like(p)
    f = 1.0 / max(int(segment), 1)
    per_round = 1.0 / p if algorithm == "eager_solo" else np.full_like(p, 0.5)
    return (1 - f) * per_round + 2 * f


def _expected_from_cdf(cdf, lo: float, hi: float, points: int = 20001) -> float:
    """E[X] = integral_0^inf (1 - F) - integral_-inf^0 F, for X with CDF F supported in [lo, hi]."""
    x = np.linspace(min(lo, 0.0), max(hi, 0.0), points)
    f = cdf(x)
    g = np.where(x >= 0, 1.0 - f, -f)
    return float((g.sum() - (g[0] + g[-1]) / 2) * (x[1] - x[0]))


def injected_wait_sync(p: int, k: int, delay: float, sigma: float) -> float:
    """W(P) for a synchronous step: the expected excess of the slowest rank over the mean
    compute when exactly k of the P ranks sleep ``delay`` (the paper's injection) and every
    rank's compute varies with standard deviation sigma:

        W = E[max(delay + sigma max_k Z, sigma max_{P-k} Z)],
        F_max(x) = Phi((x - delay) / sigma)**k * Phi(x / sigma)**(P - k).

    k = 0 gives S(P) = sigma e(P); sigma = 0 gives delay (k >= 1) or 0."""
    k = min(max(int(k), 0), int(p))
    if sigma <= 0:
        return float(delay) if k else 0.0
    if k == 0:
        return float(sigma * expected_max_normal(int(p)))
    cdf = lambda x: ndtr((x - delay) / sigma) ** k * ndtr(x / sigma) ** (p - k)  # noqa: E731
    return _expected_from_cdf(cdf, -10 * sigma, delay + 10 * sigma)


def injected_wait_eager(p: int, k: int, delay: float, sigma: float, segment: int) -> float:
    """W(P) per step for eager-SGD: no rank waits for another except at the synchronous round
    ending each segment of ``segment`` steps (``sync_every``), so a segment lasts as long as
    its slowest rank's own work. Each rank sleeps in N_r of the segment's steps, N_r ~
    Binomial(segment, k / P), taken as independent across ranks (they are not quite: exactly
    k sleep each step), with compute noise sigma sqrt(segment) over the segment:

        W = E[max_r (delay N_r + sigma sqrt(segment) Z_r)] / segment,
        F_max(x) = (sum_m Binom(m; segment, k/P) Phi((x - delay m) / (sigma sqrt(segment))))**P.

    The expected *minimum* is what Solo's rounds wait for, ~0: the segment's maximum is
    what the synchronous rounds wait for, and it is what bounds the throughput."""
    from scipy.stats import binom

    n = max(int(segment), 1)
    q = min(max(k, 0), p) / p
    m = np.arange(n + 1)
    pm = binom.pmf(m, n, q)
    s = sigma * math.sqrt(n)
    if s <= 0:
        cdf_one = lambda x: (pm[None, :] * (m[None, :] * delay <= x[:, None])).sum(axis=1)  # noqa: E731
        lo, hi = 0.0, delay * n
        if delay <= 0:
            return 0.0
    else:
        cdf_one = lambda x: (pm[None, :] * ndtr((x[:, None] - delay * m[None, :]) / s)).sum(axis=1)  # noqa: E731
        lo, hi = -10 * s, delay * n + 10 * s
    return _expected_from_cdf(lambda x: cdf_one(x) ** p, lo, hi, points=4001) / n


def sample_quantiles(centred) -> list[list[float]]:
    """The distribution of a rank's compute around its mean, as ``[level, quantile]`` pairs:
    every 1 % up to 90 %, then ever closer to 1 (1 - 0.1 x 10**(-j/8)) down to 1 - 1/n, the
    last level the n samples resolve. The slowest of P ranks lives in the top 1/P of the
    distribution, so the tail gets the points; what is beyond the last level is put at it
    (the sample cannot say more), and ``predict`` takes the normal form where that is later."""
    x = np.asarray(centred, dtype=float)
    n = len(x)
    levels = list(np.linspace(0.0, 0.9, 91))
    j = 0
    while 1 - 0.1 * 10 ** (-(j + 1) / 8) <= 1 - 1 / n:
        j += 1
        levels.append(1 - 0.1 * 10 ** (-j / 8))
    if n > 1 and levels[-1] < 1 - 1 / n:
        levels.append(1 - 1 / n)
    return [[float(lv), float(q)] for lv, q in zip(levels, np.quantile(x, levels))]


def injected_wait_sample(p: int, k: int, delay: float, quantiles) -> float:
    """W(P) for a synchronous step from the *measured* distribution of a rank's compute
    around its mean (``sample_quantiles``' pairs), not a normal one:

        W = E[max(delay + max_k X, max_{P-k} X)],  F_max(x) = F(x - delay)**k * F(x)**(P - k),

    F piecewise linear between the stored quantiles, 1 from the last one. A right-skewed
    step time (a few slow steps, as a loaded machine gives) makes the slowest of P ranks
    later than sigma e(P) says. The sample's tail ends at its last resolved level, so for P
    near the number of samples and beyond this falls short of the truth; ``predict`` takes
    the larger of this and the normal form (which grows as sqrt(2 ln P))."""
    pairs = np.asarray(quantiles, dtype=float)
    levels, q = pairs[:, 0], pairs[:, 1]
    k = min(max(int(k), 0), int(p))

    def cdf_one(x):
        return np.interp(x, q, levels, left=0.0, right=1.0)

    cdf = lambda x: cdf_one(x - delay) ** k * cdf_one(x) ** (p - k)  # noqa: E731
    return _expected_from_cdf(cdf, float(q[0]), float(q[-1]) + delay)


# each fitted parameter's unit, as ``model fit`` prints it (issue 62: ``bandwidth=6.557e+08``)
PARAM_UNITS = {"c0": "s", "c1": "s", "alpha": "", "latency": "s", "bandwidth": "B/s", "sigma": "s", "hidden": "",
               "q": "s", "cpus_per_host": "CPUs", "one_host": "", "by_exposure": ""}


def param_text(name: str, value: float) -> str:
    """``latency=12 us``, ``bandwidth=0.66 GB/s``, ``c1=0.41 ms``: a parameter with its unit, to
    4 significant digits (``c1`` is seconds per sample per thread**alpha; ``hidden`` a fraction)."""
    unit = PARAM_UNITS.get(name.split(":")[0].split(".")[0], None)
    if unit == "s" and value and abs(value) < 1:
        scaled, unit = (value * 1e6, "us") if abs(value) < 1e-3 else (value * 1e3, "ms")
        return f"{name}={scaled:.4g} {unit}"
    if unit == "B/s" and value and value != float("inf"):
        return f"{name}={value / 1e9:.4g} GB/s"
    return f"{name}={value:.4g}" + (f" {unit}" if unit else "")
