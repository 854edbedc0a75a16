"""The MPI launcher flags scalestudy adds for a run: binding and failure handling.

Plain string rules on the site config, apart from ``parsl_config`` so that a local sweep
(which asks for them for every run) does not import Parsl, about 1 s of start-up.
"""

from __future__ import annotations

from .sites import SiteConfig


def binding_flags(site: SiteConfig, threads_per_rank: int) -> str:
    """Launcher flags that give each rank its share of a node's cores."""
    if site.mpi_launcher == "srun":
        return f"--cpus-per-task={threads_per_rank}"
    if site.mpi_launcher == "aprun":
        return f"-d {threads_per_rank} -cc depth -j {site.threads_per_core}"
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


def launch_flags(site: SiteConfig, threads_per_rank: int) -> str:
    """Everything scalestudy adds to the site's own ``launcher_options`` for one run."""
    return " ".join(x for x in (failure_flags(site), binding_flags(site, threads_per_rank)) if x)
