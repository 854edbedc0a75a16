"""Model FLOP utilisation: the FLOPs a training sample costs, counted once per run, and the peak
FLOP/s of the devices a run computes on, from tables with their sources.

MFU = throughput (samples/s, all ranks) x FLOPs per sample / the run's peak, where the peak counts
each device once (``total_peak``): a GPU that several ranks share adds its peak once, and a host's
CPU cores are counted as the threads its ranks run, at most the CPUs they may use (their
affinity, capped by a cgroup CPU quota: ``cpu_grant``).

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
  The PCIe and NVL boards have their own rows, matched before the SXM ones.
- A CPU core's peak is its base clock x its microarchitecture's FP32 FLOPs per cycle
  (``CPU_MICROARCHITECTURES``: FMA units x vector lanes x 2, each row with its source). Intel's
  Skylake-SP and Cascade Lake Xeons have one or two AVX-512 FMA units by model (``AVX512_FMA_UNITS``,
  from Intel ARK): 32 or 64. The clock is always the base clock: the one in an Intel CPU's name,
  else the part's documented base (``BASE_CLOCKS``; AMD's names carry none), else the kernel's
  ``base_frequency`` (intel_pstate) or ACPI CPPC nominal frequency; never the maximum (boost)
  clock, about 30 % higher on an EPYC 7763, nor the current reading. A CPU none of these covers
  (not x86, a hybrid part, a model missing from the tables, no base clock found) has no peak,
  and no MFU, rather than a guess. Hyper-threads share a core's units: counting each thread as a
  core makes the peak an upper bound, and MFU a lower one.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path

import torch

# GPU name fragment -> (FP32 TFLOP/s, TF32 tensor-core dense TFLOP/s, source); the first match wins, so
# each board's row comes before the fragment it contains ("H100 NVL", "H100 PCIe" before "H100")
GPU_PEAKS: tuple[tuple[str, float, float, str], ...] = (
    ("H200 NVL", 60.0, 417.5, "NVIDIA H200 Tensor Core GPU datasheet (H200 NVL column: FP32 60; TF32 835 with "
                              "sparsity, halved)"),
    ("H200", 67.0, 494.7, "NVIDIA H200 Tensor Core GPU datasheet (SXM; TF32 989 with sparsity, halved)"),
    ("H100 NVL", 60.0, 417.5, "NVIDIA H100 Tensor Core GPU datasheet (H100 NVL column, per GPU: FP32 60; TF32 835 "
                              "with sparsity, halved)"),
    ("H100 PCIe", 51.0, 378.0, "NVIDIA H100 Tensor Core GPU datasheet (PCIe; TF32 756 with sparsity, halved)"),
    ("H100", 67.0, 494.7, "NVIDIA H100 Tensor Core GPU datasheet (SXM; TF32 989 with sparsity, halved)"),
    ("A100", 19.5, 156.0, "NVIDIA A100 Tensor Core GPU datasheet (TF32 dense 156, 312 with sparsity)"),
    ("V100", 15.7, 15.7, "NVIDIA V100 datasheet (SXM2; no TF32: FP32 for both)"),
)

_AGNER = "Agner Fog, The microarchitecture of Intel, AMD and VIA CPUs"
# (vendor, cpu family, models, FP32 FLOP/cycle/core with AVX-512 (None: no AVX-512; "ARK": by model,
# AVX512_FMA_UNITS), without it (AVX2 + FMA, or AVX), microarchitecture, source). FLOP/cycle = FMA
# units x FP32 lanes x 2 (a fused multiply-add is two FLOPs), or adds + multiplies without FMA.
CPU_MICROARCHITECTURES: tuple[tuple[str, int, frozenset[int], int | str | None, int, str, str], ...] = (
    ("GenuineIntel", 6, frozenset({0x2A, 0x2D, 0x3A, 0x3E}), None, 16, "Sandy Bridge / Ivy Bridge",
     f"AVX, no FMA: one 256-bit add and one 256-bit multiply per cycle, 8 + 8 ({_AGNER}, ch. Sandy Bridge)"),
    ("GenuineIntel", 6, frozenset({0x3C, 0x3F, 0x45, 0x46, 0x3D, 0x47, 0x4F, 0x56, 0x4E, 0x5E, 0x8E, 0x9E,
                                   0xA5, 0xA6}), None, 32, "Haswell to Comet Lake",
     f"AVX2: two 256-bit FMA units (ports 0 and 1), 2 x 8 x 2 ({_AGNER}, ch. Haswell and Skylake)"),
    ("GenuineIntel", 6, frozenset({0x55}), "ARK", 32, "Skylake-SP / Cascade Lake / Cooper Lake",
     "AVX-512: one or two 512-bit FMA units by model (Intel ARK, '# of AVX-512 FMA Units'), x 16 x 2"),
    ("GenuineIntel", 6, frozenset({0x6A}), 64, 32, "Ice Lake-SP",
     "AVX-512: two 512-bit FMA units, 2 x 16 x 2 (Intel ARK, 3rd Gen Xeon Scalable: '# of AVX-512 FMA Units' 2)"),
    ("GenuineIntel", 6, frozenset({0x7D, 0x7E, 0x8C, 0x8D, 0xA7}), 32, 32, "Ice Lake / Tiger Lake / Rocket Lake client",
     "AVX-512: one 512-bit FMA unit (ports 0+1 fused, none on port 5), 1 x 16 x 2 (Intel ARK; WikiChip, Sunny Cove)"),
    ("GenuineIntel", 6, frozenset({0x8F, 0xCF, 0xAD, 0xAE}), 64, 32, "Sapphire / Emerald / Granite Rapids",
     "AVX-512: two 512-bit FMA units, 2 x 16 x 2 (Intel ARK, 4th-6th Gen Xeon: '# of AVX-512 FMA Units' 2)"),
    ("AuthenticAMD", 0x17, frozenset(range(0x00, 0x30)), None, 16, "Zen / Zen+",
     f"two 128-bit FMA pipes, 2 x 4 x 2 ({_AGNER}, ch. AMD Zen)"),
    ("AuthenticAMD", 0x17, frozenset(range(0x30, 0x100)), None, 32, "Zen 2",
     f"two 256-bit FMA pipes, 2 x 8 x 2 ({_AGNER}, ch. AMD Zen 2)"),
    ("AuthenticAMD", 0x19, frozenset(range(0x100)), 32, 32, "Zen 3 / Zen 4",
     f"two 256-bit FMA pipes, 2 x 8 x 2; Zen 4 runs a 512-bit instruction as two halves ({_AGNER}, ch. Zen 3 "
     "and Zen 4; LUMI-C documentation: EPYC 7763, 16 FP64 FLOP/clock)"),
)
# AMD family 0x1A (Zen 5) differs by part: the EPYC 9005 cores have whole 512-bit FMA pipes, the
# mobile parts 256-bit ones; only the server parts are known here (name pattern -> FLOP/cycle).
ZEN5_PARTS: tuple[tuple[str, int, str], ...] = (
    (r"EPYC 9\d\d5", 64, "AMD EPYC 9005 (Zen 5): two 512-bit FMA pipes, 2 x 16 x 2 (AMD, 5th Gen EPYC "
                        "architecture: full 512-bit AVX-512 datapath)"),
)
# Intel family 6 model 0x55 (Skylake-SP, Cascade Lake, Cooper Lake): AVX-512 FMA units by model name,
# from Intel ARK's '# of AVX-512 FMA Units'; the first match wins. A model name none matches (Xeon W,
# Core X, Xeon D) has no peak.
AVX512_FMA_UNITS: tuple[tuple[str, int], ...] = (
    (r"Platinum [89]\d{3}", 2),
    (r"Gold 6\d{3}", 2),
    (r"Gold 5[12]22\b", 2),
    (r"Gold 53\d\dH", 2),        # Cooper Lake
    (r"Gold 5\d{3}", 1),
    (r"Silver 4\d{3}", 1),
    (r"Bronze 3\d{3}", 1),
)
# Base clocks (GHz) of parts whose model name carries none, from their makers' product pages
BASE_CLOCKS: dict[str, tuple[float, str]] = {
    "EPYC 7702": (2.0, "AMD product page (base 2.0, boost 3.35 GHz)"),
    "EPYC 7742": (2.25, "AMD product page (base 2.25, boost 3.4 GHz)"),
    "EPYC 7H12": (2.6, "AMD product page (base 2.6, boost 3.3 GHz)"),
    "EPYC 7713": (2.0, "AMD product page (base 2.0, boost 3.675 GHz)"),
    "EPYC 7763": (2.45, "AMD product page (base 2.45, boost 3.5 GHz); LUMI-C documentation; NERSC's "
                          "Perlmutter peak is counted at it"),
    "EPYC 7543": (2.8, "AMD product page (base 2.8, boost 3.7 GHz)"),
    "EPYC 7543P": (2.8, "AMD product page (base 2.8, boost 3.7 GHz)"),
    "EPYC 7A53": (2.0, "TOP500, Frontier: AMD Optimized 3rd Generation EPYC 64C 2GHz"),
    "EPYC 9654": (2.4, "AMD product page (base 2.4, boost 3.7 GHz)"),
    "EPYC 9554": (3.1, "AMD product page (base 3.1, boost 3.75 GHz)"),
    "EPYC 9754": (2.25, "AMD product page (base 2.25, boost 3.1 GHz)"),
    "EPYC 9755": (2.7, "AMD product page (base 2.7, boost 4.1 GHz)"),
    "EPYC 9965": (2.25, "AMD product page (base 2.25, boost 3.7 GHz)"),
    "Platinum 8480+": (2.0, "Intel ARK (processor base frequency 2.00 GHz)"),
    "Platinum 8468": (2.1, "Intel ARK (processor base frequency 2.10 GHz)"),
    "Max 9470": (2.0, "Intel ARK, Xeon CPU Max 9470 (processor base frequency 2.00 GHz)"),
    "Max 9480": (1.9, "Intel ARK, Xeon CPU Max 9480 (processor base frequency 1.90 GHz)"),
}


@dataclass(frozen=True)
class Peak:
    flops: float          # FLOP/s of what it describes (a GPU, some CPU cores, a run's devices); nan: unknown
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


def _cpuinfo_fields(cpuinfo: str) -> dict[str, str]:
    first = cpuinfo.split("\n\n", 1)[0]
    return dict((k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in first.splitlines()))


def _part(name: str) -> str | None:
    """``AMD EPYC 7763 64-Core Processor`` -> ``EPYC 7763``; ``Intel(R) Xeon(R) Platinum 8480+`` ->
    ``Platinum 8480+``: the key of ``BASE_CLOCKS``."""
    found = re.search(r"\b(EPYC|Platinum|Gold|Silver|Bronze|Max)\s+(\w+\+?)", name)
    return f"{found.group(1)} {found.group(2)}" if found else None


def flops_per_cycle(cpuinfo: str) -> tuple[int, str] | None:
    """One core's FP32 FLOPs per cycle and why, from ``/proc/cpuinfo``'s vendor, family, model,
    name and flags; None where the tables do not know the CPU."""
    field = _cpuinfo_fields(cpuinfo)
    if "flags" not in field:   # not an x86 CPU (Arm's cpuinfo has Features): no table for it
        return None
    flags = set(field["flags"].split())
    vendor, name = field.get("vendor_id", ""), field.get("model name", "")
    try:
        family, model = int(field.get("cpu family", "-1")), int(field.get("model", "-1"))
    except ValueError:
        return None
    if vendor == "AuthenticAMD" and family == 0x1A:
        row = next(((rate, why) for pattern, rate, why in ZEN5_PARTS if re.search(pattern, name)), None)
        return row if row and "avx512f" in flags else None
    for v, fam, models, wide, narrow, arch, source in CPU_MICROARCHITECTURES:
        if v != vendor or fam != family or model not in models:
            continue
        if wide == "ARK":
            units = next((n for pattern, n in AVX512_FMA_UNITS if re.search(pattern, name)), None)
            if units is None:
                return None
            wide, source = units * 32, f"{source}: {units} for this model"
        if wide is not None and "avx512f" in flags:
            return int(wide), f"{arch}, {source}"
        if narrow >= 32 and not {"avx2", "fma"} <= flags or "avx" not in flags:
            return None   # the core has the units, the (virtual) machine hides them: not this table's rate
        return narrow, f"{arch}, {source}" + (" (AVX-512 not offered)" if wide is not None else "")
    return None


def base_clock(cpuinfo: str, cpu_dir: Path = Path("/sys/devices/system/cpu/cpu0")) -> tuple[float, str] | None:
    """The CPU's base clock (Hz) and where it was read; never the maximum (boost) or current clock."""
    name = _cpuinfo_fields(cpuinfo).get("model name", "")
    ghz = re.search(r"@\s*([0-9.]+)\s*GHz", name)
    if ghz:
        return float(ghz.group(1)) * 1e9, "the base clock in its name"
    known = BASE_CLOCKS.get(_part(name) or "")
    if known:
        return known[0] * 1e9, f"its base clock, {known[1]}"
    for file, scale, words in (("cpufreq/base_frequency", 1e3, "the kernel's base_frequency (intel_pstate)"),
                               ("acpi_cppc/nominal_freq", 1e6, "the ACPI CPPC nominal frequency")):
        try:
            value = float((cpu_dir / file).read_text().strip()) * scale
        except (OSError, ValueError):
            continue
        if value > 0:
            return value, words
    return None


