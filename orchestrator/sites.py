"""Sites as data: load and validate ``site_configs/<name>.yaml``.

A site says how a machine is reached (provider, MPI launcher, account, queue) and
what it allows (max nodes, max walltime). It is validated in full at load, before
any run is built, so that a typo fails on the login node and not in a batch job
hours later. Every value that ends up in a batch script or a shell command is held
to a strict form here: names are plain words, flags are plain flags, and
``worker_init`` commands may expand ``$VAR`` but may not chain, redirect, pipe or
substitute commands.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError
from .queues import QueueLimits, parse_queues
from .site_network import NetworkSpec, parse_network

PROVIDERS = ("local", "slurm", "pbspro", "cobalt")
MPI_LAUNCHERS = ("mpiexec", "srun", "aprun")
# wheel: the MPI of the `mpich` wheel in this environment (laptops, CI, the local sites);
# system: the machine's own MPI (Cray MPICH and PALS/aprun/srun), loaded with `modules`
MPI_KINDS = ("wheel", "system")
# per_size: one batch job per node count of a sweep; packed: one batch job for the whole sweep
ALLOCATIONS = ("per_size", "packed")
_NOT_SITES = {"template"}

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}$")
WALLTIME_RE = re.compile(r"^(\d{1,3}):([0-5]\d):([0-5]\d)$")
# one shell word: plain characters, or $VAR / ${VAR} references; no quotes, no globs
WORD_RE = re.compile(r"^(?:[A-Za-z0-9_./:=@%+,~-]|\$[A-Za-z_][A-Za-z0-9_]*|\$\{[A-Za-z_][A-Za-z0-9_]*\})+$")
FLAG_RE = re.compile(r"^-{1,2}[A-Za-z0-9][A-Za-z0-9_.:=,/@+-]*$")
DIRECTIVE_WORD_RE = re.compile(r"^[A-Za-z0-9_./:=@%+,-]+$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MODULE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+/-]{0,127}$")
PATH_RE = re.compile(r"^/[A-Za-z0-9_./@+-]{1,1023}$")


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
    accelerators_per_node: int = 0   # GPUs per node (documentation and predictions; runs use device=)
    network: NetworkSpec | None = None   # interconnect, for model predict (site_network.py)

    @property
    def queue(self) -> str:
        return self.partition

    @property
    def max_threads_per_node(self) -> int:
        return self.cores_per_node * self.threads_per_core


def walltime_seconds(value: str) -> int:
    h, m, s = (int(x) for x in WALLTIME_RE.match(value).groups())
    return h * 3600 + m * 60 + s


def _site_dir() -> Path:
    return Path(str(resources.files("site_configs")))


def known_sites() -> list[str]:
    return sorted(p.stem for p in _site_dir().glob("*.yaml") if p.stem not in _NOT_SITES)


def _site_path(name: str) -> Path:
    if name.endswith((".yaml", ".yml")) or "/" in name:
        path = Path(name).expanduser()
        if not path.is_file():
            raise ConfigError("site", name, "no such site file")
        return path
    if name in _NOT_SITES or not NAME_RE.match(name) or not (_site_dir() / f"{name}.yaml").is_file():
        raise ConfigError("site", name, f"unknown site; known: {', '.join(known_sites())} (or a path to a YAML file)")
    return _site_dir() / f"{name}.yaml"


# -- value checks (also used for command-line overrides of account, queue, walltime) ---------

def check_name(field_name: str, value: Any) -> str:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise ConfigError(field_name, value, "expected a plain name (letters, digits, '_', '.', '@', '+', '-')")
    return value


def check_walltime(field_name: str, value: Any) -> str:
    if not isinstance(value, str) or not WALLTIME_RE.match(value):
        raise ConfigError(field_name, value, "expected HH:MM:SS")
    return value


def check_flags(field_name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(field_name, value, "expected a string of flags")
    for word in value.split():
        if not FLAG_RE.match(word):
            raise ConfigError(field_name, value, f"{word!r} is not a plain flag (like --mpi=pmi2)")
    return " ".join(value.split())


def check_command(field_name: str, value: Any) -> str:
    """A worker_init command: plain words and $VAR references, nothing the shell would chain or run."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(field_name, value, "expected a command")
    for word in value.split():
        if not WORD_RE.match(word):
            raise ConfigError(field_name, value, f"{word!r} holds shell metacharacters (; | & < > ` $( ) quotes "
                                                 "globs or newlines are refused; one command per item)")
    return " ".join(value.split())


