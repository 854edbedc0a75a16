"""Partial collectives for eager-SGD: a round of allreduce that does not wait for everyone.

Rounds are numbered; a rank's k-th gradient is staged for round k. A round is *activated* by

- ``solo``: the first rank to arrive;
- ``majority``: only the round's initiator, drawn from an RNG seeded identically on all
  ranks (so about half the ranks have arrived when it fires; the authors' fflib2 draws it
  with ``rand_r`` from one shared seed, ``ffrand_allreduce.c``);
- a synchronous round (as the caller says, the same on every rank): each rank joins when its
  own gradient is there, a plain allreduce.

On activation every rank joins the round's ``MPI_Iallreduce`` with what it holds: its fresh
gradient, gradients that missed earlier rounds (stale), or zeros (null). A gradient that misses
its round stays staged and joins the next round this rank takes part in, so nothing computed is
ever dropped (the authors' training op zeroes its send buffer after each step instead, so there a
late gradient joins a later round only if one starts before the zeroing). Every rank's progress
thread joins every round exactly once, in order, so the collectives always match. Three extra
values ride along each contribution (fresh, stale, null flags) and sum to the round's counts.

What the training thread takes (``round``): the round's own result; with ``catch_up`` every
round completed since, in order; with ``latest`` the newest result there is, which stays there
for the next read as the paper's receive buffer does (a rank that lagged sees only the latest).

**Progress without polling the collective.** An activation reaches every rank along two trees:
the initiator's binomial tree, and the tree rooted at rank 0, to which the initiator also sends
directly; each rank, when it joins a round, forwards it down both. Rank 0 hears of every round
and every rank hears from its parent in rank 0's tree once that parent joins, so no rank needs
to forward anything while it waits for a collective: the thread waits in ``MPI_Wait``, which
progresses the collective at once (MPICH advances a nonblocking collective only when asked; the
earlier loop slept 50 us to 1 ms between tests, and each of a large allreduce's steps waited for
the next test). Between rounds, with nothing staged, it waits on the training thread's condition
with a short timeout to hear activations (MPICH's blocking wait spins a core: waiting in it while
the rank computes would take the core from the computation).

All of it runs in a progress thread per rank on its own communicator; it needs
``MPI_THREAD_MULTIPLE``. Buffers are allocated once: two staging buffers used in turn (the one
a round reduces is not the one the next gradient goes into), results from a pool the training
thread hands back (``recycle``).
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
_POLL = 50e-6          # between rounds: the first wait for an activation, doubling
_MAX_POLL = 1e-3       # to at most this
_TREE_ROOT = 0         # the tree every activation also travels
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


def activation_targets(rank: int, initiator: int, size: int) -> list[int]:
    """Where ``rank`` sends a round's activation when it joins the round ``initiator`` activated:
    its children in the initiator's tree and in rank 0's, and rank 0 itself from the initiator."""
    out = set(binomial_children(rank, initiator, size)) | set(binomial_children(rank, _TREE_ROOT, size))
    if rank == initiator and rank != _TREE_ROOT:
        out.add(_TREE_ROOT)
    out.discard(rank)
    return sorted(out)


def majority_initiator(seed: int, round_: int, size: int) -> int:
    return int(np.random.default_rng([seed, round_, 7]).integers(size))


@dataclass
class RoundResult:
    round: int
    total: np.ndarray          # sum of every rank's contribution (a pooled buffer: ``recycle`` it)
    fresh: int
    stale: int
    null: int
    initiator: int             # who activated the round as this rank saw it (-1: synchronous)
    t0: float                  # this rank joined (clock)
    t1: float                  # the reduction completed (clock)
    synchronous: bool
    local: str = "null"        # what this rank put in: "fresh", "stale", "fresh+stale" or "null"
    staleness: int = 0         # rounds between this round and the oldest gradient this rank put in
    buffer: np.ndarray | None = None   # the whole reduced buffer (``total`` is a view of it)


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
        # gradient values + (fresh, stale, null); two, used in turn
        self._staging = [np.zeros(numel + 3, dtype=np.float32), np.zeros(numel + 3, dtype=np.float32)]
        self._staged = self._staging[0]
        self._staged_empty = True                             # nothing in it yet: the next gradient is copied
        self._null = np.zeros(numel + 3, dtype=np.float32)    # what a rank with nothing staged puts in
        self._null[-1] = 1.0
        self._pool: list[np.ndarray] = []                      # reduced buffers handed back
        self._staged_rounds: list[int] = []                   # rounds whose gradients are staged
        self._fresh_for = -1                                  # latest round with a gradient staged in time
        self._joined = -1                                     # latest round this rank has joined
        self._completed = -1                                  # latest round whose result is here
        self._sync_rounds: set[int] = set()
        self._results: dict[int, RoundResult] = {}
        self._log: list[dict] = []                            # every completed round, for the records
        self._activations: dict[int, int] = {}                # round -> first initiator heard of
        self._cv = threading.Condition()
        self._stop = False
        self._error: BaseException | None = None
        self._act_buf = np.zeros(2, dtype=np.int64)
        self._act_req = self.comm.Irecv(self._act_buf, source=MPI.ANY_SOURCE, tag=_ACT_TAG)
        self._sends: list[tuple[MPI.Request, np.ndarray]] = []
        self._thread = threading.Thread(target=self._loop, name="partial-allreduce", daemon=True)
        self._thread.start()

    # -- training thread --------------------------------------------------------------

    def round(self, grad: np.ndarray, round_: int, synchronous: bool = False, catch_up: bool = False,
              latest: bool = False) -> list[RoundResult]:
        """Stage this step's gradient for round ``round_``; the results this rank now takes.

        If the round was already activated without this rank's gradient, the gradient
        stays staged for the next round this rank's progress thread joins (stale there).
        What is taken once round ``round_`` has completed: its result alone (the rank then
        computes round ``round_ + 1``, whether or not the others have finished it); with
        ``catch_up`` every round from ``round_`` on that has completed, in order (the rank goes
        on at the round after the last); with ``latest`` the newest result there is, kept for
        the next read (the paper's receive buffer). ``synchronous`` must be the same on every
        rank for a given round; no rank can pass a synchronous round it has not joined with a
        gradient of its own, so a catch-up stops at it.
        """
        flat = grad.reshape(-1)
        with self._cv:
            if self._staged_empty:
                np.copyto(self._staged[: self.numel], flat)
                self._staged_empty = False
            else:
                self._staged[: self.numel] += flat
            self._staged_rounds.append(round_)
            if synchronous:
                self._sync_rounds.add(round_)
            if self._joined < round_:
                self._fresh_for = round_
            self._cv.notify_all()
            while self._completed < round_:
                if self._error is not None:
                    raise RuntimeError(f"partial allreduce failed: {self._error}") from self._error
                self._cv.wait(timeout=1.0)
            if latest:
                newest = max(self._results)
                for old in [r for r in self._results if r < newest]:
                    self._give_back(self._results.pop(old))
                return [self._results[newest]]
            taken = [self._results.pop(round_)]
            while catch_up and taken[-1].round + 1 in self._results:
                taken.append(self._results.pop(taken[-1].round + 1))
            return taken

    def drain_log(self) -> list[dict]:
        """Every round completed since the last call, in order, whatever the training thread took
        of it (with ``latest`` it reads only the newest)."""
        with self._cv:
            log, self._log = self._log, []
            return log

    def recycle(self, results: list[RoundResult]) -> None:
        """Hand back results the training thread is done with (their buffers are reused); a
        result still kept as the latest is not taken back."""
        with self._cv:
            for res in results:
                if self._results.get(res.round) is not res:
                    self._give_back(res)

    def _give_back(self, res: RoundResult) -> None:
        if res.buffer is not None and len(self._pool) < 4:
            self._pool.append(res.buffer)
        res.buffer = None

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._act_req.Cancel()
            self._act_req.Wait()
            MPI.Request.Waitall([req for req, _ in self._sends])
            self.comm.Free()

    # -- progress thread -------------------------------------------------------------

    def _send_activation(self, round_: int, initiator: int) -> None:
        msg = np.array([round_, initiator], dtype=np.int64)
        for target in activation_targets(self.rank, initiator, self.size):
            self._sends.append((self.comm.Isend(msg, dest=target, tag=_ACT_TAG), msg))   # msg kept until sent
        self._sends = [(req, buf) for req, buf in self._sends if not req.Test()]

    def _service_activations(self, current: int) -> None:
        """Receive activations of rounds this rank has not joined yet (an activation of a round
        it has joined is a duplicate: the other tree's, or a merged initiator's)."""
        while self._act_req.Test():
            round_, initiator = int(self._act_buf[0]), int(self._act_buf[1])
            self._act_req = self.comm.Irecv(self._act_buf, source=MPI.ANY_SOURCE, tag=_ACT_TAG)
            if round_ >= current:
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
                        return self.rank
                self._cv.wait(timeout=poll)   # the training thread's staging wakes it at once
            poll = min(poll * 2, _MAX_POLL)

    def _run_round(self, r: int, initiator: int) -> None:
        t0 = self.clock()
        with self._cv:
            rounds, self._staged_rounds = self._staged_rounds, []
            if rounds:
                contribution = self._staged
                self._staged = self._staging[1] if contribution is self._staging[0] else self._staging[0]
                self._staged_empty = True
                contribution[-3] = 1.0 if r in rounds else 0.0                     # fresh
                contribution[-2] = 1.0 if any(x < r for x in rounds) else 0.0       # stale
                contribution[-1] = 0.0                                             # null
            else:
                contribution = self._null
            self._joined = r
            staleness = r - min(rounds) if rounds else 0
            buffer = self._pool.pop() if self._pool else np.empty(self.numel + 3, dtype=np.float32)
        if initiator >= 0:
            self._send_activation(r, initiator)
        self.comm.Iallreduce(contribution, buffer, op=MPI.SUM).Wait()   # releases the GIL
        local = "+".join(name for name, flag in (("fresh", contribution[-3]), ("stale", contribution[-2])) if flag)
        result = RoundResult(round=r, total=buffer[: self.numel], fresh=int(round(buffer[-3])),
                             stale=int(round(buffer[-2])), null=int(round(buffer[-1])), initiator=initiator,
                             t0=t0, t1=self.clock(), synchronous=initiator < 0, local=local or "null",
                             staleness=staleness, buffer=buffer)
        with self._cv:
            self._sync_rounds.discard(r)
            self._results[r] = result
            self._completed = r
            self._log.append({"round": r, "initiator": initiator, "fresh": result.fresh, "stale": result.stale,
                              "null": result.null, "local": result.local, "staleness": staleness,
                              "synchronous": result.synchronous, "t0": t0, "t1": result.t1,
                              "latency": result.t1 - t0})
            self._cv.notify_all()
