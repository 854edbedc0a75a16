"""A run's attempts in its folder: what an ended attempt leaves, and what its launcher said.

A retried or rerun run starts its next attempt in the same folder; the files of the one
that ended move to ``attempt-<its run id>/`` inside it, so nothing of it is overwritten.
The driver also reads here which batch job a started run is in, and what the launcher
said when a node failed under it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from workloads.run_folder import JOB_FILE, LOG_FILE, SPEC_FILE

# what a retried run's folder keeps in place; the rest of an attempt moves to attempt-<its run id>/
KEPT_IN_PLACE = (".hydra", SPEC_FILE, "scalestudy.log")
_NAMES_FAILED_NODE = re.compile(r"node failure on \S+", re.IGNORECASE)


def archive_attempt(run_dir: Path, run_id: int) -> Path:
    """Move what an ended attempt wrote in its run folder to ``attempt-<run id>/`` inside it, so
    that the next attempt starts clean and nothing of this one is overwritten."""
    target = run_dir / f"attempt-{run_id}"
    target.mkdir(exist_ok=True)
    for entry in run_dir.iterdir():
        if entry.name in KEPT_IN_PLACE or entry.name.startswith("attempt-"):
            continue
        entry.rename(target / entry.name)
    return target


def holds_an_attempt(folder: Path) -> bool:
    """Whether a run folder holds files of an attempt that has not been archived."""
    return folder.is_dir() and any(p.name not in KEPT_IN_PLACE and not p.name.startswith("attempt-")
                                   for p in folder.iterdir())


def batch_job_of(run_dir: Path) -> str | None:
    """The scheduler's id of the batch job a started run is in (None without batch jobs)."""
    try:
        record = json.loads((run_dir / JOB_FILE).read_text())
    except (OSError, ValueError):
        return None
    return str(record["job_id"]) if record.get("running") and record.get("job_id") else None


def node_failure(run_dir: Path) -> str:
    """What the launcher said about a failed node, if it did. srun's own line names the node
    ("srun: error: Node failure on n2"); the surviving nodes' slurmstepd lines ("STEP 1.0 ON n1
    CANCELLED ... DUE TO NODE FAILURE") name only themselves. The two come from different
    processes, so either may be written first: the line that names the failed node is put first
    whatever the order, and each distinct line is kept once."""
    try:
        lines = (run_dir / LOG_FILE).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    said = list(dict.fromkeys(line.strip() for line in lines if "node failure" in line.lower()))
    said.sort(key=lambda line: _NAMES_FAILED_NODE.search(line) is None)  # stable: log order otherwise
    return "".join(f"; {line}" for line in said[:3])
