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


def gpu_rank_cores(site: SiteConfig, ranks_per_node: int) -> int:
    """A GPU run's rank owns an equal share of its node's cores, whatever threads it runs: the
    facilities' GPU examples spread ranks so that each sits in the NUMA domain of its GPU
    (ALCF: "NDEPTH=8 and --cpu-bind depth ... ensure that each MPI rank is bound to a separate
    NUMA node"; NERSC: ``-c`` = floor(64 / tasks per node) x 2)."""
    return max(1, site.cores_per_node // max(1, ranks_per_node))


class MpiLauncher:
    name: ClassVar[str]            # as a site file and Parsl's MPIExecutor name it

    def binding_flags(self, site: SiteConfig, threads_per_rank: int, ranks_per_node: int, gpu: bool = False) -> str:
        """Flags that give each rank its share of a node's cores (``threads_per_rank`` hardware
        threads, on whole cores while the node's threads fit on its cores, two per core past
        that, ...; a GPU run's rank its node's share, ``gpu_rank_cores``)."""
        return ""

    def gpu_flags(self, site: SiteConfig) -> str:
        """Flags that hand a GPU run's ranks the node's GPUs (which one each uses is
        ``workloads.placement``'s, by the site's ``gpu_binding``)."""
        return ""

    def failure_flags(self) -> str:
        """Flags that end the whole MPI job when one rank fails."""
        return ""

    def one_rank(self) -> list[str]:
        """The launcher and its flags for one rank on one node (``sites --check`` inside an allocation)."""
        return [self.name, "-n", "1"]

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

    def binding_flags(self, site: SiteConfig, threads_per_rank: int, ranks_per_node: int, gpu: bool = False) -> str:
        depth = max(threads_per_rank, gpu_rank_cores(site, ranks_per_node)) if gpu else threads_per_rank
        return f"--depth={depth} --cpu-bind=depth"

    def one_rank(self) -> list[str]:
        return [self.name, "-n", "1", "-ppn", "1"]

    # GPUs: none to add. "The Cray MPI on Polaris does not currently support binding MPI ranks to
    # GPUs" (ALCF, Using GPUs on Polaris): its affinity script sets CUDA_VISIBLE_DEVICES per local
    # rank instead, as workloads.placement does (gpu_binding: reverse)


class Srun(MpiLauncher):
    """Slurm's srun (Perlmutter): ``-c`` counts logical CPUs, and a core has ``threads_per_core``
    of them, so a rank that should own k cores asks for k x threads_per_core (NERSC, "Process
    and thread affinity")."""
    name = "srun"

    def binding_flags(self, site: SiteConfig, threads_per_rank: int, ranks_per_node: int, gpu: bool = False) -> str:
        j = hardware_threads_per_core(site, threads_per_rank * ranks_per_node)
        cores = -(-threads_per_rank // j)
        if gpu:   # NERSC's GPU examples: -c floor(64 / tasks per node) x 2 (the site sets --cpu-bind=cores)
            cores = max(cores, gpu_rank_cores(site, ranks_per_node))
        return f"--cpus-per-task={cores * site.threads_per_core}"

    def gpu_flags(self, site: SiteConfig) -> str:
        # every GPU of the node visible to every task, none bound by Slurm: --gpus-per-task or
        # --gpu-bind=map_gpu isolate each task's GPU in a cgroup, and CUDA-aware Cray MPICH then
        # fails opening its peers' memory ("cuIpcOpenMemHandle: invalid argument", E3SM issue
        # 4834 on Perlmutter; WarpX's Perlmutter script: "--gpu-bind=none ... NERSC cgroups
        # issue"). Each rank takes its own GPU from the list (workloads.placement).
        return f"--gpus-per-node={site.accelerators_per_node} --gpu-bind=none"

    def one_rank(self) -> list[str]:
        return [self.name, "--ntasks", "1", "--ntasks-per-node", "1", "--nodes", "1"]

    def failure_flags(self) -> str:
        # srun otherwise lets the other ranks run on: after a rank dies in MPI_Init they spin
        # there until the job's walltime
        return "--kill-on-bad-exit=1"


class Aprun(MpiLauncher):
    """Cray's aprun (Theta): ``-d`` counts CPUs as ``-j`` defines them, ``-j`` is the hardware
    threads used per core, ``-cc depth`` places ranks ``-d`` apart (ALCF, Theta example job
    scripts and affinity page)."""
    name = "aprun"

    def binding_flags(self, site: SiteConfig, threads_per_rank: int, ranks_per_node: int, gpu: bool = False) -> str:
        j = hardware_threads_per_core(site, threads_per_rank * ranks_per_node)
        return f"-d {-(-threads_per_rank // j) * j} -cc depth -j {j}"

    def one_rank(self) -> list[str]:
        return [self.name, "-n", "1", "-N", "1"]

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


def launch_flags(site: SiteConfig, threads_per_rank: int, ranks_per_node: int = 1, device: str = "cpu") -> str:
    """Everything scalestudy adds to the site's own ``launcher_options`` for one run."""
    launcher = launcher_of(site)
    gpu = device == "cuda"
    return " ".join(x for x in (launcher.failure_flags(),
                                launcher.binding_flags(site, threads_per_rank, ranks_per_node, gpu),
                                launcher.gpu_flags(site) if gpu else "") if x)


def fix_prefix(words: list[str]) -> list[str]:
    """A launch prefix as its launcher takes it, whichever launcher its first word names."""
    launcher = LAUNCHERS.get(words[0]) if words else None
    return launcher.fix_prefix(words) if launcher is not None else words
