"""The CPUs a rank may use: its affinity, its cgroup's cpuset and its cgroup's CPU quota.

``os.cpu_count()`` is the whole host. A scheduler confines a job to part of it with cgroups
(Slurm's ``task/cgroup`` sets a cpuset, ``docker --cpus`` and Kubernetes limits a CPU quota),
and a launcher's binding narrows each rank's affinity further. Each rank records all three in
its ``run_start`` (``cpu_record``) so that the binding audit (``results_db.analysis.binding``), the host
load and the CPU peak behind MFU (``flops.total_peak``) count the CPUs a run could use, not the
host's.

- affinity: ``os.sched_getaffinity(0)`` (within the cgroup's cpuset, narrowed by ``taskset`` or
  the launcher's binding);
- cpuset: the CPUs of the process's cgroup (cgroup v2 ``cpuset.cpus.effective``; v1
  ``cpuset.effective_cpus``), the nearest ancestor that has the file;
- quota: CPU time per second the cgroup may take (v2 ``cpu.max`` "quota period", ``max``: none;
  v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``, -1: none), the smallest over the cgroup and
  its ancestors (the kernel enforces each level). Ranks in one cgroup share its quota.

The readers take the cgroup mount and ``/proc/self/cgroup`` as arguments: the tests point them at
a stand-in tree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Iterable, Mapping

from .metrics import cpu_affinity, numa_nodes

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def cpulist(text: str) -> set[int]:
    """``0-3,8,10-11`` as a set of CPU numbers (the kernel's cpulist format)."""
    out: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if part:
            low, _, high = part.partition("-")
            out.update(range(int(low), int(high or low) + 1))
    return out


def memberships(text: str) -> dict[str, str]:
    """``/proc/self/cgroup`` as {controller: path}; cgroup v2's single line under ``""``."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            out[""] = path
        for controller in controllers.split(","):
            if controller:
                out[controller] = path
    return out


def _ancestors(path: str) -> list[str]:
    """``/a/b`` -> ``/a/b``, ``/a``, ``/``: a cgroup and the ones above it."""
    p = PurePosixPath(path if path.startswith("/") else "/" + path)
    return [str(p)] + [str(a) for a in p.parents]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _v2_quota(directory: Path) -> float | None:
    text = _read(directory / "cpu.max")
    if not text:
        return None
    quota, _, period = text.partition(" ")
    if quota == "max":
        return None
    return int(quota) / int(period or 100000)


def _v1_quota(directory: Path) -> float | None:
    quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
    if quota is None or period is None or int(quota) < 0:
        return None
    return int(quota) / int(period)


@dataclass(frozen=True)
class CpuGrant:
    cpuset: int | None           # CPUs in the cgroup's cpuset; None where no cpuset file could be read
    quota: float | None          # CPUs' worth of time the quota allows; None where there is none
    quota_cgroup: str | None     # the cgroup whose quota binds (ranks in one cgroup share it)


def read_grant(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> CpuGrant:
    """What this process's cgroups grant it: cpuset size and CPU quota (cgroup v2 or v1)."""
    where = memberships(_read(proc_cgroup) or "")
    unified = (root / "cgroup.controllers").is_file()
    if unified:   # cgroup v2 mounted at root: one hierarchy
        path = where.get("", "/")
        quota_dirs = cpuset_dirs = [(a, root / a.lstrip("/")) for a in _ancestors(path)]
        read_quota, cpuset_file = _v2_quota, "cpuset.cpus.effective"
    else:         # cgroup v1: one mount per controller (``cpu,cpuacct`` or ``cpu``; ``cpuset``)
        cpu_mount = next((root / name for name in ("cpu,cpuacct", "cpu") if (root / name).is_dir()), root / "cpu")
        quota_dirs = [(a, cpu_mount / a.lstrip("/")) for a in _ancestors(where.get("cpu", "/"))]
        cpuset_dirs = [(a, root / "cpuset" / a.lstrip("/")) for a in _ancestors(where.get("cpuset", "/"))]
        read_quota, cpuset_file = _v1_quota, "cpuset.effective_cpus"
    quota, quota_cgroup = None, None
    for name, directory in quota_dirs:
        try:
            found = read_quota(directory)
        except ValueError:
            found = None
        if found is not None and (quota is None or found < quota):
            quota, quota_cgroup = found, name
    cpuset = None
    for _, directory in cpuset_dirs:
        text = _read(directory / cpuset_file) or (None if unified else _read(directory / "cpuset.cpus"))
        if text:
            try:
                cpuset = len(cpulist(text))
            except ValueError:
                continue
            break
    return CpuGrant(cpuset, quota, quota_cgroup)


def cpu_record(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> dict[str, Any]:
    """The CPU fields of a rank's ``run_start``: affinity, NUMA nodes, the host's CPU count, the
    cgroup's cpuset size and CPU quota (each None where this machine does not say)."""
    cpus = cpu_affinity()
    grant = read_grant(root, proc_cgroup)
    return {"cpus": cpus, "numa": numa_nodes(cpus), "host_cpus": os.cpu_count(), "cgroup_cpus": grant.cpuset,
            "cpu_quota": grant.quota, "cpu_quota_cgroup": grant.quota_cgroup}


@dataclass(frozen=True)
class HostCpus:
    """The CPUs one host's ranks could use, from their ``run_start`` records."""
    cpus: frozenset[int]      # the union of the ranks' affinities (what the binding left them)
    granted: int              # CPUs the job was granted on the host: the cgroup's cpuset, else the host's count
    quota: float | None       # the CPU quota over the ranks (summed over distinct cgroups); None: not all had one

    @property
    def usable(self) -> float:
        """CPUs' worth the ranks could run on at once: their CPUs, capped by the quota."""
        return min(len(self.cpus), self.quota) if self.quota is not None else float(len(self.cpus))

    @property
    def allowed(self) -> float:
        """CPUs' worth the job may use on the host whatever the binding: the grant, capped by the quota."""
        return min(self.granted, self.quota) if self.quota is not None else float(self.granted)


def host_cpus(starts: Iterable[Mapping[str, Any]]) -> HostCpus:
    """One host's CPUs from its ranks' records (each with a ``cpus`` list)."""
    starts = list(starts)
    union = frozenset().union(*(frozenset(s.get("cpus") or ()) for s in starts))
    granted = max([int(s.get("cgroup_cpus") or s.get("host_cpus") or 0) for s in starts] + [len(union)])
    quotas: dict[str, float] = {}
    for i, s in enumerate(starts):
        if not isinstance(s.get("cpu_quota"), (int, float)):
            return HostCpus(union, granted, None)
        quotas[str(s.get("cpu_quota_cgroup") or f"rank {i}")] = float(s["cpu_quota"])
    return HostCpus(union, granted, sum(quotas.values()) if quotas else None)


def format_cpus(n: float) -> str:
    """2 as ``2``, 1.5 as ``1.5``: a quota may be a fraction of a CPU."""
    return f"{n:g}"
