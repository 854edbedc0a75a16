"""The energy a run's hosts drew, read from the counters the node exposes: one reader per
host (the first rank on it), sampled when the run starts and when it ends.

Sources, tried in this order by ``SCALESTUDY_ENERGY=auto`` (the default; a site chooses with
``env: {SCALESTUDY_ENERGY: rapl}`` in its YAML, ``none`` turns it off):

- ``pm_counters``: HPE Cray EX node counters (Perlmutter, Frontier), ``/sys/cray/pm_counters/
  energy``: the node's joules as ``"<value> J <timestamp> us"`` (about 10 Hz), and
  ``startup``, which changes when the pm_counters service restarts and resets the counters:
  then the interval is unknown. ``generation`` is not a restart: it counts power-cap
  changes, through which the energy counter keeps counting;
- ``rapl``: Linux powercap, ``/sys/class/powercap/intel-rapl:N/energy_uj`` per CPU package
  (``name`` is ``package-N``; its sub-domains, ``intel-rapl:N:M`` core, uncore, dram, are
  parts of it and not added again; ``psys``, the platform domain of client CPUs, holds the
  packages' energy already and is never added to them), a counter that
  wraps at ``max_energy_range_uj``: a sampler thread reads it every ``WRAP_SAMPLE_SECONDS``
  so that no wrap goes unseen (one wrap of a 262 kJ range takes about 45 min at 100 W);
- ``nvml``: each visible GPU's total energy since its driver loaded (mJ,
  ``nvmlDeviceGetTotalEnergyConsumption``): the GPUs only, not the node;
- ``slurm``: Slurm's own accounting (``AcctGatherEnergyType``, ``sacct`` ConsumedEnergy). The
  ranks only note their job step (``SLURM_JOB_ID.SLURM_STEP_ID``); the login node asks
  ``sacct`` for the step's joules when it ingests the run (``results_db/ingest/slurm_energy.py``),
  since Slurm writes them when the step ends. Never chosen by ``auto``: only a site whose
  Slurm gathers energy can declare it.

A reading is *measured* (a counter of the hardware), never a TDP guess; where no source is
readable the energy is missing with the sources tried and why each failed (``NoCounter``),
and where a counter goes missing or restarts mid-run it is missing too, with the reason. ``SCALESTUDY_ENERGY_ROOT`` points the sysfs readers at another
root (a recorded tree, for tests).
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SOURCES = ("auto", "pm_counters", "rapl", "nvml", "slurm", "none")
ENERGY_ENV, ROOT_ENV = "SCALESTUDY_ENERGY", "SCALESTUDY_ENERGY_ROOT"
WRAP_SAMPLE_SECONDS = 30.0
STILL_COUNTER_SECONDS = 1.0   # a counter unchanged for this long is not counting
_PM = re.compile(r"^\s*(\d+)\s*J\b")


class CounterLost(Exception):
    """A counter vanished, became unreadable or restarted: the interval's energy is unknown."""


@dataclass
class EnergyReading:
    host: str
    source: str
    joules: float | None      # None: unknown (``note`` says why)
    seconds: float
    domains: int              # packages, GPUs or nodes read
    kind: str | None = "measured"   # None: nothing was read (no counter)
    note: str | None = None
    slurm_step: str | None = None   # source ``slurm``: the step whose accounting holds the joules

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Meter(ABC):
    """A cumulative energy counter of this host."""

    name: str = ""

    @abstractmethod
    def sample(self) -> Any:
        """The counter's state now (opaque; raises ``CounterLost``)."""

    @abstractmethod
    def joules(self, first: Any, last: Any) -> float:
        """Energy between two samples (raises ``CounterLost``)."""

    domains: int = 1


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise CounterLost(f"{path}: {exc.strerror or exc}") from None


class PmCounters(Meter):
    name = "pm_counters"

    def __init__(self, root: Path) -> None:
        self.folder = root / "sys" / "cray" / "pm_counters"
        if not (self.folder / "energy").is_file():
            raise FileNotFoundError(f"{self.folder / 'energy'}: no such file")

    def sample(self) -> tuple[int, str]:
        """(joules, startup). A node without ``startup`` (an older pm_counters) shows a restart
        only where the counter went backwards."""
        text = _read(self.folder / "energy")
        match = _PM.match(text)
        if not match:
            raise CounterLost(f"{self.folder / 'energy'}: {text.strip()!r} is not '<value> J ...'")
        startup = _read(self.folder / "startup").strip() if (self.folder / "startup").exists() else ""
        return int(match.group(1)), startup

    def joules(self, first, last) -> float:
        if first[1] != last[1]:
            raise CounterLost(f"pm_counters restarted during the run (startup {first[1]} -> {last[1]})")
        if last[0] < first[0]:
            raise CounterLost(f"pm_counters went backwards ({first[0]} -> {last[0]} J)")
        return float(last[0] - first[0])


