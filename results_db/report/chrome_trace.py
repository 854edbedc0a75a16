"""A run's timeline as Chrome trace-event JSON, the format Horovod's timeline uses and
Perfetto (ui.perfetto.dev) and ``chrome://tracing`` open.

Layout: one process per rank (``pid`` = rank, named "rank R"); in it one track (``tid``)
per phase (forward, backward, update, ...) and one per tensor or fused buffer for the
collectives (named "allreduce: NAME"), plus a "step" track holding each step as one slice
(``t_start`` to ``t_start`` + the step's seconds, from the steps table). Every event of the
run's SQL timeline (table ``events``) is one complete event (``"ph": "X"``; an event of no
duration, a gradient's ``grad_ready`` stamp, is an instant, ``"ph": "i"``) with its step,
bytes, tensor and, for fused collectives, the tensors in it and the rank's arrival as
``args``. Times are on the run's aligned clock (rank 0's, the workload aligned every rank
at start-up), in microseconds from the run's first timestamp; that origin, in Unix seconds,
is ``otherData.origin_unix_seconds``. Format: "Trace Event Format", Google, the document
linked from https://github.com/catapult-project/catapult/tree/main/tracing.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
from sqlalchemy.engine import Engine

from workloads.run_folder import STEP_PHASES

from results_db.store import query

STEP_TRACK = 0
US = 1e6


class TraceError(ValueError):
    """The run has nothing to draw, or does not exist: the message says which."""


def _step_seconds(steps: pd.DataFrame) -> np.ndarray:
    phases = steps[list(STEP_PHASES)].fillna(0.0).sum(axis=1)   # as perf_model.measured reads a step
    seconds = steps["seconds"] if "seconds" in steps else pd.Series(np.nan, index=steps.index)
    return seconds.fillna(phases).to_numpy(dtype=float)


def _track_of(phase: str, tensor: str) -> str:
    return f"allreduce: {tensor}" if phase == "allreduce" else phase


def chrome_trace(engine: Engine, run_id: int, steps: tuple[int, int] | None = None,
                 ranks: Sequence[int] | None = None) -> dict[str, Any]:
    """The trace of run ``run_id`` as a JSON-ready dict (``traceEvents`` and ``otherData``).

    ``steps=(first, last)`` (inclusive) and ``ranks`` keep a window: a 256-rank, 1,000-step run
    holds tens of millions of events, more than a trace viewer opens, and a window of steps is
    read from the run's event file alone (its row groups by step), not the whole run."""
    run, events, steps_in, window = _read_window(engine, run_id, steps, ranks)
    return _trace(run, run_id, events, steps_in, window)


