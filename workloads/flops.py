"""Model FLOP utilisation: the FLOPs a training sample costs, counted once per run, and the peak
FLOP/s of the device a rank computes on, from a table with its sources.

MFU = throughput (samples/s, all ranks) x FLOPs per sample / the sum of the ranks' peaks.

What is counted and what is assumed, so that the number means what it says:

- FLOPs per sample are counted by ``torch.utils.flop_counter.FlopCounterMode`` (PyTorch's public
  counter) on one forward and backward of two samples of the run's data, on a copy of the model
  before it is placed or emulated. The counter knows matrix products and convolutions (the bulk of
  a CNN's or a transformer's work) and nothing else: element-wise work, norms and fused kernels it
  has no formula for (a whole ``nn.LSTM``) are left out, so the count is a lower bound, and MFU too.
- A GPU's peak is its datasheet's dense number for the precision PyTorch lets each kind of work
  use: convolutions at TF32 where ``torch.backends.cudnn.allow_tf32`` (on by default), matrix
  products at TF32 only where ``torch.backends.cuda.matmul.allow_tf32`` (off by default), else FP32;
  a model's mix is weighed by its counted FLOPs (the rate it would run at with each part at its peak).
- A CPU rank's peak is its threads x clock x FP32 FLOPs per cycle per core: 64 with AVX-512 on an
  Intel core (two 512-bit FMA units), 32 with AVX2 + FMA or AMD's AVX-512 (two 256-bit FMA units;
  Zen 4 runs a 512-bit instruction as two halves; Zen 5's are whole: 64), 8 without FMA; a CPU
  this table does not know (not x86) has no peak, and no MFU. The clock is the base frequency
  in the CPU's name, else the kernel's maximum, else its current reading (said in ``source``).
  Hyper-threads share a core's units: counting each thread as a core makes the peak an upper
  bound, and MFU a lower one.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path

import torch

# GPU name fragment -> (FP32 TFLOP/s, TF32 tensor-core dense TFLOP/s, source); the first match wins
GPU_PEAKS: tuple[tuple[str, float, float, str], ...] = (
    ("H200", 67.0, 494.7, "NVIDIA H200 Tensor Core GPU datasheet (SXM; TF32 989 with sparsity, halved)"),
    ("H100 PCIe", 51.0, 378.0, "NVIDIA H100 Tensor Core GPU datasheet (PCIe; TF32 756 with sparsity, halved)"),
    ("H100", 67.0, 494.7, "NVIDIA H100 Tensor Core GPU datasheet (SXM; TF32 989 with sparsity, halved)"),
    ("A100", 19.5, 156.0, "NVIDIA A100 Tensor Core GPU datasheet (TF32 dense 156, 312 with sparsity)"),
    ("V100", 15.7, 15.7, "NVIDIA V100 datasheet (SXM2; no TF32: FP32 for both)"),
)


@dataclass(frozen=True)
class Peak:
    flops: float          # FLOP/s of one rank's share of its device; nan when unknown
    source: str           # what it was read from and what was assumed


@dataclass(frozen=True)
class FlopCount:
    total: float          # forward + backward FLOPs of one sample
    convolution: float    # of which convolutions' (cuDNN's precision), the rest matrix products'


def count_training_flops(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> FlopCount:
    """Forward and backward FLOPs of one sample (``FlopCounterMode``'s count over len(x) samples),
    and the convolutions' share. The random-number state is left as it was: the count runs a
    forward pass (dropout draws), and the run's training must draw what it would have."""
    from torch.utils.flop_counter import FlopCounterMode

    from .objective import loss as objective_loss

    twin = copy.deepcopy(model).to("cpu").train()
    counter = FlopCounterMode(display=False)
    with torch.random.fork_rng(devices=[]), counter:
        objective_loss(twin(x.to("cpu")), y.to("cpu")).backward()
    per_op = counter.get_flop_counts().get("Global", {})
    conv = sum(v for op, v in per_op.items() if "convolution" in str(op))
    n = max(1, len(x))
    return FlopCount(counter.get_total_flops() / n, conv / n)


def training_flops_per_sample(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    return count_training_flops(model, x, y).total


def gpu_peak(name: str, tf32: bool, matmul_tf32: bool | None = None, convolution_share: float = 1.0) -> Peak:
    """The GPU's peak for this work: convolutions at TF32 where cuDNN may use it (``tf32``),
    matrix products at TF32 only where ``matmul_tf32`` (PyTorch's default: off); mixed work's
    peak is the rate at which it would run with each part at its own peak."""
    matmul_tf32 = tf32 if matmul_tf32 is None else matmul_tf32
    for fragment, fp32, tensor, source in GPU_PEAKS:
        if fragment.lower() in name.lower():
            conv_peak, mm_peak = (tensor if tf32 else fp32) * 1e12, (tensor if matmul_tf32 else fp32) * 1e12
            share = min(max(convolution_share, 0.0), 1.0)
            flops = 1.0 / (share / conv_peak + (1 - share) / mm_peak)
            words = (f"convolutions ({share:.0%} of the FLOPs) {'TF32 tensor, dense' if tf32 else 'FP32'}, "
                     f"matrix products {'TF32 tensor, dense' if matmul_tf32 else 'FP32'}")
            return Peak(flops, f"{name}: {words}, from the {source}")
    return Peak(float("nan"), f"{name}: not in the peak table (workloads/flops.py GPU_PEAKS)")


def cpu_peak(threads: int, cpuinfo: str, max_khz: str | None = None) -> Peak:
    """``threads`` cores' FP32 peak from ``/proc/cpuinfo``'s text (and the kernel's maximum clock)."""
    first = cpuinfo.split("\n\n", 1)[0]
    field = dict((k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in first.splitlines()))
    if "flags" not in field:   # not an x86 CPU (Arm's cpuinfo has Features): no table for it
        return Peak(float("nan"), f"{field.get('model name') or field.get('CPU implementer', 'CPU')}: not an x86 "
                                  "CPU this table knows (workloads/flops.py): peak unknown")
    flags = set(field.get("flags", "").split())
    vendor, name = field.get("vendor_id", ""), field.get("model name", "")
    family = int(field.get("cpu family", "0") or 0)
    if "avx512f" in flags and (vendor == "GenuineIntel" or (vendor == "AuthenticAMD" and family >= 26)):
        per_cycle, why = 64, "AVX-512, two 512-bit FMA units" + (" (AMD Zen 5)" if vendor == "AuthenticAMD" else "")
    elif "avx2" in flags and "fma" in flags or "avx512f" in flags:
        per_cycle, why = 32, "two 256-bit FMA units" + (" (AMD's AVX-512 in halves)" if "avx512f" in flags else "")
    else:
        per_cycle, why = 8, "no FMA"
    ghz = re.search(r"@\s*([0-9.]+)\s*GHz", name)
    if ghz:
        clock, clock_from = float(ghz.group(1)) * 1e9, "the base clock in its name"
    elif max_khz:
        clock, clock_from = float(max_khz) * 1e3, "the kernel's maximum clock"
    elif field.get("cpu MHz"):
        clock, clock_from = float(field["cpu MHz"]) * 1e6, "its current clock (/proc/cpuinfo)"
    else:
        return Peak(float("nan"), f"{name or 'CPU'}: no clock found")
    return Peak(threads * clock * per_cycle,
                f"{name or 'CPU'}: {threads} thread(s) x {clock / 1e9:.2f} GHz ({clock_from}) x {per_cycle} FP32 "
                f"FLOP/cycle ({why}; each thread counted as a core)")


def rank_peak(device: torch.device, threads: int, convolution_share: float = 1.0) -> Peak:
    """This rank's peak: its GPU's for this work's mix of convolutions and matrix products, or
    its threads' share of the CPU."""
    if device.type == "cuda":
        return gpu_peak(torch.cuda.get_device_name(device), bool(torch.backends.cudnn.allow_tf32),
                        bool(torch.backends.cuda.matmul.allow_tf32), convolution_share)
    info = Path("/proc/cpuinfo")
    if not info.exists():
        return Peak(float("nan"), "no /proc/cpuinfo: CPU peak unknown")
    freq = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    return cpu_peak(threads, info.read_text(), freq.read_text().strip() if freq.exists() else None)
