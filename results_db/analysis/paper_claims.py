"""What the papers state, beside what a study's runs measured: the report's "paper vs this run".

Each claim is one number a paper states (a speedup of one algorithm over another, an
accuracy), with its source (section, figure or table), its unit and the settings it was measured
at: data, one YAML per paper in ``papers/`` (beside the study presets that answer them), loaded
and checked here as a site file is.
``paper_vs_run`` finds, among a study's runs, those that match the claim's own axes
(algorithm, injected delay), and gives this run's number beside the paper's with the
settings that differ (ranks, model, emulated compute): a claim is compared, never assumed.

Our ``sync`` stands for the papers' synchronous SGD (Deep500's allreduce SGD and Horovod: ours
is Horovod's design, fused allreduces overlapped with backprop). A speedup's headline is in the
unit the paper measured: one process's steps per second (the gradients a process computed per
second: under ``apply_all`` and ``latest`` a late rank skips rounds, and the job's rounds per
second then overstate each process's steps), with rounds/s and gradients/s beside it, labelled;
a time to the target is a ratio of seconds, the baseline's over this mode's. A claim whose figure
the study was calibrated from (``calibration``: the compute time and learning rate chosen so that
sync matches it) says so, and is no result.
"""

from __future__ import annotations

from workloads.plural import counted

import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from results_db.stats import confidence

@dataclass(frozen=True)
class PaperClaim:
    study: str                     # the study preset that reproduces it (its study_name)
    source: str                    # paper, section / figure / table
    what: str                      # the claim in words
    metric: str                    # one of METRICS
    value: float
    match: dict[str, Any] = field(default_factory=dict)       # this run's axes that must equal these
    baseline: dict[str, Any] = field(default_factory=dict)    # speedup: the runs divided by
    settings: str = ""             # the paper's settings, in words
    target: float | None = None    # seconds_to_loss: the validation loss to reach
    unit: str = ""                 # the unit of value (METRICS)
    calibration: str = ""          # what the study took from this figure: then it is no result
    caveat: str = ""               # what of this run is not comparable with the paper's figure


# what a claim's number is, and its unit: "speedup" (rounds/s over the baseline's), "top1" (final
# test top-1), "rate" (rounds per second: the paper's steps/s), "seconds_to_loss" (wall seconds until
# the first evaluation at or below the claim's target validation loss; the runs' evaluations are needed)
METRICS = {"speedup": "x", "top1": "fraction", "rate": "steps/s", "seconds_to_loss": "s"}


class PaperClaimsError(ValueError):
    """A papers/ file that does not say a claim: one line naming the file, the claim and the field."""


def load_claims(folder: Path | None = None) -> tuple[PaperClaim, ...]:
    """Every claim of every paper in ``papers/`` (one YAML per paper: ``paper`` and ``claims``),
    checked as a site file is: an unknown or missing field, a metric or unit not declared, a
    match on no run field are refused with the file, the claim's number and the field."""
    folder = Path(str(resources.files("papers"))) if folder is None else Path(folder)
    out: list[PaperClaim] = []
    for path in sorted(folder.glob("*.yaml")):
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise PaperClaimsError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
        if not isinstance(data, dict) or set(data) != {"paper", "claims"} or not isinstance(data["claims"], list):
            raise PaperClaimsError(f"{path}: expected the keys paper and claims (a list)")
        out += [_claim(path, i, str(data["paper"]), entry) for i, entry in enumerate(data["claims"], 1)]
    return tuple(out)


_REQUIRED = {"study": str, "source": str, "what": str, "metric": str, "value": (int, float), "unit": str,
             "match": dict, "settings": str}
_OPTIONAL = {"baseline": dict, "target": (int, float), "calibration": str, "caveat": str}


