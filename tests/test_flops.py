"""Model FLOP utilisation: the counted FLOPs against hand counts, the peak table and the CPU
peak's arithmetic, and a real run whose stored MFU is its throughput x FLOPs / peak."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from workloads.flops import GPU_PEAKS, count_training_flops, cpu_peak, gpu_peak, training_flops_per_sample

from conftest import mpiexec, write_spec


def test_an_mlp_costs_what_its_matrix_products_do():
    """Linear(10, 20) -> ReLU -> Linear(20, 5), per sample: forward 2*10*20 + 2*20*5 = 600; backward
    the second layer's input and weight gradients (200 + 200) and the first's weight gradient only
    (400: the data needs no gradient) = 800; 1,400 in all."""
    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))
    x, y = torch.randn(2, 10), torch.tensor([0, 3])
    assert training_flops_per_sample(model, x, y) == 1400


def test_a_convolution_costs_what_its_multiply_adds_do():
    """Conv2d(1, 4, 3) on 8x8: 4*6*6 outputs of 9 multiply-adds = 2,592 FLOPs forward, the same for
    its weight gradient; then Linear(144, 10): 2,880 forward, 2 x 2,880 backward: 13,824 in all."""
    model = nn.Sequential(nn.Conv2d(1, 4, 3, bias=False), nn.Flatten(), nn.Linear(144, 10))
    x, y = torch.randn(2, 1, 8, 8), torch.tensor([1, 2])
    assert training_flops_per_sample(model, x, y) == 2592 * 2 + 2880 * 3


def test_counting_leaves_the_model_as_it_was():
    model = nn.Linear(4, 2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    training_flops_per_sample(model, torch.randn(2, 4), torch.tensor([0, 1]))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.weight.grad is None


INTEL = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz
cpu MHz\t\t: 1000.000
flags\t\t: fpu sse2 avx fma avx2 avx512f

processor\t: 1
"""
AMD = "vendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\ncpu MHz\t\t: 2596.124\nflags\t\t: fma avx2 avx512f\n"
OLD = "vendor_id\t: GenuineIntel\nmodel name\t: Old CPU\ncpu MHz\t\t: 2000.0\nflags\t\t: sse2\n"


def test_cpu_peaks_from_cpuinfo():
    intel = cpu_peak(4, INTEL)
    assert intel.flops == pytest.approx(4 * 2.4e9 * 64)           # base clock from the name, not the 1 GHz reading
    assert "base clock" in intel.source and "AVX-512" in intel.source
    assert cpu_peak(2, AMD).flops == pytest.approx(2 * 2.596124e9 * 32)   # Zen 4's AVX-512 in 256-bit halves
    assert cpu_peak(1, AMD, max_khz="3700000").flops == pytest.approx(3.7e9 * 32)
    assert cpu_peak(1, OLD).flops == pytest.approx(2.0e9 * 8)


def test_gpu_peaks_from_the_table():
    assert gpu_peak("NVIDIA A100-SXM4-40GB", tf32=True).flops == 156e12
    assert gpu_peak("NVIDIA A100-SXM4-40GB", tf32=False).flops == 19.5e12
    assert gpu_peak("NVIDIA H100 PCIe", tf32=False).flops == 51e12      # before "H100" (SXM) in the table
    assert gpu_peak("NVIDIA H200", tf32=True).flops == 494.7e12
    unknown = gpu_peak("Some GPU", tf32=True)
    assert unknown.flops != unknown.flops and "not in the peak table" in unknown.source
    assert all(source for *_, source in GPU_PEAKS)


@pytest.mark.mpi
def test_a_run_stores_its_mfu(tmp_path):
    spec = write_spec(tmp_path / "r", workers_per_node=2, threads_per_node=2, steps_per_epoch=4)
    proc = mpiexec(2, "-m", "workloads", str(spec))
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "r" / "result.json").read_text())
    assert result["model_flops_per_sample"] > 0
    assert result["peak_flops"] > 0 and "summed over 2 computing rank(s)" in result["peak_source"]
    assert result["mfu"] == pytest.approx(result["throughput"] * result["model_flops_per_sample"]
                                          / result["peak_flops"])


def test_counting_leaves_the_random_numbers_as_they_were():
    """A dropout model's count draws random numbers: rank 0 must go on to draw what it would have."""
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2))
    torch.manual_seed(1)
    count_training_flops(model, torch.ones(2, 4), torch.tensor([0, 1]))
    after = torch.rand(3)
    torch.manual_seed(1)
    assert torch.equal(after, torch.rand(3))


def test_the_convolutions_share_and_a_mixed_gpu_peak():
    model = nn.Sequential(nn.Conv2d(1, 4, 3, bias=False), nn.Flatten(), nn.Linear(144, 10))
    count = count_training_flops(model, torch.randn(2, 1, 8, 8), torch.tensor([1, 2]))
    assert count.convolution == 2592 * 2 and count.total == 2592 * 2 + 2880 * 3
    # on an A100 with PyTorch's defaults: convolutions at TF32 (156), matrix products at FP32 (19.5)
    share = count.convolution / count.total
    mixed = gpu_peak("NVIDIA A100-SXM4-80GB", tf32=True, matmul_tf32=False, convolution_share=share)
    assert mixed.flops == pytest.approx(1 / (share / 156e12 + (1 - share) / 19.5e12))
    assert gpu_peak("NVIDIA A100", tf32=True, matmul_tf32=False, convolution_share=0.0).flops == 19.5e12


ARM = "processor\t: 0\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\n"
ZEN5 = "vendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel name\t: AMD EPYC 9005\ncpu MHz\t\t: 2500.0\nflags\t\t: fma avx2 avx512f\n"


def test_cpus_the_table_does_not_know_have_no_peak():
    arm = cpu_peak(4, ARM)
    assert arm.flops != arm.flops and "peak unknown" in arm.source
    assert cpu_peak(1, ZEN5).flops == pytest.approx(2.5e9 * 64)


@pytest.mark.mpi
def test_the_parameter_servers_device_is_not_counted(tmp_path):
    spec = write_spec(tmp_path / "ps", algorithm="async_ps", workers_per_node=2, threads_per_node=2,
                      steps_per_epoch=4)
    proc = mpiexec(2, "-m", "workloads", str(spec))
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "ps" / "result.json").read_text())
    assert "summed over 1 computing rank(s)" in result["peak_source"]
    assert result["mfu"] == pytest.approx(result["throughput"] * result["model_flops_per_sample"]
                                          / result["peak_flops"])
