"""What an allreduce of S bytes asks of the links it crosses: nccl-tests' bus factor, and the
bytes one node's network link carries for the algorithm each backend runs. Declared once, read
by ``workloads.netbench`` (busbw), ``results_db.analysis.network`` (the fitted per-node bandwidth, the
runs' achieved busbw), ``perf_model.machine`` (predictions with a site's network) and the tests.

**Bus bandwidth** (nccl-tests ``doc/PERFORMANCE.md``, "AllReduce"; ``src/all_reduce.cu``,
``AllReduceGetBw``, lines 59-64 at NCCL_TESTS_VERSION 2.19.6, a0b82b2): busbw = S/t x 2(n-1)/n
for n ranks, the rate at which *each rank's own link* would carry an allreduce's 2(n-1)/n x S
bytes, whatever the algorithm. It is a per-rank figure: ranks that share a node share its link.

**A node's link.** P = N x w ranks, placed node by node (rank r on node r // w: Slurm's default
block distribution), S bytes on every rank. What leaves one node
for the others, per direction (what arrives is the same):

- ``ring`` (NCCL's ring; gloo's ring, which ``ProcessGroupGloo``'s allreduce runs: gloo
  ``gloo/allreduce.cc`` lines 134-137, UNSPECIFIED -> ring, neighbours rank +- 1 at 157-158,
  commit 70dc360). A reduce-scatter then an allgather, each of P - 1 steps in which every rank
  sends a chunk of S/P bytes to the same ring neighbour: 2(P-1)/P x S per rank. Neighbours r
  and r + 1 share a node except where r is a node's last rank, so of a node's w ring edges
  exactly one leaves it (and one enters). The node's link carries what ONE rank sends, 2(P-1)/P x S, not w times that.
  This is NCCL's own cost model: for a ring allreduce nsteps = 2(nRanks-1) (``src/graph/
  tuning.cc`` line 289) and algbw = busBw x nRanks / nsteps (line 379), time = lat + bytes /
  algbw (line 653), with busBw the channels' bandwidth, across nodes the node's NICs; hence
  nccl-tests' busbw of a multi-node ring measures the node's bandwidth itself (NVIDIA/nccl
  5067397).
- ``rabenseifner`` (MPICH, the ``mpi`` backend: a reduce-scatter by recursive halving, then an
  allgather by recursive doubling). ``MPI_Allreduce`` of a built-in commutative op on a
  communicator that spans nodes takes ch4's composition alpha (MPICH 6a79bf6,
  ``maint/tuning/coll/ch4/generic.json``; ``src/mpid/ch4/src/ch4_coll_impl.h`` line 532): a
  reduce within each node over shared memory, an allreduce among one leader per node (MPIR's
  ``reduce_scatter_allgather`` beyond a few elements: ``maint/tuning/coll/mpir/generic.json``),
  a broadcast within each node. A leader sends S/2 + S/4 + ... + S/N = (N-1)/N x S in the
  halving and as much in the doubling: 2(N-1)/N x S. ``MPI_Iallreduce`` (the training engine's)
  has no composition and runs Rabenseifner's over all P ranks (``iallreduce_intra_sched_
  reduce_scatter_allgather.c`` lines 107-154), whose halving starts at the nearest rank
  (mask 1, 2, 4, ...): with w and N powers of two its first log2 w steps stay in the node, and
  in the last log2 N steps each of a node's w ranks sends S/(2w) + ... + S/(Nw) = (N-1)/(Nw) x S,
  the node (N-1)/N x S per half: the same 2(N-1)/N x S. It is the least any allreduce can move
  through a node's link (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for
  clusters of workstations", JPDC 69(2), 2009: 2(n-1)/n x S per process, the node standing for
  one process once it has reduced internally).

Neither depends on w. The fit before issue 51 assumed each of a node's w ranks sent its whole
2(P-1)/P x S across the node's link (w times the ring's figure), so its per-node bandwidth came
out about w times too high.

Exact for the placement above with w and N powers of two. Not modelled: NCCL's trees (chosen
at scale, and the NVLS/CollNet variants), MPICH's recursive doubling for messages of a few
elements (log2 N x S per node, where latency dominates anyway), MPICH's extra step where N (or,
for ``MPI_Iallreduce``, P) is not a power of two (2 x rem ranks first pair off, sending S more
each way), and other MPI libraries' own algorithms (Cray MPICH, Open MPI): measure with
``study=network`` and compare.
"""

from __future__ import annotations

import numpy as np

RING = "ring"
RABENSEIFNER = "rabenseifner"
ALGORITHMS = (RING, RABENSEIFNER)
# the allreduce each netbench backend runs across nodes (sources above)
BACKEND_ALGORITHM = {"mpi": RABENSEIFNER, "gloo": RING, "nccl": RING}


def bus_factor(ranks: int) -> float:
    """nccl-tests' allreduce bus-bandwidth factor, 2(n-1)/n (0 on one rank: no traffic)."""
    return 2 * (ranks - 1) / ranks if ranks > 1 else 0.0


def algorithm_of(backend: str) -> str:
    """The allreduce a netbench backend (``mpi``, ``gloo``, ``nccl``) runs across nodes."""
    try:
        return BACKEND_ALGORITHM[backend]
    except KeyError:
        raise ValueError(f"backend {backend!r}: no traffic model (known: {', '.join(BACKEND_ALGORITHM)})") from None


def node_link_bytes(nbytes, nodes, workers_per_node, algorithm: str):
    """Bytes one node's network link carries in each direction for an allreduce of ``nbytes``
    per rank over ``nodes`` x ``workers_per_node`` ranks placed node by node: 2(P-1)/P x S for a
    ring, 2(N-1)/N x S for MPICH's Rabenseifner; 0 on one node (nothing crosses a network).
    Arrays broadcast."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"allreduce algorithm {algorithm!r}: no traffic model (known: {', '.join(ALGORITHMS)})")
    s = np.asarray(nbytes, dtype=float)
    n = np.maximum(np.asarray(nodes, dtype=float), 1.0)
    w = np.maximum(np.asarray(workers_per_node, dtype=float), 1.0)
    parties = n * w if algorithm == RING else n
    return np.where(n > 1, 2 * (parties - 1) / parties * s, 0.0)
