"""Sites as data: load and validate ``site_configs/<name>.yaml``.

A site says how a machine is reached (provider, MPI launcher, account, queue) and
what it allows (max nodes). It is validated in full at load, before any run is
built, so that a typo fails on the login node and not in a batch job hours later.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError

PROVIDERS = ("local",)
MPI_LAUNCHERS = ("mpiexec", "srun", "aprun")
_NOT_SITES = {"template"}


@dataclass(frozen=True)
class SiteConfig:
    name: str
    provider: str
    mpi_launcher: str
    cores_per_node: int
    max_nodes: int
    description: str = ""
    max_concurrent_runs: int = 1
    worker_init: str = ""


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
    if name in _NOT_SITES or not (_site_dir() / f"{name}.yaml").is_file():
        raise ConfigError("site", name, f"unknown site; known: {', '.join(known_sites())} (or a path to a YAML file)")
    return _site_dir() / f"{name}.yaml"


def _positive_int(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(field, value, "expected an integer >= 1")
    return value


def load_site(name: str) -> SiteConfig:
    path = _site_path(str(name))
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError("site", str(path), f"not valid YAML ({exc.__class__.__name__})") from None
    if not isinstance(raw, dict):
        raise ConfigError("site", str(path), "expected a mapping of settings")
    site_name = path.stem
    fields = {f.name: f for f in dataclasses.fields(SiteConfig)}
    for key in raw:
        if key not in fields or key == "name":
            raise ConfigError(f"site.{key}", raw[key], f"unknown key in {path.name}; known: {', '.join(k for k in fields if k != 'name')}")
    for f in dataclasses.fields(SiteConfig):
        if f.name != "name" and f.default is dataclasses.MISSING and f.name not in raw:
            raise ConfigError(f"site.{f.name}", None, f"required in {path.name}")
    if raw["provider"] not in PROVIDERS:
        raise ConfigError("site.provider", raw["provider"], f"unsupported; known: {', '.join(PROVIDERS)}")
    if raw["mpi_launcher"] not in MPI_LAUNCHERS:
        raise ConfigError("site.mpi_launcher", raw["mpi_launcher"], f"unsupported; known: {', '.join(MPI_LAUNCHERS)}")
    for key in ("cores_per_node", "max_nodes", "max_concurrent_runs"):
        if key in raw:
            _positive_int(f"site.{key}", raw[key])
    for key in ("description", "worker_init"):
        if key in raw and not isinstance(raw[key], str):
            raise ConfigError(f"site.{key}", raw[key], "expected a string")
    return SiteConfig(name=site_name, **raw)
