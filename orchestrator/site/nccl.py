"""NCCL's network on a site: the ``nccl_network:`` block of a site YAML.

    nccl_network:
      plugin: AWS Libfabric        # what NCCL_NET forces, and the name NCCL logs ("Using network AWS Libfabric")
      enabled: true                # false: none of it is exported (ALCF: the plugin hangs some applications)
      library_path: [/soft/...]    # prepended to LD_LIBRARY_PATH (absolute paths; the plugin's, its deps')
      env: {NCCL_NET_GDR_LEVEL: PHB, FI_CXI_DISABLE_HOST_REGISTER: 1}   # literal values, quoted when exported
      source: "..."                # where the settings come from (required)

Without the plugin NCCL falls back to TCP sockets, which on Polaris ALCF measured ten times
slower (``site_configs/polaris.yaml`` cites the numbers). The batch job exports the block
after the site's modules and ``worker_init`` (``mpi.env.batch_environment``), so no module
overrides it, and names the site's plugin (``workloads.nccl_network.PLUGIN_ENV``) even when it
is turned off, so that a run that used sockets on such a site is flagged (``scalestudy status``,
the report).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .checks import NAME_RE, PATH_RE, check_env

KEYS = ("plugin", "enabled", "library_path", "env", "source")


@dataclass(frozen=True)
class NcclNetwork:
    plugin: str
    source: str
    enabled: bool = True
    library_path: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def exports(self) -> list[tuple[str, str]]:
        """(name, literal value) to export, in order: NCCL_NET first; nothing when turned off."""
        if not self.enabled:
            return []
        return [("NCCL_NET", self.plugin), *self.env]


def parse_nccl_network(value: Any) -> NcclNetwork | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConfigError("site.nccl_network", value, f"expected a mapping with {', '.join(KEYS)}")
    for key in value:
        if key not in KEYS:
            raise ConfigError(f"site.nccl_network.{key}", value[key], f"unknown key; known: {', '.join(KEYS)}")
    plugin = value.get("plugin")
    # NCCL's own names ("AWS Libfabric", "IB", "Socket"): plain words and single spaces
    if not isinstance(plugin, str) or len(plugin) > 64 or not all(NAME_RE.match(w) for w in plugin.split(" ")):
        raise ConfigError("site.nccl_network.plugin", plugin, "expected the network's name as NCCL logs it, "
                          "e.g. AWS Libfabric")
    enabled = value.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError("site.nccl_network.enabled", enabled, "expected true or false")
    paths = value.get("library_path") or []
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, list) or not all(isinstance(p, str) and PATH_RE.match(p) for p in paths):
        raise ConfigError("site.nccl_network.library_path", value.get("library_path"),
                          "expected absolute paths of plain characters (prepended to LD_LIBRARY_PATH)")
    env = check_env("site.nccl_network.env", value.get("env"))
    if any(name in ("NCCL_NET", "LD_LIBRARY_PATH") for name, _ in env):
        name = next(n for n, _ in env if n in ("NCCL_NET", "LD_LIBRARY_PATH"))
        raise ConfigError(f"site.nccl_network.env.{name}", dict(env)[name], "set by plugin: and library_path:")
    source = value.get("source")
    if not isinstance(source, str) or not source.strip():
        raise ConfigError("site.nccl_network.source", source, "expected where the settings come from")
    return NcclNetwork(plugin=plugin, source=source.strip(), enabled=enabled, library_path=tuple(paths), env=env)