class Rapl(Meter):
    name = "rapl"

    def __init__(self, root: Path) -> None:
        base = root / "sys" / "class" / "powercap"
        tops = sorted(p for p in base.glob("intel-rapl:*") if re.fullmatch(r"intel-rapl:\d+", p.name)
                      and (p / "energy_uj").is_file())
        self.packages = [p for p in tops if _domain_name(p).startswith("package")]
        if not self.packages:
            found = ", ".join(f"{p.name} {_domain_name(p)}" for p in tops)
            raise FileNotFoundError(f"{base}: no RAPL package domain" + (f" (only {found})" if found else ""))
        self.ranges = [int(_read(p / "max_energy_range_uj")) for p in self.packages]
        self.domains = len(self.packages)
        self._lock = threading.Lock()
        self._total = 0.0                    # µJ accumulated since the first sample
        self._last: list[int] | None = None

    def _raw(self) -> list[int]:
        try:
            return [int(_read(p / "energy_uj")) for p in self.packages]
        except ValueError as exc:
            raise CounterLost(f"rapl: {exc}") from None

    def sample(self) -> float:
        """Accumulated µJ, each package's wrap undone (a package's counter restarts at 0 past
        its range: a smaller value than the last read means one wrap). Read under the lock, so
        that the sampler thread's read and the last one are applied in the order they were made."""
        with self._lock:
            raw = self._raw()
            if self._last is not None:
                for now, before, span in zip(raw, self._last, self.ranges):
                    self._total += now - before if now >= before else now + span - before
            self._last = raw
            return self._total

    def joules(self, first, last) -> float:
        return (last - first) / 1e6


def _domain_name(domain: Path) -> str:
    """A top RAPL domain's ``name``; a kernel old enough to lack the file had packages only."""
    try:
        return (domain / "name").read_text().strip()
    except OSError:
        return "package"


class Nvml(Meter):
    name = "nvml"

    def __init__(self, nvml=None, gpus: str | None = None) -> None:
        """``gpus``: the host's GPUs in ``CUDA_VISIBLE_DEVICES`` form (indices or UUIDs), all
        its ranks' together; default this process's ``CUDA_VISIBLE_DEVICES``, else every GPU."""
        if nvml is None:
            import pynvml as nvml   # the [gpu] extra (nvidia-ml-py)
        self.nvml = nvml
        nvml.nvmlInit()
        listed = gpus if gpus is not None else os.environ.get("CUDA_VISIBLE_DEVICES")
        count = nvml.nvmlDeviceGetCount()
        names = [g.strip() for g in listed.split(",") if g.strip()] if listed else [str(i) for i in range(count)]
        self.handles = []
        for name in dict.fromkeys(names):
            if name.isdigit():
                if int(name) < count:
                    self.handles.append(nvml.nvmlDeviceGetHandleByIndex(int(name)))
            else:                       # GPU-<uuid> (MIG devices have no energy counter: lost below)
                self.handles.append(nvml.nvmlDeviceGetHandleByUUID(name))
        if not self.handles:
            raise FileNotFoundError("no GPU visible to NVML")
        self.domains = len(self.handles)

    def sample(self) -> list[int]:
        try:
            return [int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self.handles]
        except Exception as exc:   # noqa: BLE001 - NVMLError_* and friends
            raise CounterLost(f"nvml: {exc}") from None

    def joules(self, first, last) -> float:
        if any(b < a for a, b in zip(first, last)):
            raise CounterLost("nvml: a GPU's energy counter went backwards (driver reloaded?)")
        return sum(b - a for a, b in zip(first, last)) / 1e3


class SlurmStep(Meter):
    """No counter on the node: the step's joules come from Slurm's accounting at ingestion."""

    name = "slurm"

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        environ = os.environ if environ is None else environ
        job, step = environ.get("SLURM_JOB_ID", ""), environ.get("SLURM_STEP_ID", "")
        if not (job.isdigit() and step.isdigit()):
            raise FileNotFoundError("not inside a Slurm job step (no SLURM_JOB_ID and SLURM_STEP_ID): "
                                    "Slurm accounts energy per step started by srun")
        self.step = f"{job}.{step}"

    def sample(self) -> None:
        return None

    def joules(self, first, last) -> float:
        raise CounterLost("slurm: the step's energy is read from sacct at ingestion")


