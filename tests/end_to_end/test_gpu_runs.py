"""GPU runs on a machine without a GPU: everything but the kernels.

The binding arithmetic against tables written from the facilities' pages; the GPU sites'
launch lines run through stand-in launchers that refuse what the machines would get wrong
(tests/fake_launchers/gpu_launchers.py); validation; a GPU run where no GPU is visible failing
in one line; and the GPU facts of a run stored and shown, or stored as missing. The engines'
GPU data paths run on CPU tensors in tests/mpi_programs/check_allreduce.py and
test_workload_mpi.py; orchestrator/gpu_check is the check on a real GPU.
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
from orchestrator.site.config import SiteConfig, load_site
from orchestrator.site.launchers import launch_flags
from orchestrator.sweep.runspec import build_run_spec
from workloads.placement import bind_gpu, gpu_of

from conftest import REPO, scalestudy

STAND_IN = REPO / "tests" / "fake_launchers" / "gpu_launchers.py"
BASE = {"study_name": "g", "nodes": 2, "workers_per_node": 4}

# the GPU of each rank of a 2-node, 4-ranks-a-node run, written from the facilities' pages:
# Polaris' set_affinity_gpu_polaris.sh "gpu=$((${num_gpus} - 1 - ${PMI_LOCAL_RANK} % ${num_gpus}))";
# Perlmutter: NERSC's tutorials "Reversing order of GPUs to match default CPU affinities from Slurm"
# "export CUDA_VISIBLE_DEVICES=3,2,1,0" (local rank k on GPU 3 - k; WarpX: "$((3-SLURM_LOCALID))")
EXPECTED_GPU = {"polaris": ["3", "2", "1", "0", "3", "2", "1", "0"],
                "perlmutter_gpu": ["3", "2", "1", "0", "3", "2", "1", "0"]}


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
    assert build_run_spec({**BASE, "site": "perlmutter_gpu"}).gpu_binding == "reverse"
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


@pytest.mark.sweep
def test_the_dry_run_shows_the_gpu_flags_and_binding(tmp_path):
    proc = scalestudy("sweep", "site=perlmutter_gpu", "nodes=2", "workers_per_node=4", "epochs=1", "--dry-run",
                      "--show-scripts", f"db_url=sqlite:///{tmp_path / 'r.db'}", cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "--gpus-per-node=4 --gpu-bind=none" in proc.stdout and "--cpus-per-task=32" in proc.stdout
    assert "#SBATCH --constraint=gpu" in proc.stdout
    assert "#SBATCH --gpus-per-node=4" in proc.stdout   # the job holds the GPUs the srun line hands out
    assert "GPUs: one per rank, the k-th rank of a node on GPU 3 - k % 4" in proc.stdout


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


@pytest.mark.sweep
def test_gpu_facts_are_stored_shown_and_missing_where_absent(tmp_path, finished_run):
    """A run whose ranks recorded GPU facts (written here in the contract's format) gets them in
    SQL and in the report; a CPU run gets them as missing, never as 0."""
    from results_db import connect
    from results_db.report.html_report import build_report
    from results_db.ingest.folder import ingest_run
    from results_db.store.runs import PlannedRun, register_runs
    from results_db.store.schema import Run
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


# --- the GPU sites' batch jobs on Cray MPICH, through stand-ins -------------------------------------------------
#
# A batch job's real set-up lines (mpi.env.batch_environment) run in bash after a stand-in for the
# facility's Lmod: `module load conda` leaves MPICH_GPU_SUPPORT_ENABLED=1 behind, as ALCF's own
# environment dumps after `module load conda` show (argonne-lcf/alcf-nccl-tests, pytests/*/env_aws.dat),
# and `module load cray-mpich-abi` sets CRAY_MPICH_ROOTDIR as the cray-mpich module does (same dumps),
# holding a GTL stand-in file when the test says so. Then the Parsl worker's real code
# (orchestrator.mpi.run.execute_planned) starts the run through the stand-in launcher
# (tests/fake_launchers/gpu_launchers.py), which treats the ranks as Cray MPICH would: the thread
# level capped by MPICH_MAX_THREAD_SAFETY, an abort with GPU support on and no GTL. The ranks run
# the real workload on this host's MPICH; a device=cuda run here ends where it finds no GPU, which
# is past every launcher gate.

LMOD = """module() {{
  echo "module $*" >> {log}
  case "$1 $2" in
    "load conda") export MPICH_GPU_SUPPORT_ENABLED=1 ;;
    "load cray-mpich-abi"|"load pytorch") export CRAY_MPICH_ROOTDIR={cray} ;;
  esac
}}
conda() {{ echo "conda $*" >> {log}; }}
"""


def _launcher_bin(tmp_path: Path) -> Path:
    """mpiexec and srun on PATH as the machine's launchers: the stand-ins, each call logged."""
    bin_dir = tmp_path / "machine-bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("mpiexec", "srun"):
        path = bin_dir / name
        seen = " ".join(f"{v}=${v}" for v in ("MPICH_GPU_SUPPORT_ENABLED", "LD_PRELOAD", "NCCL_DEBUG",
                                              "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"))
        path.write_text(f"#!/bin/sh\necho \"{name} $* | {seen}\" >> {tmp_path / 'launcher-calls.log'}\n"
                        f"exec {sys.executable} {STAND_IN} {name} \"$@\"\n")
        path.chmod(0o755)
    return bin_dir


