"""The warnings a figure carries on its face: what its data cannot tell.

- a partial grid (configurations with no finished run) and axes that moved together
  (``grid.py``): a comparison that is not the one its axis names;
- ``site=local`` runs whose ranks and threads outnumber the host's cores: on a
  laptop, 4 ranks on 2 cores measure contention, not scaling. The host's cores are
  the ``cpus`` the orchestrator recorded in the run's environment (runs recorded
  before it did so carry no note: nothing is guessed);
- emulated runs (``compute=emulated``): their forward and backward were sleeps drawn
  from another run's compute profile, so they say what communication costs at that
  scale, not what this host computes.
"""

from __future__ import annotations

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
    """The ``site=local`` runs whose ranks x threads per rank exceed the recorded host cores,
    with ``cpus`` and ``threads`` (all ranks' threads: nodes x threads per node)."""
    local = runs[runs["site"] == "local"]
    if "compute" in local:   # an emulated rank sleeps instead of computing: its ranks share no compute
        local = local[local["compute"] != "emulated"]
    local = local.copy()
    if local.empty:
        return local.assign(cpus=[], threads=[])
    local["cpus"] = [_environment(e).get("cpus") for e in local["environment"]]
    local = local[local["cpus"].notna()]
    local["threads"] = local["nodes"] * local["threads_per_node"]
    return local[(local["threads"] > local["cpus"]) | (local["world_size"] > local["cpus"])]


def oversubscription_note(sr: StudyRuns, run_ids: Sequence[int]) -> str | None:
    chosen = sr.runs[sr.runs["run_id"].isin(list(run_ids))]
    over = oversubscribed(chosen)
    if over.empty:
        return None
    cores = sorted({int(c) for c in over["cpus"]})
    who = "This run" if len(chosen) == 1 else f"All {len(chosen)} runs" if len(over) == len(chosen) \
        else f"{len(over)} of these {len(chosen)} runs"
    return (f"{who} ran on site=local with up to {int(over['world_size'].max())} "
            f"ranks and {int(over['threads'].max())} threads on a host with {'/'.join(map(str, cores))} cores: "
            "the ranks oversubscribe the cores, so these timings measure contention, not scaling.")


def emulation_note(sr: StudyRuns, run_ids: Sequence[int]) -> str | None:
    chosen = sr.runs[sr.runs["run_id"].isin(list(run_ids))]
    if "compute" not in chosen:
        return None
    emulated = chosen[chosen["compute"] == "emulated"]
    if emulated.empty:
        return None
    who = "This run is" if len(chosen) == 1 else f"All {len(chosen)} runs are" if len(emulated) == len(chosen) \
        else f"{len(emulated)} of these {len(chosen)} runs are"
    return (f"{who} emulated (compute=emulated): forward and backward slept times recorded on a real run, "
            "communication ran for real; they show what communication costs at that scale, not this host's compute.")


def grid_notes(sr: StudyRuns) -> list[str]:
    if sr.grid is None:
        return []
    notes = [sr.grid.missing_note(setting)] + sr.grid.coupled_notes(label_of)
    return [n for n in notes if n]


def figure_notes(sr: StudyRuns, run_ids: Sequence[int], compares_configurations: bool = True) -> list[str]:
    notes = grid_notes(sr) if compares_configurations else []
    extra = [oversubscription_note(sr, run_ids), emulation_note(sr, run_ids)]
    return [*notes, *(n for n in extra if n)]
