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
- A(n, P) = 2 (P - 1) * lat + 2 (P - 1) / P * n / bw: the allreduce of n bytes as a ring (or
  reduce-scatter + allgather, as MPICH does for large messages): 2(P - 1) messages in
  sequence, each rank sending and receiving 2(P - 1)/P of the data. lat and bw are the
  per-message latency and the per-rank bandwidth.
- h: the share of the allreduce hidden behind backprop (overlap), from the timeline.
- U: the weight update.

Throughput is P * b / T(P); efficiency T(1) / T(P) (weak scaling).

eager-SGD does not wait for the slowest rank. With Solo allreduce a round fires when the
first rank arrives; a rank's expected wait is then the expected *minimum*, and the late
ranks' gradients join a later round: the stored rounds give the expected fresh, stale and
null shares of a round's contributions (``participation``).
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


def allreduce_seconds(nbytes, ranks, latency: float, bandwidth: float):
    """A(n, P) = 2 (P-1) lat + 2 (P-1)/P * n / bw; zero on one rank."""
    p = np.asarray(ranks, dtype=float)
    n = np.asarray(nbytes, dtype=float)
    return np.where(p > 1, 2 * (p - 1) * latency + 2 * (p - 1) / np.maximum(p, 1) * n / bandwidth, 0.0)


def step_seconds(ranks, batch, threads, nbytes, *, c0: float, c1: float, alpha: float, sigma: float,
                 latency: float, bandwidth: float, hidden: float, update: float):
    """T(P) = C(b, t) + S(P) + (1 - h) A(n, P) + U."""
    return (compute_seconds(batch, threads, c0, c1, alpha) + straggler_seconds(ranks, sigma)
            + (1 - hidden) * allreduce_seconds(nbytes, ranks, latency, bandwidth) + update)