def _claim(path: Path, number: int, paper: str, entry: Any) -> PaperClaim:
    from workloads.spec import FIELD

    where = f"{path.name}, claim {number}"
    if not isinstance(entry, dict):
        raise PaperClaimsError(f"{where}: expected a mapping of {', '.join(_REQUIRED)}")
    for key in entry:
        if key not in _REQUIRED and key not in _OPTIONAL:
            raise PaperClaimsError(f"{where}: unknown field {key!r}; known: {', '.join([*_REQUIRED, *_OPTIONAL])}")
    for key, kind in {**_REQUIRED, **_OPTIONAL}.items():
        if key not in entry:
            if key in _REQUIRED:
                raise PaperClaimsError(f"{where}: {key} is missing")
            continue
        if not isinstance(entry[key], kind) or isinstance(entry[key], bool):
            raise PaperClaimsError(f"{where}: {key}={entry[key]!r}: expected {getattr(kind, '__name__', 'a number')}")
    if entry["metric"] not in METRICS:
        raise PaperClaimsError(f"{where}: metric={entry['metric']!r}: expected one of {', '.join(METRICS)}")
    if entry["unit"] != METRICS[entry["metric"]]:
        raise PaperClaimsError(f"{where}: unit={entry['unit']!r}: a {entry['metric']} is in {METRICS[entry['metric']]!r}")
    for key in ("match", "baseline"):
        unknown = [axis for axis in entry.get(key, {}) if axis not in FIELD]
        if unknown:
            raise PaperClaimsError(f"{where}: {key}.{unknown[0]}: not a run field")
    if (entry["metric"] == "speedup") != ("baseline" in entry) or (entry["metric"] == "seconds_to_loss") != ("target" in entry):
        raise PaperClaimsError(f"{where}: a speedup names its baseline, a seconds_to_loss its target, and no other claim does")
    return PaperClaim(entry["study"], f"{paper}, {entry['source']}", entry["what"], entry["metric"], float(entry["value"]),
                      dict(entry["match"]), dict(entry.get("baseline", {})), entry["settings"],
                      float(entry["target"]) if "target" in entry else None, entry["unit"],
                      entry.get("calibration", ""), entry.get("caveat", ""))


CLAIMS = load_claims()


def loss_target(study: str) -> float | None:
    """The validation loss a study's paper measures time to (its ``seconds_to_loss`` claims'
    target), or None: the report's default target for that study's time to loss."""
    return next((c.target for c in CLAIMS if c.study == study and c.metric == "seconds_to_loss"), None)


def select_runs(runs: pd.DataFrame, match: dict[str, Any]) -> pd.DataFrame:
    keep = pd.Series(True, index=runs.index)
    for axis, value in match.items():
        if axis not in runs.columns:
            return runs.iloc[0:0]
        keep &= runs[axis] == value
    return runs[keep]


def settings_of(runs: pd.DataFrame) -> str:
    """This run's settings where they may differ from the paper's: ranks, model, data, compute,
    batch, the imbalance (how many of the ranks are delayed, and by how much) and the run's length
    in steps."""
    def values(axis: str) -> list[str]:
        if axis not in runs.columns or not runs[axis].notna().any():
            return []
        return sorted({str(v) for v in runs[axis].dropna()}, key=lambda v: (len(v), v))

    parts = [f"{name} {'/'.join(values(axis))}" for axis, name in (
        ("world_size", "ranks"), ("model", "model"), ("dataset", "data"), ("compute", "compute"),
        ("batch_size", "batch per rank"), ("epochs", "epochs")) if values(axis)]
    imbalance = _imbalance(runs)
    if imbalance:
        parts.append(imbalance)
    if values("steps"):
        parts.append(f"{'/'.join(values('steps'))} steps")
    return ", ".join(parts)


def _imbalance(runs: pd.DataFrame) -> str:
    """The injected imbalance in words, with the fraction of ranks it delays (1 of 8 here, where
    the paper's ResNet-50 delays 4 of 64)."""
    kinds = {str(k) for k in runs["imbalance_kind"].dropna()} if "imbalance_kind" in runs.columns else set()
    if len(kinds) != 1:
        return ""
    kind = kinds.pop()
    delays = sorted({f"{float(v):g}" for v in runs["imbalance_delay_ms"].dropna()}) \
        if "imbalance_delay_ms" in runs.columns else []
    ms = f"{'/'.join(delays)} ms" if delays else ""
    size = "/".join(sorted({str(int(v)) for v in runs["world_size"].dropna()})) if "world_size" in runs.columns else "?"
    if kind == "injected":
        k = "/".join(sorted({str(int(v)) for v in runs["imbalance_ranks"].dropna()})) \
            if "imbalance_ranks" in runs.columns else "1"
        return f"{k} of {size} ranks drawn each step, delayed {ms}"
    if kind == "fixed":
        return f"1 of {size} ranks delayed {ms} every step"
    if kind == "shifted":
        return f"every rank delayed up to {ms}, shifted each step"
    return "imbalance inherent in the data" if kind == "inherent" else f"imbalance {kind} {ms}".strip()


