"""The runs' own files in an artifact, and its flat tables: what an evaluation committee reads
without the tool.

``runs/<run_id>/`` holds each run's files as its folder had them (``workloads.run_folder``): the
launch line actually run (``command.txt``), the spec, the batch job's exit and wall time, the
workload's log, the per-rank metrics and a command's per-rank output (a rank's binary timeline
stream is not copied: its events are the artifact's ``results.db.events/``). Each file is cut at
``FILE_CAP`` bytes (at a line, with a last line saying how much more there was) and the whole at
``TOTAL_CAP``: a fine-grain timeline or a chatty log must not make an artifact too large to
download, and the database keeps every number anyway. What was cut or left out is counted in the
README. Every file passes through ``scrub.text_scrubber``: no path, user or host of the user's.

``runs.csv`` and ``steps.csv`` are the runs and their steps as flat tables (one value a cell, the
configuration's parameters as ``params.<name>`` columns): what a reader with a spreadsheet opens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd
from sqlalchemy import Engine

from results_db.store import query
from workloads import run_folder

FILE_CAP = 4 << 20      # bytes of one packed run file (the rest cut, at a line, and said)
TOTAL_CAP = 64 << 20    # bytes of all packed run files of an artifact (runs past it left out, and said)
RUNS_FOLDER = "runs"


def caps_words() -> str:
    return f"each file cut at {FILE_CAP >> 20} MiB, {TOTAL_CAP >> 20} MiB in all"


@dataclass
class PackedRunFiles:
    files: int = 0
    bytes: int = 0
    cut: list[str] = field(default_factory=list)          # files cut at FILE_CAP
    left_out: list[int] = field(default_factory=list)     # runs whose files did not fit TOTAL_CAP
    missing: list[int] = field(default_factory=list)      # runs whose folder is not on this file system
    unreadable: list[str] = field(default_factory=list)   # files that could not be read, and why


def _run_folder_files(folder: Path) -> list[Path]:
    """The files of the run-folder contract, in its order (no other file of the folder: a user's
    checkpoint or data set is not the artifact's to carry)."""
    names = [run_folder.SPEC_FILE, run_folder.STARTED_FILE, run_folder.JOB_FILE, run_folder.FAILURE_FILE,
             run_folder.LOG_FILE, run_folder.REPORTED_RESULT_FILE, run_folder.RESULT_FILE]
    found = [folder / n for n in names if (folder / n).is_file()]
    for sub in (run_folder.METRICS_DIR, run_folder.OUTPUT_DIR):
        if (folder / sub).is_dir():
            # not a rank's binary event stream: its events are the artifact's results.db.events/
            # (the same events, compressed), and a binary file cannot be cut at a line or scrubbed
            found += sorted(p for p in (folder / sub).iterdir() if p.is_file() and p.suffix != ".arrows")
    return found


def _capped_text(path: Path) -> tuple[str, bool]:
    with open(path, "rb") as fh:
        data = fh.read(FILE_CAP + 1)
    if len(data) <= FILE_CAP:
        return data.decode("utf-8", errors="replace"), False
    size = path.stat().st_size
    kept = data[:FILE_CAP]
    kept = kept[: kept.rfind(b"\n") + 1] or kept
    return (kept.decode("utf-8", errors="replace")
            + f"[scalestudy artifact pack: cut here at {FILE_CAP >> 20} MiB; {size - len(kept)} bytes more "
              f"in the original]\n"), True


def pack_run_files(runs: pd.DataFrame, out: Path, scrub: Callable[[str], str]) -> PackedRunFiles:
    """Each run's files into ``out/runs/<run_id>/`` (module docstring), scrubbed, within the caps."""
    packed = PackedRunFiles()
    for row in runs.sort_values("run_id").to_dict("records"):
        run_id = int(row["run_id"])
        folder = Path(str(row.get("run_dir") or ""))
        if not row.get("run_dir") or not folder.is_dir():
            packed.missing.append(run_id)
            continue
        texts = []
        for path in _run_folder_files(folder):
            try:
                text, cut = _capped_text(path)
            except OSError as exc:   # unreadable (permissions, a file system gone): said, not fatal
                packed.unreadable.append(f"{run_id}/{path.relative_to(folder)} ({exc.strerror or exc})")
                continue
            texts.append((path.relative_to(folder), scrub(text), cut))
        size = sum(len(t.encode()) for _, t, _ in texts)
        if packed.bytes + size > TOTAL_CAP:
            packed.left_out.append(run_id)
            continue
        for rel, text, cut in texts:
            dest = out / RUNS_FOLDER / str(run_id) / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text, encoding="utf-8")
            packed.files += 1
            if cut:
                packed.cut.append(str(dest.relative_to(out)))
        packed.bytes += size
    return packed


def _flat(frame: pd.DataFrame) -> pd.DataFrame:
    """One value a cell: mappings and lists as JSON text (a spreadsheet cannot hold a dict)."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object and out[column].map(lambda v: isinstance(v, (dict, list))).any():
            out[column] = out[column].map(lambda v: json.dumps(v, sort_keys=True) if isinstance(v, (dict, list))
                                          else v)
    return out


def write_flat_tables(target: Engine, study: str, out: Path) -> tuple[int, int]:
    """``runs.csv`` and ``steps.csv`` from the artifact's own (scrubbed) database: (runs, steps)."""
    runs = query.runs(target, study=study, attempts="all")
    if "params" in runs:
        runs = query.expand_json(runs, "params")
    drop = [c for c in ("spec", "config", "environment", "versions", "binding") if c in runs]
    _flat(runs.drop(columns=drop)).to_csv(out / "runs.csv", index=False)
    steps = query.steps(target, [int(r) for r in runs["run_id"]])
    steps.to_csv(out / "steps.csv", index=False)
    return len(runs), len(steps)
