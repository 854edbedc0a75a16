"""A job step's energy from Slurm's accounting, read on the login node when a run is ingested.

Slurm sums the energy its ``AcctGatherEnergyType`` plugin (RAPL, IPMI, Cray pm_counters,
NVML) gathered on every node of a step and stores it with the step's record when the step
ends: ``sacct -j JOB.STEP --format=ConsumedEnergyRaw`` (joules, all nodes together). Where
the cluster has no accounting storage, or gathers no energy, the value is missing with
Slurm's own reason; a zero or blank value is missing too, never a measurement of 0 J.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from typing import Callable

SACCT_FORMAT = "JobID,ConsumedEnergyRaw,ElapsedRaw,NNodes"
STEP_PATTERN = re.compile(r"\d+(?:_\d+)?\.\d+")
SACCT_TRIES, SACCT_WAIT_SECONDS = 4, 1.0   # the step's record is written as it ends: a short wait


@dataclass(frozen=True)
class StepEnergy:
    step: str
    joules: float | None      # None: unknown (``note`` says why)
    seconds: float | None
    nodes: int | None
    note: str | None = None


Runner = Callable[..., subprocess.CompletedProcess]


def _sacct(step: str, run: Runner) -> subprocess.CompletedProcess:
    return run(["sacct", "-j", step, "--noheader", "--parsable2", f"--format={SACCT_FORMAT}"],
               capture_output=True, text=True, timeout=30)


def _row(stdout: str, step: str) -> list[str] | None:
    for line in stdout.splitlines():
        fields = line.strip().split("|")
        if len(fields) >= 4 and fields[0] == step:
            return fields
    return None


def step_energy(step: str, run: Runner = subprocess.run, tries: int = SACCT_TRIES,
                wait: float = SACCT_WAIT_SECONDS) -> StepEnergy:
    """The joules Slurm accounted to ``step`` ("JOB.STEP"); missing, with the reason, where
    it accounted none."""
    if not STEP_PATTERN.fullmatch(step):
        return StepEnergy(step, None, None, None, f"slurm_step {step!r} is not JOB.STEP")
    note = "no record"
    for attempt in range(tries):
        if attempt:
            time.sleep(wait)
        try:
            done = _sacct(step, run)
        except FileNotFoundError:
            return StepEnergy(step, None, None, None, "sacct is not on this machine's PATH")
        except (OSError, subprocess.TimeoutExpired) as exc:
            return StepEnergy(step, None, None, None, f"sacct: {exc}")
        said = (done.stderr or "").strip() or (done.stdout or "").strip()
        if done.returncode != 0 or "accounting storage is disabled" in said:
            first = said.splitlines()[0] if said else f"exit code {done.returncode}"
            return StepEnergy(step, None, None, None, f"sacct: {first}")
        row = _row(done.stdout, step)
        if row is None:
            continue                          # not written yet: the step has just ended
        energy, elapsed, nodes = row[1].strip(), row[2].strip(), row[3].strip()
        seconds = float(elapsed) if elapsed.isdigit() else None
        count = int(nodes) if nodes.isdigit() else None
        try:
            joules = float(energy)
        except ValueError:
            joules = None
        if joules is None or joules <= 0 or joules >= 2**63 - 2:   # NO_VAL64 where no plugin gathered
            note = (f"Slurm accounted no energy to step {step} (ConsumedEnergyRaw {energy!r}): "
                    "the cluster gathers none (AcctGatherEnergyType)")
            return StepEnergy(step, None, seconds, count, note)
        return StepEnergy(step, joules, seconds, count)
    return StepEnergy(step, None, None, None, f"sacct has no record of step {step} ({note} after {tries} tries)")
