"""orchestrator/gpu_check on the CPU: its agreement check and its negative control.

What runs on a GPU cannot run here; what can is the check's own logic: several ranks against
one process on the global batch, and the control (rank 1's contribution zeroed before every
sum) that the check must catch, so that a pass on a GPU means something.
"""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.gpu_check import checks as gpu_check


def test_distance_is_relative_to_the_training_move():
    init = np.zeros(4)
    reference = {"final": np.array([[1.0, 0, 0, 0]]), "init": init}
    case = {"final": np.array([[1.0, 0.01, 0, 0], [1.0, 0, 0, 0]]), "init": init}
    off, spread = gpu_check.distance(case, reference)
    assert off == pytest.approx(0.01) and spread == pytest.approx(0.01)


def test_the_gpu_paths_cases_cover_what_users_run():
    several, skipped = gpu_check.agreement_cases("cuda", 4)   # no folder: CUDA-aware MPI not asked
    names = [c for c, _, _ in several]
    assert names[0].startswith("sync, 4 ranks on 4 GPUs, torch.distributed (NCCL)")
    assert any("ddp" in n for n in names) and any("sharing one GPU, host staging" in n for n in names)
    assert all(f.get("fusion_threshold_mb", gpu_check.FUSION_MB) <= gpu_check.FUSION_MB for _, f, _ in several)
    one, skipped_one = gpu_check.agreement_cases("cuda", 1)
    assert all(r == 2 for _, _, r in one) and any("NCCL refuses" in s for s in skipped_one)


@pytest.mark.mpi
def test_the_negative_control_is_caught_and_the_real_sum_passes(tmp_path, monkeypatch):
    cases, _ = gpu_check.agreement_cases("cpu", 0)
    monkeypatch.setattr(gpu_check, "agreement_cases", lambda device, gpus, work=None: (cases[:1], []))
    lines, records, ok = gpu_check.agreement("cpu", 0, 6, tmp_path)
    assert ok, "\n".join(lines)
    real, control = records
    assert real["off"] < gpu_check.AGREEMENT["cpu"] and real["groups_per_step"] >= 2
    assert control["case"] == "negative control" and control["off"] > 100 * gpu_check.AGREEMENT["cpu"]
    assert control["spread"] == 0.0   # the ranks agree with one another: only the reference shows it
    assert any("negative control" in line and "caught" in line for line in lines)


def test_a_case_on_a_cray_gets_the_sweeps_gpu_support_setting(tmp_path, monkeypatch):
    """On a Cray the facility's modules leave MPICH_GPU_SUPPORT_ENABLED=1; a case started by the
    check gets what a sweep's run of its data path gets (0 for NCCL), or the sweep's refusal."""
    from orchestrator.errors import ConfigError

    monkeypatch.setitem(gpu_check.LAUNCH, "system_mpi", True)
    monkeypatch.setenv("MPICH_GPU_SUPPORT_ENABLED", "1")
    for name in ("CRAY_MPICH_ROOTDIR", "CRAY_LD_LIBRARY_PATH", "LD_LIBRARY_PATH"):
        monkeypatch.delenv(name, raising=False)
    env = gpu_check.case_environment(gpu_check.base("cuda", workers_per_node=2, data_path="torch_distributed"),
                                     tmp_path)
    assert env["MPICH_GPU_SUPPORT_ENABLED"] == "0" and env["NCCL_DEBUG"] == "INFO"
    with pytest.raises(ConfigError, match="GTL"):
        gpu_check.case_environment(gpu_check.base("cuda", workers_per_node=2, data_path="cuda_aware_mpi"), tmp_path)
    aware, why = gpu_check.cuda_aware_mpi(tmp_path)   # refused before any rank starts
    assert not aware and "GTL" in why


@pytest.mark.sweep
def test_the_catch_up_case_runs_on_the_cpu_flow(tmp_path):
    """Part 5 through the CPU flow (host MPI; the GPU's host staging is what a device run adds):
    the straggler skipped rounds and the models stayed identical."""
    lines, records, ok = gpu_check.catch_up("cpu", 12, tmp_path)
    assert ok, "\n".join(lines)
    [record] = records
    assert record["drift"] == 0.0 and record["skipped"] > 0
