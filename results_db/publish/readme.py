"""The artifact's README, written from the study, point by point as an artifact-evaluation checklist
asks (SC's and PPoPP's AD/AE appendices; the ACM badges Available, Functional, Reproduced): how to
get and install the software, the hardware as the ranks measured it, what each run costs, what to
expect with its tolerance, how to check and re-run, and what the folder holds."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pandas as pd

from results_db.analysis.reproduction import TOLERANCE
from results_db.stats import confidence

from .run_files import PackedRunFiles, caps_words

MEASURED = ("throughput", "rounds_per_second", "gradients_per_second", "train_seconds", "final_top1", "final_loss",
            "energy_joules", "mfu")


def _distinct(values) -> list:
    seen = []
    for v in values:
        if v is not None and v == v and v not in seen:
            seen.append(v)
    return seen


def _software(runs: pd.DataFrame) -> str:
    env = [e for e in runs.get("environment", []) if isinstance(e, dict)]
    repos = _distinct(e.get("repository") for e in env)
    commits = _distinct(runs.get("git_commit", []))
    dirty = any(bool(d) for d in runs.get("git_dirty", []) if d is not None and d == d)
    repo = repos[0] if repos else "REPOSITORY"
    commit = commits[0] if commits else "COMMIT"
    note = "" if repos else "\nNo repository was recorded with the runs (the checkout had no `origin`): ask the authors."
    note += "" if commits else "\nNo commit was recorded: the runs were not made from a git checkout."
    if len(commits) > 1:
        note += f"\nThe runs were made at {len(commits)} commits ({', '.join(c[:12] for c in commits)}); the first is shown."
    if dirty:
        note += "\nSome runs were made with uncommitted changes (`git_dirty`): that commit alone may not reproduce them."
    return f"""Repository: {repo}; commit: `{commit}`.{note}

    git clone {repo} scalestudy && cd scalestudy && git checkout {commit[:40]}
    bash scripts/setup-env.sh            # installs into .venv (Python >= 3.10; the README's first command)
    source .venv/bin/activate
    scalestudy artifact check PATH/TO/THIS/FOLDER"""


def _hardware(runs: pd.DataFrame, interconnect: dict[str, str]) -> str:
    from workloads.hardware import describe

    versions = [v for v in runs.get("versions", []) if isinstance(v, dict)]
    hosts = _distinct(describe(v["host"]) for v in versions if isinstance(v.get("host"), dict))
    lines = [f"- host: {h}" for h in hosts] or ["- host: not recorded (runs made before scalestudy recorded it, "
                                                 "or a command workload, whose ranks record nothing)"]
    gpus = _distinct(runs.get("gpu_model", []))
    drivers = _distinct(v.get("driver") for v in versions)
    lines.append(f"- GPU: {', '.join(map(str, gpus))}; driver {', '.join(map(str, drivers)) or 'not recorded'}"
                 if gpus else "- GPU: none used")
    cpus = _distinct(runs.get("host_cpus", []))
    if cpus:
        lines.append(f"- CPUs a host gave the runs: {', '.join(str(int(c)) for c in cpus)}")
    mpi = _distinct(v.get("mpi_library") for v in versions)
    if mpi:
        lines.append(f"- MPI library: {'; '.join(map(str, mpi))}")
    for site, words in sorted(interconnect.items()):
        lines.append(f"- interconnect ({site}, from its site file): {words}")
    nccl = _distinct(runs.get("nccl_network", []))
    if nccl:
        lines.append(f"- NCCL's network, from its log: {', '.join(map(str, nccl))}")
    return "\n".join(lines)


def _table(rows: list[list[str]], header: list[str]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(r) + " |" for r in rows])


def _elapsed(runs: pd.DataFrame) -> pd.Series:
    """Seconds each run held its allocation: started to finished (its whole MPI job, start-up
    included: what it costs), else the training loop's own wall time."""
    if "started_at" in runs and "finished_at" in runs:
        held = (pd.to_datetime(runs["finished_at"], utc=True) - pd.to_datetime(runs["started_at"], utc=True))
        held = held.dt.total_seconds()
    else:
        held = pd.Series(float("nan"), index=runs.index)
    return held.fillna(runs["wall_seconds"]) if "wall_seconds" in runs else held