def cpu_peak(cores: float, cpuinfo: str, cpu_dir: Path = Path("/sys/devices/system/cpu/cpu0")) -> Peak:
    """``cores`` cores' FP32 peak: base clock x FLOPs per cycle, from ``/proc/cpuinfo``'s text and
    the kernel's files under ``cpu_dir``; NaN, with the reason, where either is unknown."""
    name = _cpuinfo_fields(cpuinfo).get("model name") or "CPU"
    rate = flops_per_cycle(cpuinfo)
    if rate is None:
        return Peak(float("nan"), f"{name}: not a CPU the FLOPs-per-cycle table knows (workloads/flops.py): "
                                  "peak unknown, no MFU")
    clock = base_clock(cpuinfo, cpu_dir)
    if clock is None:
        return Peak(float("nan"), f"{name}: no base clock found (not in its name, the table of parts or the "
                                  "kernel's base_frequency): peak unknown, no MFU")
    (per_cycle, why), (hz, clock_from) = rate, clock
    return Peak(cores * hz * per_cycle,
                f"{name}: {cores:g} core(s) x {hz / 1e9:.2f} GHz ({clock_from}) x {per_cycle} FP32 FLOP/cycle "
                f"({why}; each thread counted as a core)")


def rank_peak(device: torch.device, convolution_share: float = 1.0) -> Peak:
    """The peak of one unit this rank computes on: its GPU's for this work's mix of convolutions
    and matrix products, or one core of its CPU (``total_peak`` counts the cores)."""
    if device.type == "cuda":
        return gpu_peak(torch.cuda.get_device_name(device), bool(torch.backends.cudnn.allow_tf32),
                        bool(torch.backends.cuda.matmul.allow_tf32), convolution_share)
    info = Path("/proc/cpuinfo")
    if not info.exists():
        return Peak(float("nan"), "no /proc/cpuinfo: CPU peak unknown")
    return cpu_peak(1, info.read_text())


