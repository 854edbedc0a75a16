"""What scalestudy knows of each MPI launcher, one small class each, found through ``launcher_of``.

A launcher class holds its flags: the binding that gives each rank its share of a node's
cores, the flag that ends the whole job when one rank fails, how Parsl's launch line is
spelled for it, and the node names a dry run shows. Plain string rules on the site
config, apart from the Parsl configuration so that a local sweep (which asks for them for
every run) does not import Parsl, about 1 s of start-up.

``mpiexec`` is two launchers: MPICH's Hydra (this host, the local Slurm cluster) and HPE
Cray PALS (Polaris); which one a site gets is its scheduler's word (``Scheduler.mpiexec``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:   # annotations only: config imports this module
    from .config import SiteConfig


def hardware_threads_per_core(site: SiteConfig, threads_per_node: int) -> int:
    """How many hardware threads of each core a run uses: 1 until its threads outnumber the
    cores, then 2, ... up to the core's hardware threads (aprun's ``-j``)."""
    return max(1, min(site.threads_per_core, -(-threads_per_node // site.cores_per_node)))


class MpiLauncher:
    name: ClassVar[str]            # as a site file and Parsl's MPIExecutor name it

    def binding_flags(self, site: SiteConfig, threads_per_rank: int, ranks_per_node: int) -> str:
        """Flags that give each rank its share of a node's cores (``threads_per_rank`` hardware
        threads, on whole cores while the node's threads fit on its cores, two per core past
        that, ...)."""
        return ""

    def failure_flags(self) -> str:
        """Flags that end the whole MPI job when one rank fails."""
        return ""

    def fix_prefix(self, words: list[str]) -> list[str]:
        """Parsl's ``$PARSL_MPI_PREFIX`` as this launcher takes it."""
        return words

    def placeholder_host(self, index: int) -> str:
        """A node name for a dry run's launch line, in the machine's own form."""
        return f"node{index}"


class HydraMpiexec(MpiLauncher):
    """MPICH's Hydra on this host: no pinning, ranks share the cores; it already aborts the job
    when a rank exits non-zero."""
    name = "mpiexec"


class PalsMpiexec(MpiLauncher):
    """HPE Cray PALS (Polaris): ``--depth`` is the hardware threads per rank, ``--cpu-bind
    depth`` places ranks that far apart (ALCF, Polaris "Running jobs")."""
    name = "mpiexec"

    def binding_flags(self, site: SiteConfig, threads_per_rank: int, ranks_per_node: int) -> str:
        return f"--depth={threads_per_rank} --cpu-bind=depth"


class Srun(MpiLauncher):
    """Slurm's srun (Perlmutter): ``-c`` counts logical CPUs, and a core has ``threads_per_core``
    of them, so a rank that should own k cores asks for k x threads_per_core (NERSC, "Process
    and thread affinity")."""
    name = "srun"

    def binding_flags(self, site: SiteConfig, threads_per_rank: int, ranks_per_node: int) -> str:
        j = hardware_threads_per_core(site, threads_per_rank * ranks_per_node)
        return f"--cpus-per-task={-(-threads_per_rank // j) * site.threads_per_core}"

    def failure_flags(self) -> str:
        # srun otherwise lets the other ranks run on: after a rank dies in MPI_Init they spin
        # there until the job's walltime
        return "--kill-on-bad-exit=1"


class Aprun(MpiLauncher):
    """Cray's aprun (Theta): ``-d`` counts CPUs as ``-j`` defines them, ``-j`` is the hardware
    threads used per core, ``-cc depth`` places ranks ``-d`` apart (ALCF, Theta example job
    scripts and affinity page)."""
    name = "aprun"

    def binding_flags(self, site: SiteConfig, threads_per_rank: int, ranks_per_node: int) -> str:
        j = hardware_threads_per_core(site, threads_per_rank * ranks_per_node)
        return f"-d {-(-threads_per_rank // j) * j} -cc depth -j {j}"

    def fix_prefix(self, words: list[str]) -> list[str]:
        """Parsl writes ``aprun ... -node-list nid03835,nid03836``; Cray's aprun places on given
        nodes with ``-L node_list``, "a comma-separated list of node IDs" (Cray, "Running
        Applications", S-2496: ``aprun ... [-L node_list]``), the numbers ``COBALT_PARTNAME``
        lists and the ``nidNNNNN`` names carry. Without it runs packed into one job would not
        get the nodes Parsl gave them."""
        if not words or words[0] != "aprun" or "-node-list" not in words:
            return words
        i = words.index("-node-list")
        if i + 1 >= len(words):
            return words
        ids = [str(int(n[3:])) if n.startswith("nid") and n[3:].isdigit() else n for n in words[i + 1].split(",")]
        return [*words[:i], "-L", ",".join(ids), *words[i + 2:]]

    def placeholder_host(self, index: int) -> str:
        return f"nid{index:05d}"


LAUNCHERS: dict[str, MpiLauncher] = {"mpiexec": HydraMpiexec(), "pals": PalsMpiexec(), "srun": Srun(),
                                     "aprun": Aprun()}
# what a site file's mpi_launcher may say
MPI_LAUNCHERS = ("mpiexec", "srun", "aprun")


def launcher_of(site: SiteConfig) -> MpiLauncher:
    """The launcher a site's runs start with: its ``mpi_launcher``, and for ``mpiexec`` the
    flavour its scheduler's machines have."""
    if site.mpi_launcher == "mpiexec":
        return LAUNCHERS[site.scheduler.mpiexec]
    return LAUNCHERS[site.mpi_launcher]


def launch_flags(site: SiteConfig, threads_per_rank: int, ranks_per_node: int = 1) -> str:
    """Everything scalestudy adds to the site's own ``launcher_options`` for one run."""
    launcher = launcher_of(site)
    return " ".join(x for x in (launcher.failure_flags(),
                                launcher.binding_flags(site, threads_per_rank, ranks_per_node)) if x)


def fix_prefix(words: list[str]) -> list[str]:
    """A launch prefix as its launcher takes it, whichever launcher its first word names."""
    launcher = LAUNCHERS.get(words[0]) if words else None
    return launcher.fix_prefix(words) if launcher is not None else words
