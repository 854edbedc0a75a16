"""A site as the performance model sees it: its hosts (for the crowding term) and its network.

``perf_model`` reads no site files (``perf_model.machine``); the commands and the sweep
hand it these, built here from the site YAML.
"""

from __future__ import annotations

from perf_model.machine import Host, Network

from ..errors import ConfigError
from .config import SiteConfig, load_site


def network_of(site: SiteConfig) -> Network | None:
    net = site.network
    return None if net is None else Network(net.latency_seconds, net.node_bandwidth_bytes, net.describe())


def host_of(site: SiteConfig) -> Host:
    """The site's hosts as the model's oversubscription term sees them: hardware threads
    each (what the OS schedules ranks on: cores x threads_per_core), and whether every rank
    of a run shares one (a site without batch jobs runs on this host; ``shared_host: true``:
    local_slurm's virtual nodes)."""
    return Host(int(site.max_threads_per_node), not site.scheduler.batch_jobs or bool(site.shared_host))


def host_of_site_name(name: str) -> Host | None:
    """``host_of`` the site a stored run named, or None where its site YAML is gone."""
    try:
        return host_of(load_site(name))
    except (ConfigError, OSError, ValueError):
        return None
