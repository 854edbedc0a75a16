"""Registers ``hydra/launcher=parsl`` and ``hydra/sweeper=scalestudy`` with Hydra; both live in
``orchestrator.sweep``, on Hydra's public Launcher and Sweeper plugin interfaces.

``hydra_plugins`` is a namespace package (no ``__init__.py`` at its top): Hydra
imports every module under it at start-up, which stores the config node below.
Hydra instantiates only plugin classes defined under ``hydra_plugins``, hence the
empty subclass; all behaviour stays in ``orchestrator.sweep.launcher``.
"""

from dataclasses import dataclass
from typing import Any, Dict, Optional

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

from orchestrator.sweep.sweeper import ScalestudySweeper as _ScalestudySweeper  # noqa: E402


class ScalestudySweeper(_ScalestudySweeper):
    """Hydra's handle on ``orchestrator.sweep.sweeper.ScalestudySweeper``."""


@dataclass
class ScalestudySweeperConf:
    _target_: str = "hydra_plugins.scalestudy_launcher.parsl_launcher.ScalestudySweeper"
    # as Hydra's basic sweeper's: jobs launched per batch (None: all in one), and sweep
    # overrides kept in the config (hydra.sweeper.params), before the command line's
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None


ConfigStore.instance().store(group="hydra/sweeper", name="scalestudy", node=ScalestudySweeperConf, provider="scalestudy")
