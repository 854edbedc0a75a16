"""Run pytest, then each failed test once more, one at a time:

    python scripts/pytest_retry.py [pytest args]

A test that fails and then passes on its second run is reported as flaky (a WARNING naming it)
and does not fail the run; one that fails twice does, and so does an error of pytest itself
(exit 2-5: interrupted, internal error, usage, nothing collected), which is never retried. The
second run is serial (no ``-n``), after the rest of the suite has finished: a test that failed
because the machine was busy meets a quieter one. scripts/test.sh and
scripts/test-version-ranges.sh both run their suites through this; tests/project/test_retry.py
plants a test that fails on its first run only."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLUGIN = "pytest_failed_ids"   # scripts/pytest_failed_ids.py
TIMING = "pytest_timing"       # scripts/pytest_timing.py: each test's wall and CPU, where $SCALESTUDY_TEST_TIMING names a file


def _pytest(args: list[str], failed_ids: Path, retry: bool = False) -> int:
    env = dict(os.environ, SCALESTUDY_FAILED_IDS=str(failed_ids), SCALESTUDY_TEST_RETRY="1" if retry else "",
               PYTHONPATH=os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p))
    return subprocess.call([sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", TIMING, *args], env=env)


def main(args: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="pytest-retry-") as tmp:
        first, second = Path(tmp) / "first", Path(tmp) / "second"
        rc = _pytest(args, first)
        if rc != 1:      # 0: all passed; 2-5: pytest itself failed, nothing to retry
            return rc
        ids = list(dict.fromkeys(first.read_text().split("\n") if first.exists() else []))
        ids = [i for i in ids if i]
        if not ids:
            print("pytest_retry: pytest said tests failed but none was reported failed: not retried", flush=True)
            return rc
        print(f"pytest_retry: {len(ids)} failed; each once more, one at a time:", *(f"  {i}" for i in ids),
              sep="\n", flush=True)
        rc = _pytest(["-ra", "-p", "no:cacheprovider", *ids], second, retry=True)
        again = set(second.read_text().split("\n")) - {""} if second.exists() else set()
        flaky = [i for i in ids if i not in again]
        if rc == 0:
            print(f"pytest_retry: WARNING: {len(flaky)} test(s) failed once and passed on the second run (flaky):",
                  *(f"  FLAKY {i}" for i in flaky), sep="\n", flush=True)
        elif flaky:
            print("pytest_retry: passed on the second run (flaky):", *(f"  FLAKY {i}" for i in flaky), sep="\n")
        return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
