"""Aligns every rank's timestamps to rank 0's clock.

Fine-grain timelines compare events across nodes whose clocks differ by more than
the events last. At start-up each rank exchanges a few ping-pongs with rank 0 and
keeps the offset measured on the round trip with the smallest latency (Cristian's
algorithm); timestamps written to the metrics are ``time.time() + offset``.
"""

from __future__ import annotations

import time

from mpi4py import MPI

_TAG = 7301


def estimate_offset_to_root(comm: MPI.Comm, rounds: int = 8) -> float:
    """Seconds to add to this rank's ``time.time()`` to get rank 0's clock."""
    rank, size = comm.Get_rank(), comm.Get_size()
    offset = 0.0
    for peer in range(1, size):
        if rank == 0:
            for _ in range(rounds):
                comm.recv(source=peer, tag=_TAG)
                comm.send(time.time(), dest=peer, tag=_TAG)
        elif rank == peer:
            best_rtt = float("inf")
            for _ in range(rounds):
                t1 = time.time()
                comm.send(None, dest=0, tag=_TAG)
                root_time = comm.recv(source=0, tag=_TAG)
                t2 = time.time()
                if t2 - t1 < best_rtt:
                    best_rtt = t2 - t1
                    offset = root_time - (t1 + t2) / 2.0
    return offset


class AlignedClock:
    """``now()`` on rank 0's time base."""

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset

    def now(self) -> float:
        return time.time() + self.offset
