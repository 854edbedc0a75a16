"""What a sweep's runs will take, by the study's model fit: the walltime to ask the queue for.

Only a fit of the same machine sets a walltime: every run it was fitted on must have run on
the sweep's site, computing for real (not emulated), on the sweep's device. A fit of emulated
runs on a laptop says nothing of a Polaris job's length, and a walltime it set too short
would kill the job; such a sweep gets a note saying why, and the site's walltime.

A run's predicted time is its start-up and evaluation overhead (measured on the fitted
study's runs) plus its steps times the predicted step time (``perf_model.predict``). A batch
job's walltime request is that time, times ``MARGIN``, plus ``PAD_SECONDS`` (the queue's
start-up, the job script), rounded up to 5 minutes: a job that outlives its walltime is
killed, one that asks too much waits longer and is charged no more (facilities charge the
time used), so the margin is generous.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..site.checks import walltime_seconds
from ..site.model_inputs import host_of, network_of
from ..site.queues import queue_for_walltime

MARGIN = 1.5
PAD_SECONDS = 300
ROUND_SECONDS = 300


MAX_REQUEST_SECONDS = 999 * 3600   # what HH:MM:SS with up to 3 hour digits holds


def walltime_request(seconds: float) -> str:
    """HH:MM:SS for a job predicted to take ``seconds``: with the margin and pad, rounded up."""
    total = int(math.ceil((seconds * MARGIN + PAD_SECONDS) / ROUND_SECONDS) * ROUND_SECONDS)
    total = min(total, MAX_REQUEST_SECONDS)
    return f"{total // 3600:02d}:{total % 3600 // 60:02d}:{total % 60:02d}"


def predicted_run_seconds(fit: dict[str, Any], algorithm: str, nodes: int, workers_per_node: int, steps: int,
                          network=None, batch_size: int | None = None, threads: int | None = None,
                          host=None) -> float | None:
    """A run's predicted seconds, or None where the fit cannot say (another algorithm, or a
    batch or thread count a one-batch compute term was not measured at)."""
    from perf_model.fit import is_constant_compute
    from perf_model.predict import PredictError, predict

    shapes = fit.get("workloads") or {}
    if algorithm not in shapes or "compute" not in fit["terms"]:
        return None
    shape = shapes[algorithm]
    if is_constant_compute(fit["terms"]["compute"]) and ((batch_size or shape["batch_size"]) != shape["batch_size"] or
                                          (threads or shape["threads_per_worker"]) != shape["threads_per_worker"]):
        return None
    if batch_size or threads:
        fit = {**fit, "workloads": {**shapes, algorithm: {**shape, "batch_size": batch_size or shape["batch_size"],
                                                           "threads_per_worker": threads or shape["threads_per_worker"]}}}
    try:
        [row] = predict(fit, algorithm, [nodes], workers_per_node, network, host=host).to_dict("records")
    except PredictError:
        return None
    return shape.get("overhead_seconds", 0.0) + steps * row["step_seconds"]


@dataclass
class SweepPrediction:
    """What the study's model fit predicts for a sweep's runs: seconds per run (None where it
    cannot say), the walltime request it implies, and a note for the user."""
    seconds: dict[int, float | None] = field(default_factory=dict)   # job idx -> predicted run seconds
    walltime: str = ""
    note: str = ""
    source: str = ""      # which fit
    fit_id: int | None = None


def _spec_steps(spec) -> int | None:
    """The steps a run will take, where the sweep says (``steps_per_epoch``); else None: a
    full epoch's steps depend on the data set and the global batch, which the fit does not
    know, and a guess here would set a walltime that kills the job."""
    return spec.epochs * spec.steps_per_epoch if spec.steps_per_epoch else None


def fitted_on(engine, run_ids) -> set[tuple[str, str, str]]:
    """(site, compute, device) of the runs a fit was made from."""
    from results_db.store.run_rows import run_rows

    rows = run_rows(engine, run_ids=list(run_ids), columns=["site", "compute", "device"])
    return {(str(site), str(compute or "real"), str(device or "cpu")) for site, compute, device in rows.rows}


def predict_sweep(db_url: str | None, site, indexed_specs: Sequence[tuple[int, Any]]) -> SweepPrediction:
    """Predicted run times of a sweep's runs from the newest model fit of their study, read
    without writing (no database file created, no schema migrated); empty when there is no
    fit. ``walltime``: the longest batch job's request (``allocation=per_size``: a job runs
    its node count's runs ``max_concurrent_runs`` at a time), capped at the site's
    max_walltime; empty unless every run has a prediction."""
    from results_db import connect
    from results_db.store.migrate import is_current
    from results_db.store.model_fits import latest_model_fit
    from results_db.store.connect import missing_sqlite_file, resolve_db_url

    out = SweepPrediction()
    if not indexed_specs or missing_sqlite_file(db_url) is not None:
        return out
    study = indexed_specs[0][1].study
    try:
        engine = connect(resolve_db_url(db_url), upgrade=False)
        try:
            fit = latest_model_fit(engine, study) if is_current(engine) else None
            fitted = fitted_on(engine, fit["run_ids"]) if fit and fit.get("workloads") else set()
        finally:
            engine.dispose()
    except Exception:  # noqa: BLE001 - a prediction is a help, never a reason to refuse a sweep
        return out
    if fit is None or not fit.get("workloads"):
        return out
    devices = {spec.device for _, spec in indexed_specs}
    wanted = {(site.name, "real", device) for device in devices}
    if not fitted or not fitted <= wanted or len(devices) > 1:
        shown = "; ".join(f"site {s}, compute={c}, device={d}" for s, c, d in sorted(fitted)) or "no runs"
        out.note = (f"model fit #{fit['id']} of study {study} was fitted on {shown}: not this sweep's machine "
                    f"(site {site.name}, compute=real, device={'/'.join(sorted(devices))}), so it sets no walltime "
                    f"or time limit here: walltime stays the site's {site.walltime}")
        return out
    network = network_of(site)
    for idx, spec in indexed_specs:
        steps = _spec_steps(spec)
        out.seconds[idx] = None if spec.algorithm not in fit["workloads"] or steps is None else predicted_run_seconds(
            fit, spec.algorithm, spec.nodes, spec.workers_per_node, steps, network, spec.batch_size,
            spec.threads_per_worker, host_of(site))
    known = [s for s in out.seconds.values() if s is not None]
    source = out.source = f"model fit #{fit['id']} of study {study}"
    out.fit_id = fit["id"]
    if len(known) < len(out.seconds):
        out.note = (f"predicted run times from {source}: {len(out.seconds) - len(known)} of {len(out.seconds)} runs "
                    "have none (no steps_per_epoch, or an algorithm, batch or thread count the fit did not measure); "
                    "walltime stays the site's")
        return out
    if not site.scheduler.batch_jobs or site.allocation == "packed":
        out.note = f"predicted run times from {source}"
        return out
    _ask_walltime(out, site, indexed_specs)
    return out


def _ask_walltime(out: SweepPrediction, site, indexed_specs: Sequence[tuple[int, Any]]) -> None:
    """The walltime the predicted run times ask of every batch job (``per_size``: a job runs its
    node count's runs one after another), where a queue takes it."""
    per_size: dict[int, float] = {}
    for idx, spec in indexed_specs:
        per_size[spec.nodes] = per_size.get(spec.nodes, 0.0) + out.seconds[idx]
    # each job's request, raised where a queue takes nothing shorter (Theta's default: 30 min)
    requests = [queue_for_walltime(site, n, walltime_request(total))[0].walltime for n, total in per_size.items()]
    wanted = max(requests, key=walltime_seconds)
    capped = ""
    if site.max_walltime and walltime_seconds(wanted) > walltime_seconds(site.max_walltime):
        wanted, capped = site.max_walltime, " (capped at the site's max_walltime: runs that outlast it get " \
                                            "another batch job)"
    refused = [n for n in per_size if queue_for_walltime(site, n, wanted)[2] and
               not queue_for_walltime(site, n, site.walltime)[2]]
    if refused:   # a prediction helps; it never makes a sweep the site's walltime would pass fail
        out.note = (f"predicted run times from {out.source}; the walltime they ask for, {wanted}, fits no queue for "
                    f"the {', '.join(map(str, sorted(refused)))}-node job(s): walltime stays the site's "
                    f"{site.walltime} (split the sweep by node count to ask each its own)")
        return
    out.walltime = wanted
    out.note = (f"walltime {out.walltime} per batch job from the predicted run times ({out.source}; the longest "
                f"job's runs x {MARGIN:g} + {PAD_SECONDS // 60} min, at least a queue's minimum){capped}; "
                "walltime=HH:MM:SS overrides it")
