"""Sites as data: load and validate ``site_configs/<name>.yaml``.

A site says how a machine is reached (provider, MPI launcher, account, queue) and
what it allows (max nodes, max walltime). It is validated in full at load, before
any run is built, so that a typo fails on the login node and not in a batch job
hours later. Every value that ends up in a batch script or a shell command is held
to the strict forms of ``checks``; what a scheduler or launcher means is theirs
(``schedulers``, ``launchers``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from workloads.placement import GPU_BINDINGS

from ..errors import ConfigError
from .checks import (NAME_RE, PATH_RE, as_list, check_command, check_directive, check_env,
                     check_flags, check_module, check_name, check_walltime, positive_int, walltime_seconds)
from .launchers import MPI_LAUNCHERS, MpiLauncher, launcher_of
from .nccl import NcclNetwork, parse_nccl_network
from .network import NetworkSpec, parse_network
from .queues import QueueLimits, parse_queues
from .schedulers import SCHEDULERS, Scheduler
from workloads.did_you_mean import hint

PROVIDERS = tuple(SCHEDULERS)
# wheel: the MPI of the `mpich` wheel in this environment (laptops, CI, the local sites);
# system: the machine's own MPI (Cray MPICH and PALS/aprun/srun), loaded with `modules`
MPI_KINDS = ("wheel", "system")
# per_size: one batch job per node count of a sweep; packed: one batch job for the whole sweep
ALLOCATIONS = ("per_size", "packed")
_NOT_SITES = {"template"}


@dataclass(frozen=True)
class SiteConfig:
    name: str
    provider: str
    mpi_launcher: str
    cores_per_node: int
    max_nodes: int
    description: str = ""
    launcher_options: str = ""
    partition: str = ""          # Slurm partition; PBS Pro / Cobalt queue (alias: queue)
    account: str = ""
    threads_per_core: int = 1
    walltime: str = "01:00:00"
    max_walltime: str = ""
    max_concurrent_runs: int = 1   # runs in flight at once inside one allocation (Parsl block)
    max_runs_in_flight: int = 0    # runs in flight across all allocations of a sweep; 0 = no cap
    oversubscribe: bool = False  # allow more threads per node than hardware threads (this host, small tests)
    # every "node" is the same machine (local_slurm's virtual nodes): a run's ranks all share its
    # cores, which the performance model's oversubscription term counts (the local provider always is)
    shared_host: bool = False
    scheduler_options: tuple[str, ...] = field(default_factory=tuple)
    worker_init: tuple[str, ...] = field(default_factory=tuple)
    # environment variables for the batch job and every rank (literal values, quoted when exported)
    env: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    select_options: str = ""       # PBS Pro: added to the select statement, e.g. system=polaris
    slurm_queue: str = "partition"  # Slurm: the queue is a partition, or a QOS (NERSC: --qos=regular)
    mpi: str = "wheel"             # wheel | system (see MPI_KINDS)
    modules: tuple[str, ...] = field(default_factory=tuple)   # `module load` each, before worker_init
    libmpi: str = ""               # pin the MPI library mpi4py loads (MPI4PY_LIBMPI); "" = the loader's search
    queues: tuple[QueueLimits, ...] = field(default_factory=tuple)   # the facility's queue table (queues.py)
    sources: tuple[str, ...] = field(default_factory=tuple)  # facility pages this file was checked against
    queue_pinned: bool = False     # the queue was given on the command line: never moved to another
    # per_size: a batch job per node count; packed: every run of a sweep inside one batch job of
    # allocation_nodes nodes (0: the sweep's largest run), several at a time when they fit
    allocation: str = "per_size"
    allocation_nodes: int = 0
    accelerators_per_node: int = 0   # GPUs per node: device=cuda runs at most one rank per GPU
    # which GPU a node's k-th rank owns (workloads/placement.py): direct (k), reverse (n-1-k,
    # Polaris' topology), none (the launcher binds)
    gpu_binding: str = "direct"
    network: NetworkSpec | None = None   # interconnect, for model predict (site_network.py)
    # NCCL's network plugin and its settings, exported after the modules (nccl.py); None: NCCL's defaults
    nccl_network: NcclNetwork | None = None
    # start the batch script as a login shell (#!/bin/bash -l), as the facility's own examples do
    login_shell: bool = False

    @property
    def queue(self) -> str:
        return self.partition

    @property
    def scheduler(self) -> Scheduler:
        return SCHEDULERS[self.provider]

    @property
    def launcher(self) -> MpiLauncher:
        return launcher_of(self)

    @property
    def max_threads_per_node(self) -> int:
        return self.cores_per_node * self.threads_per_core


# variables each run sets for itself, after the site's env:, which would override the site's value
RUN_SET_ENV = {
    "MPICH_GPU_SUPPORT_ENABLED": "set by each run as its data path needs (0, or 1 with GTL preloaded for "
                                 "data_path=cuda_aware_mpi): remove it from the site's env:",
}


def site_dir() -> Path:
    return Path(str(resources.files("site_configs")))


def known_sites() -> list[str]:
    return sorted(p.stem for p in site_dir().glob("*.yaml") if p.stem not in _NOT_SITES)


def _site_path(name: str) -> Path:
    if name.endswith((".yaml", ".yml")) or "/" in name:
        path = Path(name).expanduser()
        if not path.is_file():
            raise ConfigError("site", name, "no such site file")
        return path
    if name in _NOT_SITES or not NAME_RE.match(name) or not (site_dir() / f"{name}.yaml").is_file():
        raise ConfigError("site", name, f"unknown site{hint(name, known_sites())}; known: {', '.join(known_sites())} "
                                        "(or a path to a YAML file)")
    return site_dir() / f"{name}.yaml"


def _read(path: Path) -> dict[str, Any]:
    """The file's settings: a mapping, ``queue`` spelled as ``partition``, no unknown key."""
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError("site", str(path), f"not valid YAML ({exc.__class__.__name__})") from None
    if not isinstance(raw, dict):
        raise ConfigError("site", str(path), "expected a mapping of settings")
    if "queue" in raw:
        if "partition" in raw:
            raise ConfigError("site.queue", raw["queue"], f"give queue or partition in {path.name}, not both")
        raw["partition"] = raw.pop("queue")
    fields = {f.name: f for f in dataclasses.fields(SiteConfig) if f.name not in ("name", "queue_pinned")}
    for key in raw:
        if key not in fields:
            raise ConfigError(f"site.{key}", raw[key], f"unknown key in {path.name}; known: {', '.join(fields)}, queue")
    for f in fields.values():
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name not in raw:
            raise ConfigError(f"site.{f.name}", None, f"required in {path.name}")
    return raw


