"""Did a re-run reproduce the original? Per configuration, the two-study comparison
(``regression.compare_sets``: the change's interval, the log-ratio test, Holm across the
configurations) turned into a verdict a reader of an artifact wants, with the reasons:

- **faster** / **slower** (or better / worse): the change is significant, Holm held;
- **reproduced**: no significant change, and the change's 90 % interval lies within ±``tolerance``
  (an equivalence test: two one-sided tests at 5 %, Schuirmann 1987): "the same within 10 %"
  shown, not assumed from the absence of a difference;
- **inconclusive**: neither (too much noise for the tolerance: more repeats would decide);
- **not comparable**: a configuration one side did not run, or too few repeats to judge.

Reasons name what differs between the two sides' runs of the configuration: the site, the
project's commit, the library versions (torch, MPI), the hosts' CPUs, the data path.
"""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

from results_db.stats import confidence
from . import regression

REPRODUCED, INCONCLUSIVE, NOT_COMPARABLE = "reproduced", "inconclusive", "not comparable"
TOLERANCE = 0.10
_WHAT_DIFFERS = (("site", "site"), ("git_commit", "commit"), ("host_cpus", "CPUs per host"),
                 ("data_path_used", "data path"), ("gpu_model", "GPU"))


def _versions(runs: pd.DataFrame) -> set[str]:
    out = set()
    for v in runs.get("versions", pd.Series(dtype=object)):
        if isinstance(v, dict):
            out.add(", ".join(f"{k} {v[k]}" for k in ("torch", "mpi_library", "cuda", "nccl") if v.get(k)))
    return out


def _cpu_models(runs: pd.DataFrame) -> set[str]:
    """The hosts' CPU models, as the ranks read them (``workloads.hardware``)."""
    return {str(v["host"]["cpu_model"]) for v in runs.get("versions", pd.Series(dtype=object))
            if isinstance(v, dict) and isinstance(v.get("host"), dict) and v["host"].get("cpu_model")}


def reasons(a: pd.DataFrame, b: pd.DataFrame) -> str:
    """What differs between the two sides' runs (of one configuration, or of the whole studies)."""
    out = []
    for column, words in _WHAT_DIFFERS:
        if column in a and column in b:
            va, vb = {str(x) for x in a[column].dropna()}, {str(x) for x in b[column].dropna()}
            if va and vb and va != vb:
                out.append(f"{words}: {'/'.join(sorted(va))} then {'/'.join(sorted(vb))}")
    ca, cb = _cpu_models(a), _cpu_models(b)
    if ca and cb and ca != cb:
        out.append(f"CPU: {'/'.join(sorted(ca))} then {'/'.join(sorted(cb))}")
    va, vb = _versions(a), _versions(b)
    if va and vb and va != vb:
        out.append(f"software: {' / '.join(sorted(va))} then {' / '.join(sorted(vb))}")
    return "; ".join(out)


def compare_rerun(original: pd.DataFrame, rerun: pd.DataFrame, metric: str = "throughput",
                  tolerance: float = TOLERANCE, ignore: Sequence[str] = ()) -> pd.DataFrame:
    """One row per configuration: ``compare_sets``' columns, ``reproduction`` (the verdict) and
    ``why`` (the reasons, and for "not comparable" what is missing)."""
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance {tolerance!r}: a fraction between 0 and 1 (0.1: within 10 %)")
    table = regression.compare_sets(original, rerun, metric=metric, ignore=[*ignore, "study"])
    keys = [c for c in table.columns if c not in regression.COLUMNS]
    good, bad = confidence.words(True), confidence.words(False)
    verdicts, why = [], []
    for row in table.to_dict("records"):
        side_a = _match(original, keys, row)
        side_b = _match(rerun, keys, row)
        differs = reasons(side_a, side_b)
        if row["verdict"] in ("only in A", "only in B"):
            verdicts.append(NOT_COMPARABLE)
            why.append("only in the original" if row["verdict"] == "only in A" else "only in the re-run")
            continue
        if row["verdict"] in (confidence.TOO_FEW, confidence.NO_VARIATION):
            verdicts.append(NOT_COMPARABLE)
            why.append("; ".join(x for x in (row["verdict"], differs) if x))
            continue
        if row["verdict"] in (*good, *bad):
            verdicts.append(row["verdict"])
        else:
            est = confidence.ratio_estimate(_values(side_b, metric), _values(side_a, metric), level=0.90)
            inside = est.low >= 1 / (1 + tolerance) and est.high <= 1 + tolerance
            verdicts.append(REPRODUCED if inside else INCONCLUSIVE)
            if not inside:   # say why it could not decide, and what would
                said = [f"its 90 % interval {est.low:.3f}–{est.high:.3f} reaches beyond ±{tolerance:.0%}"]
                if row.get("detectable") == row.get("detectable") and row["detectable"] > tolerance:
                    said.append(f"these repeats detect ±{row['detectable']:.0%} at best: more repeats would decide")
                differs = "; ".join([*said, *([differs] if differs else [])])
        why.append(differs)
    table["reproduction"] = verdicts
    table["why"] = why
    table.attrs["tolerance"] = tolerance
    table.attrs["metric"] = metric
    return table


def _match(runs: pd.DataFrame, keys: Sequence[str], row: dict) -> pd.DataFrame:
    from .configuration import hashable
    from results_db.store.query import expand_json

    plain = hashable(expand_json(runs, "params") if "params" in runs.columns else runs)
    if "status" in plain:
        plain = plain[plain["status"] == "done"]
    keep = pd.Series(True, index=plain.index)
    for k in keys:
        value = row[k]
        if k in plain:
            keep &= plain[k].isna() if (value is None or (isinstance(value, float) and math.isnan(value))) \
                else plain[k] == value
    return runs.loc[plain.index[keep]]


def _values(runs: pd.DataFrame, metric: str) -> list[float]:
    return list(pd.to_numeric(runs[metric], errors="coerce").dropna()) if metric in runs else []


def counts(table: pd.DataFrame) -> str:
    c = table["reproduction"].value_counts()
    order = (REPRODUCED, "faster", "slower", "better", "worse", INCONCLUSIVE, NOT_COMPARABLE)
    return ", ".join(f"{c[v]} {v}" for v in order if v in c)
