"""The main lane's order (scripts/pytest_module_order.py): modules longest first, a new one first of
all, each module's tests together and in their own order; and the weights file it reads is the one
the timing report writes, naming modules that exist."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

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


def test_without_weights_the_order_is_left_as_collected(tmp_path, monkeypatch):
    monkeypatch.setattr(pytest_module_order, "WEIGHTS", tmp_path / "missing.json")
    items = [Item("b.py::t"), Item("a.py::t")]
    pytest_module_order.pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == ["b.py::t", "a.py::t"]


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
    # list scheduling, checked by hand: two workers, 40 and 12 s: 40 s either way; one worker: 52 s
    assert test_timing_report.list_schedule([12.0, 40.0], 2) == 40.0
    assert test_timing_report.list_schedule([12.0, 40.0], 1) == 52.0
    assert test_timing_report.list_schedule([40.0, 30.0, 20.0, 12.0], 2) == 52.0   # 40+12, 30+20
    assert test_timing_report.list_schedule([12.0, 20.0, 30.0, 40.0], 2) == 60.0   # shortest first: 20+40 at the end


def test_the_committed_weights_name_modules_that_exist():
    weights = pytest_module_order.load_weights()
    assert len(weights) > 50 and all(w >= 0 for w in weights.values())
    missing = [m for m in weights if not (REPO / m).exists()]
    assert not missing, f"{missing}: gone; rewrite tests/module_weights.json (docs/reference/development.md)"