def _check_machine(raw: dict[str, Any], path: Path) -> None:
    """Scheduler, launcher and the machine's sizes."""
    if raw["provider"] not in PROVIDERS:
        raise ConfigError("site.provider", raw["provider"], f"unsupported; known: {', '.join(PROVIDERS)}")
    if raw["mpi_launcher"] not in MPI_LAUNCHERS:
        raise ConfigError("site.mpi_launcher", raw["mpi_launcher"], f"unsupported; known: {', '.join(MPI_LAUNCHERS)}")
    if "accelerators_per_node" in raw:
        value = raw["accelerators_per_node"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError("site.accelerators_per_node", value, "expected an integer >= 0")
    if "gpu_binding" in raw and raw["gpu_binding"] not in GPU_BINDINGS:
        raise ConfigError("site.gpu_binding", raw["gpu_binding"], f"expected {', '.join(GPU_BINDINGS)} (which GPU "
                          "a node's k-th rank owns: k, n-1-k, or whatever the launcher gives it)")
    raw["network"] = parse_network(raw.get("network"))
    raw["nccl_network"] = parse_nccl_network(raw.get("nccl_network"))
    for key in ("cores_per_node", "max_nodes", "max_concurrent_runs", "threads_per_core"):
        if key in raw:
            positive_int(f"site.{key}", raw[key])
    if "max_runs_in_flight" in raw:
        value = raw["max_runs_in_flight"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError("site.max_runs_in_flight", value, "expected an integer >= 0 (0: no cap)")
    if "allocation" in raw or "allocation_nodes" in raw:
        raw["allocation"], raw["allocation_nodes"] = check_allocation(
            "site.", raw.get("allocation", "per_size"), raw.get("allocation_nodes", 0), raw["provider"],
            raw.get("max_nodes"), path.stem)
    for key in ("oversubscribe", "shared_host", "login_shell"):
        if key in raw and not isinstance(raw[key], bool):
            raise ConfigError(f"site.{key}", raw[key], "expected true or false")
    if "description" in raw and not isinstance(raw["description"], str):
        raise ConfigError("site.description", raw["description"], "expected a string")


def _check_batch_settings(raw: dict[str, Any], path: Path) -> None:
    """What reaches a batch script: account, queue, walltimes, flags, set-up commands."""
    for key in ("partition", "account"):
        if raw.get(key):
            check_name(f"site.{key}", raw[key])
    for key in ("walltime", "max_walltime"):
        if raw.get(key):
            check_walltime(f"site.{key}", raw[key])
    if raw.get("walltime") and raw.get("max_walltime") and \
            walltime_seconds(raw["walltime"]) > walltime_seconds(raw["max_walltime"]):
        raise ConfigError("site.walltime", raw["walltime"], f"exceeds max_walltime {raw['max_walltime']}")
    if "launcher_options" in raw:
        raw["launcher_options"] = check_flags("site.launcher_options", raw["launcher_options"] or "")
    raw["worker_init"] = tuple(check_command("site.worker_init", c) for c in as_list("site.worker_init",
                                                                                    raw.get("worker_init")))
    for command in raw["worker_init"]:
        check_no_second_environment(command)
    raw["env"] = check_env("site.env", raw.get("env"))
    for name, value in raw["env"]:
        if name in RUN_SET_ENV:   # each run sets it after the site's env: (orchestrator/mpi/run_env.py)
            raise ConfigError(f"site.env.{name}", value, RUN_SET_ENV[name])
    nccl = raw.get("nccl_network")
    if nccl is not None:
        both = sorted({name for name, _ in raw["env"]} & {"NCCL_NET", "LD_LIBRARY_PATH", *(n for n, _ in nccl.env)})
        if both:
            raise ConfigError(f"site.env.{both[0]}", dict(raw["env"])[both[0]], "also set by nccl_network: give it "
                              "in one place")
        if raw["provider"] == "local":   # no batch script: the plugin's settings would go nowhere
            raise ConfigError("site.nccl_network", nccl.plugin, "needs a batch job (provider slurm, pbspro or "
                              "cobalt); on a local site set the NCCL variables in your shell")
    raw["mpi"] = raw.get("mpi", "wheel")
    if raw["mpi"] not in MPI_KINDS:
        raise ConfigError("site.mpi", raw["mpi"], "expected wheel (this environment's mpich wheel) or system "
                          "(the machine's MPI, from modules)")
    SCHEDULERS[raw["provider"]].check_site(raw, path.name)
    raw["modules"] = tuple(check_module(m) for m in as_list("site.modules", raw.get("modules")))
    if raw.get("libmpi"):
        if not isinstance(raw["libmpi"], str) or not PATH_RE.match(raw["libmpi"]):
            raise ConfigError("site.libmpi", raw["libmpi"], "expected an absolute path to libmpi.so.12 (plain characters)")
    if raw.get("slurm_queue", "partition") not in ("partition", "qos"):
        raise ConfigError("site.slurm_queue", raw["slurm_queue"], "expected partition or qos")
    raw["scheduler_options"] = tuple(check_directive("site.scheduler_options", d)
                                     for d in as_list("site.scheduler_options", raw.get("scheduler_options")))


def _check_queues(raw: dict[str, Any], path: Path) -> None:
    raw["queues"] = parse_queues(raw.get("queues"))
    raw["sources"] = tuple(str(x) for x in as_list("site.sources", raw.get("sources")))
    if raw["queues"] and raw.get("partition") and not any(q.name == raw["partition"] for q in raw["queues"]):
        raise ConfigError("site.queue", raw["partition"], f"not in the queue table of {path.name}; known: "
                          f"{', '.join(q.name for q in raw['queues'])}")


def check_no_second_environment(command: str) -> None:
    """A batch job runs the Python environment the sweep was launched from (its ``bin/`` first on
    ``PATH``, the worker started by that interpreter's path), so a ``worker_init`` that activates
    another one would only make ``python`` on ``PATH`` disagree with the ranks' interpreter."""
    words = command.split()
    if (len(words) == 2 and words[0] in ("source", ".") and words[1].endswith("/bin/activate")) or \
            (words[:2] == ["conda", "activate"] and words[2:] not in ([], ["base"])):
        raise ConfigError("site.worker_init", command, "activates a second Python environment: batch jobs run the "
                          "one the sweep is launched from (its bin/ first on PATH, after worker_init); drop the "
                          "line and launch scalestudy from that environment")


def load_site(name: str) -> SiteConfig:
    path = _site_path(str(name))
    raw = _read(path)
    _check_machine(raw, path)
    _check_batch_settings(raw, path)
    _check_queues(raw, path)
    return SiteConfig(name=path.stem, **raw)


def check_allocation(prefix: str, allocation: Any, nodes: Any, provider: str, max_nodes: Any,
                     site_name: str) -> tuple[str, int]:
    """``allocation`` and ``allocation_nodes``, of a site file (``prefix`` "site.") or a sweep ("")."""
    if allocation not in ALLOCATIONS:
        raise ConfigError(f"{prefix}allocation", allocation, f"expected {' or '.join(ALLOCATIONS)}")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 0:
        raise ConfigError(f"{prefix}allocation_nodes", nodes, "expected an integer >= 1 (0: the sweep's largest run)")
    if isinstance(max_nodes, int) and nodes > max_nodes:
        raise ConfigError(f"{prefix}allocation_nodes", nodes, f"site {site_name} allows at most {max_nodes} nodes")
    if allocation == "packed" and not SCHEDULERS[provider].batch_jobs:
        raise ConfigError(f"{prefix}allocation", allocation, f"site {site_name} has no batch jobs to pack runs into "
                          "(its runs start on this host, one at a time)")
    return allocation, nodes


def with_overrides(site: SiteConfig, account: Any = None, queue: Any = None, walltime: Any = None,
                   allocation: Any = None, allocation_nodes: Any = None) -> SiteConfig:
    """The site with the sweep's own account, queue, walltime or allocation (validated like the site's)."""
    changes: dict[str, Any] = {}
    if allocation is not None or allocation_nodes is not None:
        changes["allocation"], changes["allocation_nodes"] = check_allocation(
            "", site.allocation if allocation is None else allocation,
            site.allocation_nodes if allocation_nodes is None else allocation_nodes,
            site.provider, site.max_nodes, site.name)
        if allocation_nodes is not None and changes["allocation"] != "packed":
            raise ConfigError("allocation_nodes", allocation_nodes, f"only a packed sweep uses it, and site "
                              f"{site.name} allocates per_size: add allocation=packed")
    if account is not None:
        changes["account"] = check_name("account", account)
    if queue is not None:
        changes["partition"] = check_name("queue", queue)
        changes["queue_pinned"] = True
        if site.queues and not any(q.name == queue for q in site.queues):
            raise ConfigError("queue", queue, f"not in site {site.name}'s queue table; known: "
                              f"{', '.join(q.name for q in site.queues)}")
    if walltime is not None:
        changes["walltime"] = check_walltime("walltime", walltime)
        if site.max_walltime and walltime_seconds(walltime) > walltime_seconds(site.max_walltime):
            raise ConfigError("walltime", walltime, f"site {site.name} allows at most {site.max_walltime}")
    return dataclasses.replace(site, **changes) if changes else site