def _read_window(engine: Engine, run_id: int, steps: tuple[int, int] | None,
                 ranks: Sequence[int] | None) -> tuple[pd.Series, pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """The run's row, its events and steps in the window, and the window as ``otherData`` names it;
    ``TraceError`` where there is no such run or nothing in the window."""
    runs = query.runs(engine, run_ids=[run_id], columns=["run_id", "run_key", "study", "algorithm", "world_size"])
    if runs.empty:
        raise TraceError(f"run {run_id}: no such run")
    events = query.events(engine, [run_id], steps=steps)
    step_rows = query.steps(engine, [run_id])
    if steps is not None:
        step_rows = step_rows[step_rows["step"].between(*steps)]
    if ranks is not None:
        events = events[events["rank"].isin(list(ranks))]
        step_rows = step_rows[step_rows["rank"].isin(list(ranks))]
    events, steps_in = events.reset_index(drop=True), step_rows.reset_index(drop=True)
    if events.empty and steps_in.empty:
        if steps is not None or ranks is not None:
            raise TraceError(f"run {run_id}: nothing recorded in {_window(steps, ranks)}")
        raise TraceError(f"run {run_id}: no timeline and no steps recorded (run it with timeline=true)")
    window = {"steps": list(steps) if steps is not None else "all",
              "ranks": sorted(int(r) for r in ranks) if ranks is not None else "all"}
    return runs.iloc[0], events, steps_in, window


def _window(steps: tuple[int, int] | None, ranks: Sequence[int] | None) -> str:
    said = [f"steps {steps[0]}-{steps[1]}"] if steps is not None else []
    if ranks is not None:
        said.append("rank(s) " + ",".join(str(r) for r in sorted(ranks)))
    return " of ".join(said)


def _trace(run: pd.Series, run_id: int, events: pd.DataFrame, steps: pd.DataFrame,
           window: dict[str, Any], origin: float | None = None) -> dict[str, Any]:
    step_end = steps["t_start"].to_numpy(dtype=float) + _step_seconds(steps) if not steps.empty else np.array([])
    starts = [a.min() for a in (events["t0"].to_numpy(dtype=float), steps["t_start"].to_numpy(dtype=float)) if a.size]
    origin = float(min(starts)) if origin is None else origin
    tracks: dict[tuple[int, str], int] = {}
    per_rank: dict[int, int] = {}      # tracks each rank has so far (0 is its step track)

    def tid(rank: int, name: str) -> int:
        key = (rank, name)
        if key not in tracks:
            per_rank[rank] = tracks[key] = per_rank.get(rank, 0) + 1
        return tracks[key]

    out: list[dict[str, Any]] = []
    for rank, step, t0, end in zip(steps["rank"].to_numpy(), steps["step"].to_numpy(),
                                   steps["t_start"].to_numpy(dtype=float), step_end):
        out.append({"name": f"step {int(step)}", "cat": "step", "ph": "X", "pid": int(rank), "tid": STEP_TRACK,
                    "ts": (t0 - origin) * US, "dur": max(end - t0, 0.0) * US, "args": {"step": int(step)}})
    columns = [events[c].to_numpy() for c in ("rank", "step", "tensor", "phase", "t0", "t1", "bytes")]
    fused = events["tensors"].to_numpy() if "tensors" in events else np.full(len(events), None)
    arrival = events["arrival"].to_numpy() if "arrival" in events else np.full(len(events), None)
    for rank, step, tensor, phase, t0, t1, nbytes, inside, arrived in zip(*columns, fused, arrival):
        args: dict[str, Any] = {"step": int(step), "bytes": int(nbytes), "tensor": str(tensor)}
        if inside is not None and not (isinstance(inside, float) and math.isnan(inside)):
            args["tensors"] = inside
        if arrived is not None and not (isinstance(arrived, float) and math.isnan(arrived)):
            args["arrival_us"] = (float(arrived) - origin) * US
        event = {"name": f"{phase} {tensor}" if tensor and tensor != "-" else str(phase), "cat": str(phase),
                 "pid": int(rank), "tid": tid(int(rank), _track_of(str(phase), str(tensor))),
                 "ts": (float(t0) - origin) * US, "args": args}
        if t1 > t0:
            event.update(ph="X", dur=(float(t1) - float(t0)) * US)
        else:
            event.update(ph="i", s="t")
        out.append(event)
    ranks = sorted(set(int(r) for r in steps["rank"]) | set(int(r) for r in events["rank"]))
    meta = _rank_meta(ranks)
    for (rank, name), number in tracks.items():
        meta.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": number, "args": {"name": name}})
    return {"traceEvents": meta + out, "displayTimeUnit": "ms",
            "otherData": {"run_id": int(run_id), "run_key": str(run["run_key"]), "study": str(run["study"]),
                          "algorithm": str(run["algorithm"]), "ranks": int(run["world_size"]),
                          "origin_unix_seconds": origin, "clock": "aligned to rank 0 at start-up",
                          "window": window}}


def write_chrome_trace(engine: Engine, run_id: int, path: Path, steps: tuple[int, int] | None = None,
                       ranks: Sequence[int] | None = None) -> int:
    """Write the trace (of a window, see ``chrome_trace``) to ``path``; returns the number of
    timeline events (steps excluded).

    The same trace as ``chrome_trace``'s dict, written as text an event a line: a dict and a
    ``json.dump`` per event took 13 s for a 10^6-event window here (``bench_trace_export.py``;
    ``chrome_trace`` keeps that form, for a caller who wants the dict), of which the events' own fields
    are a handful of numbers and a few distinct names. Here each distinct name, phase and fused
    list is escaped once, the numbers formatted by ``repr`` (what ``json`` writes for a float), and
    the lines joined in chunks (``tests/results_db/test_chrome_trace.py`` parses the file and
    compares it with the dict)."""
    run, events, steps_in, window = _read_window(engine, run_id, steps, ranks)
    # the steps and the metadata as the dict form has them (few); the events as text (many)
    starts = [a.min() for a in (events["t0"].to_numpy(dtype=float), steps_in["t_start"].to_numpy(dtype=float)) if a.size]
    origin = float(min(starts))
    head = _trace(run, run_id, events.iloc[0:0], steps_in, window, origin)
    shown = {e["pid"] for e in head["traceEvents"] if e["ph"] == "M"}
    ranks_only_in_events = sorted(set(int(r) for r in events["rank"]) - shown)
    chunks, tracks = _event_lines(events, origin)
    items = [json.dumps(e, separators=(",", ":")) for e in head["traceEvents"] + _rank_meta(ranks_only_in_events) + tracks]
    with open(path, "w") as f:
        f.write('{"traceEvents":[\n' + ",\n".join(items))
        for chunk in chunks:
            f.write((",\n" if items else "") + chunk)
            items = True
        f.write('\n],"displayTimeUnit":"ms","otherData":' + json.dumps(head["otherData"], separators=(",", ":")) + "}\n")
    return len(events)


def _rank_meta(ranks: Sequence[int]) -> list[dict[str, Any]]:
    out = []
    for rank in ranks:
        out += [{"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}},
                {"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}},
                {"name": "thread_name", "ph": "M", "pid": rank, "tid": STEP_TRACK, "args": {"name": "step"}}]
    return out


def _event_lines(events: pd.DataFrame, origin: float) -> tuple[list[str], list[dict[str, Any]]]:
    """The events as trace-event JSON (the layout of ``_trace``: a track per rank and phase, or
    per fused buffer's allreduce, numbered in order of first appearance), in chunks of text, and
    the thread-name records of those tracks."""
    if events.empty:
        return [], []
    rank = events["rank"].to_numpy(dtype=np.int64)
    phase = events["phase"].astype(str).to_numpy(dtype=object)
    tensor = events["tensor"].fillna("").astype(str).to_numpy(dtype=object)
    track = np.where(phase == "allreduce", "allreduce: " + tensor, phase)
    codes, uniques = pd.factorize(pd.MultiIndex.from_arrays([rank, track]))
    per_rank: dict[int, int] = {}
    tracks: dict[tuple[int, str], int] = {}
    for r, name in uniques:
        per_rank[int(r)] = tracks[(int(r), name)] = per_rank.get(int(r), 0) + 1
    tid = np.array([tracks[(int(r), n)] for r, n in uniques], dtype=np.int64)[codes].tolist()
    t0, t1 = events["t0"].to_numpy(dtype=float), events["t1"].to_numpy(dtype=float)
    ts, dur, instant = ((t0 - origin) * US).tolist(), ((t1 - t0) * US).tolist(), (t1 <= t0).tolist()
    step = events["step"].to_numpy(dtype=np.int64).tolist()
    nbytes = events["bytes"].to_numpy(dtype=np.int64).tolist()
    fused = events["tensors"].tolist() if "tensors" in events else [None] * len(events)
    arrived = events["arrival"].to_numpy(dtype=float) if "arrival" in events else np.full(len(events), np.nan)
    arrived_us, has_arrival = ((arrived - origin) * US).tolist(), (~np.isnan(arrived)).tolist()
    escaped: dict[str, str] = {}

    def esc(text: str) -> str:
        out = escaped.get(text)
        if out is None:
            out = escaped[text] = json.dumps(text)
        return out

    chunks, out = [], []
    for i, (r, p, t) in enumerate(zip(rank.tolist(), phase.tolist(), tensor.tolist())):
        args = f'"step":{step[i]},"bytes":{nbytes[i]},"tensor":{esc(t)}'
        inside = fused[i]
        if inside is not None and not (isinstance(inside, float) and inside != inside):
            args += f',"tensors":{esc(inside)}'
        if has_arrival[i]:
            args += f',"arrival_us":{arrived_us[i]!r}'
        kind = '"ph":"i","s":"t"' if instant[i] else f'"ph":"X","dur":{dur[i]!r}'
        name = esc(f"{p} {t}" if t and t != "-" else p)
        out.append(f'{{"name":{name},"cat":{esc(p)},"pid":{r},"tid":{tid[i]},"ts":{ts[i]!r},"args":{{{args}}},{kind}}}')
        if len(out) >= 100_000:
            chunks.append(",\n".join(out))
            out = []
    if out:
        chunks.append(",\n".join(out))
    meta = [{"name": "thread_name", "ph": "M", "pid": r, "tid": n, "args": {"name": name}}
            for (r, name), n in tracks.items()]
    return chunks, meta
