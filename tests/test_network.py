"""The network's own limit: netbench's numbers against their definitions (nccl-tests'), the fit
against a network of known latency and bandwidth, and ``study=network`` through a real sweep
read back by ``scalestudy network``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from results_db.network import fit_network

from conftest import mpiexec, scalestudy


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["mpi", "gloo"])
def test_netbench_reports_what_nccl_tests_defines(backend):
    proc = mpiexec(2, "-m", "workloads.netbench", "--backend", backend, "--sizes", "8,65536", "--seconds", "0.05")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split() for line in proc.stdout.splitlines() if line and not line.startswith("#")]
    assert [int(r[0]) for r in rows] == [8, 65536]
    for size, time_us, algbw, busbw in ((int(a), float(b), float(c), float(d)) for a, b, c, d in rows):
        assert time_us > 0
        assert algbw == pytest.approx(size / (time_us * 1e-6) / 1e9, rel=0.02, abs=0.002)   # printed rounded
        assert busbw == pytest.approx(algbw * 2 * (2 - 1) / 2, abs=0.002)                    # 2(n-1)/n = 1


def test_bad_sizes_are_one_line():
    from workloads.netbench import main

    assert main(["--sizes", "2"]) == 2


def test_the_fit_recovers_a_known_network():
    """Times made from the allreduce term with latency 3 us and 20 GB/s per node, at 2, 4 and 8
    nodes of 1 and 4 ranks: the fit gives both back; one-node points are left out."""
    lat, bw = 3e-6, 20e9
    rows = []
    for nodes in (1, 2, 4, 8):
        for wpn in (1, 4):
            p = nodes * wpn
            for size in (8, 4096, 1 << 20, 1 << 24):
                t = 2 * np.ceil(np.log2(p)) * lat + 2 * (p - 1) / p * size * wpn / bw if nodes > 1 else 1e-7
                rows.append({"run_id": nodes * 10 + wpn, "study": "network", "created_at": "2026-12-04 10:00",
                             "backend": "mpi",
                             "nodes": nodes, "workers_per_node": wpn, "world_size": p, "bytes": size,
                             "time_us": t * 1e6, "busbw_gbps": np.nan})
    fitted = fit_network(pd.DataFrame(rows))
    assert fitted.latency_us == pytest.approx(3.0, rel=1e-6)
    assert fitted.node_bandwidth_gbs == pytest.approx(20.0, rel=1e-6)
    assert fitted.rms_relative < 1e-9 and fitted.points == 3 * 2 * 4
    assert fit_network(pd.DataFrame([r for r in rows if r["nodes"] == 1])) is None
    with pytest.raises(ValueError, match="fit one backend"):   # an MPI and an NCCL curve are not pooled
        fit_network(pd.DataFrame(rows + [{**rows[-1], "backend": "nccl"}]))


@pytest.mark.mpi
def test_a_network_study_is_read_back_beside_the_nominal_numbers(tmp_path):
    db = f"sqlite:///{tmp_path / 'r.db'}"
    sweep = scalestudy("sweep", "study=network", "params.seconds=0.02", f"db_url={db}", cwd=tmp_path)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    assert "reported metrics per run, not shown here" in sweep.stdout
    shown = scalestudy("network", "local", "--db", db, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "mpi busbw GB/s, 2x1" in shown.stdout
    assert "measured (mpi): latency" in shown.stdout and "nominal (site file): latency 13 us" in shown.stdout
    refused = scalestudy("model", "predict", "--study", "network", "--network", "measured", "--db", db, cwd=tmp_path)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "--network measured: give --site SITE" in refused.stderr


def test_achieved_busbw_is_the_median_over_large_fused_allreduces(tmp_path):
    """Two ranks, three fused allreduces of 4 MiB lasting (from the last rank's start to the last
    rank's end) 1, 2 and 4 ms, and one of 1 KiB: the median of 4 MiB / 2 ms x 2(2-1)/2 = 2.097 GB/s."""
    from sqlalchemy import insert, update
    from sqlalchemy.orm import Session

    from results_db import connect
    from results_db.network import achieved
    from results_db.runs import PlannedRun, register_runs
    from results_db.schema import Event, Run
    from workloads.spec import RunSpec

    engine = connect(f"sqlite:///{tmp_path / 'r.db'}")
    spec = RunSpec(study="t", site="local", nodes=2, workers_per_node=1, threads_per_node=1, batch_size=8,
                   timeline=True)
    [d] = register_runs(engine, "t", [PlannedRun("k", spec.to_dict(), "/nowhere")])
    size, rows = 4 << 20, []
    for step, ms in enumerate((1.0, 2.0, 4.0)):
        for rank, late in ((0, 0.0), (1, 0.5e-3)):   # rank 1 starts later: the collective starts then
            rows.append({"run_id": d.run_id, "rank": rank, "step": step, "tensor": "fused0", "phase": "allreduce",
                         "t0": 10.0 + step + late, "t1": 10.0 + step + 0.5e-3 + ms * 1e-3, "bytes": size})
    rows.append({"run_id": d.run_id, "rank": 0, "step": 0, "tensor": "fused1", "phase": "allreduce",
                 "t0": 20.0, "t1": 20.1, "bytes": 1024})
    with Session(engine) as s, s.begin():
        s.execute(update(Run).where(Run.id == d.run_id).values(status="done", throughput=1.0))
        s.execute(insert(Event), rows)
    table = achieved(engine, "local")
    assert list(table["collectives"]) == [3]
    assert table["busbw_gbps"].iloc[0] == pytest.approx(size / 2e-3 / 1e9)
