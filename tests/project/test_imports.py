"""Every module of the project imports on its own, in a fresh interpreter: a module that only
imports because another was imported first (a cycle resolved by luck, a name missing until a
sibling sets it up) fails here. The fast lane's first net (scripts/test.sh --fast)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO

PACKAGES = ("orchestrator", "workloads", "results_db", "perf_model", "hydra_plugins")
# scripts that another program runs, not modules: Alembic executes env.py inside its own context
NOT_MODULES = {"results_db.store.migrations.env"}


def project_modules() -> list[str]:
    names = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__main__":       # runs a program: imported through its package instead
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if ".".join(parts) not in NOT_MODULES:
                names.append(".".join(parts))
    return names


MODULES = project_modules()
# one interpreter a batch: a fresh one per module would cost ~2 s each (torch) for ~200 modules
BATCHES = [MODULES[i::8] for i in range(8)]


def test_the_modules_listed_cover_every_package():
    assert len(MODULES) > 150 and {m.split(".")[0] for m in MODULES} == set(PACKAGES)


@pytest.mark.parametrize("batch", range(len(BATCHES)))
def test_each_module_imports_in_a_fresh_interpreter(batch):
    """An interpreter per module would be exact; one per batch of every eighth module is the
    affordable approximation (a module's siblings in its package mostly sit in other batches)."""
    code = ("import importlib, sys, traceback\nbad = []\nfor name in sys.argv[1:]:\n"
            "    try:\n        importlib.import_module(name)\n"
            "    except Exception:\n        bad.append(name + ': ' + traceback.format_exc().splitlines()[-1])\n"
            "print('\\n'.join(bad)); sys.exit(1 if bad else 0)\n")
    proc = subprocess.run([sys.executable, "-c", code, *BATCHES[batch]], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
