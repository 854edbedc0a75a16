"""A study's runs sent to MLflow (``scalestudy export mlflow``), where ML groups browse and
compare their runs.

One MLflow experiment per study (``scalestudy/STUDY``); one MLflow run per attempt of each
finished run (``runs`` of every attempt, not only the latest): the run's axes and
``params.*`` as params, its headline numbers and ``metrics.*`` as metrics, rank 0's loss and
step time per step as metric history (``loss``, ``step_seconds``), and the site, batch job,
commit, run_key, attempt and status as tags. Exporting again adds nothing twice: an attempt
already in the experiment whole (tags ``scalestudy.run_key`` and ``scalestudy.attempt``, and
``scalestudy.complete``, set last) is skipped. Runs still pending or running are left for a
later export.

An export deletes only what it wrote itself: each names its runs with its own id
(``scalestudy.export``, set when the run is created), and one that fails midway deletes its
own runs without the completion tag. It never deletes another run of the experiment: a
user's own run, or another export's half-written one, since an export still writing and one
killed midway look the same from outside; such an attempt is sent again whole and the
half-written run is counted for the user to remove.

MLflow is an optional extra (``pip install 'scalestudy[mlflow]'``: the client,
``mlflow-skinny``); a sweep never needs it.
"""

from __future__ import annotations

import math
import os
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any, Iterable

import pandas as pd
from sqlalchemy.engine import Engine

from workloads.run_folder import STEP_PHASES
from workloads.spec import FIELDS

from results_db.store import query

EXPERIMENT_PREFIX = "scalestudy/"
RUN_KEY_TAG, ATTEMPT_TAG = "scalestudy.run_key", "scalestudy.attempt"
COMPLETE_TAG = "scalestudy.complete"   # set last: a run without it was cut off mid-export, and is redone
EXPORT_TAG = "scalestudy.export"       # set at creation: the export that owns the run (the only one to delete it)
COMPLETED_TAG = "scalestudy.completed_ns"   # set with COMPLETE_TAG: which of two exports' copies came first
UNFINISHED = ("pending", "running")
STATUS = {"done": "FINISHED", "cancelled": "KILLED"}      # everything else that ended: FAILED
PARAM_COLUMNS = tuple(f.name for f in FIELDS if f.identity and f.column and f.name not in ("params", "command")) + (
    "world_size", "global_batch_size")
BUILTIN_ONLY = {f.name for f in FIELDS if f.builtin_only}
METRIC_COLUMNS = ("throughput", "train_seconds", "wall_seconds", "steps", "final_top1", "final_loss", "host_load",
                  "gpu_peak_memory_mb", "gpu_utilization", "predicted_seconds")
TAG_COLUMNS = ("site", "job_id", "git_commit", "git_dirty", "status", "compute", "device", "run_dir")
_BATCH = 900   # MLflow's log_batch takes at most 1000 metrics, 100 params, 100 tags per call


class ExportError(ValueError):
    """The study, the tracking store or MLflow itself is not there: one line says which."""


@dataclass
class Exported:
    experiment: str
    added: int
    skipped: int
    unfinished: int
    half_written: int = 0   # runs other exports left without the completion tag: not ours to delete


def _client(tracking_uri: str):
    # MLflow's INFO lines ("Updating database tables") are not ours to print; read at its import
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise ExportError("MLflow is not installed: pip install 'scalestudy[mlflow]' (the mlflow-skinny client)") \
            from None
    if tracking_uri.startswith(("http://", "https://")):
        _reachable(tracking_uri)
    try:   # the client opens its store here: a bad scheme or an unwritable SQLite path fails now
        return MlflowClient(tracking_uri=tracking_uri)
    except Exception as exc:   # noqa: BLE001 - MLflow's own errors name the store's problem
        raise ExportError(f"--tracking-uri {tracking_uri}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _reachable(uri: str, timeout: float = 5.0) -> None:
    """An HTTP tracking server answers its health check, or one line says it does not
    (MLflow's own client would retry with back-off for minutes first)."""
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout):
            pass
    except urllib.error.HTTPError:
        return   # it answered: a server is there (a proxy may refuse /health)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ExportError(f"--tracking-uri {uri}: unreachable ({reason})") from None


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, (bool, str)):
        return float(value) if isinstance(value, bool) else None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _ms(stamp: Any) -> int | None:
    return int(pd.Timestamp(stamp).timestamp() * 1000) if _present(stamp) and not pd.isna(stamp) else None


