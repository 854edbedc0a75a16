"""Model FLOP utilisation: the counted FLOPs against hand counts; peaks against published figures
and hand numbers from datasheets (NERSC's Perlmutter peak, Intel ARK, NVIDIA's datasheets), never
against the code's own expression; each device counted once (ranks sharing a GPU, ranks crowding
a host's CPUs); and real runs whose stored peak says what it counted."""

from __future__ import annotations

import json
import os

import pytest
import torch
from torch import nn

from workloads.flops import (GPU_PEAKS, count_training_flops, cpu_peak, gpu_peak, mfu, total_peak,
                             training_flops_per_sample)

from conftest import mpiexec, write_spec


@pytest.mark.sweep
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


def cpuinfo(name: str, vendor: str, family: int, model: int, flags: str, mhz: str = "3500.000") -> str:
    """The first processor of a /proc/cpuinfo, as the kernel writes it (``cpu MHz``: the current
    clock, here a boost reading that must not be used)."""
    return (f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
            f"model name\t: {name}\ncpu MHz\t\t: {mhz}\nflags\t\t: fpu sse2 avx {flags}\n\nprocessor\t: 1\n")


EPYC_7763 = cpuinfo("AMD EPYC 7763 64-Core Processor", "AuthenticAMD", 25, 1, "fma avx2")


def boost_only(tmp_path):
    """A stand-in /sys/devices/system/cpu/cpu0 whose cpufreq gives the maximum (boost) clock only."""
    (tmp_path / "cpufreq").mkdir(parents=True, exist_ok=True)
    (tmp_path / "cpufreq" / "cpuinfo_max_freq").write_text("3500000\n")
    return tmp_path


def test_epyc_7763_peak_is_nersc_perlmutters(tmp_path):
    """NERSC's Perlmutter architecture page: the CPU partition (3,072 nodes of 2 EPYC 7763, 128 cores)
    peaks at 15.4 PFLOP/s FP64, the GPU nodes' CPUs (1,792 x 64 cores) at 4.5; Zen 3 does FP64 at half
    its FP32 rate. The base clock (2.45 GHz) gives them; the boost clock (3.5) would give 22.0 and 6.4."""
    sysfs = boost_only(tmp_path)
    cpu_nodes = cpu_peak(3072 * 128, EPYC_7763, sysfs)
    assert cpu_nodes.flops / 2 == pytest.approx(15.4e15, rel=0.005)
    assert cpu_peak(1792 * 64, EPYC_7763, sysfs).flops / 2 == pytest.approx(4.5e15, rel=0.005)
    assert "2.45 GHz" in cpu_nodes.source and "AMD product page" in cpu_nodes.source


def test_intel_avx512_parts_with_one_and_two_fma_units():
    """Hand numbers from Intel ARK: Xeon Gold 6148, 20 cores at a 2.40 GHz base, 2 AVX-512 FMA units
    (2 x 16 lanes x 2 FLOPs): 3,072 GFLOP/s FP32; Xeon Gold 5118, 12 cores at 2.30 GHz, 1 unit:
    883.2 GFLOP/s (WikiChip lists both). A Xeon Platinum 8480+ names no clock: ARK's 2.00 GHz base,
    56 cores, 2 units: 7,168 GFLOP/s."""
    gold_6148 = cpuinfo("Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz", "GenuineIntel", 6, 85, "fma avx2 avx512f")
    gold_5118 = cpuinfo("Intel(R) Xeon(R) Gold 5118 CPU @ 2.30GHz", "GenuineIntel", 6, 85, "fma avx2 avx512f")
    spr = cpuinfo("Intel(R) Xeon(R) Platinum 8480+", "GenuineIntel", 6, 143, "fma avx2 avx512f")
    assert cpu_peak(20, gold_6148).flops == pytest.approx(3072e9)
    assert cpu_peak(12, gold_5118).flops == pytest.approx(883.2e9)
    assert cpu_peak(56, spr).flops == pytest.approx(7168e9)
    # a virtual machine that hides AVX-512 runs AVX2's two 256-bit FMAs: 20 x 2.4 x 32 = 1,536
    hidden = cpuinfo("Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz", "GenuineIntel", 6, 85, "fma avx2")
    assert cpu_peak(20, hidden).flops == pytest.approx(1536e9)


