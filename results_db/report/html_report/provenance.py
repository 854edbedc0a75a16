"""Where a study's numbers came from, as the runs recorded it.

Every value here was stored with the runs when they were planned (the project's git
commit and whether the tree was dirty, the orchestrator's package versions, the site)
or when they were ingested (the workload's torch / mpi4py / MPI library, hosts, batch
job ids): the report states what was, not what this machine has now. The one value
of today is the database the report was read from, and its password never appears.
"""

from __future__ import annotations

from workloads.plural import counted

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata

import pandas as pd
from sqlalchemy import Engine

from results_db.analysis.binding import flagged_runs
from results_db.analysis.nccl import SocketRuns, socket_runs
from results_db.store import query
from results_db.store.connect import safe_url

_COLUMNS = ["run_id", "status", "site", "git_commit", "git_dirty", "environment", "versions", "job_id", "hosts",
            "device", "gpu_model", "gpus", "data_path_used", "nccl_network"]
_JOB_IDS_SHOWN = 40


@dataclass
class Provenance:
    database: str                                         # the URL, password masked
    generated_at: str
    generator: str                                        # the scalestudy that wrote the report
    commits: list[tuple[str, str, int]] = field(default_factory=list)   # (commit, "clean"/"dirty"/"unknown", runs)
    sites: list[tuple[str, int]] = field(default_factory=list)
    packages: list[tuple[str, str, str]] = field(default_factory=list)   # (package, versions, where recorded)
    mpi_libraries: list[tuple[str, int]] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)
    job_ids_more: int = 0
    warnings: list[str] = field(default_factory=list)    # what makes some runs' numbers not the machine's


def _versions(values) -> str:
    counts = Counter(v for v in values if v)
    return ", ".join(f"{v} ({counted(n, 'run')})" if len(counts) > 1 else str(v) for v, n in counts.most_common()) or "-"


def _generator() -> str:
    try:
        return f"scalestudy {metadata.version('scalestudy')}"
    except metadata.PackageNotFoundError:
        return "scalestudy"


def collect(engine: Engine, study: str, db_url: str, where=None) -> Provenance:
    """The provenance of every run of the selection (any state: a failed run has a commit too)."""
    runs = query.runs(engine, study=study, where=where, columns=_COLUMNS)
    prov = Provenance(database=safe_url(db_url), generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                      generator=_generator())
    if runs.empty:
        return prov
    commits = Counter()
    for commit, dirty in zip(runs["git_commit"], runs["git_dirty"]):
        state = "unknown" if dirty is None or pd.isna(dirty) else ("dirty" if bool(dirty) else "clean")
        commits[(commit or "(not a git checkout)", state)] += 1
    prov.commits = [(c, s, n) for (c, s), n in commits.most_common()]
    prov.sites = Counter(runs["site"]).most_common()
    env = [e if isinstance(e, dict) else {} for e in runs["environment"]]
    ver = [v if isinstance(v, dict) else {} for v in runs["versions"]]
    names = sorted({k for e in env for k in e if k not in ("login_host", "cpus")})
    prov.packages = [(name, _versions(e.get(name) for e in env), "orchestrator (login node)") for name in names]
    for name in sorted({k for v in ver for k in v if k not in ("mpi_library", "host")}):
        prov.packages.append((name, _versions(v.get(name) for v in ver), "workload (compute nodes)"))
    if any(isinstance(v.get("host"), dict) for v in ver):   # the host's hardware, as its first rank read it
        from workloads.hardware import describe

        prov.packages.append(("host", _versions(describe(v.get("host")) for v in ver if v.get("host")),
                              "workload (compute nodes)"))
    prov.mpi_libraries = Counter(v["mpi_library"] for v in ver if v.get("mpi_library")).most_common()
    gpus = runs[runs["device"] == "cuda"] if "device" in runs else runs.iloc[0:0]
    if not gpus.empty:   # what GPUs, how many a run, how the gradients travelled
        prov.packages.append(("GPU", _versions(gpus["gpu_model"].where(gpus["gpu_model"].notna(), "not recorded")),
                              "workload (compute nodes)"))
        prov.packages.append(("GPUs per run", _versions(str(int(g)) if pd.notna(g) else "not recorded"
                                                         for g in gpus["gpus"]), "workload (compute nodes)"))
    used = [u for u in runs["data_path_used"].dropna()] if "data_path_used" in runs else []
    if used:
        prov.packages.append(("data path", _versions(used), "workload (compute nodes)"))
    networks = [n for n in runs["nccl_network"].dropna()] if "nccl_network" in runs else []
    if networks:
        prov.packages.append(("NCCL network", _versions(networks), "workload (compute nodes, NCCL's log)"))
    selected = set(int(i) for i in runs["run_id"])
    for found in socket_runs(engine, study):
        ids = tuple(i for i in found.run_ids if i in selected)
        if ids:
            prov.warnings.append(SocketRuns(found.study, found.plugin, ids).describe())
    # the binding audit (results_db/analysis/binding.py): where ranks ran against what the run meant
    for name, run_id, found in flagged_runs(engine, study):
        if run_id in selected:
            more = f"; and {len(found) - 1} more finding(s)" if len(found) > 1 else ""
            prov.warnings.append(f"binding of run {run_id}: {found[0]}{more} (runs.binding holds them all)")
    prov.hosts = sorted({h for hosts in runs["hosts"].dropna() for h in str(hosts).split(",") if h})
    logins = sorted({e["login_host"] for e in env if e.get("login_host")})
    if logins:
        prov.packages.append(("login host", ", ".join(logins), "orchestrator (login node)"))
    jobs = sorted({str(j) for j in runs["job_id"].dropna() if str(j)})
    prov.job_ids, prov.job_ids_more = jobs[:_JOB_IDS_SHOWN], max(0, len(jobs) - _JOB_IDS_SHOWN)
    return prov