def _number(x: float) -> str:
    """4 significant digits, never in exponent form below 10^7 (a table read by people)."""
    if x != x:
        return "-"
    if abs(x) >= 1000:
        return f"{x:.0f}" if abs(x) < 1e7 else f"{x:.3e}"
    return f"{x:.4g}"


def _expected(plain: pd.DataFrame, axes: list[str], metric: str | None) -> str:
    """Per configuration: what a run costs and what it measured, with its 95 % interval."""
    done = plain[plain["status"] == "done"] if "status" in plain else plain
    done = done.assign(elapsed=_elapsed(done))
    if done.empty:
        return "No run finished: nothing to expect."
    keys = axes or ["nodes"]
    rows = []
    for key, group in done.groupby(keys, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        wall = group["elapsed"].dropna()
        nodes = float(group["nodes"].iloc[0]) if "nodes" in group else float("nan")
        cost = (f"{wall.mean():.3g} s, {wall.mean() * nodes / 3600:.2g} node-hours" if len(wall) else "not recorded")
        cell = "-"
        if metric and metric in group:
            values = group[metric].dropna().tolist()
            if values:
                mean = sum(values) / len(values)
                low, high = confidence.mean_interval(values) if len(values) >= 2 else (float("nan"), float("nan"))
                cell = _number(mean) + (f" [{_number(low)}, {_number(high)}]" if low == low else " (1 run)")
        rows.append([", ".join(f"{a}={v}" for a, v in zip(keys, key)), str(len(group)), cost, cell])
    return _table(rows, ["configuration", "runs", "a run: wall time, cost", f"{metric or 'metric'}: mean [95 %]"])


def _kept(files: PackedRunFiles, runs: int) -> str:
    """What of the runs' own files the artifact carries, and what its caps cut or left out."""
    return (f"{files.files} files of {runs - len(files.missing)} runs ({caps_words()}"
            + (f"; {len(files.cut)} cut" if files.cut else "")
            + (f"; runs {', '.join(map(str, files.left_out))} left out past the total" if files.left_out else "")
            + (f"; runs {', '.join(map(str, files.missing))} had no folder on the packing host" if files.missing else "")
            + (f"; unreadable, left out: {', '.join(files.unreadable)}" if files.unreadable else "")
            + ")")


def readme(study: str, runs: pd.DataFrame, copied, n_files: int, files: PackedRunFiles,
           interconnect: dict[str, str], tables: tuple[int, int]) -> str:
    from results_db.analysis.configuration import config_axes, hashable
    from results_db.store import query

    sites = sorted({str(s) for s in runs["site"].dropna()})
    states = runs["status"].value_counts().to_dict()
    plain = hashable(query.expand_json(runs, "params") if "params" in runs else runs)
    axes = [a for a in config_axes(plain) if a in plain and plain[a].nunique(dropna=False) > 1]
    swept = "\n".join(f"- `{a}`: {', '.join(str(v) for v in sorted(plain[a].dropna().unique(), key=str))}"
                      for a in axes) or "- (one configuration)"
    measured = [c for c in MEASURED if c in plain and plain[c].notna().any()]
    metric = measured[0] if measured else None
    site_arg = f" site={sites[0]}" if sites else ""
    # an account only where the runs were charged to one (a local site's were not)
    charged = "config" in runs and any(isinstance(c, dict) and c.get("account") for c in runs["config"])
    account_arg = " account=YOUR_PROJECT" if charged else ""
    total = _elapsed(plain).dropna().sum()
    kept = _kept(files, len(runs))
    return f"""# Artifact of study `{study}`

Written by `scalestudy artifact pack` on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC.

## Getting and installing the software

{_software(runs)}

`scalestudy artifact check` recomputes every file's SHA-256 against `manifest.json` and names any file
changed, missing or not in it: run it before reading anything.

## Hardware, as the runs' ranks measured it

{_hardware(runs, interconnect)}

## What was swept, what each run costs, what to expect

{swept}

Measured: {', '.join(measured) or 'nothing finished'}. Runs: {', '.join(f'{n} {s}' for s, n in states.items())};
{total / 3600:.2g} hours of allocation in all (each run's start to finish).

{_expected(plain, axes, metric)}

A re-run reproduces a configuration when its ratio to these runs, with its 95 % interval, lies
within ±{TOLERANCE:.0%} (`scalestudy artifact rerun --tolerance`); with fewer than
{confidence.MIN_REPEATS} repeats a side, or where the detectable change is larger than that, it says
"inconclusive" and why. The interval above is Student's t over the repeats; a configuration of one run has none.

## Checking and re-running it

    scalestudy artifact check .
    scalestudy artifact rerun . --dry-run          # what it would run and cost, nothing submitted
    scalestudy artifact rerun .                    # here, on this machine's site

On the original site: `scalestudy artifact rerun .{site_arg}{account_arg}`; on another:
`scalestudy artifact rerun . site=OTHER`. The runs go into a new study of your database and are compared
with these, configuration by configuration: reproduced, faster, slower, inconclusive, or not comparable,
with the reasons; the table and the report go to `reports/<new study>/`.

## What it holds

- `results.db` (SQLite): the study's {copied.rows.get('runs', 0)} runs (every attempt), their steps,
  evaluations, rounds and timelines ({n_files} event file(s) in `results.db.events/`), and model fits ({copied.fits}).
  Every reading command opens it: `scalestudy query --study {study} --db sqlite:///$PWD/results.db`
  (`SCALESTUDY_EVENTS_DIR`, if set, must be unset or point at `results.db.events/`).
- `runs.csv` ({tables[0]} runs) and `steps.csv` ({tables[1]} rank-steps): the same, flat, for a reader without the tool.
- `runs/<run id>/`: each run's own files: `command.txt` (the launch line run), `spec.json`, `job.json`,
  `workload.log`, `metrics/rank-<r>.jsonl`, a command's `output/rank-<r>.log`: {kept}. (A rank's
  timeline stream, `metrics/events-rank-<r>.arrows`, is not copied: its events are in `results.db.events/`.)
- `conf/study/run_<id>.yaml`: each run's configuration as it ran (values the run resolved, such as
  `device: auto`, as resolved); `sweeps.txt`: the sweep commands.
- `site/`: the site file(s) ({', '.join(sites) or 'none'}); `software.json`, `machine.json`: what ran it, and on what.
- `report/index.html`: the study's report, every figure redrawn from `results.db`.

Paths are relative to the runs' root (`<runs>`), the installation's (`<scalestudy>`, `<python-env>`) and
the home folder (`~`); hosts are named by role (`node0`, ..., `driver`): nothing of the packer's
places leaves unless packed with `--with-places`.
"""


def interconnect_of(site_files: dict[str, Any]) -> dict[str, str]:
    """What each packed site file says of its interconnect (its ``network`` block: latency,
    bandwidth, where they come from), read as YAML (the artifact's layer does not load sites)."""
    import yaml

    out: dict[str, str] = {}
    for site, path in sorted(site_files.items()):
        try:
            network = (yaml.safe_load(path.read_text()) or {}).get("network")
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        if isinstance(network, dict):
            stand_ins = set(network.get("stand_ins") or [])
            latency = f"latency {network.get('latency_us')} us"
            bandwidth = f"bandwidth {network.get('node_bandwidth_gbs')} GB/s per node"
            if "latency_us" in stand_ins:
                latency += " (a stand-in, unsourced)"
            if "node_bandwidth_gbs" in stand_ins:
                bandwidth += " (a stand-in, unsourced)"
            out[site] = f"{latency}, {bandwidth}; {network.get('source') or 'no source given'}"
    return out
