"""The main lane's order (scripts/pytest_module_order.py): modules longest first, a new one first of
all, each module's tests together and in their own order; the weights file it reads is the one the
timing report writes, naming modules that exist; and the timing plugin (scripts/pytest_timing.py)
that measures them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import pytest_module_order
import test_timing_report


@dataclass
class Item:
    nodeid: str


def _order(nodeids: list[str], weights: dict[str, float], tmp_path, monkeypatch) -> list[str]:
    path = tmp_path / "weights.json"
    path.write_text(json.dumps({"wall_seconds": weights}))
    monkeypatch.setattr(pytest_module_order, "WEIGHTS", path)
    items = [Item(n) for n in nodeids]
    pytest_module_order.pytest_collection_modifyitems(None, items)
    return [i.nodeid for i in items]


def test_longest_module_first_a_new_one_before_it_and_each_module_kept_whole(tmp_path, monkeypatch):
    ids = ["a.py::t1", "a.py::t2", "b.py::t1", "c.py::t2", "c.py::t1", "new.py::t1"]
    order = _order(ids, {"a.py": 5.0, "b.py": 50.0, "c.py": 20.0}, tmp_path, monkeypatch)
    assert order == ["new.py::t1", "b.py::t1", "c.py::t2", "c.py::t1", "a.py::t1", "a.py::t2"]


def test_without_weights_the_order_is_left_as_collected_and_a_bad_file_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(pytest_module_order, "WEIGHTS", tmp_path / "missing.json")
    items = [Item("b.py::t"), Item("a.py::t")]
    pytest_module_order.pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == ["b.py::t", "a.py::t"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"wall": {}}')
    with pytest.raises(SystemExit, match="bad.json: not a weights file"):
        pytest_module_order.load_weights(bad)


def test_the_timing_plugin_writes_each_test_once_with_its_childrens_cpu(tmp_path):
    """Under pytest-xdist (2 workers) each test is one line, written by its worker (the controller
    sees every test too and writes none); a child process's CPU counts once it is reaped; a test
    run once more by pytest_retry is marked a retry."""
    (tmp_path / "test_planted.py").write_text(
        "import subprocess, sys\n"
        "def test_burns_in_a_child():\n"
        "    subprocess.run([sys.executable, '-c', 'import time\\nt = time.process_time()\\n"
        "while time.process_time() - t < 0.4: pass'], check=True)\n"
        "def test_quick():\n    pass\n")
    timing = tmp_path / "t.jsonl"
    env = {**os.environ, "SCALESTUDY_TEST_TIMING": str(timing), "SCALESTUDY_TEST_LANE": "main",
           "PYTHONPATH": str(REPO / "scripts")}
    env.pop("PYTEST_XDIST_WORKER", None)
    for extra, retry in ((["-n", "2"], ""), ([], "1")):
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "pytest_timing", "-p", "no:cacheprovider",
                               *extra, str(tmp_path / "test_planted.py")], capture_output=True, text=True, check=False,
                              cwd=tmp_path, env={**env, "SCALESTUDY_TEST_RETRY": retry})
        assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [json.loads(line) for line in timing.read_text().splitlines()]
    first, again = [x for x in lines if not x["retry"]], [x for x in lines if x["retry"]]
    assert sorted(x["test"].split("::")[1] for x in first) == ["test_burns_in_a_child", "test_quick"]
    assert {x["worker"] for x in first} <= {"gw0", "gw1"} and len(again) == 2
    burn = next(x for x in first if x["test"].endswith("burns_in_a_child"))
    assert burn["children_cpu"] >= 0.3 and burn["wall"] >= burn["children_cpu"] - 0.05, burn
    assert test_timing_report.load(timing)["test"].tolist().count(burn["test"]) == 1   # the retry left out


def test_the_report_writes_the_weights_the_order_reads_and_sees_the_tail(tmp_path):
    lines = [{"test": "m1.py::a", "lane": "main", "worker": "gw0", "start": 0.0, "wall": 30.0, "cpu": 1.0,
              "children_cpu": 20.0},
             {"test": "m1.py::b", "lane": "main", "worker": "gw0", "start": 30.0, "wall": 10.0, "cpu": 1.0,
              "children_cpu": 0.0},
             {"test": "m2.py::a", "lane": "main", "worker": "gw1", "start": 0.0, "wall": 12.0, "cpu": 2.0,
              "children_cpu": 0.0}]
    timing = tmp_path / "t.jsonl"
    timing.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "w.json"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "test_timing_report.py"), str(timing),
                           "--write-weights", str(out), "--simulate", "2"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert pytest_module_order.load_weights(out) == {"m1.py": 40.0, "m2.py": 12.0}
    # 2 workers: most tests first (m1, then m2) and longest first alike end at 40 s
    assert "most tests first 40 s, longest first 40 s" in proc.stdout, proc.stdout
    other = tmp_path / "other.jsonl"
    other.write_text('{"test": "m.py::a"}\n')   # not the plugin's: one line naming it, exit 2
    bad = subprocess.run([sys.executable, str(REPO / "scripts" / "test_timing_report.py"), str(other)],
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "other.jsonl: not a timing file" in bad.stderr
    # list scheduling, checked by hand: two workers, 40 and 12 s: 40 s either way; one worker: 52 s
    assert test_timing_report.list_schedule([12.0, 40.0], 2) == 40.0
    assert test_timing_report.list_schedule([12.0, 40.0], 1) == 52.0
    assert test_timing_report.list_schedule([40.0, 30.0, 20.0, 12.0], 2) == 52.0   # 40+12, 30+20
    assert test_timing_report.list_schedule([12.0, 20.0, 30.0, 40.0], 2) == 60.0   # shortest first: 20+40 at the end


def test_the_committed_weights_name_modules_that_exist():
    weights = pytest_module_order.load_weights()
    assert len(weights) > 50
    missing = [m for m in weights if not (REPO / m).exists()]
    assert not missing, (f"{missing}: gone; take them out of tests/module_weights.json (a renamed module runs "
                         "first until the weights are written again: docs/reference/development.md)")
