"""Registers ``hydra/launcher=parsl`` with Hydra; the launcher lives in ``orchestrator``.

``hydra_plugins`` is a namespace package (no ``__init__.py`` at its top): Hydra
imports every module under it at start-up, which stores the config node below.
Hydra instantiates only plugin classes defined under ``hydra_plugins``, hence the
empty subclass; all behaviour stays in ``orchestrator.sweep.launcher``.
"""

from dataclasses import dataclass
from typing import Any, Optional

from hydra.core.config_store import ConfigStore

from orchestrator.sweep import launcher as _launcher


class ParslLauncher(_launcher.ParslLauncher):
    """Hydra's handle on ``orchestrator.sweep.launcher.ParslLauncher``."""


@dataclass
class ParslLauncherConf:
    _target_: str = "hydra_plugins.scalestudy_launcher.parsl_launcher.ParslLauncher"
    # site_configs/<site>.yaml, or a path to a site file
    site: str = "local"
    # per-job allocation; may interpolate the job's own keys, e.g. ${nodes}
    num_nodes: Any = 1
    ranks_per_node: Any = 1
    # extra flags for the MPI launcher (e.g. --mpi=pmi2 for srun)
    launcher_options: str = ""
    # dotted path to a class told about the sweep (see orchestrator.sweep.observer.SweepObserver)
    observer: Optional[str] = None
    poll_seconds: float = 0.5
    # override the site's account, queue (Slurm partition) and walltime (HH:MM:SS)
    account: Optional[str] = None
    queue: Optional[str] = None
    walltime: Optional[str] = None
    # per_size | packed, and the packed batch job's nodes (None: the site's)
    allocation: Optional[str] = None
    allocation_nodes: Any = None


ConfigStore.instance().store(group="hydra/launcher", name="parsl", node=ParslLauncherConf, provider="scalestudy")


# -- hydra/sweeper=scalestudy ------------------------------------------------------------

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf  # noqa: E402


class ScalestudySweeper(BasicSweeper):
    """Hydra's basic sweeper, less its composing of every job before launching: the Parsl
    launcher composes each job itself, all of them before it submits anything, so
    Hydra's check would only compose every job a second time (a tenth of a second per
    job; ``benchmarks/bench_overhead.py``). With another launcher it checks as usual."""

    def validate_batch_is_legal(self, batch):  # noqa: D102
        if isinstance(self.launcher, _launcher.ParslLauncher):
            return None
        return super().validate_batch_is_legal(batch)


@dataclass
class ScalestudySweeperConf(BasicSweeperConf):
    _target_: str = "hydra_plugins.scalestudy_launcher.parsl_launcher.ScalestudySweeper"


ConfigStore.instance().store(group="hydra/sweeper", name="scalestudy", node=ScalestudySweeperConf, provider="scalestudy")
