"""Ranks that arrive early wait asleep, not spinning, until every rank of the job is there.

An MPI library waits in a collective by polling: on a node with a core a rank that costs
nothing, but where ranks share cores (a laptop, a login node, the 2-core test machine) the
ranks that finished their imports first spin at full speed in the first collective and take
the cores from the ranks still importing torch or building their model. A probe of the test
suite (benchmarks/RESULTS.md, issue 59) found 7 % of its CPU spent so, in the start-up
collectives. Used only where the ranks gather before the timed part of a run: the training
loop's own collectives are left to the library, as the study measures them.
"""

from __future__ import annotations

import time

from mpi4py import MPI

POLL_S = 0.002   # the most it adds to a start-up, once; far below a rank's import of torch (~1 s)


def all_arrived(comm: MPI.Comm, poll_s: float = POLL_S) -> None:
    """A barrier that sleeps between its tests (MPI_Ibarrier, MPI_Test)."""
    if comm.Get_size() == 1:
        return
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(poll_s)
