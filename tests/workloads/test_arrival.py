"""Early ranks wait for a late one asleep (workloads/comm/arrival.py), where MPI_Barrier spins."""

from __future__ import annotations

import json

import pytest

from conftest import REPO, mpiexec

LATE_S = 2.0


def _waits(how: str) -> list[dict]:
    proc = mpiexec(3, str(REPO / "tests" / "mpi_programs" / "check_arrival.py"), how, str(LATE_S), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # each rank prints one JSON object; mpiexec may join two ranks' lines (their newlines raced)
    text = proc.stdout.replace("}{", "}\n{")
    return sorted((json.loads(line) for line in text.splitlines() if line.strip()), key=lambda r: r["rank"])


@pytest.mark.mpi
def test_early_ranks_wait_for_a_late_one_asleep_where_a_barrier_spins():
    """Ranks 1 and 2 wait ~2 s for rank 0 either way. In all_arrived they spend under a tenth of
    it on the CPU; in MPI_Barrier (the control) MPICH polls, and they spend most of it there
    (on a busy machine a spinning rank may get less than its whole core: a third is asked)."""
    asleep, spinning = _waits("arrival"), _waits("barrier")
    for waited in (asleep, spinning):
        assert all(r["wall"] >= 0.9 * LATE_S for r in waited[1:]), waited   # they did wait for rank 0
    assert all(r["cpu"] < 0.1 * r["wall"] for r in asleep[1:]), asleep
    assert all(r["cpu"] > 0.33 * r["wall"] for r in spinning[1:]), spinning
