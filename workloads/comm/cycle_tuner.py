"""Choosing the engine's cycle time from measured steps (``autotune=true``).

Whether reducing beside backprop pays depends on the node, not on the algorithm: where a
core is free (or the gradients live on an accelerator) short cycles hide the allreduce;
where every core computes, each cycle's wake-up and the reductions' arithmetic are taken
from backprop, and one cycle after backward is faster (benchmarks/RESULTS.md, weak
scaling: 0.935 of the no-communication limit against 0.902 at 5 ms, 18 rounds on this
2-core VM). Horovod's answer is
``HOROVOD_AUTOTUNE``, which searches cycle time and fusion threshold by Bayesian
optimisation over a few hundred steps; ours tunes the cycle time alone, over the first
steps of a run, which is what a run of a hundred steps can afford.

Schedule: candidates are tried in turn, one step each, for ``rounds`` rounds, starting at
``first_step`` (the engine learns its gradient layout in step 0). A step is timed from
``begin_step`` (before its batch is loaded) to the end of the optimizer's step, on every
rank; evaluation between epochs falls outside. Three rounds or none: with two samples a
median is their mean, and one slow step (the first after the layout is rebuilt) would
decide. Then every rank's median per candidate is summed (``MPI.SUM`` over the
training communicator) and rank 0's argmin is broadcast, so all ranks adopt the same
cycle time even if their sums differed in the last bit. Interleaving the candidates
(A B C A B C ...) keeps a slow stretch of the machine from landing on one candidate.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
import numpy as np
from mpi4py import MPI

# a cycle longer than any step: one negotiation and one fused allreduce per step, after backward
ONE_PER_STEP = math.inf
ROUNDS = 3
FIRST_STEP = 1


def candidates_for(configured_s: float) -> tuple[float, ...]:
    """The configured cycle, a fifth of it (more overlap) and one cycle per step (none)."""
    out: list[float] = []
    for c in (configured_s, configured_s / 5, ONE_PER_STEP):
        if c > 0 and c not in out:
            out.append(c)
    return tuple(out)


@dataclass
class CycleTimeTuner:
    """Which cycle time step k runs with, and, once the trials are measured, the choice.

    The choice must run at least as many steps as the trials took: a run shorter than
    ``first_step`` + 2 x rounds x candidates steps is not tuned (``chosen`` is the
    configured cycle, ``tuned`` False)."""
    configured: float
    total_steps: int
    rounds: int = ROUNDS
    first_step: int = FIRST_STEP
    candidates: tuple[float, ...] = ()
    chosen: float | None = None
    tuned: bool = False
    samples: dict[float, list[float]] = field(default_factory=dict)
    mean_medians: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.candidates:
            self.candidates = candidates_for(self.configured)
        k = len(self.candidates)
        affordable = (self.total_steps - self.first_step) // (2 * k) if self.total_steps else self.rounds
        if affordable < self.rounds:
            self.rounds = 0
        self.samples = {c: [] for c in self.candidates}
        if self.rounds < 1 or k < 2:
            self.chosen = self.configured

    @property
    def last_trial(self) -> int:
        return self.first_step + self.rounds * len(self.candidates) - 1

    def cycle_for(self, step: int) -> float:
        if self.chosen is not None:
            return self.chosen
        if step < self.first_step:
            return self.configured
        return self.candidates[(step - self.first_step) % len(self.candidates)]

    def observe(self, step: int, seconds: float) -> None:
        """Step ``step`` took ``seconds`` on this rank (only trial steps are kept)."""
        if self.chosen is None and self.first_step <= step <= self.last_trial:
            self.samples[self.cycle_for(step)].append(seconds)

    def due(self, step: int) -> bool:
        """Whether the choice must be made before step ``step`` begins (a collective: every
        rank asks at the same step)."""
        return self.chosen is None and step > self.last_trial

    def decide(self, comm: MPI.Comm) -> float:
        medians = np.array([statistics.median(self.samples[c]) for c in self.candidates], dtype=np.float64)
        total = np.empty_like(medians)
        comm.Allreduce(medians, total, op=MPI.SUM)
        best = comm.bcast(int(np.argmin(total)) if comm.Get_rank() == 0 else None, root=0)
        self.chosen, self.tuned = self.candidates[best], True
        self.mean_medians = [float(t) / comm.Get_size() for t in total]
        return self.chosen

    def report(self) -> dict[str, object]:
        """For the run's ``metrics``: the cycle chosen (ms; null for one per step) and the trials."""
        def ms(c: float) -> float | None:
            return None if math.isinf(c) else c * 1e3
        out: dict[str, object] = {"autotune_cycle_time_ms": ms(self.chosen if self.chosen is not None
                                                               else self.configured),
                                  "autotune_tuned": self.tuned}
        if self.tuned:
            out["autotune_trials"] = {("one per step" if ms(c) is None else f"{ms(c):g} ms"): round(m * 1e3, 3)
                                      for c, m in zip(self.candidates, self.mean_medians)}
            out["autotune_trial_steps"] = self.rounds * len(self.candidates)
        return out
