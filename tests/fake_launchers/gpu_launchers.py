"""Stand-ins for the MPI launchers of the GPU sites, which this machine does not have.

    python gpu_launchers.py srun    [srun flags]    PROGRAM ARGS...   (NERSC Perlmutter GPU nodes)
    python gpu_launchers.py mpiexec [PALS flags]    PROGRAM ARGS...   (ALCF Polaris, Cray PALS)

Each checks the flags the way its machine's documentation says they must be for one rank per
GPU, refuses what would go wrong there (one line on stderr, exit 2), then starts the ranks on
this host as one MPI job (through this environment's MPICH, whose ``mpiexec`` gives each rank
its ``PMI_RANK``) with the environment the real launcher gives them (Slurm's list of the
node's GPUs) and waits for them. What is refused, and why:

- srun, a GPU node of 64 cores x 2 hardware threads and 4 A100s (docs.nersc.gov, Perlmutter
  architecture; "-c ... floor(64 / tasks per node) * 2"):
  ``--gpus-per-task`` or a ``--gpu-bind`` other than ``none`` (each task's GPU isolated in a
  cgroup: CUDA-aware Cray MPICH then fails, "cuIpcOpenMemHandle: invalid argument", E3SM
  issue 4834); no ``--gpus-per-node`` (the tasks would see no GPU); more tasks per node than
  GPUs; ``--cpus-per-task`` other than the node's share (the ranks would not sit in their
  GPUs' NUMA domains), or more logical CPUs than the node has.
- PALS mpiexec, a Polaris node of 32 cores x 2 hardware threads and 4 A100s (ALCF, "Using GPUs
  on Polaris": ``--depth=8 --cpu-bind depth`` for 4 ranks a node, one NUMA domain each; "The
  Cray MPI on Polaris does not currently support binding MPI ranks to GPUs"): GPU binding
  flags (PALS has none); a depth x ranks per node other than the node's 32 cores; more ranks
  per node than GPUs.
- srun inside a batch job (``SLURM_JOB_ID`` set) asking ``--gpus-per-node`` for more GPUs than
  the job holds (``SLURM_GPUS_PER_NODE``, which sbatch sets from ``#SBATCH --gpus-per-node``):
  a step has only the job's GPUs to give, and every NERSC GPU example asks for them in #SBATCH.

Both machines run HPE Cray MPICH, and the ranks get what it would do with their environment:

- the thread level: Cray MPICH grants at most ``MPICH_MAX_THREAD_SAFETY`` (intro_mpi(3); the
  issue that added this reports older releases granting less than MULTIPLE without it, and
  HPE's text does not say what 8.x grants): here ``serialized`` unless it says ``multiple``,
  through mpi4py's ``MPI4PY_RC_THREAD_LEVEL``, so the real ``MPI_Query_thread`` says so;
- ``MPICH_GPU_SUPPORT_ENABLED=1`` without Cray MPICH's GTL library in the process: the job
  aborts with Cray MPICH's message as ALCF quotes it ("aborting job:" / "MPIDI_CRAY_init:
  GPU_SUPPORT_ENABLED is requested, but GTL library is not linked"; ALCF's Polaris Python
  page), exit 1. A GTL library in ``LD_PRELOAD`` (an existing ``libmpi_gtl_cuda.so``; the
  tests' is an empty stand-in file) counts as linked and is taken out before the ranks start.
"""

from __future__ import annotations

import os
import subprocess
import sys


def refuse(launcher: str, why: str) -> None:
    print(f"{launcher} (stand-in): {why}", file=sys.stderr)
    sys.exit(2)


