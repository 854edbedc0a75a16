"""How often a fit's band holds the study's own measured runs: the number ``scalestudy model
predict`` shows beside its band, measured on the study in hand instead of quoted from one
validation elsewhere (a figure of another machine and another study says nothing of this
one's).

Each finished built-in run of the algorithm is predicted at its own configuration (nodes,
ranks per node, batch, threads; the CPUs it was pinned to where fewer than the fit's host),
on the fit's own machine, and its measured throughput (``perf_model.measured``) is inside
or outside the band. Runs the fit saw are counted apart from runs added since: a band holds
the runs it was fitted on more often than new ones, and the line says which it measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine

from results_db.store import query

from .fit import is_constant_compute
from .machine import Host
from .measured import measured_throughput
from .predict import PredictError, predict


@dataclass(frozen=True)
class Coverage:
    band: float
    held: int          # runs whose measured throughput lies inside the band
    runs: int
    fitted_held: int   # of them, runs the fit saw
    fitted: int

    def line(self, algorithm: str) -> str:
        share = f"{self.band:.0%} band held {self.held} of this study's {self.runs} finished {algorithm} run(s) " \
                f"({self.held / self.runs:.0%})"
        new = self.runs - self.fitted
        if not new:
            return f"measured: the {share}, all of them runs the fit saw (in-sample: new runs land inside less often)"
        return (f"measured: the {share}: {self.fitted_held} of the {self.fitted} the fit saw, "
                f"{self.held - self.fitted_held} of the {new} run(s) since")


def band_coverage(engine: Engine, fit: dict[str, Any], study: str, algorithm: str, band: float) -> Coverage | None:
    """The band's coverage of ``study``'s finished runs of ``algorithm``; None where it cannot
    be measured: no bootstrap refits (the band is the point itself), or no run the fit can
    predict (another batch than a one-batch compute term's, no measured steps)."""
    if not fit.get("bootstrap"):
        return None
    runs = query.runs(engine, study=study, where="status=done")
    if runs.empty:
        return None
    runs = runs[(runs["algorithm"] == algorithm)
                & (runs.get("workload_kind", "builtin").fillna("builtin") == "builtin")]
    if runs.empty:
        return None
    measured = measured_throughput(engine, [int(i) for i in runs["run_id"]], fit["warmup"]).set_index("run_id")
    fitted_ids = set(int(i) for i in fit["run_ids"])
    bands: dict[tuple, tuple[float, float] | None] = {}
    held = count = fitted_held = fitted = 0
    for run in runs.itertuples():
        if int(run.run_id) not in measured.index:
            continue
        key = (int(run.nodes), int(run.workers_per_node), int(run.batch_size),
               max(int(run.threads_per_node) // int(run.workers_per_node), 1), _cpus(run))
        if key not in bands:
            bands[key] = _band_at(fit, algorithm, band, *key)
        if bands[key] is None:
            continue
        low, high = bands[key]
        inside = low <= float(measured.loc[int(run.run_id), "throughput"]) <= high
        saw = int(run.run_id) in fitted_ids
        held, count = held + inside, count + 1
        fitted_held, fitted = fitted_held + (inside and saw), fitted + saw
    return Coverage(band, held, count, fitted_held, fitted) if count else None


def _cpus(run) -> int:
    cpus = getattr(run, "host_cpus", None)
    return int(cpus) if cpus is not None and cpus == cpus else 0


def _band_at(fit: dict[str, Any], algorithm: str, band: float, nodes: int, wpn: int, batch: int, threads: int,
             cpus: int) -> tuple[float, float] | None:
    """(low, high) throughput of the band at one configuration, or None where the fit cannot
    predict it."""
    shape = fit["workloads"][algorithm]
    if is_constant_compute(fit["terms"].get("compute", {})) and (batch, threads) != \
            (shape["batch_size"], shape["threads_per_worker"]):
        return None
    fit = {**fit, "workloads": {**fit["workloads"],
                                algorithm: {**shape, "batch_size": batch, "threads_per_worker": threads}}}
    fit_host = Host.from_params(fit["terms"].get("oversubscription", {}).get("params", {}))
    # a run pinned to fewer CPUs than the fit's host crowded on those (as the fit counted it)
    host = Host(cpus, fit_host.one_host) if fit_host and 0 < cpus < fit_host.cpus else None
    try:
        [row] = predict(fit, algorithm, [nodes], wpn, None, band, host).to_dict("records")
    except PredictError:
        return None
    return row["throughput_low"], row["throughput_high"]