# -- this study's runs beside the claims ---------------------------------------------------------
#
# For a claim of one algorithm over another (a speedup), four ratios, each with its interval over
# the repeats (``confidence.ratio_estimate``: from 3 repeats a side; with fewer, the range of each
# repeat over the baseline's mean). The headline (``this_run``): one process's steps per second,
# the paper's steps/s (``process_steps``: under ``paper``, ``lockstep`` and sync every rank takes
# every step, so it equals rounds/s; under ``apply_all`` and ``latest`` a late rank skips rounds
# and takes fewer). Beside it: the job's rounds per second, its gradients per second, and time to
# the paper's target (a validation loss, or the baseline's stated top-1), the baseline's seconds
# over this mode's. A claim of a rate gives one process's steps/s too (its rounds/s beside it); a
# time or an accuracy, this run's mean with its range over the runs. Each eager-SGD claim is
# answered once per ``eager_catch_up`` mode the study ran: the paper's own mechanism and the
# extensions side by side.

COLUMNS = ["claim", "source", "mode", "paper", "this_run", "spread", "rounds", "gradients", "time_to_target", "runs",
           "paper_settings", "this_run_settings", "note", "metric"]


def _ratio_text(mine: pd.Series, base: pd.Series) -> tuple[float, str]:
    """(mean ratio, "1.48 [1.41, 1.55]" or "1.48 (1.40–1.57)") of ``mine`` over ``base``."""
    mine, base = mine.dropna(), base.dropna()
    if mine.empty or base.empty or base.mean() == 0:
        return math.nan, ""
    est = confidence.ratio_estimate(mine, base)
    if est.reason:
        return est.ratio, (f"{est.ratio:.2f} ({mine.min() / base.mean():.2f}–{mine.max() / base.mean():.2f}, "
                           f"{len(mine)}/{counted(len(base), 'run')}: {est.reason})")
    return est.ratio, f"{est.ratio:.2f} [{est.low:.2f}, {est.high:.2f}]"


def _seconds(runs: pd.DataFrame, evals: pd.DataFrame | None, target: tuple[str, float] | None) -> pd.Series:
    """Per run, seconds to the target (NaN: not reached, or no evaluations)."""
    from results_db.store.query import first_reaching

    if runs.empty or evals is None or target is None:
        return pd.Series(dtype=float)
    column, value = target
    reached = first_reaching(evals, [int(i) for i in runs["run_id"]], value, column)
    return reached.set_index("run_id")["seconds"].reindex([int(i) for i in runs["run_id"]])


def _modes(runs: pd.DataFrame, claim: PaperClaim) -> list[Any]:
    """The eager-SGD modes the study ran for this claim's eager algorithm (one None where the claim
    is not of eager-SGD, or the runs do not say)."""
    algorithm = claim.match.get("algorithm", "")
    if not str(algorithm).startswith("eager") or "eager_catch_up" not in runs.columns:
        return [None]
    found = sorted({m for m in select_runs(runs, claim.match)["eager_catch_up"].dropna()})
    return found or [None]


def study_target(study: str, runs: pd.DataFrame) -> tuple[str, float] | None:
    """What "time to the paper's target" means for this study: its claims' validation loss
    (``seconds_to_loss``), or the final top-1 a claim states for its baseline, where one does."""
    loss = next((c.target for c in CLAIMS if c.study == study and c.metric == "seconds_to_loss"), None)
    if loss is not None:
        return ("loss", loss)
    top1 = [c.value for c in CLAIMS if c.study == study and c.metric == "top1" and c.match.get("algorithm") == "sync"]
    return ("top1", top1[0]) if top1 else None