def mfu(throughput: float, flops_per_sample: float, peak_flops: float) -> float:
    """Model FLOP utilisation: the FLOP/s the work needed (samples/s x FLOPs per sample) over the
    peak; NaN where the peak is unknown."""
    return throughput * flops_per_sample / peak_flops if peak_flops > 0 else float("nan")


def total_peak(ranks: list[dict]) -> Peak:
    """The run's peak over its computing ranks, each device counted once. Each rank gives ``flops``
    (its unit's peak: one GPU, or one CPU core), ``host`` and either ``gpu`` (an identity of its
    GPU on that host: UUID, PCI bus id or visible index) or its ``threads`` and CPU record
    (``cpus``, ``cpu_quota``...: ``cpu_grant.cpu_record``). A GPU several ranks share counts once;
    a host's CPU counts the threads its ranks run, at most the CPUs they may use."""
    from .cpu_grant import format_cpus, host_cpus

    gpus: dict[tuple[str, str], float] = {}
    unnamed = 0
    cpu_hosts: dict[str, list[dict]] = {}
    for i, r in enumerate(ranks):
        if r.get("device") == "cuda":
            ident = r.get("gpu")
            if not ident:
                unnamed += 1
                ident = f"rank {i}"
            gpus[(str(r.get("host")), str(ident))] = float(r["flops"])
        else:
            cpu_hosts.setdefault(str(r.get("host")), []).append(r)
    total, words = sum(gpus.values()), []
    if gpus:
        words.append(f"{len(gpus)} GPU(s) for {sum(1 for r in ranks if r.get('device') == 'cuda')} rank(s)"
                     + (f" ({unnamed} unnamed, each counted)" if unnamed else ""))
    cores = 0.0
    for host, group in cpu_hosts.items():
        threads = sum(int(r.get("threads") or 1) for r in group)
        usable = host_cpus(group).usable if all(isinstance(r.get("cpus"), list) for r in group) else float(threads)
        counted = min(float(threads), usable)
        cores += counted
        total += counted * float(group[0]["flops"])   # one CPU model per host
    if cpu_hosts:
        words.append(f"{format_cpus(cores)} core(s) on {len(cpu_hosts)} host(s) for "
                     f"{sum(len(g) for g in cpu_hosts.values())} rank(s)")
    return Peak(total, "counted once per device: " + ", ".join(words))
