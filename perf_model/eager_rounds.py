"""How many rounds per second eager-SGD's solo allreduce can make under a given load imbalance.

An event simulation of the mechanism in ``workloads.comm.partial`` with ``catch_up`` on or off,
driven by the same delay draws as the run (``workloads.imbalance.DelayInjector``), so a
measured rate can be checked against what the mechanism allows, independently of the code
that implements it:

- each rank computes its step in ``compute + delay(step, rank)`` seconds;
- a solo round completes when the first rank has its fresh gradient for it (rounds complete
  in order; activation and the reduction itself take no time here);
- with catch-up a rank that finishes step ``s`` goes on at ``max(s + 1, last completed + 1)``;
  without it (``lockstep``) at ``s + 1``;
- the last step is synchronous: the run ends when every rank has computed it.

Why it matters: with one rank in P drawn *per step* (the ``injected`` scheme), even a rank that
never carries a delay forward meets a fresh one whenever it is the rank that leads the round,
so the rate cannot stay at ``1 / compute`` for small P (at P = 2, D = C: 0.75 of it, where
lockstep gives 0.68); a persistent straggler (``fixed``) costs catch-up nothing.

``eager_steps`` is the model's simulation (``predict.step_parts`` under catch-up): it adds
majority's initiator and the synchronous rounds, draws its delays vectorised rather than
through ``DelayInjector`` (an expectation, not a replay), and returns a rank's mean recorded
step. ``solo_round_rate`` stays as the replay of a run's own draws, and as the independent
check of ``eager_steps`` (tests/perf_model/test_eager_rounds.py).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from workloads.imbalance import DelayInjector


def solo_round_rate(delays: DelayInjector, compute_s: float, steps: int, catch_up: bool = True) -> float:
    """Rounds per second of a ``steps``-step solo run (the last round synchronous)."""
    size = delays.world_size
    events = [(compute_s + delays.seconds(0, r), r, 0) for r in range(size)]
    heapq.heapify(events)
    completed, last_finish = -1, 0.0
    while events:
        t, rank, step = heapq.heappop(events)
        if step == steps - 1:                       # the synchronous last round: everyone computes it
            last_finish = max(last_finish, t)
            continue
        completed = max(completed, step)
        nxt = max(step + 1, completed + 1) if catch_up else step + 1
        heapq.heappush(events, (t + compute_s + delays.seconds(nxt, rank), rank, nxt))
    return steps / last_finish


@dataclass(frozen=True)
class EagerSteps:
    """What a rank's recorded steps come to under eager-SGD's rounds (``eager_steps``)."""
    seconds_per_gradient: float   # the run's time over the gradients a rank computed: its mean recorded step
    rounds_per_gradient: float    # rounds taken (results applied, each one optimizer step) per gradient computed


def eager_steps(mode: str, ranks: int, compute_s: float, delay_s: float, delayed: int, sigma: float,
                segment: int, catch_up: bool = True, rounds: int = 400, seeds: int = 4) -> EagerSteps:
    """The expected mean recorded step of an eager-SGD rank, by simulating the mechanism of
    ``workloads.comm.partial`` (module docstring) with synchronous rounds and majority's initiator:

    - a rank's work on a round is ``compute_s`` + sigma Z (at least 0), plus ``delay_s`` for the
      ``delayed`` ranks of ``ranks`` drawn each round (the ``injected`` scheme);
    - a rank that has its gradient for round s waits until round s completes: at once for
      ``solo`` (the first gradient activates it), at its initiator's gradient for ``majority``
      (a rank drawn each round), at the last rank's for a synchronous round (every
      ``segment``-th and the last);
    - it then goes on at ``max(s + 1, last completed + 1)`` with ``catch_up``, else at s + 1.

    A rank's recorded steps run back to back from the first to the last round (emulated runs
    skip the evaluation between epochs), so its mean recorded step is the run's time over the
    gradients it computed; the mean over ranks and over ``seeds`` runs of ``rounds`` rounds is
    returned. Communication takes no time here: the model adds it as its own term.

    Why simulate: with catch-up a late rank does not carry its delay, but whoever leads a round
    may be the one delayed in it, and a synchronous round waits for whoever is delayed in it;
    no closed form of the lock-step kind (``terms.injected_wait_eager``) holds for both."""
    if mode not in ("solo", "majority"):
        raise ValueError(f"eager mode {mode!r}: solo or majority")
    p, n = max(int(ranks), 1), max(int(rounds), 2)
    k = min(max(int(delayed), 0), p)
    synchronous = np.zeros(n, dtype=bool)
    if segment and segment > 0:
        synchronous[int(segment) - 1::int(segment)] = True
    synchronous[-1] = True
    per_gradient, per_round = [], []
    for seed in range(seeds):
        rng = np.random.default_rng([seed, p, k, n, 2027])
        work = np.maximum(compute_s + sigma * rng.standard_normal((n, p)), 0.0)
        if k and delay_s > 0:
            chosen = np.argsort(rng.random((n, p)), axis=1)[:, :k]
            np.put_along_axis(work, chosen, work[np.arange(n)[:, None], chosen] + delay_s, axis=1)
        initiator = rng.integers(p, size=n)
        computed, end = _simulate(mode, work, initiator, synchronous, catch_up)
        per_gradient.append(float(np.mean(end / computed)))
        per_round.append(float(np.mean(n / computed)))
    return EagerSteps(float(np.mean(per_gradient)), float(np.mean(per_round)))


def _simulate(mode: str, work: np.ndarray, initiator: np.ndarray, synchronous: np.ndarray,
              catch_up: bool) -> tuple[np.ndarray, float]:
    """The gradients each rank computed, and the run's end (the last rank's last round)."""
    n, p = work.shape
    computed = np.zeros(p)
    done = np.full(n, np.inf)
    arrived = np.zeros(n, dtype=int)
    waiting: dict[int, list[int]] = {}
    events = [(float(work[0, r]), r, 0) for r in range(p)]
    heapq.heapify(events)
    completed, end = -1, 0.0

    def resume(rank: int, step: int, t: float) -> None:
        nonlocal end
        nxt = max(step + 1, completed + 1) if catch_up else step + 1
        if nxt >= n:
            end = max(end, t)
        else:
            heapq.heappush(events, (t + float(work[nxt, rank]), rank, nxt))

    while events:
        t, rank, step = heapq.heappop(events)
        computed[rank] += 1
        if done[step] <= t:
            resume(rank, step, t)
            continue
        arrived[step] += 1
        fires = arrived[step] == p if synchronous[step] else (mode == "solo" or initiator[step] == rank)
        if not fires:
            waiting.setdefault(step, []).append(rank)
            continue
        done[step], completed = t, step
        for other in waiting.pop(step, []) + [rank]:
            resume(other, step, t)
    return computed, end
