"""The binding audit: where each rank of a run actually ran, against what its configuration meant.

Launcher binding mistakes are silent: every rank on one GPU, ranks pinned to the same cores, a
rank on the NUMA node far from its GPU, more threads than the cores it was granted. Each rank
records its host, CPU affinity (``os.sched_getaffinity``), its cgroup's cpuset size and CPU quota
(``workloads.cpu_grant``), NUMA nodes, thread count and GPU (UUID, PCI bus id, NUMA node) in its
``run_start``; ingestion checks them here and stores one line per finding in ``runs.binding`` (an
empty list: checked, nothing found; null: not recorded).

A host's CPUs are the ones the job was granted there: the cgroup's cpuset (Slurm confines a job
to its CPUs with one), capped by a CPU quota where the cgroup has one, not ``os.cpu_count()``
(records from before the grant was recorded fall back to the host's count). Findings:

- ranks confined by their binding to fewer CPUs than their threads, where the grant had enough;
- ranks bound to overlapping CPUs;
- a rank bound to fewer CPUs than its threads;
- oversubscription: more threads on a host than the CPUs its ranks may use (their CPUs, capped
  by the quota) while they are not bound apart (unbound, each free to run anywhere, or bound to
  overlapping sets); ranks bound apart show it as the rank(s) with more threads than CPUs;
- ranks sharing one GPU, and a GPU on another NUMA node than its rank's CPUs.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from workloads.cpu_grant import format_cpus, host_cpus

MAX_FINDINGS = 12


def _ranks(ranks: Iterable[int]) -> str:
    ranks = sorted(ranks)
    return f"ranks {', '.join(map(str, ranks[:-1]))} and {ranks[-1]}" if len(ranks) > 1 else f"rank {ranks[0]}"


def _cpus(cpus: Iterable[int]) -> str:
    """``0-3,8``: CPU numbers in the kernel's cpulist form."""
    cpus = sorted(set(cpus))
    parts, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            parts.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(parts)


def _threads(start: dict[str, Any]) -> int:
    return int(start.get("threads") or 1)


def _host_findings(host: str, ranks: list[dict[str, Any]]) -> list[str]:
    """The CPU findings of one host's ranks."""
    grant = host_cpus(ranks)
    union, threads = grant.cpus, sum(_threads(s) for s in ranks)
    allowed = grant.allowed
    quota = (f" under a CPU quota of {format_cpus(grant.quota)}" if grant.quota is not None
             and grant.quota < len(union) else "")
    bound = [len(s["cpus"]) < grant.granted for s in ranks]
    disjoint = all(not set(a["cpus"]) & set(b["cpus"]) for i, a in enumerate(ranks) for b in ranks[i + 1:])
    found: list[str] = []
    if len(ranks) > 1 and threads <= allowed:
        if threads > len(union):   # confined to fewer CPUs than their threads, where the grant had them
            found.append(f"{host}: {_ranks(s['rank'] for s in ranks)} share CPUs {_cpus(union)}: {threads} "
                         f"threads on {len(union)} CPU(s) of the {format_cpus(allowed)} granted")
        elif not all(set(s["cpus"]) == union for s in ranks):   # bound, and overlapping
            for i, a in enumerate(ranks):
                for b in ranks[i + 1:]:
                    shared = set(a["cpus"]) & set(b["cpus"])
                    if shared:
                        found.append(f"{host}: {_ranks((a['rank'], b['rank']))} share CPUs {_cpus(shared)}")
    if threads > grant.usable and threads > allowed and not (all(bound) and disjoint):
        how = "unbound" if not any(bound) else "not bound apart"
        who = (f"{_ranks(s['rank'] for s in ranks)} run" if len(ranks) > 1 else f"rank {ranks[0]['rank']} runs")
        found.append(f"{host}: {who} {threads} threads on the {format_cpus(grant.usable)} CPU(s) "
                     f"{'they' if len(ranks) > 1 else 'it'} may use ({_cpus(union)}{quota}), {how}: oversubscribed")
    for s, is_bound in zip(ranks, bound):
        if is_bound and _threads(s) > len(s["cpus"]):
            found.append(f"{host}: rank {s['rank']} runs {s['threads']} threads on {len(s['cpus'])} CPU(s) "
                         f"({_cpus(s['cpus'])})")
    return found


def audit(starts: list[dict[str, Any]], device: str = "cpu") -> list[str] | None:
    """One line per finding over the ranks' ``run_start`` records; None when no rank recorded
    its affinity (nothing to check, nothing guessed)."""
    recorded = [s for s in starts if isinstance(s.get("cpus"), list)]
    if not recorded:
        return None
    findings: list[str] = []
    by_host: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for start in recorded:
        by_host[str(start.get("host", "?"))].append(start)
    for host, ranks in by_host.items():
        findings += _host_findings(host, ranks)
    if device == "cuda":
        owners: dict[tuple[str, str], list[int]] = defaultdict(list)
        for s in starts:
            gpu = s.get("gpu") if isinstance(s.get("gpu"), dict) else None
            if gpu is None:
                continue
            ident = gpu.get("uuid") or gpu.get("pci_bus_id") or gpu.get("visible")
            if ident:
                owners[(str(s.get("host", "?")), str(ident))].append(int(s["rank"]))
            near, numa = gpu.get("numa_node"), s.get("numa")
            if isinstance(near, int) and isinstance(numa, list) and numa and near not in numa:
                findings.append(f"{s.get('host', '?')}: rank {s['rank']}'s GPU ({gpu.get('pci_bus_id')}) is on NUMA "
                                f"node {near}, its CPUs on {', '.join(map(str, numa))}")
        for (host, ident), ranks in owners.items():
            if len(ranks) > 1:
                findings.append(f"{host}: {_ranks(ranks)} share one GPU ({ident})")
    if len(findings) > MAX_FINDINGS:
        findings = findings[:MAX_FINDINGS] + [f"... and {len(findings) - MAX_FINDINGS} more"]
    return findings


def flagged_runs(engine, study: str | None = None) -> list[tuple[str, int, list[str]]]:
    """(study, run id, findings) of each latest attempt whose audit found something."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from results_db.store.schema import Run, Study

    stmt = (select(Study.name, Run.id, Run.binding).join(Study, Run.study_id == Study.id)
            .where(Run.latest.is_(True), Run.binding.is_not(None)).order_by(Study.name, Run.id))
    if study:
        stmt = stmt.where(Study.name == study)
    with Session(engine) as session:
        return [(name, run_id, list(found)) for name, run_id, found in session.execute(stmt)
                if isinstance(found, list) and found]
