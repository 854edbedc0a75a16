"""Ranks that share a core: the host term O(P) of a step (``terms.oversubscription_seconds``).

Emulated compute lets 8-64 ranks run on a 2-core laptop, and what they then measure is
partly the laptop: every rank that communicates or waits wants a core, and each exchange
waits for its peer's turn. The other terms describe a machine where a rank has its cores;
this one is fitted on what they leave unexplained in the study's own runs, so a fit made
on a crowded host predicts that host (the validation of RESULTS.md), and a prediction for
a site where every rank has a core (``Host.ranks_per_core`` <= 1) leaves it out.

The model package reads no site files: the caller says what a run's site's hosts are
(``host_of``: site name -> ``Host``), as ``scalestudy model fit`` does from the site YAML.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import pandas as pd

from .fit import FitError, Term, fit_oversubscription


@dataclass(frozen=True)
class Host:
    """A site's hosts as far as crowding goes: cores each, and whether every rank of a run
    lands on the same one (the ``local`` site: its "nodes" are this machine)."""
    cores: int
    one_host: bool

    def ranks_per_core(self, nodes: int, workers_per_node: int) -> float:
        ranks = nodes * workers_per_node if self.one_host else workers_per_node
        return ranks / max(self.cores, 1)

    def to_params(self) -> dict[str, float]:
        return {"cores_per_host": float(self.cores), "one_host": 1.0 if self.one_host else 0.0}

    @classmethod
    def from_params(cls, params: Mapping[str, float]) -> "Host | None":
        if "cores_per_host" not in params:
            return None
        return cls(int(params["cores_per_host"]), bool(params.get("one_host", 0.0)))


HostOf = Callable[[str], "Host | None"]


def residual_points(data, params: dict[str, Any], shapes: dict[str, dict[str, Any]], host_of: HostOf,
                    step_of: Callable[..., dict[str, float]]) -> tuple[pd.DataFrame, dict[str, Host]]:
    """One row per multi-rank run whose site's hosts are known: ``algorithm``, ``ranks``,
    ``ranks_per_core``, ``residual`` (its measured mean step less ``step_of``'s prediction
    from the other terms), and the hosts seen by site name."""
    if "allreduce" not in params and any(s.get("gradient_bytes") for s in shapes.values()):
        raise FitError("the oversubscription term needs the allreduce term (the other terms' prediction of a "
                       "multi-rank step)")
    rows, hosts = [], {}
    runs = data.runs.set_index("run_id")
    for run_id, measured in data.step_seconds.items():
        run = runs.loc[run_id]
        ranks, algorithm = int(run["world_size"]), str(run["algorithm"])
        if ranks < 2 or algorithm not in shapes:
            continue
        site = str(run["site"])
        if site not in hosts:
            hosts[site] = host_of(site)
        host = hosts[site]
        if host is None:
            continue
        nodes, wpn = int(run["nodes"]), int(run["workers_per_node"])
        shape = {**shapes[algorithm], "workers_per_node": wpn}
        predicted = step_of(params, shape, algorithm, ranks, nodes, None, None)["step"]
        rows.append({"run_id": int(run_id), "algorithm": algorithm, "ranks": ranks,
                     "ranks_per_core": host.ranks_per_core(nodes, wpn), "residual": float(measured) - predicted})
    return pd.DataFrame(rows, columns=["run_id", "algorithm", "ranks", "ranks_per_core", "residual"]), \
        {k: v for k, v in hosts.items() if v is not None}


def fit_for_study(data, params: dict[str, Any], shapes: dict[str, dict[str, Any]], host_of: HostOf,
                  step_of: Callable[..., dict[str, float]]) -> Term:
    """``fit.fit_oversubscription`` on the study's residuals, with the host it was fitted on
    (``cores_per_host``, ``one_host``) stored beside q: a prediction without ``--site`` is for
    that host."""
    points, hosts = residual_points(data, params, shapes, host_of, step_of)
    if not hosts:
        raise FitError("the hosts of the study's sites are unknown (no site YAML found for "
                       f"{', '.join(sorted(set(map(str, data.runs['site'])))) or 'its runs'}): "
                       "ranks per core cannot be told")
    term = fit_oversubscription(points)
    distinct = set(hosts.values())
    if len(distinct) > 1:
        return dataclasses.replace(term, notes=term.notes + (
            f"runs on sites with different hosts ({', '.join(sorted(hosts))}): give --site to predict",))
    return dataclasses.replace(term, params={**next(iter(distinct)).to_params(), **term.params})
