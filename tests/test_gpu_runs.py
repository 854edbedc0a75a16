"""GPU runs on a machine without a GPU: everything but the kernels.

The binding arithmetic against tables written from the facilities' pages; the GPU sites'
launch lines run through stand-in launchers that refuse what the machines would get wrong
(tests/fake_launchers/gpu_launchers.py); validation; a GPU run where no GPU is visible failing
in one line; and the GPU facts of a run stored and shown, or stored as missing. The engines'
GPU data paths run on CPU tensors in tests/mpi_programs/check_allreduce.py and
test_workload_mpi.py; benchmarks/gpu_check.py is the check on a real GPU.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.pools.preview import preview_launch_prefix
from orchestrator.site.config import load_site
from orchestrator.site.launchers import launch_flags
from orchestrator.sweep.runspec import build_run_spec
from workloads.placement import bind_gpu, gpu_of

from conftest import REPO, scalestudy

STAND_IN = REPO / "tests" / "fake_launchers" / "gpu_launchers.py"
BASE = {"study_name": "g", "nodes": 2, "workers_per_node": 4}

# the GPU of each rank of a 2-node, 4-ranks-a-node run, written from the facilities' pages:
# Polaris' set_affinity_gpu_polaris.sh "gpu=$((${num_gpus} - 1 - ${PMI_LOCAL_RANK} % ${num_gpus}))";
# Perlmutter's "export CUDA_VISIBLE_DEVICES=$SLURM_LOCALID"
EXPECTED_GPU = {"polaris": ["3", "2", "1", "0", "3", "2", "1", "0"],
                "perlmutter_gpu": ["0", "1", "2", "3", "0", "1", "2", "3"]}


def test_binding_arithmetic_against_the_facilities_rules():
    assert [gpu_of("reverse", k, 4) for k in range(8)] == [3, 2, 1, 0, 3, 2, 1, 0]
    assert [gpu_of("direct", k, 4) for k in range(6)] == [0, 1, 2, 3, 0, 1]
    assert gpu_of("none", 2, 4) is None and gpu_of("direct", 0, 0) is None
    # Slurm lists the node's GPUs in every task: the rank takes its own from the list
    env = {"SLURM_PROCID": "6", "CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    assert bind_gpu("direct", 4, 8, 4, env) == "6" and env["CUDA_VISIBLE_DEVICES"] == "6"
    env = {"PMI_RANK": "5", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert bind_gpu("reverse", 4, 8, 4, env) == "2"
    # one GPU already named (a user's --gpus-per-task, or their own choice) is kept
    env = {"PMI_RANK": "1", "CUDA_VISIBLE_DEVICES": "3"}
    assert bind_gpu("direct", 4, 8, 4, env) is None and env["CUDA_VISIBLE_DEVICES"] == "3"
    with pytest.raises(ValueError, match="gpu_binding='diagonal'"):
        gpu_of("diagonal", 0, 4)


@pytest.mark.parametrize("site_name, launcher", [("polaris", "mpiexec"), ("perlmutter_gpu", "srun")])
def test_gpu_launch_lines_pass_the_stand_in_launchers_and_bind_as_documented(tmp_path, site_name, launcher):
    """The launch line scalestudy builds for a GPU run on each site, run by a stand-in of that
    site's launcher (which refuses wrong GPU flags); every rank then binds its GPU as the
    site's page says."""
    site = load_site(site_name)
    spec = build_run_spec({**BASE, "site": site_name})
    assert spec.device == "cuda" and spec.gpus_per_node == 4
    options = " ".join(x for x in (site.launcher_options, launch_flags(site, spec.threads_per_worker,
                                                                       spec.workers_per_node, spec.device)) if x)
    words = shlex.split(preview_launch_prefix(site, spec.nodes, spec.workers_per_node, options))
    assert words[0] == launcher
    probe = ("import os, sys; from workloads.placement import bind_gpu, launcher_ranks; "
             f"bind_gpu({spec.gpu_binding!r}, 4, 8, 4); "
             "os.write(1, f\"{launcher_ranks(8, 4, os.environ)[0]} {os.environ['CUDA_VISIBLE_DEVICES']}\\n\".encode())")
    proc = subprocess.run([sys.executable, str(STAND_IN), launcher, *words[1:], sys.executable, "-c", probe],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = dict(line.split() for line in proc.stdout.splitlines())
    assert [got[str(r)] for r in range(8)] == EXPECTED_GPU[site_name]


@pytest.mark.parametrize("launcher, flags, said", [
    ("srun", ["--ntasks", "8", "--ntasks-per-node", "4", "--cpus-per-task=32", "--gpus-per-task=1"], "cgroup"),
    ("srun", ["--ntasks", "8", "--ntasks-per-node", "4", "--cpus-per-task=32", "--gpus-per-node=4",
              "--gpu-bind=map_gpu:0,1,2,3"], "--gpu-bind=map_gpu"),
    ("srun", ["--ntasks", "8", "--ntasks-per-node", "4", "--cpus-per-task=2", "--gpus-per-node=4",
              "--gpu-bind=none"], "floor(64 / 4) x 2 = 32"),
    ("srun", ["--ntasks", "8", "--ntasks-per-node", "4", "--cpus-per-task=32"], "no --gpus-per-node"),
    ("mpiexec", ["-n", "8", "-ppn", "4", "--depth=1", "--cpu-bind=depth"], "one NUMA domain each"),
    ("mpiexec", ["-n", "8", "-ppn", "8", "--depth=4", "--cpu-bind=depth"], "not one rank per GPU"),
])
def test_the_stand_ins_refuse_wrong_gpu_flags(launcher, flags, said):
    """The stand-ins can fail: what the machines would get wrong is refused, in one line."""
    proc = subprocess.run([sys.executable, str(STAND_IN), launcher, *flags, "true"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_gpu_sites_default_to_one_rank_per_gpu_and_refuse_more():
    assert build_run_spec({**BASE, "site": "polaris"}).gpu_binding == "reverse"
    assert build_run_spec({**BASE, "site": "perlmutter_gpu"}).gpu_binding == "direct"
    cpu = build_run_spec({**BASE, "site": "polaris", "device": "cpu"})
    assert (cpu.device, cpu.gpu_binding, cpu.gpus_per_node) == ("cpu", "none", 0)
    assert build_run_spec({**BASE, "site": "perlmutter"}).device == "cpu"   # the CPU nodes
    with pytest.raises(ConfigError) as err:
        build_run_spec({**BASE, "site": "polaris", "workers_per_node": 8})
    assert "workers_per_node=8" in str(err.value) and "4 GPU(s)" in str(err.value) and "\n" not in str(err.value)
    for overrides, said in (({"site": "local", "device": "cuda"}, "declares no GPUs"),
                            ({"site": "polaris", "data_path": "mpi"}, "torch_distributed or cuda_aware_mpi or "
                                                                      "host_staging (auto: torch_distributed)"),
                            ({"site": "polaris", "algorithm": "eager_solo", "data_path": "torch_distributed"},
                             "host_staging (auto picks it)"),
                            ({"site": "polaris", "workload": {"kind": "command", "command": ["true"]},
                              "data_path": "host_staging"}, "a command workload moves its own")):
        with pytest.raises(ConfigError, match=said.replace("(", r"\(").replace(")", r"\)")):
            build_run_spec({**BASE, **overrides})


def test_the_dry_run_shows_the_gpu_flags_and_binding(tmp_path):
    proc = scalestudy("sweep", "site=perlmutter_gpu", "nodes=2", "workers_per_node=4", "epochs=1", "--dry-run",
                      f"db_url=sqlite:///{tmp_path / 'r.db'}", cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "--gpus-per-node=4 --gpu-bind=none" in proc.stdout and "--cpus-per-task=32" in proc.stdout
    assert "#SBATCH --constraint=gpu" in proc.stdout
    assert "GPUs: one per rank, the k-th rank of a node on GPU k % 4" in proc.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("workload", ["builtin", "command"])
def test_a_gpu_run_where_no_gpu_is_visible_fails_in_one_line(tmp_path, workload):
    """device=cuda on a host without a GPU: the run fails at once with one line naming it (no
    hang, no retry: a setup failure), and the sweep says so."""
    extra = ["workload.kind=command", "workload.command=[python,-c,'print(1)']"] if workload == "command" else []
    db = tmp_path / "r.db"
    proc = scalestudy("sweep", "site=local_gpu", "study_name=nogpu", "nodes=1", "workers_per_node=1", "epochs=1",
                      "steps_per_epoch=2", "batch_size=32",
                      "retries.crash=2", *extra, f"db_url=sqlite:///{db}", f"hydra.sweep.dir={tmp_path / 'mr'}",
                      cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stderr
    import sqlite3

    with sqlite3.connect(db) as conn:
        rows = conn.execute("select status, device, error from runs").fetchall()
    assert len(rows) == 1, rows   # one attempt: a setup failure is never retried
    status, device, error = rows[0]
    assert status == "failed" and device == "cuda" and "device=cuda: no GPU is visible" in error, error


def test_gpu_facts_are_stored_shown_and_missing_where_absent(tmp_path, finished_run):
    """A run whose ranks recorded GPU facts (written here in the contract's format) gets them in
    SQL and in the report; a CPU run gets them as missing, never as 0."""
    from results_db import connect
    from results_db.html_report import build_report
    from results_db.ingest import ingest_run
    from results_db.runs import PlannedRun, register_runs
    from results_db.schema import Run
    from sqlalchemy.orm import Session
    from workloads.metrics import MetricsWriter, write_result
    from workloads.spec import RunSpec

    gpu_dir = tmp_path / "gpu-run"
    spec = RunSpec(study="gpus", site="polaris", nodes=1, workers_per_node=2, device="cuda", gpu_binding="reverse",
                   gpus_per_node=4)
    (gpu_dir).mkdir()
    spec.save(gpu_dir / "spec.json")
    for rank, (uuid, peak, busy) in enumerate((("GPU-a", 3 * 2**30, 81.0), ("GPU-b", 5 * 2**30, None))):
        w = MetricsWriter(gpu_dir, rank)
        w.run_start(rank=rank, size=2, host="x3001", node="x3001", cpus=[0, 1],
                    versions={"torch": "2.13.0", "cuda": "12.8", "nccl": "2.27.3", "driver": "570.86"},
                    gpu={"name": "NVIDIA A100-SXM4-40GB", "uuid": uuid, "visible": str(3 - rank)})
        w.step(step=0, epoch=0, samples=32, t_start=0.0, data=0.0, forward=0.01, delay=0.0, backward=0.02,
               comm_wait=0.005, update=0.001, loss=2.3)
        w.run_end(status="done", summary={"gpu_peak_memory_bytes": peak, "gpu_utilization": busy})
        w.close()
    write_result(gpu_dir, {"status": "done", "throughput": 1000.0, "steps": 1, "data_path_used": "torch_distributed:nccl"})
    engine = connect(f"sqlite:///{tmp_path / 'r.db'}")
    for study, folder in (("gpus", gpu_dir), ("cpus", finished_run)):
        spec_of = RunSpec.load(folder / "spec.json")
        [decision] = register_runs(engine, study, [PlannedRun(study + "-key", spec_of.to_dict(), str(folder))])
        ingest_run(engine, decision.run_id, folder)
    with Session(engine) as s:
        gpu = s.query(Run).filter(Run.run_key == "gpus-key").one()
        cpu = s.query(Run).filter(Run.run_key == "cpus-key").one()
    assert (gpu.gpu_model, gpu.gpus, gpu.gpu_peak_memory_mb, gpu.gpu_utilization) == \
        ("NVIDIA A100-SXM4-40GB", 2, 5 * 1024.0, 81.0)   # utilisation: the rank NVML could read, not a 0 for the other
    assert gpu.data_path_used == "torch_distributed:nccl" and gpu.versions["nccl"] == "2.27.3"
    assert (cpu.gpu_model, cpu.gpus, cpu.gpu_peak_memory_mb, cpu.gpu_utilization) == (None, None, None, None)
    assert cpu.data_path_used == "mpi"
    report = build_report(engine, "gpus", tmp_path / "report", f"sqlite:///{tmp_path / 'r.db'}")
    page = report.index.read_text()
    for text in ("NVIDIA A100-SXM4-40GB", "GPU peak memory (MB)", "5120", "torch_distributed:nccl", "2.27.3", "570.86"):
        assert text in page, text
