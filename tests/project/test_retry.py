"""The retry that keeps one flaky test from deciding a landing (scripts/pytest_retry.py, which
scripts/test.sh and scripts/test-version-ranges.sh run their suites through), on a planted
suite: a test that fails on its first run only, named among explicit node ids (one in a sub-folder)
as the floor suites name theirs. The control is the retry those scripts had before (pytest's
``--last-failed`` beside explicit ids): on the same suite it exits 4 and can never pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

RETRY = REPO / "scripts" / "pytest_retry.py"
FLAKY = "tests/test_flaky.py::test_fails_on_its_first_run_only"
# explicit ids, one of them in a sub-folder's module that has no failure (the case pytest 9.2 answers
# "not found", as it did for tests/reliability/test_node_lost.py in the Parsl floor suite)
IDS = [FLAKY, "tests/sub/test_plain.py::test_passes"]


def _plant(root: Path, *, always_fails: bool = False) -> Path:
    (root / "tests" / "sub").mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    (root / "tests" / "sub" / "test_plain.py").write_text("def test_passes():\n    pass\n")
    (root / "tests" / "test_flaky.py").write_text(
        "import pathlib\nimport pytest\n\n\n"
        "def test_fails_on_its_first_run_only():\n"
        "    ran = pathlib.Path(__file__).with_name('ran-before')\n"
        "    first = not ran.exists()\n"
        "    ran.touch()\n"
        f"    assert {'False' if always_fails else 'not first'}, 'the first run fails'\n")
    return root


def _retry(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RETRY), *args], cwd=root, capture_output=True, text=True, timeout=120)


def test_a_test_that_fails_once_is_reported_flaky_and_passes(tmp_path):
    proc = _retry(_plant(tmp_path), *IDS)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"FLAKY {FLAKY}" in proc.stdout
    assert "1 failed, 1 passed" in proc.stdout   # the first run, as it was


def test_a_test_that_fails_twice_fails_the_run(tmp_path):
    proc = _retry(_plant(tmp_path, always_fails=True), *IDS)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "FLAKY" not in proc.stdout and "once more" in proc.stdout


def test_the_retry_names_a_test_that_failed_in_an_xdist_worker(tmp_path):
    """Under ``-n 2 --dist loadfile`` (scripts/test.sh) the failure is reported by a worker to the
    controller: the id is written once, by the controller."""
    pytest.importorskip("xdist")
    proc = _retry(_plant(tmp_path), "-n", "2", "--dist", "loadfile", *IDS)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"FLAKY {FLAKY}\n" in proc.stdout


def test_control_the_last_failed_retry_cannot_pass(tmp_path):
    root = _plant(tmp_path)
    cache = ["-o", f"cache_dir={tmp_path / 'cache'}"]
    first = subprocess.run([sys.executable, "-m", "pytest", *cache, *IDS], cwd=root, capture_output=True, text=True)
    assert first.returncode == 1, first.stdout[-2000:]
    second = subprocess.run([sys.executable, "-m", "pytest", *cache, "--last-failed", "--last-failed-no-failures",
                             "none", *IDS], cwd=root, capture_output=True, text=True)
    assert second.returncode == 4, second.stdout[-2000:] + second.stderr[-2000:]