def _batch_run(tmp_path: Path, site, overrides: dict, gtl: bool = False) -> tuple[subprocess.CompletedProcess, Path]:
    """One run of ``site`` as its batch job would start it (the block comment above)."""
    from orchestrator.mpi.env import batch_environment, env_bin_dir
    from orchestrator.site.queues import plan_batch_jobs
    from orchestrator.pools.preview import preview_batch_script

    spec = build_run_spec({"study_name": "cray", "site": site.name, "nodes": 1, "epochs": 1, "steps_per_epoch": 2,
                           "batch_size": 16, **overrides}, site=site)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spec.save(run_dir / "spec.json")
    cray = tmp_path / "cray-mpich"
    if gtl:   # the cray-mpich module's GTL folder, holding an empty stand-in of the library
        (cray / "gtl" / "lib").mkdir(parents=True)
        (cray / "gtl" / "lib" / "libmpi_gtl_cuda.so").write_text("")
    options = " ".join(x for x in (site.launcher_options, launch_flags(site, spec.threads_per_worker,
                                                                       spec.workers_per_node, spec.device)) if x)
    env = {"PATH": f"{_launcher_bin(tmp_path)}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "PARSL_MPI_PREFIX": preview_launch_prefix(site, spec.nodes, spec.workers_per_node, options)}
    if site.provider == "slurm":   # what sbatch puts in the job's environment from its #SBATCH lines
        # sbatch passes on the submitting login environment, where Perlmutter users report
        # MPICH_GPU_SUPPORT_ENABLED=1 (the issue that added these tests)
        env["MPICH_GPU_SUPPORT_ENABLED"] = "1"
        [job] = plan_batch_jobs(site, [spec.nodes])
        script, _ = preview_batch_script(site, job, tmp_path)
        env["SLURM_JOB_ID"] = "4242"
        for line in script.splitlines():
            if line.startswith("#SBATCH --gpus-per-node="):
                env["SLURM_GPUS_PER_NODE"] = line.split("=", 1)[1]
    else:
        env["PBS_JOBID"] = "4242.polaris"
    text = "\n".join([LMOD.format(log=tmp_path / "module-calls.log", cray=cray), *batch_environment(site),
                      f"cd {run_dir}",
                      f"exec {env_bin_dir()}/python3 -c 'import sys; from pathlib import Path; "
                      "from orchestrator.mpi.run import execute_planned; execute_planned(Path(sys.argv[1]))' "
                      f"{run_dir}"])
    proc = subprocess.run(["bash", "-c", text], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    return proc, run_dir


def _site_without(tmp_path: Path, name: str, line: str) -> "SiteConfig":
    """The shipped site file with one line taken out (a setting dropped)."""
    from orchestrator.site.config import site_dir

    text = (site_dir() / f"{name}.yaml").read_text()
    assert line in text.splitlines(), line
    path = tmp_path / f"{name}.yaml"
    path.write_text("\n".join(x for x in text.splitlines() if x != line) + "\n")
    return load_site(str(path))


THREAD_SAFETY = "  MPICH_MAX_THREAD_SAFETY: multiple   # [TS] the engine thread and eager-SGD's progress thread need MULTIPLE"


@pytest.mark.mpi
def test_a_polaris_batch_job_runs_its_engine_thread_on_cray_mpich(tmp_path):
    """A CPU run of the sync engine (its background thread needs MPI_THREAD_MULTIPLE) started as
    Polaris' batch job would start it, after `module load conda` left MPICH_GPU_SUPPORT_ENABLED=1:
    it finishes. Without MPICH_MAX_THREAD_SAFETY the stand-in grants SERIALIZED and the engine
    refuses; without the run's MPICH_GPU_SUPPORT_ENABLED=0 the job aborts for want of GTL."""
    site = load_site("polaris")
    proc, run_dir = _batch_run(tmp_path, site, {"workers_per_node": 2, "threads_per_node": 32, "device": "cpu",
                                                "engine_thread": True})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "done" and result["steps"] == 2
    assert "module load conda" in (tmp_path / "module-calls.log").read_text()   # the stand-in Lmod ran
    assert (tmp_path / "launcher-calls.log").read_text().startswith("mpiexec -n 2 -ppn 2")   # PALS' stand-in

    # the negative control: the same run on the site file without MPICH_MAX_THREAD_SAFETY
    dropped = tmp_path / "dropped"
    dropped.mkdir()
    proc, run_dir = _batch_run(dropped, _site_without(dropped, "polaris", THREAD_SAFETY),
                               {"workers_per_node": 2, "threads_per_node": 32, "device": "cpu", "engine_thread": True})
    assert proc.returncode != 0
    assert "provides MPI_THREAD_SERIALIZED" in proc.stderr, proc.stderr[-2000:]
    # the hint names what helps on the machine's MPI, not the mpich wheel
    assert "MPICH_MAX_THREAD_SAFETY: multiple" in proc.stderr and "pip install mpich" not in proc.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("site_name, data_path", [("polaris", "torch_distributed"), ("polaris", "host_staging"),
                                                  ("perlmutter_gpu", "torch_distributed")])
def test_gpu_runs_get_past_cray_mpich_with_gpu_support_as_their_data_path_needs(tmp_path, site_name, data_path):
    """NCCL and host staging need no GPU-aware MPI: the run sets MPICH_GPU_SUPPORT_ENABLED=0 over
    the module's 1, so Cray MPICH (the stand-in) starts the ranks, which get as far as looking
    for their GPU (none here). On Perlmutter the job holds its GPUs (#SBATCH --gpus-per-node=4),
    so the srun step can hand them out. NCCL's log goes to the run folder."""
    site = load_site(site_name)
    proc, run_dir = _batch_run(tmp_path, site, {"workers_per_node": 4, "data_path": data_path}, gtl=True)
    assert proc.returncode != 0
    assert "device=cuda: no GPU is visible" in proc.stderr, proc.stderr[-2000:]
    assert "GTL library is not linked" not in proc.stderr
    launched = (tmp_path / "launcher-calls.log").read_text()
    assert "MPICH_GPU_SUPPORT_ENABLED=0 LD_PRELOAD= " in launched
    assert f"NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET NCCL_DEBUG_FILE={run_dir}/nccl/nccl.%h.%p.log" in launched


@pytest.mark.mpi
def test_cuda_aware_mpi_gets_gtl_preloaded_or_one_line_where_there_is_none(tmp_path):
    """data_path=cuda_aware_mpi: MPICH_GPU_SUPPORT_ENABLED=1 with the cray-mpich module's GTL
    library preloaded, so Cray MPICH (the stand-in) starts the ranks; where the node has no GTL
    library, one line naming the data path, before anything is launched."""
    site = load_site("polaris")
    overrides = {"workers_per_node": 4, "data_path": "cuda_aware_mpi"}
    proc, _ = _batch_run(tmp_path, site, overrides, gtl=True)
    assert proc.returncode != 0
    assert "device=cuda: no GPU is visible" in proc.stderr and "GTL library is not linked" not in proc.stderr, \
        proc.stderr[-2000:]
    gtl = tmp_path / "cray-mpich" / "gtl" / "lib" / "libmpi_gtl_cuda.so"
    assert f"MPICH_GPU_SUPPORT_ENABLED=1 LD_PRELOAD={gtl} " in (tmp_path / "launcher-calls.log").read_text()
    bare = tmp_path / "no-gtl"
    bare.mkdir()
    proc, _ = _batch_run(bare, site, overrides, gtl=False)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "data_path='cuda_aware_mpi': needs MPICH_GPU_SUPPORT_ENABLED=1 and Cray MPICH's GTL library" in last, last
    assert str(bare / "cray-mpich" / "gtl" / "lib") in last
    assert not (bare / "launcher-calls.log").exists()   # nothing launched


# two lines of ALCF's published NCCL logs (argonne-lcf/alcf-nccl-tests at 385be33,
# pytests/resnet50/results/2025-06-27-09-51-31/without_aws.log and with_aws.log)
NCCL_SOCKET = "x3006c0s19b1n0:4136197:4136297 [0] NCCL INFO Using network Socket\n"
NCCL_PLUGIN = "x3006c0s19b1n0:4138718:4138853 [0] NCCL INFO Using network AWS Libfabric\n"


def test_the_network_nccl_used_is_recorded_and_a_socket_run_flagged(tmp_path):
    """A GPU run's summary says which network NCCL logged (read from its log files in the run
    folder) and which plugin the site declares; ingestion stores both; a run that used sockets on
    a site with a plugin is flagged by ``scalestudy status`` and in the report, one that used the
    plugin is not."""
    from results_db import connect
    from results_db.report.html_report import build_report
    from results_db.ingest.folder import ingest_run
    from results_db.store.runs import PlannedRun, register_runs
    from results_db.store.schema import Run
    from sqlalchemy.orm import Session
    from workloads.metrics import MetricsWriter, write_result
    from workloads.nccl_network import LOG_DIR, PLUGIN_ENV, network_facts
    from workloads.spec import RunSpec

    engine = connect(f"sqlite:///{tmp_path / 'r.db'}")
    site_env = {PLUGIN_ENV: "AWS Libfabric"}   # what the polaris batch job exports
    ids = {}
    # one node: NCCL logs sockets at start-up but moves the data over NVLink: not flagged
    for name, logs, nodes in (("socket", [NCCL_SOCKET, NCCL_SOCKET.replace("[0]", "[1]")], 2),
                              ("plugin", [NCCL_PLUGIN], 2), ("mixed", [NCCL_PLUGIN, NCCL_SOCKET], 2),
                              ("one-node", [NCCL_SOCKET, NCCL_SOCKET.replace("[0]", "[1]")], 1)):
        run_dir = tmp_path / name
        (run_dir / LOG_DIR).mkdir(parents=True)
        spec = RunSpec(study="nets", site="polaris", nodes=nodes, workers_per_node=2 // nodes, device="cuda",
                       gpu_binding="reverse", gpus_per_node=4, seed=len(ids))
        spec.save(run_dir / "spec.json")
        for rank, line in enumerate(logs):   # NCCL's debug file of each process (NCCL_DEBUG_FILE=...%h.%p.log)
            (run_dir / LOG_DIR / f"nccl.x3006c0s19b1n0.{4136197 + rank}.log").write_text(
                "x3006c0s19b1n0:4136197:4136197 [0] NCCL INFO NET/Plugin: ...\n" + line)
        for rank in range(2):
            w = MetricsWriter(run_dir, rank)
            w.run_start(rank=rank, size=2, host=f"x300{rank}", node=f"x300{rank}", versions={"nccl": "2.21.5"})
            w.step(step=0, epoch=0, samples=32, t_start=0.0, data=0.0, forward=0.01, delay=0.0, backward=0.02,
                   comm_wait=0.005, update=0.001, loss=2.3)
            w.run_end(status="done", summary={})
            w.close()
        facts = network_facts(run_dir, site_env)
        write_result(run_dir, {"status": "done", "throughput": 100.0, "steps": 1,
                               "data_path_used": "torch_distributed:nccl", **facts})
        [decision] = register_runs(engine, "nets", [PlannedRun(name, spec.to_dict(), str(run_dir))])
        ingest_run(engine, decision.run_id, run_dir)
        ids[name] = decision.run_id
    with Session(engine) as s:
        stored = {r.run_key: (r.nccl_network, r.nccl_plugin) for r in s.query(Run)}
    assert stored == {"socket": ("Socket", "AWS Libfabric"), "plugin": ("AWS Libfabric", "AWS Libfabric"),
                      "mixed": ("AWS Libfabric,Socket", "AWS Libfabric"), "one-node": ("Socket", "AWS Libfabric")}
    flagged = f"2 GPU run(s) used NCCL over TCP sockets although the site has the AWS Libfabric network plugin " \
              f"(runs {ids['socket']}, {ids['mixed']})"
    proc = scalestudy("status", "--db", f"sqlite:///{tmp_path / 'r.db'}", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and f"WARNING study nets: {flagged}" in proc.stdout, proc.stdout + proc.stderr
    page = build_report(engine, "nets", tmp_path / "report", f"sqlite:///{tmp_path / 'r.db'}").index.read_text()
    assert flagged in page and "NCCL network" in page