def run_payload(run: pd.Series, history: pd.DataFrame) -> tuple[dict[str, str], dict[str, float], dict[str, str],
                                                                  list[tuple[str, float, int]]]:
    """(params, metrics, tags, metric history) of one attempt: what the export logs."""
    command = run.get("workload_kind") == "command"
    params = {c: str(run[c]) for c in PARAM_COLUMNS
              if c in run and _present(run[c]) and not (command and c in BUILTIN_ONLY)}
    if command and _present(run.get("command")):
        params["command"] = " ".join(map(str, run["command"])) if not isinstance(run["command"], str) \
            else run["command"]
    for key, value in (run.get("params") or {}).items():
        params[f"params.{key}"] = str(value)
    metrics = {c: x for c in METRIC_COLUMNS if c in run and (x := _number(run[c])) is not None}
    for key, value in (run.get("metrics") or {}).items():
        if (x := _number(value)) is not None:
            metrics[f"metrics.{key}"] = x
    tags = {f"scalestudy.{c}" if c in ("status", "run_dir") else c: str(run[c])
            for c in TAG_COLUMNS if c in run and _present(run[c])}
    tags.update({RUN_KEY_TAG: str(run["run_key"]), ATTEMPT_TAG: str(int(run["attempt"])),
                 "scalestudy.run_id": str(int(run["run_id"])), "scalestudy.study": str(run["study"])})
    steps: list[tuple[str, float, int]] = []
    for _, row in history.iterrows():
        if (x := _number(row["loss"])) is not None:
            steps.append(("loss", x, int(row["step"])))
        if (x := _number(row["step_seconds"])) is not None:
            steps.append(("step_seconds", x, int(row["step"])))
    return params, metrics, tags, steps


def _rank0_history(engine: Engine, run_ids: list[int]) -> dict[int, pd.DataFrame]:
    steps = query.steps(engine, run_ids)
    if steps.empty:
        return {}
    first = steps[steps["rank"] == 0]
    # a step's seconds as reported, else the sum of its phases (as perf_model.measured reads them)
    phases = first[list(STEP_PHASES)].fillna(0.0).sum(axis=1)
    first = first.assign(step_seconds=first["seconds"].fillna(phases) if "seconds" in first else phases)
    return {int(r): g[["step", "loss", "step_seconds"]] for r, g in first.groupby("run_id")}