def test_the_base_clock_from_the_kernel_never_the_maximum(tmp_path):
    """A part neither its name nor the table clocks: intel_pstate's base_frequency (2.0 GHz) is used,
    the maximum (3.8) never; without a base clock there is no peak."""
    unknown = cpuinfo("Intel(R) Xeon(R) Platinum 8470", "GenuineIntel", 6, 143, "fma avx2 avx512f")
    sysfs = boost_only(tmp_path)
    (sysfs / "cpufreq" / "cpuinfo_max_freq").write_text("3800000\n")
    none = cpu_peak(1, unknown, sysfs)
    assert none.flops != none.flops and "no base clock" in none.source and "no MFU" in none.source
    (sysfs / "cpufreq" / "base_frequency").write_text("2000000\n")
    assert cpu_peak(52, unknown, sysfs).flops == pytest.approx(52 * 2.0e9 * 64)   # 6,656 GFLOP/s
    assert "base_frequency" in cpu_peak(1, unknown, sysfs).source


ARM = "processor\t: 0\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\n"


def test_cpus_the_tables_do_not_know_have_no_peak(tmp_path):
    """No guess: an Arm CPU, a hybrid Intel part (Alder Lake's cores differ), a Skylake-SP model whose
    FMA units ARK's rule does not cover (Xeon W), a mobile Zen 5, an EPYC whose name has no model."""
    unknown = [ARM,
               cpuinfo("12th Gen Intel(R) Core(TM) i7-12700H", "GenuineIntel", 6, 154, "fma avx2"),
               cpuinfo("Intel(R) Xeon(R) W-2133 CPU @ 3.60GHz", "GenuineIntel", 6, 85, "fma avx2 avx512f"),
               cpuinfo("AMD Ryzen AI 9 HX 370", "AuthenticAMD", 26, 36, "fma avx2 avx512f"),
               cpuinfo("AMD EPYC", "AuthenticAMD", 25, 17, "fma avx2 avx512f")]
    for info in unknown:
        peak = cpu_peak(4, info, boost_only(tmp_path))
        assert peak.flops != peak.flops and "peak unknown" in peak.source, info
    # Zen 5 in an EPYC 9005 has whole 512-bit FMA pipes: 2.7 GHz base x 64 = 172.8 GFLOP/s a core
    turin = cpuinfo("AMD EPYC 9755 128-Core Processor", "AuthenticAMD", 26, 2, "fma avx2 avx512f")
    assert cpu_peak(1, turin).flops == pytest.approx(172.8e9)


def test_gpu_peaks_from_the_datasheets():
    """NVIDIA's datasheets, dense (the "with sparsity" figures halved)."""
    assert gpu_peak("NVIDIA A100-SXM4-40GB", tf32=True).flops == 156e12
    assert gpu_peak("NVIDIA A100-SXM4-40GB", tf32=False).flops == 19.5e12
    assert gpu_peak("NVIDIA H100 80GB HBM3", tf32=False).flops == 67e12          # SXM
    assert gpu_peak("NVIDIA H100 PCIe", tf32=False).flops == 51e12
    # the NVL boards: FP32 60, TF32 835 with sparsity -> 417.5; not the SXM row's 67 and 494.7
    for name in ("NVIDIA H100 NVL", "NVIDIA H200 NVL"):
        assert gpu_peak(name, tf32=False).flops == 60e12, name
        assert gpu_peak(name, tf32=True).flops == 417.5e12, name
        assert "NVL" in gpu_peak(name, tf32=True).source
    assert gpu_peak("NVIDIA H200", tf32=True).flops == 494.7e12
    unknown = gpu_peak("Some GPU", tf32=True)
    assert unknown.flops != unknown.flops and "not in the peak table" in unknown.source
    assert all(source for *_, source in GPU_PEAKS)


def test_a_shared_gpu_counts_once_in_mfu():
    """Hand case: 2 ranks on one A100 (FP32 19.5 TFLOP/s) at 1,000 samples/s of 1 GFLOP each need
    1 TFLOP/s: MFU 1/19.5 = 5.13 %. Counting the GPU per rank would halve it; two GPUs do halve it."""
    shared = [{"device": "cuda", "host": "n1", "gpu": "GPU-a", "flops": 19.5e12, "rank": r} for r in (0, 1)]
    assert mfu(1000, 1e9, total_peak(shared).flops) == pytest.approx(0.05128, abs=1e-5)
    assert "1 GPU(s) for 2 rank(s)" in total_peak(shared).source
    apart = [{**shared[0]}, {**shared[1], "gpu": "GPU-b"}]
    assert mfu(1000, 1e9, total_peak(apart).flops) == pytest.approx(0.02564, abs=1e-5)
    # the same GPU index on two hosts is two GPUs
    hosts = [{**shared[0], "gpu": "0"}, {**shared[1], "gpu": "0", "host": "n2"}]
    assert total_peak(hosts).flops == 39e12


