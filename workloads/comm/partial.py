"""Partial collectives for eager-SGD: a round of allreduce that does not wait for everyone.

Each training step is one *round*. A rank that has its gradient for the round stages
it; the round is *activated* by

- ``solo``: the first rank to arrive — it sends an activation along a binomial tree
  rooted at itself; every rank forwards each initiator's activation down that
  initiator's tree, so simultaneous initiators merge into the one round;
- ``majority``: only the round's initiator, drawn from an RNG seeded identically on
  all ranks (so about half the ranks have arrived when it fires);
- a synchronous round (every ``sync_every`` steps, and the last): each rank joins
  when its own gradient is there, a plain allreduce.

On activation every rank joins the round's ``MPI_Iallreduce`` with what it holds:
its fresh gradient, gradients that missed earlier rounds (stale), or zeros (null).
A gradient that misses its round stays staged and joins the next round this rank
takes part in, so nothing computed is ever dropped. Every rank's progress thread joins
every round exactly once, in order, so the collectives always match; the training
thread may take several completed rounds' results at once (``round(catch_up=True)``)
and go on at the round the others have reached, computing none of the rounds it missed. Three extra values ride
along each contribution (fresh, stale, null flags) and sum to the round's counts.

All of it runs in a progress thread per rank on its own communicator; it needs
``MPI_THREAD_MULTIPLE``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
from mpi4py import MPI

from .background import require_thread_multiple

_ACT_TAG = 4711
_POLL = 50e-6
_MAX_POLL = 1e-3
MODES = ("solo", "majority")


def binomial_children(rank: int, root: int, size: int) -> list[int]:
    """Children of ``rank`` in a binomial tree over ``size`` ranks rooted at ``root`` (any size)."""
    v = (rank - root) % size
    mask = 1
    while mask < size:
        if v & mask:
            break
        mask <<= 1
    mask >>= 1
    children = []
    while mask > 0:
        if v + mask < size:
            children.append((v + mask + root) % size)
        mask >>= 1
    return children


def majority_initiator(seed: int, round_: int, size: int) -> int:
    return int(np.random.default_rng([seed, round_, 7]).integers(size))


@dataclass
class RoundResult:
    round: int
    total: np.ndarray          # sum of every rank's contribution
    fresh: int
    stale: int
    null: int
    initiator: int             # who activated the round as this rank saw it (-1: synchronous)
    t0: float                  # this rank joined (clock)
    t1: float                  # the reduction completed (clock)
    synchronous: bool
    local: str = "null"        # what this rank put in: "fresh", "stale", "fresh+stale" or "null"
    staleness: int = 0         # rounds between this round and the oldest gradient this rank put in


class PartialAllreduce:
    def __init__(self, numel: int, comm: MPI.Comm, mode: str, seed: int,
                 clock: Callable[[], float] = time.time) -> None:
        require_thread_multiple("eager-SGD's partial allreduce")
        if mode not in MODES:
            raise ValueError(f"partial allreduce mode {mode!r}; known: {', '.join(MODES)}")
        self.comm = comm.Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.mode, self.seed, self.clock = mode, seed, clock
        self.numel = numel
        self._staged = np.zeros(numel + 3, dtype=np.float32)  # gradient values + (fresh, stale, null)
        self._staged_rounds: list[int] = []                   # rounds whose gradients are staged
        self._fresh_for = -1                                  # latest round with a gradient staged in time
        self._joined = -1                                     # latest round this rank has joined
        self._sync_rounds: set[int] = set()
        self._results: dict[int, RoundResult] = {}
        self._activations: dict[int, int] = {}                # round -> first initiator heard of
        self._forwarded: set[tuple[int, int]] = set()
        self._cv = threading.Condition()
        self._stop = False
        self._error: BaseException | None = None
        self._act_buf = np.zeros(2, dtype=np.int64)
        self._act_req = self.comm.Irecv(self._act_buf, source=MPI.ANY_SOURCE, tag=_ACT_TAG)
        self._sends: list[MPI.Request] = []
        self._thread = threading.Thread(target=self._loop, name="partial-allreduce", daemon=True)
        self._thread.start()

    # -- training thread --------------------------------------------------------------

    def round(self, grad: np.ndarray, round_: int, synchronous: bool = False,
              catch_up: bool = False) -> list[RoundResult]:
        """Stage this step's gradient for round ``round_``; the results this rank now takes.

        If the round was already activated without this rank's gradient, the gradient
        stays staged for the next round this rank's progress thread joins (stale there).
        Without ``catch_up``: round ``round_``'s result alone (the rank then computes round
        ``round_ + 1``, whether or not the others have finished it). With ``catch_up``: every
        round from ``round_`` on that has completed, in order (the rank has missed them while it
        computed, and goes on at the round after the last: the persistent schedules of the
        paper, sec. 4.1, where a late process finds the latest result and joins the next
        execution). ``synchronous`` must be the same on every rank for a given round; no rank
        can pass a synchronous round it has not joined with a gradient of its own, so a catch-up
        stops at it.
        """
        with self._cv:
            self._staged[: self.numel] += grad.reshape(-1)
            self._staged_rounds.append(round_)
            if synchronous:
                self._sync_rounds.add(round_)
            if self._joined < round_:
                self._fresh_for = round_
            self._cv.notify_all()
            while round_ not in self._results:
                if self._error is not None:
                    raise RuntimeError(f"partial allreduce failed: {self._error}") from self._error
                self._cv.wait(timeout=1.0)
            taken = [self._results.pop(round_)]
            while catch_up and taken[-1].round + 1 in self._results:
                taken.append(self._results.pop(taken[-1].round + 1))
            return taken

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._act_req.Cancel()
            self._act_req.Wait()
            MPI.Request.Waitall(self._sends)
            self.comm.Free()

    # -- progress thread -------------------------------------------------------------

    def _send_activation(self, round_: int, initiator: int) -> None:
        if (round_, initiator) in self._forwarded:
            return
        self._forwarded.add((round_, initiator))
        msg = np.array([round_, initiator], dtype=np.int64)
        for child in binomial_children(self.rank, initiator, self.size):
            self._sends.append(self.comm.Isend(msg.copy(), dest=child, tag=_ACT_TAG))
        self._sends = [r for r in self._sends if not r.Test()]

    def _service_activations(self, current: int) -> None:
        """Receive activations and forward each down its initiator's tree.

        Every rank forwards every initiator's activation (once), whether or not it
        has joined the round already, so each initiator's tree reaches all ranks and
        concurrent initiators cannot leave a rank unactivated. Activations of rounds
        before ``current`` are dropped: this rank saw that round complete, which
        needs every rank to have joined it.
        """
        while self._act_req.Test():
            round_, initiator = int(self._act_buf[0]), int(self._act_buf[1])
            self._act_req = self.comm.Irecv(self._act_buf, source=MPI.ANY_SOURCE, tag=_ACT_TAG)
            if round_ < current:
                continue
            self._send_activation(round_, initiator)
            if round_ > self._joined:
                self._activations.setdefault(round_, initiator)

    def _loop(self) -> None:
        try:
            r = 0
            while True:
                initiator = self._await_activation(r)
                if initiator is None:
                    return
                self._run_round(r, initiator)
                r += 1
        except BaseException as exc:
            with self._cv:
                self._error = exc
                self._cv.notify_all()

    def _await_activation(self, r: int) -> int | None:
        """Block until round ``r`` is activated; returns its initiator (-1: synchronous)."""
        poll = _POLL
        while True:
            self._service_activations(r)
            with self._cv:
                if self._stop:
                    return None
                synchronous = r in self._sync_rounds
                have_fresh = self._fresh_for >= r
                if synchronous and have_fresh:
                    return -1
                if not synchronous:
                    if r in self._activations:
                        return self._activations.pop(r)
                    if have_fresh and (self.mode == "solo" or majority_initiator(self.seed, r, self.size) == self.rank):
                        self._send_activation(r, self.rank)
                        return self.rank
                self._cv.wait(timeout=poll)
            poll = min(poll * 2, _MAX_POLL)

    def _run_round(self, r: int, initiator: int) -> None:
        t0 = self.clock()
        with self._cv:
            contribution = self._staged
            self._staged = np.zeros_like(contribution)
            rounds, self._staged_rounds = self._staged_rounds, []
            self._joined = r
            contribution[-3] = 1.0 if r in rounds else 0.0                     # fresh
            contribution[-2] = 1.0 if any(x < r for x in rounds) else 0.0       # stale
            contribution[-1] = 1.0 if not rounds else 0.0                       # null
            staleness = r - min(rounds) if rounds else 0
        if initiator >= 0:
            self._send_activation(r, initiator)
        total = np.empty_like(contribution)
        req = self.comm.Iallreduce(contribution, total, op=MPI.SUM)
        poll = _POLL
        while not req.Test():
            self._service_activations(r)
            time.sleep(poll)
            poll = min(poll * 2, _MAX_POLL)
        local = "+".join(name for name, flag in (("fresh", contribution[-3]), ("stale", contribution[-2])) if flag)
        result = RoundResult(round=r, total=total[: self.numel], fresh=int(round(total[-3])),
                             stale=int(round(total[-2])), null=int(round(total[-1])), initiator=initiator,
                             t0=t0, t1=self.clock(), synchronous=initiator < 0, local=local or "null",
                             staleness=staleness)
        self._forwarded = {key for key in self._forwarded if key[0] > r}
        with self._cv:
            self._sync_rounds.discard(r)
            self._results[r] = result
            self._cv.notify_all()
