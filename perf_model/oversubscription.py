"""Ranks that share a core: the host term O(P) of a step (``terms.oversubscription_seconds``).

Emulated compute lets 8-64 ranks run on a 2-core laptop, and what they then measure is
partly the laptop: every rank that communicates or waits wants a core, and each exchange
waits for its peer's turn (how many of a step's collectives find every rank waiting is the
algorithm's: ``terms.crowding_exposure``). The other terms describe a machine where a rank has its cores;
this one is fitted on what they leave unexplained in the study's own runs, so a fit made
on a crowded host predicts that host (the validation of RESULTS.md), and a prediction for
a site where every rank has a core (``Host.ranks_per_core`` <= 1) leaves it out.

The model package reads no site files: the caller says what a run's site's hosts are
(``host_of``: site name -> ``Host``), as ``scalestudy model fit`` does from the site YAML.
A run that recorded fewer CPUs for its ranks than the site's hosts have (``runs.host_cpus``:
pinned by ``taskset``, a launcher's binding or a cpuset) counts its ranks per core on those:
it was more crowded than the site file says, which is how a study of <= 8 ranks on a 2-core
host reaches the ranks per core of 16 (benchmarks/validate_model_runs.py). A run that
recorded more is counted on the site's, as a prediction for that site is, with a note.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import pandas as pd

from .fit import FitError, Term, fit_oversubscription
from .machine import Host
from .predict import step_parts
from .terms import crowding_exposure


HostOf = Callable[[str], "Host | None"]
COLUMNS = ["run_id", "algorithm", "ranks", "ranks_per_core", "exposure", "residual", "step"]


def residual_points(data, params: dict[str, Any], shapes: dict[str, dict[str, Any]], host_of: HostOf,
                    constant_compute: bool = False) -> tuple[pd.DataFrame, dict[str, Host], list[str]]:
    """One row per multi-rank run whose site's hosts are known: ``algorithm``, ``ranks``,
    ``ranks_per_core``, ``exposure`` (``terms.crowding_exposure``), ``residual`` (its
    measured mean step less ``predict.step_parts``' from the other terms, at the run's own
    batch, threads and placement; ranks per core on the CPUs the run recorded where fewer
    than the site's), ``step`` (the measured mean step); the hosts seen by site name; and
    notes on runs left out.
    ``constant_compute``: the compute term holds at the study's one batch size only, so runs
    at another are left out."""
    runs = data.runs.set_index("run_id")
    multi = [i for i in data.step_seconds.index if int(runs.loc[i, "world_size"]) > 1
             and str(runs.loc[i, "algorithm"]) in shapes]
    if not multi:
        raise FitError("need >= 1 multi-rank run to fit the oversubscription term")
    if "allreduce" not in params and any(shapes[str(runs.loc[i, "algorithm"])].get("gradient_bytes") for i in multi):
        raise FitError("the oversubscription term needs the allreduce term (the other terms' prediction of a "
                       "multi-rank step)")
    rows, hosts, unknown, off_batch, roomier = [], {}, set(), 0, set()
    for run_id in multi:
        run = runs.loc[run_id]
        site = str(run["site"])
        if site not in hosts:
            hosts[site] = host_of(site)
        host = hosts[site]
        if host is None:
            unknown.add(site)
            continue
        algorithm = str(run["algorithm"])
        nodes, wpn = int(run["nodes"]), int(run["workers_per_node"])
        seen = run.get("host_cpus")
        if seen is not None and pd.notna(seen) and 0 < int(seen) < host.cpus:
            # pinned to fewer CPUs than the site's hosts have: as crowded as it was. Never more:
            # predictions count ranks on the site's CPUs, and the fit must count as they do
            host = Host(int(seen), host.one_host)
        elif seen is not None and pd.notna(seen) and int(seen) > host.cpus:
            roomier.add(site)
        shape = {**shapes[algorithm], "workers_per_node": wpn, "batch_size": int(run["batch_size"]),
                 "threads_per_worker": max(int(run["threads_per_node"]) // wpn, 1)}
        for own in ("sync_every", "steps"):   # the run's own segment (its wait, averaging and exposure)
            if pd.notna(run.get(own)):
                shape[own] = int(run[own])
        if constant_compute and (shape["batch_size"], shape["threads_per_worker"]) != \
                (shapes[algorithm]["batch_size"], shapes[algorithm]["threads_per_worker"]):
            off_batch += 1     # a one-batch compute term says nothing of this run's compute
            continue
        measured = float(data.step_seconds[run_id])
        predicted = step_parts(params, shape, algorithm, int(run["world_size"]), nodes, None, None)["step"]
        segment = shape["sync_every"] or shape["steps"] or 1
        rows.append({"run_id": int(run_id), "algorithm": algorithm, "ranks": int(run["world_size"]),
                     "ranks_per_core": host.ranks_per_core(nodes, wpn),
                     "exposure": float(crowding_exposure(algorithm, int(run["world_size"]), segment)),
                     "residual": measured - predicted, "step": measured})
    notes = []
    if unknown:
        notes.append(f"runs of {', '.join(sorted(unknown))} left out: no site YAML says what their hosts are")
    if roomier:
        notes.append(f"runs of {', '.join(sorted(roomier))} recorded more CPUs than the site YAML's hosts have "
                     "(cores_per_node x threads_per_core): counted on the YAML's, as predictions are; "
                     "if the YAML is wrong for this machine, correct it")
    if off_batch:
        notes.append(f"{off_batch} run(s) at another batch or thread count than the one-batch compute term left out")
    return pd.DataFrame(rows, columns=COLUMNS), {k: v for k, v in hosts.items() if v is not None}, notes


def fit_for_study(data, params: dict[str, Any], shapes: dict[str, dict[str, Any]], host_of: HostOf,
                  constant_compute: bool = False) -> Term:
    """``fit.fit_oversubscription`` on the study's residuals, with the host it was fitted on
    (``cpus_per_host``, ``one_host``) stored beside q: a prediction without ``--site`` is for
    that host."""
    points, hosts, notes = residual_points(data, params, shapes, host_of, constant_compute)
    if not hosts:
        raise FitError("the hosts of the study's sites are unknown (no site YAML found for "
                       f"{', '.join(sorted(set(map(str, data.runs['site']))))}): ranks per core cannot be told")
    term = fit_oversubscription(points)
    term = dataclasses.replace(term, notes=term.notes + tuple(notes))
    distinct = set(hosts.values())
    if len(distinct) > 1:
        return dataclasses.replace(term, notes=term.notes + (
            f"runs on sites with different hosts ({', '.join(sorted(hosts))}): no host stored, so a prediction "
            "without --site has no crowding; give --site",))
    return dataclasses.replace(term, params={**next(iter(distinct)).to_params(), **term.params})
