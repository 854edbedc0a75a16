"""One collective order on every rank, whatever each rank's copies and events do.

A GPU's copies and events complete late, and not at the same moment on every rank; a CPU's
are done at once, so no other CPU test can see an engine that issues collectives in the order
its copies happen to finish. ``tests/fake_device/late_device.py`` is a stand-in device with
that timing (random per rank and per seed) under the real engines, data paths, algorithms
and MPI. On the code before the issue order was fixed, the first host-staging case hung
(mismatched ``MPI_Iallreduce`` sizes) and, with equal sizes, summed the wrong tensors.
"""

from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import pytest

from conftest import REPO, mpiexec, write_spec

pytestmark = pytest.mark.mpi
ORDER = str(REPO / "tests" / "mpi_programs" / "check_collective_order.py")
GATHER = str(REPO / "tests" / "mpi_programs" / "train_and_gather.py")


@pytest.mark.parametrize("ranks, seeds", [(2, 2), (3, 1)])
def test_every_data_path_sums_like_mpi_allreduce_under_late_copies(ranks, seeds):
    try:
        proc = mpiexec(ranks, ORDER, str(seeds), timeout=240)
    except subprocess.TimeoutExpired as exc:   # mismatched collectives of different sizes hang
        last = [line for line in (exc.stderr or b"").decode(errors="replace").splitlines() if "checking" in line]
        pytest.fail(f"hung (collectives issued in different orders?) at: {last[-1:] or 'start'}")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert f"OK {ranks} ranks" in proc.stdout
    # the stand-in really delayed copies that the engine polled, with several groups a step
    counts = re.search(r"stand-in: (\d+) late copies, (\d+) polls that found a copy not done; (\d+) steps with "
                       r"several fused groups", proc.stdout)
    assert counts and all(int(n) > 0 for n in counts.groups()), proc.stdout


COMMON = dict(epochs=1, steps_per_epoch=6, lr=0.1, momentum=0.9, seed=4, model="small_cnn",
              workers_per_node=2, threads_per_node=2, batch_size=16)


def _train(tmp_path, name, late_seed=None, **fields):
    spec = write_spec(tmp_path / name, **COMMON, **fields)
    out = tmp_path / f"{name}.npy"
    extra = ["--late-device", str(late_seed)] if late_seed is not None else []
    proc = mpiexec(2, GATHER, str(spec), str(out), *extra, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    made = json.loads((tmp_path / f"{name}.npy.late.json").read_text()) if late_seed is not None else None
    return np.load(out), made


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """sync over host MPI on a plain CPU device: what every path must reproduce."""
    return _train(tmp_path_factory.mktemp("ref"), "ref", algorithm="sync", fusion_threshold_mb=0.01)[0]


@pytest.mark.parametrize("algorithm, data_path", [
    ("sync", "mpi"), ("sync", "torch_distributed"), ("sync", "host_staging"), ("sync", "cuda_aware_mpi"),
    # every round synchronous: eager-SGD is then SGD on the global batch, through its host mirror
    ("eager_solo", "host_staging"), ("eager_majority", "host_staging")])
def test_every_algorithm_trains_the_same_weights_under_late_copies(tmp_path, reference, algorithm, data_path):
    extra = {"sync_every": 1} if algorithm.startswith("eager") else {}
    weights, made = _train(tmp_path, "late", late_seed=11, algorithm=algorithm, data_path=data_path,
                           fusion_threshold_mb=0.01, **extra)
    assert np.array_equal(weights[0], weights[1]), "the ranks' weights differ"
    np.testing.assert_allclose(weights[0], reference[0], rtol=0, atol=1e-5)
    if data_path == "host_staging":   # the stand-in's copies were in the path
        assert sum(m["late_copies"] for m in made) > 0
    if data_path == "cuda_aware_mpi":   # the producing stream's late events held collectives back
        assert sum(m["late_reads"] for m in made) > 0


def test_the_parameter_server_trains_under_late_copies(tmp_path):
    spec = write_spec(tmp_path / "ps", **{**COMMON, "workers_per_node": 3, "threads_per_node": 3, "momentum": 0.0},
                      algorithm="async_ps", data_path="host_staging")
    out = tmp_path / "ps.npy"
    proc = mpiexec(3, GATHER, str(spec), str(out), "--late-device", "5", timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    made = json.loads((tmp_path / "ps.npy.late.json").read_text())
    assert sum(m["late_copies"] for m in made) > 0   # its host mirrors copied through the stand-in
    weights = np.load(out)
    assert np.isfinite(weights).all()