def paper_vs_run(runs: pd.DataFrame, study: str, evals: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per claim of ``study`` and eager-SGD mode (module docstring)."""
    target = study_target(study, runs)
    rows = []
    for claim in (c for c in CLAIMS if c.study == study):
        for mode in _modes(runs, claim):
            mine = select_runs(runs, claim.match)
            if mode is not None:
                mine = mine[mine["eager_catch_up"] == mode]
            row: dict[str, Any] = {"claim": claim.what, "source": claim.source, "mode": mode or "", "paper": claim.value,
                                   "this_run": math.nan, "spread": "", "rounds": "", "gradients": "",
                                   "time_to_target": "", "runs": len(mine), "paper_settings": claim.settings,
                                   "this_run_settings": settings_of(mine) if len(mine) else "", "note": "",
                                   "metric": claim.metric}
            if mine.empty:
                row["note"] = "no finished run"
            elif claim.metric == "speedup":
                base = select_runs(runs, {**{k: v for k, v in claim.match.items() if k != "algorithm"}, **claim.baseline})
                if base.empty:
                    row["note"] = "no finished run of the baseline"
                else:
                    row["this_run"], row["spread"] = _ratio_text(process_steps(mine), process_steps(base))
                    _, row["rounds"] = _ratio_text(_col(mine, "rounds_per_second"), _col(base, "rounds_per_second"))
                    _, row["gradients"] = _ratio_text(_col(mine, "gradients_per_second"),
                                                      _col(base, "gradients_per_second"))
                    t_mine, t_base = _seconds(mine, evals, target), _seconds(base, evals, target)
                    if len(t_mine.dropna()) and len(t_base.dropna()):   # seconds over seconds: the baseline's over this one's
                        _, row["time_to_target"] = _ratio_text(t_base, t_mine)
                    elif target is not None:
                        row["time_to_target"] = "not reached" if evals is not None and not _emulated(mine) else \
                            "not measured (emulated compute)"
            elif claim.metric == "rate":
                _mean_range(row, process_steps(mine), 2)
                r = _col(mine, "rounds_per_second").dropna()
                row["rounds"] = f"{r.mean():.2f} rounds/s ({r.min():.2f}–{r.max():.2f})" if len(r) else ""
            elif claim.metric == "seconds_to_loss":
                seconds = _seconds(mine, evals, ("loss", claim.target)).dropna()
                if seconds.empty:
                    row["note"] = "not measured (emulated compute computes no loss)" if _emulated(mine) else \
                        f"not reached ({counted(len(mine), 'run')})"
                else:
                    _mean_range(row, seconds, 1)
                    if len(seconds) < len(mine):
                        row["note"] = f"{len(seconds)} of {counted(len(mine), 'run')} reached it"
            else:   # top1
                values = mine["final_top1"].dropna() if "final_top1" in mine else pd.Series(dtype=float)
                if values.empty:
                    row["note"] = "not measured (emulated compute computes no accuracy)" if _emulated(mine) else \
                        "no accuracy recorded"
                else:
                    _mean_range(row, values, 3)
            notes = [n for n in (row["note"], claim.calibration and f"calibration, not a result: {claim.calibration}",
                                 claim.caveat) if n]
            row["note"] = "; ".join(notes)
            rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def process_steps(runs: pd.DataFrame) -> pd.Series:
    """One process's steps per second, the unit of the paper's steps/s: the gradients the job's
    computing ranks computed per second, per rank (the parameter server's rank computes none).
    Runs that recorded no gradient count (rows from before it was kept) give their rounds/s."""
    workers = _col(runs, "world_size")
    if "algorithm" in runs.columns:
        workers = workers - (runs["algorithm"] == "async_ps").astype(float)
    per = _col(runs, "gradients_per_second") / workers
    return per.where(per.notna(), _col(runs, "rounds_per_second"))


def _col(runs: pd.DataFrame, name: str) -> pd.Series:
    """A column of the runs as numbers (NaN where the runs lack it: older rows, made-up tables)."""
    return pd.to_numeric(runs[name], errors="coerce") if name in runs else pd.Series(math.nan, index=runs.index)


def _mean_range(row: dict, values: pd.Series, digits: int) -> None:
    values = values.dropna()
    if len(values):
        row["this_run"] = float(values.mean())
        row["spread"] = f"{values.min():.{digits}f}–{values.max():.{digits}f}"


def _emulated(runs: pd.DataFrame) -> bool:
    return "compute" in runs and bool((runs["compute"] == "emulated").all())
