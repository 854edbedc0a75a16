"""``scalestudy model export --format extrap``: a study's measurements as Extra-P reads them,
checked by loading the file with Extra-P itself (its own environment, ``.venv-extrap``, made
by ``scripts/install-extrap.sh``, which ``.ci/run`` runs) against the steps in SQL."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, scalestudy

EXTRAP_PYTHON = REPO / ".venv-extrap" / "bin" / "python"
needs_extrap = pytest.mark.skipif(not EXTRAP_PYTHON.exists(),
                                  reason="Extra-P not installed (bash scripts/install-extrap.sh)")
RANKS = (2, 4, 8, 16, 32)
WAIT = 0.004   # seconds of waiting per exchange: 4 ms x log2(P) per step

# Extra-P reading the file: per callpath, its coordinates and the mean of their repetitions
READ = """
import json, sys
from extrap.fileio.file_reader.jsonlines_file_reader import read_jsonlines_file
e = read_jsonlines_file(sys.argv[1])
out = {"parameters": [p.name for p in e.parameters], "callpaths": {}}
for (cp, metric), ms in e.measurements.items():
    out["callpaths"][cp.name] = {str(int(m.coordinate[0])): [m.mean, m.repetitions] for m in ms}
print(json.dumps(out))
"""


def _study(tmp_path: Path) -> str:
    from perf_synthetic import write_study
    from results_db import connect

    url = f"sqlite:///{tmp_path / 'x.db'}"
    configs = [(8, p) for p in RANKS] + [(8, 4), (8, 16)]   # two repetitions at 4 and 16 ranks
    write_study(connect(url), "syn", configs, comm_wait=lambda p, cpus: WAIT * math.log2(p))
    return url


def _rank0_means(url: str) -> dict[int, list[float]]:
    """Independently of the export: rank 0's mean step (sum of its phases) after 5 steps, per run, by ranks."""
    import sqlite3

    db = url.removeprefix("sqlite:///")
    sql = ("select r.world_size, avg(s.data + s.forward + s.backward + s.comm_wait + s.[update]) from steps s "
           "join runs r on r.id = s.run_id where s.rank = 0 and s.step >= 5 and r.status = 'done' group by s.run_id")
    out: dict[int, list[float]] = {}
    with sqlite3.connect(db) as con:
        for p, mean in con.execute(sql):
            out.setdefault(int(p), []).append(mean)
    return out


@needs_extrap
@pytest.mark.sweep
def test_extrap_reads_what_the_model_is_fitted_on(tmp_path):
    url = _study(tmp_path)
    out = tmp_path / "syn.jsonl"
    proc = scalestudy("model", "export", "--study", "syn", "--format", "extrap", "--out", str(out), "--db", url,
                      cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"{out}: 7 run(s) of study syn" in proc.stdout
    read = subprocess.run([str(EXTRAP_PYTHON), "-c", READ, str(out)], capture_output=True, text=True, timeout=120)
    assert read.returncode == 0, read.stderr
    got = json.loads(read.stdout)
    assert got["parameters"] == ["p"]   # batch and threads do not vary here: not parameters
    assert set(got["callpaths"]) == {"sync", "sync->compute", "sync->update", "sync->other"}
    expected = _rank0_means(url)
    step = got["callpaths"]["sync"]
    assert sorted(map(int, step)) == list(RANKS)
    for p, means in expected.items():
        mean, repetitions = step[str(p)]
        assert repetitions == len(means)        # a run is one repetition
        assert mean == pytest.approx(sum(means) / len(means), rel=1e-9)
    # the parts add up to the step, point by point
    for p in RANKS:
        parts = sum(got["callpaths"][f"sync->{k}"][str(p)][0] for k in ("compute", "update", "other"))
        assert parts == pytest.approx(step[str(p)][0], rel=1e-9)


@needs_extrap
@pytest.mark.sweep
def test_extrap_models_the_exported_scaling(tmp_path):
    """Extra-P's model of the exported step carries the log2(P) wait the runs were made with:
    its value at 128 ranks, outside the measured sizes, is the made one within 5 %."""
    url = _study(tmp_path)
    out = tmp_path / "syn.jsonl"
    assert scalestudy("model", "export", "--study", "syn", "--out", str(out), "--db", url, cwd=tmp_path).returncode == 0
    fit = subprocess.run([str(EXTRAP_PYTHON), str(REPO / "benchmarks" / "extrap_fit.py"), str(out), "--at", "128"],
                         capture_output=True, text=True, timeout=120)
    assert fit.returncode == 0, fit.stderr
    models = json.loads(fit.stdout)
    compute = statistics_mean(_rank0_means(url)[2]) - WAIT * 1   # the 2-rank step less its 1 exchange
    made = compute + WAIT * math.log2(128)
    assert models["sync"]["at"]["128"] == pytest.approx(made, rel=0.05), models["sync"]["function"]


def statistics_mean(xs):
    return sum(xs) / len(xs)


@pytest.mark.sweep
def test_export_bad_input_is_one_line(tmp_path):
    url = _study(tmp_path)
    proc = scalestudy("model", "export", "--study", "nosuch", "--db", url, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "nosuch" in proc.stderr, proc.stderr
    missing = tmp_path / "no" / "such" / "f.jsonl"
    proc = scalestudy("model", "export", "--study", "syn", "--out", str(missing), "--db", url, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and str(missing.parent) in proc.stderr, proc.stderr
    assert not missing.parent.exists()
