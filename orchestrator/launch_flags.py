"""The MPI launcher flags scalestudy adds for a run: binding and failure handling.

Plain string rules on the site config, apart from ``parsl_config`` so that a local sweep
(which asks for them for every run) does not import Parsl, about 1 s of start-up.
"""

from __future__ import annotations

from .sites import SiteConfig


def hardware_threads_per_core(site: SiteConfig, threads_per_node: int) -> int:
    """How many hardware threads of each core a run uses: 1 until its threads outnumber the
    cores, then 2, ... up to the core's hardware threads (aprun's ``-j``)."""
    return max(1, min(site.threads_per_core, -(-threads_per_node // site.cores_per_node)))


def binding_flags(site: SiteConfig, threads_per_rank: int, ranks_per_node: int = 1) -> str:
    """Launcher flags that give each rank its share of a node's cores.

    Each rank gets ``threads_per_rank`` hardware threads, on whole cores while the node's
    threads fit on its cores (one hardware thread per core), two per core past that, ...
    - aprun (Theta): ``-d`` counts CPUs as ``-j`` defines them, ``-j`` is the hardware
      threads used per core, ``-cc depth`` places ranks ``-d`` apart (ALCF, Theta example
      job scripts and affinity page).
    - srun (Perlmutter): ``-c`` counts logical CPUs, and a core has ``threads_per_core`` of
      them, so a rank that should own k cores asks for k x threads_per_core (NERSC, "Process
      and thread affinity").
    - PALS mpiexec (Polaris): ``--depth`` is the hardware threads per rank, ``--cpu-bind
      depth`` places ranks that far apart (ALCF, Polaris "Running jobs").
    """
    j = hardware_threads_per_core(site, threads_per_rank * ranks_per_node)
    cores_per_rank = -(-threads_per_rank // j)
    if site.mpi_launcher == "srun":
        return f"--cpus-per-task={cores_per_rank * site.threads_per_core}"
    if site.mpi_launcher == "aprun":
        return f"-d {cores_per_rank * j} -cc depth -j {j}"
    if site.provider == "pbspro":  # Cray PALS mpiexec (Polaris)
        return f"--depth={threads_per_rank} --cpu-bind=depth"
    return ""  # MPICH's hydra on this host: no pinning, ranks share the cores


def failure_flags(site: SiteConfig) -> str:
    """Launcher flags that end the whole MPI job when one rank fails.

    srun otherwise lets the other ranks run on: after a rank dies in ``MPI_Init`` they
    spin there until the job's walltime. MPICH's and Cray's ``mpiexec`` and ``aprun``
    already abort the job when a rank exits non-zero.
    """
    return "--kill-on-bad-exit=1" if site.mpi_launcher == "srun" else ""


def launch_flags(site: SiteConfig, threads_per_rank: int, ranks_per_node: int = 1) -> str:
    """Everything scalestudy adds to the site's own ``launcher_options`` for one run."""
    return " ".join(x for x in (failure_flags(site), binding_flags(site, threads_per_rank, ranks_per_node)) if x)


def aprun_node_list(words: list[str]) -> list[str]:
    """An aprun command as Parsl composes it, with the node list spelled as aprun takes it.

    Parsl writes ``aprun ... -node-list nid03835,nid03836``; Cray's aprun places on given nodes
    with ``-L node_list``, "a comma-separated list of node IDs" (Cray, "Running Applications",
    S-2496: ``aprun ... [-L node_list]``), the numbers ``COBALT_PARTNAME`` lists and the
    ``nidNNNNN`` names carry. Without it runs packed into one job would not get the nodes Parsl
    gave them. Other commands come back unchanged."""
    if not words or words[0] != "aprun" or "-node-list" not in words:
        return words
    i = words.index("-node-list")
    if i + 1 >= len(words):
        return words
    ids = [str(int(n[3:])) if n.startswith("nid") and n[3:].isdigit() else n for n in words[i + 1].split(",")]
    return [*words[:i], "-L", ",".join(ids), *words[i + 2:]]
