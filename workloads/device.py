"""The rank's device: which one, how a step's phases are timed on it, and the GPU facts of a run.

A GPU rank owns one GPU (``placement`` set ``CUDA_VISIBLE_DEVICES`` before CUDA started).
Its phase times mean GPU time: a mark waits for the work queued so far on the rank's
stream to finish (``StepClock``), so a forward that merely launched its kernels is not
counted as done. The stream's synchronisation keeps other streams running (NCCL's, the
staging copies'), so overlap of communication with backprop is measured, not removed.

GPU facts (model, driver, CUDA, NCCL, peak memory, utilisation) are recorded where the
machine offers them and as missing (None) where it does not, never as zero: NVML
(``nvidia-ml-py``) is optional.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

import torch

from .failure import SetupError
from .placement import VISIBLE


def run_device(device: str, local_rank: int, rank: int) -> torch.device:
    """The rank's torch device; ``SetupError`` in one line where ``cuda`` is asked for and no
    GPU is visible (never a hang: it is raised before any collective)."""
    if device != "cuda":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SetupError(f"device=cuda: no GPU is visible to rank {rank} on {socket.gethostname()} "
                         f"({VISIBLE}={os.environ.get(VISIBLE, '(not set)')!r}; torch {torch.__version__}, built for "
                         f"CUDA {torch.version.cuda or 'none: a CPU build'})")
    index = local_rank % torch.cuda.device_count()   # 0 where the placement left one GPU visible
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


class StepClock:
    """Marks between a step's phases, in seconds: after the rank's stream has run what was
    queued so far on a GPU, at once on a CPU."""

    def __init__(self, device: torch.device) -> None:
        self.stream = torch.cuda.current_stream(device) if device.type == "cuda" else None

    def __call__(self) -> float:
        if self.stream is not None:
            self.stream.synchronize()
        return time.perf_counter()


def _nvml():
    """pynvml, initialised; None where it is not installed or finds no driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001 - ImportError, NVMLError_LibraryNotFound, DriverNotLoaded: absent
        return None


def _physical_index(index: int) -> int | None:
    """The NVML (physical) index of torch's device ``index``, through CUDA_VISIBLE_DEVICES."""
    visible = [d.strip() for d in os.environ.get(VISIBLE, "").split(",") if d.strip()]
    if not visible:
        return index
    return int(visible[index]) if index < len(visible) and visible[index].isdigit() else None


def pci_numa_node(bus_id: str, root: str = "/sys/bus/pci/devices") -> int | None:
    """The NUMA node a PCI device hangs off (the kernel's ``numa_node``; -1 or missing: unknown)."""
    try:
        node = int(open(f"{root}/{bus_id.lower()}/numa_node").read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def gpu_facts(device: torch.device) -> dict[str, Any] | None:
    """What a run's record says of the rank's GPU (``run_start``); None on a CPU."""
    if device.type != "cuda":
        return None
    props = torch.cuda.get_device_properties(device)
    facts: dict[str, Any] = {"name": props.name, "memory_bytes": int(props.total_memory),
                             "capability": f"{props.major}.{props.minor}", "cuda": torch.version.cuda,
                             "visible": os.environ.get(VISIBLE), "uuid": str(getattr(props, "uuid", "")) or None,
                             "nccl": None, "driver": None, "pci_bus_id": None, "numa_node": None}
    if getattr(props, "pci_bus_id", None) is not None:   # torch >= 2.5; the binding audit's NUMA check
        bus = f"{getattr(props, 'pci_domain_id', 0):04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        facts["pci_bus_id"] = bus
        facts["numa_node"] = pci_numa_node(bus)
    try:
        version = torch.cuda.nccl.version()
        facts["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    except (AttributeError, RuntimeError):   # a build without NCCL
        pass
    nvml = _nvml()
    if nvml is not None:
        try:
            facts["driver"] = nvml.nvmlSystemGetDriverVersion()
        except Exception:  # noqa: BLE001
            pass
    return facts


class UtilizationSampler:
    """The GPU's utilisation (%) sampled on a thread while the rank trains; ``stop`` returns
    the mean, or None where NVML cannot say (not installed, no driver): missing, not 0."""

    def __init__(self, device: torch.device, period: float = 0.5) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = None
        nvml = _nvml() if device.type == "cuda" else None
        physical = _physical_index(device.index or 0) if nvml is not None else None
        if nvml is None or physical is None:
            return
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(physical)
        except Exception:  # noqa: BLE001
            return
        self._thread = threading.Thread(target=self._loop, args=(nvml, handle, period), name="gpu-utilization",
                                        daemon=True)
        self._thread.start()

    def _loop(self, nvml, handle, period: float) -> None:
        while not self._stop.wait(period):
            try:
                self.samples.append(float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
            except Exception:  # noqa: BLE001 - a sample missed is not a zero
                pass

    def stop(self) -> float | None:
        if self._thread is None:
            return None
        self._stop.set()
        self._thread.join(timeout=5)
        return sum(self.samples) / len(self.samples) if self.samples else None


def peak_memory_bytes(device: torch.device) -> int | None:
    return int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None
