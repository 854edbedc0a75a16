"""The workload as a plain MPI program: real mpiexec, real ranks."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest

from workloads.spec import RunSpec

from conftest import REPO, mpiexec, write_spec

pytestmark = pytest.mark.mpi
PROGRAM = str(REPO / "tests" / "mpi_programs" / "train_and_gather.py")
HAVE_HOROVOD = importlib.util.find_spec("horovod") is not None
NEEDS_HOROVOD = pytest.mark.skipif(not HAVE_HOROVOD, reason="Horovod is not installed here (optional: "
                                   "bash scripts/install-horovod.sh builds it in a few minutes)")


def _train(tmp_path, name, ranks, **fields):
    spec = write_spec(tmp_path / name, **fields)
    out = tmp_path / f"{name}.npy"
    proc = mpiexec(ranks, PROGRAM, str(spec), str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return np.load(out)


@pytest.mark.parametrize("ranks", [3, 4])
def test_allreduce_paths_match_mpi_allreduce(ranks):
    proc = mpiexec(ranks, str(REPO / "tests" / "mpi_programs" / "check_allreduce.py"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"OK {ranks} ranks" in proc.stdout


COMMON = dict(epochs=2, steps_per_epoch=8, lr=0.1, momentum=0.9, seed=3)


@pytest.fixture(scope="module")
def single_process(tmp_path_factory):
    """Plain SGD in one process on the global batch (64): the reference every engine must match."""
    tmp = tmp_path_factory.mktemp("single")
    return _train(tmp, "one", 1, workers_per_node=1, threads_per_node=1, batch_size=64, **COMMON)[0]


@pytest.mark.parametrize("algorithm, fusion_mb, data_path", [
    ("sync", 64, "auto"), ("sync", 0.05, "auto"), ("sync", 0, "auto"), ("ddp", 64, "auto"),
    # the engine's GPU path (torch.distributed: NCCL on GPUs) on CPU ranks, through gloo
    ("sync", 0.05, "torch_distributed"),
    pytest.param("horovod", 64, "auto", marks=NEEDS_HOROVOD)])
def test_four_ranks_match_one_process_with_the_global_batch(tmp_path, single_process, algorithm, fusion_mb,
                                                            data_path):
    four = _train(tmp_path, "four", 4, workers_per_node=4, threads_per_node=4, batch_size=16,
                  algorithm=algorithm, fusion_threshold_mb=fusion_mb, data_path=data_path, **COMMON)
    # all ranks hold identical weights after training
    assert four.shape[0] == 4
    for r in range(1, 4):
        assert np.array_equal(four[0], four[r]), f"rank {r} differs from rank 0"
    # and they equal plain SGD on the global batch in one process
    np.testing.assert_allclose(four[0], single_process, rtol=0, atol=1e-5)


def test_sync_with_a_straggler_still_matches_one_process(tmp_path, single_process):
    """A delayed rank is still in backward (its engine polls) while the others wait in
    MPI_Wait: the ranks must still issue matching collectives, and the math is unchanged."""
    four = _train(tmp_path, "late", 4, workers_per_node=4, threads_per_node=4, batch_size=16, algorithm="sync",
                  imbalance_kind="injected", imbalance_ranks=1, imbalance_delay_ms=20.0, **COMMON)
    for r in range(1, 4):
        assert np.array_equal(four[0], four[r]), f"rank {r} differs from rank 0"
    np.testing.assert_allclose(four[0], single_process, rtol=0, atol=1e-5)


def test_the_reference_run_really_trains(tmp_path, single_process):
    start = _train(tmp_path, "start", 1, workers_per_node=1, threads_per_node=1, batch_size=64,
                   epochs=1, steps_per_epoch=1, lr=1e-12, momentum=0.0, seed=3)
    assert np.abs(single_process - start[0]).max() > 1e-2  # far above the tolerance used above


def test_metrics_contract(finished_run):
    spec = RunSpec.load(finished_run / "spec.json")
    result = json.loads((finished_run / "result.json").read_text())
    assert result["schema"] == 1 and result["status"] == "done" and result["world_size"] == 2
    assert result["steps"] == spec.epochs * spec.steps_per_epoch
    assert result["samples"] == result["steps"] * spec.global_batch_size
    assert 0.0 <= result["final_top1"] <= 1.0 and result["throughput"] > 0
    for rank in range(2):
        records = [json.loads(line) for line in (finished_run / "metrics" / f"rank-{rank}.jsonl").read_text().splitlines()]
        assert all(r["schema"] == 1 for r in records)
        kinds = [r["type"] for r in records]
        assert kinds[0] == "run_start" and kinds[-1] == "run_end"
        start = records[0]
        assert start["rank"] == rank and start["size"] == 2 and start["host"]
        assert {"torch", "mpi4py", "mpi_library"} <= set(start["versions"])
        assert start["threads"] == 1  # threads_per_node=2 shared by 2 workers
        assert start["cpus"] == sorted(os.sched_getaffinity(0))   # mpiexec binds nothing: this process's
        steps = [r for r in records if r["type"] == "step"]
        assert [s["step"] for s in steps] == list(range(result["steps"]))
        for s in steps:
            assert s["samples"] == spec.batch_size
            assert all(s[k] >= 0 for k in ("data", "forward", "backward", "comm_wait", "update"))
            assert np.isfinite(s["loss"])
        assert all(steps[i]["t_start"] <= steps[i + 1]["t_start"] for i in range(len(steps) - 1))
        evals = [r for r in records if r["type"] == "eval"]
        assert len(evals) == (spec.epochs if rank == 0 else 0)
        assert records[-1]["status"] == "done"


def test_world_size_must_match_the_spec(tmp_path):
    spec = write_spec(tmp_path / "r", workers_per_node=4, threads_per_node=4)
    proc = mpiexec(2, "-m", "workloads", str(spec))
    assert proc.returncode != 0
    assert "MPI world size is 2 but the spec asks for" in proc.stderr
    assert not (tmp_path / "r" / "result.json").exists()


def test_threads_per_worker_are_applied(tmp_path):
    spec = write_spec(tmp_path / "t", workers_per_node=1, threads_per_node=2, steps_per_epoch=1)
    proc = mpiexec(1, "-m", "workloads", str(spec))
    assert proc.returncode == 0, proc.stderr
    start = json.loads((tmp_path / "t" / "metrics" / "rank-0.jsonl").read_text().splitlines()[0])
    assert start["threads"] == 2


@NEEDS_HOROVOD
def test_horovod_autotune_reaches_horovod_and_its_log_lands_in_the_run_folder(tmp_path, monkeypatch):
    """autotune=true sets HOROVOD_AUTOTUNE: Horovod's parameter manager then scores samples of
    cycle time and fusion threshold and logs each in the run folder; without it, no log.
    (Warm-up and sample length shortened so that 40 steps hold several samples.)"""
    monkeypatch.setenv("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "1")
    monkeypatch.setenv("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "2")
    monkeypatch.delenv("HOROVOD_AUTOTUNE_LOG", raising=False)
    for autotune in (True, False):
        spec = write_spec(tmp_path / f"a{autotune}", algorithm="horovod", autotune=autotune, workers_per_node=2,
                          threads_per_node=2, steps_per_epoch=40)
        proc = mpiexec(2, "-m", "workloads", str(spec))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        log = spec.parent / "horovod-autotune.csv"
        if autotune:
            lines = log.read_text().splitlines()
            assert "cycle_time" in lines[0], lines[:2]
            assert len(lines) >= 2, lines   # at least one scored sample
        else:
            assert not log.exists()


@pytest.mark.skipif(HAVE_HOROVOD, reason="Horovod is installed here: the real thing is tested instead")
def test_horovod_without_horovod_says_how_to_install(tmp_path):
    spec = write_spec(tmp_path / "h", algorithm="horovod", steps_per_epoch=1)
    proc = mpiexec(1, "-m", "workloads", str(spec))
    assert proc.returncode != 0
    assert "algorithm=horovod needs horovod.torch" in proc.stderr and "scripts/install-horovod.sh" in proc.stderr