def _options(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """Flags as name -> value (``--x=v``, ``--x v`` for the flags that take a value), and the program."""
    takes_value = {"--ntasks", "--ntasks-per-node", "--nodelist", "--nodes", "-n", "-ppn", "-hosts", "--depth"}
    opts, i = {}, 0
    while i < len(args) and args[i].startswith("-"):
        name, eq, value = args[i].partition("=")
        if not eq and name in takes_value:
            i += 1
            value = args[i]
        opts[name] = value
        i += 1
    return opts, args[i:]


THREAD_LEVELS = ("single", "funneled", "serialized", "multiple")
GTL = "libmpi_gtl_cuda.so"


def cray_mpich(env: dict[str, str]) -> dict[str, str]:
    """The ranks' environment as Cray MPICH would treat it (module docstring); exits where it aborts."""
    env = dict(env)
    cap = env.get("MPICH_MAX_THREAD_SAFETY", "serialized").lower()
    if cap not in THREAD_LEVELS:
        cap = "serialized"
    if cap != "multiple":
        env["MPI4PY_RC_THREAD_LEVEL"] = cap
    preload = env.get("LD_PRELOAD", "").replace(":", " ").split()
    gtl = [p for p in preload if os.path.basename(p) == GTL and os.path.isfile(p)]
    if env.get("MPICH_GPU_SUPPORT_ENABLED") == "1" and not gtl:
        print("aborting job:\nMPIDI_CRAY_init: GPU_SUPPORT_ENABLED is requested, but GTL library is not linked",
              file=sys.stderr, flush=True)
        sys.exit(1)
    if gtl:
        rest = [p for p in preload if p not in gtl]
        if rest:
            env["LD_PRELOAD"] = " ".join(rest)
        else:
            env.pop("LD_PRELOAD", None)
    return env


def _start(ranks: int, extra: dict[str, str], program: list[str]) -> int:
    """The ranks as one MPI job on this host, through this environment's MPICH (Hydra) mpiexec."""
    hydra = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return subprocess.run([hydra, "-n", str(ranks), *program], env=cray_mpich({**os.environ, **extra})).returncode


def srun(args: list[str]) -> int:
    opts, program = _options(args)
    cores, threads, gpus = 64, 2, 4
    per_node = int(opts.get("--ntasks-per-node", "1"))
    if "--gpus-per-task" in opts:
        refuse("srun", "--gpus-per-task isolates each task's GPU in a cgroup: CUDA-aware Cray MPICH fails "
                       "(cuIpcOpenMemHandle: invalid argument); use --gpus-per-node with --gpu-bind=none")
    if opts.get("--gpu-bind", "none") != "none":
        refuse("srun", f"--gpu-bind={opts['--gpu-bind']} isolates each task's GPU in a cgroup; use --gpu-bind=none")
    if "--gpus-per-node" not in opts:
        refuse("srun", "no --gpus-per-node: the tasks of a GPU job would see no GPU")
    if int(opts["--gpus-per-node"]) > gpus:
        refuse("srun", f"--gpus-per-node={opts['--gpus-per-node']}: a Perlmutter GPU node has {gpus}")
    held = os.environ.get("SLURM_GPUS_PER_NODE", "0")
    if os.environ.get("SLURM_JOB_ID") and int(opts["--gpus-per-node"]) > int(held if held.isdigit() else 0):
        refuse("srun", f"--gpus-per-node={opts['--gpus-per-node']} in a job that holds {held} GPU(s) a node: the "
                       "batch job must ask for them (#SBATCH --gpus-per-node)")
    if per_node > gpus:
        refuse("srun", f"{per_node} tasks per node for {gpus} GPUs: not one rank per GPU")
    cpus = int(opts.get("--cpus-per-task", "1"))
    if cpus * per_node > cores * threads:
        refuse("srun", f"{per_node} tasks x {cpus} CPUs is more than the node's {cores * threads}")
    if cpus != cores // per_node * threads:
        refuse("srun", f"--cpus-per-task={cpus}: NERSC's -c for {per_node} tasks a node is "
                       f"floor({cores} / {per_node}) x {threads} = {cores // per_node * threads}")
    visible = ",".join(str(g) for g in range(int(opts["--gpus-per-node"])))
    return _start(int(opts["--ntasks"]), {"CUDA_VISIBLE_DEVICES": visible}, program)


def pals_mpiexec(args: list[str]) -> int:
    opts, program = _options(args)
    cores, gpus = 32, 4
    per_node = int(opts.get("-ppn", "1"))
    for flag in ("--gpu-bind", "--gpus-per-task", "--gpus-per-node"):
        if flag in opts:
            refuse("mpiexec", f"{flag}: PALS has no GPU binding (ALCF: CUDA_VISIBLE_DEVICES per local rank)")
    if per_node > gpus:
        refuse("mpiexec", f"-ppn {per_node} for {gpus} GPUs: not one rank per GPU")
    depth = int(opts.get("--depth", "1"))
    if opts.get("--cpu-bind") != "depth" or depth * per_node != cores:
        refuse("mpiexec", f"--depth={depth} --cpu-bind={opts.get('--cpu-bind')} with -ppn {per_node}: ALCF's GPU "
                          f"runs give each rank {cores // per_node} cores (--depth={cores // per_node} --cpu-bind "
                          "depth), one NUMA domain each")
    return _start(int(opts["-n"]), {}, program)


if __name__ == "__main__":
    launcher, rest = sys.argv[1], sys.argv[2:]
    sys.exit(srun(rest) if launcher == "srun" else pals_mpiexec(rest))
