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
"""

from __future__ import annotations

import heapq

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
