"""The warnings a figure carries on its face: what its data cannot tell.

- a partial grid (configurations with no finished run) and axes that moved together
  (``grid.py``): a comparison that is not the one its axis names;
- runs whose ranks shared cores: on their most crowded host, more threads than CPUs
  (``runs.host_load`` > 1, from the CPUs each rank recorded it could use), whatever the site
  is called (a laptop, the virtual nodes of ``local_slurm``, a user's own copy of either) and
  whether they computed or emulated: 4 ranks on 2 cores measure contention, not scaling. Runs
  recorded before ``host_load`` existed fall back to ``site=local`` and the cores the
  orchestrator recorded;
- emulated runs (``compute=emulated``): their forward and backward were sleeps drawn from
  another run's compute profile, and their communication ran for real on this machine; on a
  host their ranks crowd, what they show is that host as much as the algorithm.
"""

from __future__ import annotations

from workloads.plural import counted

import json
from typing import Sequence

import pandas as pd

from .data import StudyRuns, label_of, setting


def _environment(value) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def oversubscribed(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs whose ranks shared cores, with ``load`` (threads per CPU on the most crowded
    host): from ``host_load`` where the run recorded it, else (older runs) ``site=local`` runs
    whose ranks x threads per rank exceed the host cores the orchestrator recorded."""
    runs = runs.copy()
    recorded = runs["host_load"] if "host_load" in runs else pd.Series(float("nan"), index=runs.index)
    runs["load"] = recorded.astype(float)
    older = runs[runs["load"].isna() & (runs["site"] == "local")]
    if not older.empty and "environment" in older:
        cpus = pd.Series([_environment(e).get("cpus") for e in older["environment"]], index=older.index, dtype=float)
        threads = older["nodes"] * older["threads_per_node"]
        runs.loc[older.index, "load"] = (threads.where(threads > older["world_size"], older["world_size"])
                                         / cpus)
    return runs[runs["load"] > 1]


def oversubscription_note(sr: StudyRuns, run_ids: Sequence[int]) -> str | None:
    chosen = sr.runs[sr.runs["run_id"].isin(list(run_ids))]
    over = oversubscribed(chosen)
    if over.empty:
        return None
    who = "This run" if len(chosen) == 1 else f"All {counted(len(chosen), 'run')}" if len(over) == len(chosen) \
        else f"{len(over)} of these {counted(len(chosen), 'run')}"
    return (f"{who} ran up to {over['load'].max():.3g} threads per CPU on the most crowded host (up to "
            f"{int(over['world_size'].max())} ranks): the ranks shared cores, so these timings measure contention "
            "as much as the algorithm, not scaling.")


def _compute_kind(sr: StudyRuns, run_ids: Sequence[int], kind: str, verb: str) -> str | None:
    """Who among these runs ran ``compute=kind`` ("This run is", "3 of these 5 runs are"), or None."""
    chosen = sr.runs[sr.runs["run_id"].isin(list(run_ids))]
    if "compute" not in chosen:
        return None
    some = chosen[chosen["compute"] == kind]
    if some.empty:
        return None
    plural = "are" if verb == "is" else verb
    return f"This run {verb}" if len(chosen) == 1 else f"All {counted(len(chosen), 'run')} {plural}" if len(some) == len(chosen) \
        else f"{len(some)} of these {counted(len(chosen), 'run')} {plural}"


def emulation_note(sr: StudyRuns, run_ids: Sequence[int]) -> str | None:
    who = _compute_kind(sr, run_ids, "emulated", "is")
    if who is None:
        return None
    return (f"{who} emulated (compute=emulated): forward and backward slept times recorded on a real run and "
            "communication ran for real, on this machine; not a measurement of computing at that scale, and where "
            "the ranks shared a host's cores, a measurement of that host as much as of the algorithm.")


def padding_note(sr: StudyRuns, run_ids: Sequence[int]) -> str | None:
    """Runs with ``compute=padded``: computed for real, each step held to a profile's time."""
    who = _compute_kind(sr, run_ids, "padded", "")
    if who is None:
        return None
    return (f"{who.rstrip()} computed for real with padded compute (compute=padded): each step's forward and backward "
            "were held until they had lasted a profile's times (a paper's step, not this machine's), so their rates "
            "are the profile's plus what the step does besides; their losses and accuracies are measured.")


def grid_notes(sr: StudyRuns) -> list[str]:
    if sr.grid is None:
        return []
    notes = [sr.grid.missing_note(setting)] + sr.grid.coupled_notes(label_of)
    return [n for n in notes if n]


def figure_notes(sr: StudyRuns, run_ids: Sequence[int], compares_configurations: bool = True) -> list[str]:
    notes = grid_notes(sr) if compares_configurations else []
    extra = [oversubscription_note(sr, run_ids), emulation_note(sr, run_ids), padding_note(sr, run_ids)]
    return [*notes, *(n for n in extra if n)]