class NoCounter(Meter):
    """Stands for a host where no source was readable, so that its reading says which sources
    were tried and why each failed: without it the run would store no reason at all."""

    name = "none"
    domains = 0

    def __init__(self, tried: list[str]) -> None:
        self.why = f"no energy counter readable ({'; '.join(tried)})"

    def sample(self) -> None:
        raise CounterLost(self.why)

    def joules(self, first, last) -> float:
        raise CounterLost(self.why)


def open_meter(source: str | None = None, root: str | None = None, device: str = "cpu",
               gpus: str | None = None) -> Meter | None:
    """The host's meter for ``source``: a ``NoCounter`` naming what failed when none is
    readable, None when ``none`` turned energy off. ``auto``: the node's pm_counters; else,
    on a GPU run, NVML (the GPUs ``gpus`` names: a GPU run's energy is mostly its GPUs');
    else RAPL (the CPU packages)."""
    source = (source or os.environ.get(ENERGY_ENV) or "auto").strip()
    if source not in SOURCES:
        raise ValueError(f"{ENERGY_ENV}={source!r}: expected one of {', '.join(SOURCES)}")
    base = Path(root or os.environ.get(ROOT_ENV) or "/")
    auto = ["pm_counters", "nvml", "rapl"] if device == "cuda" else ["pm_counters", "rapl"]
    if source == "none":
        return None
    tried = []
    for name in {"auto": auto}.get(source, [source]):
        try:
            meter = {"pm_counters": lambda: PmCounters(base), "rapl": lambda: Rapl(base), "nvml": lambda: Nvml(gpus=gpus),
                     "slurm": lambda: SlurmStep()}[name]()
            meter.sample()     # readable now (RAPL's energy_uj is root-only on many kernels)
            return meter
        except Exception as exc:   # noqa: BLE001 - OSError, CounterLost, no pynvml, NVML's own errors
            tried.append(f"{name}: {_why(exc)}")
    return NoCounter(tried)


def _why(exc: BaseException) -> str:
    """The first line of why a source failed (NVML's errors run to several)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class HostEnergy:
    """The energy of this host over the run: started and stopped by the host's first rank."""

    def __init__(self, meter: Meter | None, host: str | None = None,
                 wrap_sample_seconds: float = WRAP_SAMPLE_SECONDS) -> None:
        self.meter, self.host = meter, host or socket.gethostname()
        self._note: str | None = None
        self._stop = threading.Event()
        self._began = time.monotonic()
        self._first = None
        self._thread: threading.Thread | None = None
        if meter is None:
            return
        try:
            self._first = meter.sample()
        except CounterLost as exc:
            self._note = str(exc)
            return
        if isinstance(meter, Rapl):
            self._thread = threading.Thread(target=self._keep, args=(wrap_sample_seconds,), daemon=True,
                                            name="energy-sampler")
            self._thread.start()

    def _keep(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                self.meter.sample()
            except CounterLost as exc:
                self._note = self._note or str(exc)
                return

    def stop(self) -> EnergyReading | None:
        """The reading (None where the host has no meter)."""
        if self.meter is None:
            return None
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        seconds = time.monotonic() - self._began
        if isinstance(self.meter, SlurmStep):
            return EnergyReading(self.host, self.meter.name, None, seconds, self.meter.domains,
                                 note="read from Slurm's accounting at ingestion", slurm_step=self.meter.step)
        joules = None
        if self._note is None:
            try:
                joules = self.meter.joules(self._first, self.meter.sample())
            except CounterLost as exc:
                self._note = str(exc)
        if joules is not None and joules <= 0 and seconds >= STILL_COUNTER_SECONDS:
            # a host draws watts: a counter that stood still for seconds is a stub (VMs expose those)
            joules, self._note = None, f"{self.meter.name}: the counter did not advance in {seconds:.1f} s"
        return EnergyReading(self.host, self.meter.name, joules, seconds, self.meter.domains,
                             kind=None if isinstance(self.meter, NoCounter) else "measured",
                             note=self._note if joules is None else None)


def start_host_energy(comm, device: str = "cpu") -> HostEnergy | None:
    """On the first rank of each host (shared-memory split), a started ``HostEnergy``; None
    on the others. The ranks are bound to their GPUs already: the first reads all of theirs.
    A bad ``SCALESTUDY_ENERGY`` fails the run at its start."""
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    listed = local.allgather(os.environ.get("CUDA_VISIBLE_DEVICES", "")) if device == "cuda" else []
    first = local.Get_rank() == 0
    local.Free()
    if not first:
        return None
    gpus = ",".join(dict.fromkeys(g.strip() for v in listed for g in v.split(",") if g.strip())) or None
    return HostEnergy(open_meter(device=device, gpus=gpus))
