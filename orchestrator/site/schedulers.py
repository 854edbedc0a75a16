"""What scalestudy knows of each scheduler, one small class each, found through ``SCHEDULERS``.

As Parsl keeps a provider per scheduler and ReFrame a scheduler class per name, each
class here holds all of one scheduler's knowledge: the directive prefix of its batch
scripts, the variable its jobs carry their id in, what its submit command prints (the
dry run answers with it), which ``mpiexec`` its machines have, what a site file of it may
not say, and the Parsl provider that submits, polls and cancels its batch jobs. A site
with a new scheduler is one new class in the table. The local "scheduler" is this host:
no batch jobs, runs started from the driver's threads.

Parsl is imported only when a provider is made (about 1 s that a local sweep never pays).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import ConfigError
from .checks import DIRECTIVE_WORD_RE

if TYPE_CHECKING:   # annotations only: config imports this module
    from .config import SiteConfig


class Scheduler:
    name: ClassVar[str]
    batch_jobs: ClassVar[bool] = True          # False: runs start on this host, from the driver
    directive: ClassVar[str] = ""              # the prefix of a batch script's directive lines
    job_id_var: ClassVar[str] = ""             # where a batch job's processes find its id
    submitted_reply: ClassVar[str] = ""        # what its submit command prints (for the dry run)
    mpiexec: ClassVar[str] = "mpiexec"         # the flavour of mpiexec its machines have (launchers.py)
    # whether its batch script can start as a login shell (site login_shell: #!/bin/bash -l)
    login_shell: ClassVar[bool] = False

    def check_site(self, raw: dict[str, Any], file_name: str) -> None:
        """Refuse what a site file of this scheduler may not say (``raw``: the file's values;
        normalised in place)."""
        if raw.get("login_shell") and not self.login_shell:
            raise ConfigError("site.login_shell", True, f"the {self.name} batch script here starts with Parsl's "
                              "#!/bin/bash; only PBS Pro's can be a login shell")
        if raw.get("select_options"):
            raise ConfigError("site.select_options", raw["select_options"], "expected PBS Pro select resources "
                              "like system=polaris")

    def directives(self, site: SiteConfig) -> list[str]:
        """The batch script's directive lines (the site's own, and any the scheduler needs)."""
        return [f"{self.directive} {d}" for d in site.scheduler_options]

    def provider(self, site: SiteConfig, nodes: int, worker_init: str):
        """The Parsl provider of ``nodes``-node batch jobs on ``site`` (its queue as chosen)."""
        raise NotImplementedError


class LocalHost(Scheduler):
    name = "local"
    batch_jobs = False

    def check_site(self, raw: dict[str, Any], file_name: str) -> None:
        super().check_site(raw, file_name)
        if raw["mpi_launcher"] != "mpiexec":
            raise ConfigError("site.mpi_launcher", raw["mpi_launcher"], "the local site starts runs with mpiexec")
        if raw.get("max_concurrent_runs", 1) != 1:
            raise ConfigError("site.max_concurrent_runs", raw["max_concurrent_runs"], "the local site runs one run "
                              "at a time (its runs share this host's cores, and Hydra keeps one job's state per "
                              "process)")
        if raw.get("worker_init"):
            raise ConfigError("site.worker_init", list(raw["worker_init"]), "the local site runs no batch script, "
                              "so nothing would run these; set environment variables with env: instead")
        if raw.get("mpi") == "system":
            raise ConfigError("site.mpi", "system", "the local site starts runs with this environment's mpiexec")

    def provider(self, site: SiteConfig, nodes: int, worker_init: str):
        raise ValueError("the local site runs its MPI jobs from the driver's threads: no provider")


class Slurm(Scheduler):
    name = "slurm"
    directive = "#SBATCH"
    job_id_var = "SLURM_JOB_ID"
    submitted_reply = "Submitted batch job 0"

    def directives(self, site: SiteConfig) -> list[str]:
        # --no-requeue: a job killed with its node fails the task (Parsl retries) instead of hanging in requeue.
        # A GPU node's GPUs are the job's only when it asks for them: every NERSC GPU example has
        # "#SBATCH --gpus-per-node=4" (or --gpus-per-task); an srun --gpus-per-node inside a job that
        # holds none has none to give
        gpus = (f"--gpus-per-node={site.accelerators_per_node}",) if site.accelerators_per_node else ()
        return [f"{self.directive} {d}" for d in ("--no-requeue", *gpus, *site.scheduler_options)]

    def provider(self, site: SiteConfig, nodes: int, worker_init: str):
        from parsl.launchers import SimpleLauncher
        from parsl.providers import SlurmProvider

        qos = site.slurm_queue == "qos"   # NERSC's queues are QOSes (--qos=regular)
        return SlurmProvider(partition=None if qos else (site.partition or None), qos=site.partition if qos else None,
                             account=site.account or None,
                             nodes_per_block=nodes, init_blocks=0, min_blocks=0, max_blocks=1,
                             walltime=site.walltime, scheduler_options="\n".join(self.directives(site)),
                             worker_init=worker_init, launcher=SimpleLauncher(), exclusive=True, cmd_timeout=30)


class PbsPro(Scheduler):
    name = "pbspro"
    directive = "#PBS"
    job_id_var = "PBS_JOBID"
    submitted_reply = "0.dry-run"
    mpiexec = "pals"   # HPE Cray PALS (Polaris, Aurora)
    login_shell = True

    def check_site(self, raw: dict[str, Any], file_name: str) -> None:
        value = raw.get("select_options")
        if value:
            if not isinstance(value, str) or not all(DIRECTIVE_WORD_RE.match(w) for w in value.lstrip(":").split(":")):
                raise ConfigError("site.select_options", value, "expected PBS Pro select resources like system=polaris")
            raw["select_options"] = value.lstrip(":")

    def provider(self, site: SiteConfig, nodes: int, worker_init: str):
        from parsl.launchers import SimpleLauncher
        from parsl.providers import PBSProProvider

        provider = PBSProProvider(account=site.account or None, queue=site.partition or None,
                                  scheduler_options="\n".join(self.directives(site)),
                                  select_options=site.select_options, worker_init=worker_init, nodes_per_block=nodes,
                                  cpus_per_node=site.cores_per_node, init_blocks=0, min_blocks=0, max_blocks=1,
                                  walltime=site.walltime, launcher=SimpleLauncher(), cmd_timeout=60)
        if site.login_shell:   # the provider's own script template (a public attribute), first line only
            first, rest = provider.template_string.split("\n", 1)
            if first.startswith("#!") and not first.rstrip().endswith(" -l"):
                provider.template_string = f"{first.rstrip()} -l\n{rest}"
        return provider


class Cobalt(Scheduler):
    name = "cobalt"
    directive = "#COBALT"
    job_id_var = "COBALT_JOBID"
    submitted_reply = "0"

    def provider(self, site: SiteConfig, nodes: int, worker_init: str):
        from parsl.launchers import SimpleLauncher

        from ..pools.providers import CobaltProvider   # Parsl dropped its own in 2024.11

        return CobaltProvider(account=site.account or None, queue=site.partition or None,
                              scheduler_options="\n".join(self.directives(site)), worker_init=worker_init,
                              nodes_per_block=nodes, init_blocks=0, min_blocks=0, max_blocks=1,
                              walltime=site.walltime, launcher=SimpleLauncher())


SCHEDULERS: dict[str, Scheduler] = {s.name: s for s in (LocalHost(), Slurm(), PbsPro(), Cobalt())}
# the variables a batch job's id may be in, whichever scheduler started it
JOB_ID_VARS = tuple(s.job_id_var for s in SCHEDULERS.values() if s.job_id_var)