def _runs_of(client, experiment_id: str, where: str = ""):
    token = None
    while True:
        page = client.search_runs([experiment_id], filter_string=where, max_results=1000, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


def _exported(client, experiment_id: str) -> tuple[set[tuple[str, str]], int]:
    """The (run_key, attempt) pairs the experiment holds whole, and how many of our runs
    another export left half-written (sent again, not deleted: it may still be writing)."""
    seen, half = set(), 0
    for r in _runs_of(client, experiment_id):
        if r.data.tags.get(COMPLETE_TAG) == "true":
            seen.add((r.data.tags.get(RUN_KEY_TAG), r.data.tags.get(ATTEMPT_TAG)))
        elif RUN_KEY_TAG in r.data.tags:
            half += 1
    return seen, half


def _discard_own(client, experiment_id: str, export_id: str) -> None:
    """Delete this export's runs that lack the completion tag: found by the export's tag,
    so that a run whose creation reached the store but whose answer was lost goes too.
    Best effort: the store may be what failed."""
    try:
        for r in _runs_of(client, experiment_id, f"tags.`{EXPORT_TAG}` = '{export_id}'"):
            if r.data.tags.get(COMPLETE_TAG) != "true":
                client.delete_run(r.info.run_id)
    except Exception:   # noqa: BLE001 - the original error is the one to report
        pass


def _chunks(items: list, n: int = _BATCH) -> Iterable[list]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


def export_study(engine: Engine, study: str, tracking_uri: str, progress=None) -> Exported:
    """Send ``study``'s finished attempts to the tracking store at ``tracking_uri``."""
    runs = query.runs(engine, study=study, attempts="all")
    if runs.empty:
        raise ExportError(f"study {study!r}: no runs in this database")
    client = _client(tracking_uri)

    name = EXPERIMENT_PREFIX + study
    try:
        experiment = client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
        seen, half_written = _exported(client, experiment_id)
    except Exception as exc:   # noqa: BLE001 - MLflow's own errors name the store's problem
        raise ExportError(f"--tracking-uri {tracking_uri}: {_first_line(exc)}") from None
    ended = runs[~runs["status"].isin(UNFINISHED)]
    todo = ended[[(str(k), str(int(a))) not in seen for k, a in zip(ended["run_key"], ended["attempt"])]]
    history = _rank0_history(engine, [int(i) for i in todo["run_id"]])
    export_id = uuid.uuid4().hex
    added = 0
    for n, (_, run) in enumerate(todo.iterrows(), 1):
        try:
            added += _send_run(client, experiment_id, run, history.get(int(run["run_id"])), export_id)
        except BaseException as exc:   # a refused value, a lost store, Ctrl-C: our half-written run goes
            _discard_own(client, experiment_id, export_id)
            if not isinstance(exc, Exception):
                raise
            raise ExportError(f"run {int(run['run_id'])} ({run['run_key']}): MLflow refused it: {_first_line(exc)} "
                              f"({n - 1} run(s) of {len(todo)} sent; exporting again resumes)") from None
        if progress:
            progress(n, len(todo))
    return Exported(name, added, len(ended) - added, len(runs) - len(ended), half_written)


def _send_run(client, experiment_id: str, run: pd.Series, history: pd.DataFrame | None, export_id: str) -> bool:
    """One finished attempt as an MLflow run, tagged complete only once all of it is in; whether
    it stayed (False: another export's copy of the same attempt was complete first)."""
    from mlflow.entities import Metric, Param, RunStatus, RunTag

    if history is None:
        history = pd.DataFrame(columns=["step", "loss", "step_seconds"])
    params, metrics, tags, steps = run_payload(run, history)
    started, finished = _ms(run.get("started_at")) or _ms(run.get("created_at")), _ms(run.get("finished_at"))
    label = " ".join(f"{k}={run[k]}" for k in ("nodes", "workers_per_node", "batch_size") if k in run)
    made = client.create_run(experiment_id, start_time=started, tags={**tags, EXPORT_TAG: export_id, "mlflow.runName":
                             f"{label} #{int(run['attempt'])}"}, run_name=f"{label} #{int(run['attempt'])}")
    stamp = finished or started or 0
    all_metrics = [Metric(k, v, stamp, 0) for k, v in metrics.items()] + \
        [Metric(k, v, stamp, s) for k, v, s in steps]
    for chunk in _chunks([Param(k, v[:6000]) for k, v in params.items()], 100):
        client.log_batch(made.info.run_id, params=chunk)
    for chunk in _chunks(all_metrics):
        client.log_batch(made.info.run_id, metrics=chunk)
    client.set_terminated(made.info.run_id, status=RunStatus.to_string(
        getattr(RunStatus, STATUS.get(str(run["status"]), "FAILED"))), end_time=finished)
    client.log_batch(made.info.run_id, tags=[RunTag(COMPLETE_TAG, "true"), RunTag(COMPLETED_TAG, str(time.time_ns()))])
    return _keep_first(client, experiment_id, tags[RUN_KEY_TAG], tags[ATTEMPT_TAG], made.info.run_id)


def _keep_first(client, experiment_id: str, run_key: str, attempt: str, own: str) -> bool:
    """Two exports running at once can each send the same attempt. Of the complete copies, the
    first completed (then the smaller run id) stays; each export deletes only its own copy, and
    only when another complete one came first, so exactly one stays whichever checks first (a
    copy completed after this check carries a later stamp and deletes itself; the stamps are
    the exporting hosts' clocks)."""
    where = (f"tags.`{RUN_KEY_TAG}` = '{run_key}' and tags.`{ATTEMPT_TAG}` = '{attempt}' "
             f"and tags.`{COMPLETE_TAG}` = 'true'")
    copies = [(int(r.data.tags.get(COMPLETED_TAG, "0")), r.info.run_id) for r in _runs_of(client, experiment_id, where)]
    if not copies or min(copies)[1] == own:
        return True
    client.delete_run(own)
    return False