def check_directive(field_name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(field_name, value, "expected a scheduler directive")
    words = value.split()
    if not FLAG_RE.match(words[0]) or not all(DIRECTIVE_WORD_RE.match(w) for w in words[1:]):
        raise ConfigError(field_name, value, "expected flags like --constraint=cpu or -l filesystems=home")
    return " ".join(words)


def check_env(field_name: str, value: Any) -> tuple[tuple[str, str], ...]:
    """``env``: a mapping of variable names to literal values (no expansion; quoted when exported)."""
    if value in (None, ""):
        return ()
    if not isinstance(value, dict):
        raise ConfigError(field_name, value, "expected a mapping NAME: value")
    out = []
    for name, val in value.items():
        if not isinstance(name, str) or not ENV_NAME_RE.match(name):
            raise ConfigError(f"{field_name}.{name}", val, "not an environment variable name")
        if isinstance(val, bool) or not isinstance(val, (str, int, float)) or any(c in str(val) for c in "\n\0"):
            raise ConfigError(f"{field_name}.{name}", val, "expected a one-line string or number")
        out.append((name, str(val)))
    return tuple(out)


def _check_module(value: Any) -> str:
    if not isinstance(value, str) or not MODULE_RE.match(value):
        raise ConfigError("site.modules", value, "expected a module name like cray-python/3.11.5")
    return value


def _positive_int(field_name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(field_name, value, "expected an integer >= 1")
    return value


def _list(field_name: str, value: Any) -> list:
    if value in (None, ""):
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise ConfigError(field_name, value, "expected a list")
    return value


def load_site(name: str) -> SiteConfig:
    path = _site_path(str(name))
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
    if raw["provider"] not in PROVIDERS:
        raise ConfigError("site.provider", raw["provider"], f"unsupported; known: {', '.join(PROVIDERS)}")
    if raw["mpi_launcher"] not in MPI_LAUNCHERS:
        raise ConfigError("site.mpi_launcher", raw["mpi_launcher"], f"unsupported; known: {', '.join(MPI_LAUNCHERS)}")
    if "accelerators_per_node" in raw:
        value = raw["accelerators_per_node"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError("site.accelerators_per_node", value, "expected an integer >= 0")
    raw["network"] = parse_network(raw.get("network"))
    for key in ("cores_per_node", "max_nodes", "max_concurrent_runs", "threads_per_core"):
        if key in raw:
            _positive_int(f"site.{key}", raw[key])
    if "max_runs_in_flight" in raw:
        value = raw["max_runs_in_flight"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError("site.max_runs_in_flight", value, "expected an integer >= 0 (0: no cap)")
    if "allocation" in raw or "allocation_nodes" in raw:
        raw["allocation"], raw["allocation_nodes"] = check_allocation(
            "site.", raw.get("allocation", "per_size"), raw.get("allocation_nodes", 0), raw["provider"],
            raw.get("max_nodes"), path.stem)
    for key in ("oversubscribe", "shared_host"):
        if key in raw and not isinstance(raw[key], bool):
            raise ConfigError(f"site.{key}", raw[key], "expected true or false")
    if "description" in raw and not isinstance(raw["description"], str):
        raise ConfigError("site.description", raw["description"], "expected a string")
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
    raw["worker_init"] = tuple(check_command("site.worker_init", c) for c in _list("site.worker_init", raw.get("worker_init")))
    if raw["provider"] == "local" and raw["mpi_launcher"] != "mpiexec":
        raise ConfigError("site.mpi_launcher", raw["mpi_launcher"], "the local site starts runs with mpiexec")
    if raw["provider"] == "local" and raw.get("max_concurrent_runs", 1) != 1:
        raise ConfigError("site.max_concurrent_runs", raw["max_concurrent_runs"], "the local site runs one run at a "
                          "time (its runs share this host's cores, and Hydra keeps one job's state per process)")
    if raw["provider"] == "local" and raw["worker_init"]:
        raise ConfigError("site.worker_init", list(raw["worker_init"]), "the local site runs no batch script, so "
                          "nothing would run these; set environment variables with env: instead")
    raw["env"] = check_env("site.env", raw.get("env"))
    raw["mpi"] = raw.get("mpi", "wheel")
    if raw["mpi"] not in MPI_KINDS:
        raise ConfigError("site.mpi", raw["mpi"], "expected wheel (this environment's mpich wheel) or system "
                          "(the machine's MPI, from modules)")
    if raw["mpi"] == "system" and raw["provider"] == "local":
        raise ConfigError("site.mpi", "system", "the local site starts runs with this environment's mpiexec")
    raw["modules"] = tuple(_check_module(m) for m in _list("site.modules", raw.get("modules")))
    if raw.get("libmpi"):
        if not isinstance(raw["libmpi"], str) or not PATH_RE.match(raw["libmpi"]):
            raise ConfigError("site.libmpi", raw["libmpi"], "expected an absolute path to libmpi.so.12 (plain characters)")
    if raw.get("slurm_queue", "partition") not in ("partition", "qos"):
        raise ConfigError("site.slurm_queue", raw["slurm_queue"], "expected partition or qos")
    if raw.get("select_options"):
        value = raw["select_options"]
        if raw["provider"] != "pbspro" or not isinstance(value, str) or \
                not all(DIRECTIVE_WORD_RE.match(w) for w in value.lstrip(":").split(":")):
            raise ConfigError("site.select_options", value, "expected PBS Pro select resources like system=polaris")
        raw["select_options"] = value.lstrip(":")
    raw["queues"] = parse_queues(raw.get("queues"), check_name, check_walltime)
    raw["sources"] = tuple(str(x) for x in _list("site.sources", raw.get("sources")))
    if raw["queues"] and raw.get("partition") and not any(q.name == raw["partition"] for q in raw["queues"]):
        raise ConfigError("site.queue", raw["partition"], f"not in the queue table of {path.name}; known: "
                          f"{', '.join(q.name for q in raw['queues'])}")
    raw["scheduler_options"] = tuple(check_directive("site.scheduler_options", d)
                                     for d in _list("site.scheduler_options", raw.get("scheduler_options")))
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
    if allocation == "packed" and provider == "local":
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