def test_ranks_crowding_a_hosts_cpus_count_its_cores_once():
    """Hand case: one EPYC 7763 core is 2.45 GHz x 32 = 78.4 GFLOP/s. 4 one-thread ranks that may use
    CPUs 0-1 count 2 cores (156.8 GFLOP/s), not 4; under a CPU quota of 1, 1 core; 2 ranks x 2
    threads on 8 CPUs count their 4 threads (313.6)."""
    core = 78.4e9
    crowded = [{"device": "cpu", "host": "h", "threads": 1, "cpus": [0, 1], "host_cpus": 2, "flops": core}
               for _ in range(4)]
    assert total_peak(crowded).flops == pytest.approx(156.8e9)
    assert "2 core(s) on 1 host(s) for 4 rank(s)" in total_peak(crowded).source
    quota = [{**r, "cpu_quota": 1.0, "cpu_quota_cgroup": "/job"} for r in crowded]
    assert total_peak(quota).flops == pytest.approx(78.4e9)
    roomy = [{"device": "cpu", "host": "h", "threads": 2, "cpus": list(range(8)), "host_cpus": 8, "flops": core}
             for _ in range(2)]
    assert total_peak(roomy).flops == pytest.approx(313.6e9)
    assert mfu(10, 1e9, float("nan")) != mfu(10, 1e9, float("nan"))   # no peak, no MFU


def _expected_cores(threads: int) -> int:
    return min(threads, len(os.sched_getaffinity(0)))


def _check_stored_peak(result: dict, cores: int, ranks: int) -> None:
    """The peak counts this machine's cores once; where the tables know this CPU there is an MFU,
    where they do not (this project's own CI host names no model: "AMD EPYC") none, and it says so."""
    assert f"{cores} core(s) on 1 host(s) for {ranks} rank(s)" in result["peak_source"], result["peak_source"]
    assert result["model_flops_per_sample"] > 0
    if result["peak_flops"] is None:
        assert result["mfu"] is None and "no MFU" in result["peak_source"]
    else:
        assert result["peak_flops"] > 0 and 0 < result["mfu"] < 1


@pytest.mark.mpi
def test_a_run_stores_its_mfu(tmp_path):
    """4 one-thread ranks: their host's cores, at most the CPUs they may use, counted once."""
    spec = write_spec(tmp_path / "r", workers_per_node=4, threads_per_node=4, steps_per_epoch=4)
    proc = mpiexec(4, "-m", "workloads", str(spec))
    assert proc.returncode == 0, proc.stderr[-2000:]
    _check_stored_peak(json.loads((tmp_path / "r" / "result.json").read_text()), _expected_cores(4), 4)


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
    # on an A100 with PyTorch's defaults: convolutions at TF32 (156), matrix products at FP32 (19.5). By
    # hand, a sample's 5,184 convolution FLOPs take 33.23 ps at 156 T and its 8,640 others 443.08 ps at
    # 19.5 T: 13,824 FLOPs in 476.31 ps, 29.02 TFLOP/s
    share = count.convolution / count.total
    mixed = gpu_peak("NVIDIA A100-SXM4-80GB", tf32=True, matmul_tf32=False, convolution_share=share)
    assert mixed.flops == pytest.approx(29.023e12, rel=1e-4)
    assert gpu_peak("NVIDIA A100", tf32=True, matmul_tf32=False, convolution_share=0.0).flops == 19.5e12


@pytest.mark.mpi
def test_the_parameter_servers_device_is_not_counted(tmp_path):
    spec = write_spec(tmp_path / "ps", algorithm="async_ps", workers_per_node=2, threads_per_node=2,
                      steps_per_epoch=4)
    proc = mpiexec(2, "-m", "workloads", str(spec))
    assert proc.returncode == 0, proc.stderr[-2000:]
    _check_stored_peak(json.loads((tmp_path / "ps" / "result.json").read_text()), 1, 1)
