"""Load imbalance injected into training steps, identical for every algorithm.

- ``injected`` (eager-SGD's scheme): each step an RNG seeded identically on all ranks
  picks ``ranks`` ranks, which sleep ``delay_ms``;
- ``fixed``: one rank (``rank``, default the last) sleeps ``delay_ms`` every step;
- ``shifted`` (the paper's severe imbalance, ResNet-32 on CIFAR-10, sec. 7.2.3): every rank
  sleeps every step, P evenly spaced amounts up to ``delay_ms`` (``delay_ms`` k / P,
  k = 1..P: 50 to 400 ms for 8 ranks at 400), the amounts shifted one rank on after each step;
- ``exponential`` / ``lognormal``: every rank sleeps a random time with mean
  ``delay_ms`` (log-normal with shape ``sigma``), drawn per step and rank;
- ``inherent``: no sleep; the work itself varies (an LSTM over sequences of
  long-tailed lengths, see ``workloads.data``).

The sleep happens between forward and backward, before any gradient exists, so an
engine that starts communicating during backward cannot hide it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .registry import IMBALANCE_KINDS as KINDS


@dataclass(frozen=True)
class DelayInjector:
    kind: str
    ranks: int
    delay_ms: float
    rank: int
    sigma: float
    seed: int
    world_size: int

    def seconds(self, step: int, rank: int) -> float:
        d = self.delay_ms / 1000.0
        if self.kind in ("none", "inherent") or d <= 0:
            return 0.0
        if self.kind == "injected":
            chosen = np.random.default_rng([self.seed, step, 99]).choice(
                self.world_size, size=min(self.ranks, self.world_size), replace=False)
            return d if rank in chosen else 0.0
        if self.kind == "fixed":
            return d if rank == self.rank % self.world_size else 0.0
        if self.kind == "shifted":
            return d * ((rank + step) % self.world_size + 1) / self.world_size
        rng = np.random.default_rng([self.seed, step, rank, 98])
        if self.kind == "exponential":
            return float(rng.exponential(d))
        if self.kind == "lognormal":
            mu = math.log(d) - self.sigma ** 2 / 2.0  # mean exp(mu + sigma^2/2) = d
            return float(rng.lognormal(mu, self.sigma))
        raise ValueError(f"imbalance.kind={self.kind!r} is unknown; known: {', '.join(KINDS)}")
