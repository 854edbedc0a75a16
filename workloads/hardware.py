"""The host a rank ran on, as an evaluation committee asks for it: CPU model, sockets, cores,
hardware threads, memory, OS and kernel. Read by the first rank at ``run_start`` from the files
the kernel itself exposes (``/proc/cpuinfo``, ``/proc/meminfo``, ``/etc/os-release``), not from
the login node, where the artifact is packed and which is often another machine. The GPU's model
and driver are recorded beside it (``placement.gpu_facts``), the interconnect by the site file.
Each field is None where the host does not say (a CPU without "physical id", a container without
``/etc/os-release``)."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any


def _cpuinfo(text: str) -> dict[str, Any]:
    """Model, sockets, physical cores, hardware threads from ``/proc/cpuinfo``'s blocks."""
    model, sockets, cores, threads = None, set(), set(), 0
    for block in text.strip().split("\n\n"):
        fields = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if "processor" not in fields:
            continue
        threads += 1
        model = model or fields.get("model name") or fields.get("cpu model") or fields.get("Model")
        if "physical id" in fields:
            sockets.add(fields["physical id"])
            if "core id" in fields:
                cores.add((fields["physical id"], fields["core id"]))
    return {"cpu_model": model, "sockets": len(sockets) or None, "cores": len(cores) or None,
            "hardware_threads": threads or os.cpu_count()}


def _memory_gib(text: str) -> float | None:
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 2**20, 1)   # kB
    return None


def _os_name(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def host_hardware(proc: Path = Path("/proc"), etc: Path = Path("/etc")) -> dict[str, Any]:
    """This host's hardware and system (module docstring)."""
    return {**_cpuinfo(_read(proc / "cpuinfo")), "memory_gib": _memory_gib(_read(proc / "meminfo")),
            "os": _os_name(_read(etc / "os-release")) or platform.system(), "kernel": platform.release(),
            "machine": platform.machine()}


def describe(hardware: dict[str, Any] | None) -> str:
    """One line: ``AMD EPYC, 1 socket, 2 cores (2 hardware threads), 23.5 GiB, Debian GNU/Linux 12
    (bookworm), kernel 6.18.44``: what the report's provenance and the artifact's README print."""
    if not isinstance(hardware, dict):
        return "not recorded"
    h = hardware
    parts = [h.get("cpu_model") or "CPU model not recorded"]
    if h.get("sockets"):
        parts.append(f"{h['sockets']} socket{'s' if h['sockets'] != 1 else ''}")
    if h.get("cores"):
        parts.append(f"{h['cores']} cores ({h.get('hardware_threads')} hardware threads)")
    elif h.get("hardware_threads"):
        parts.append(f"{h['hardware_threads']} hardware threads")
    if h.get("memory_gib") is not None:
        parts.append(f"{h['memory_gib']:g} GiB")
    if h.get("os"):
        parts.append(str(h["os"]))
    if h.get("kernel"):
        parts.append(f"kernel {h['kernel']}")
    return ", ".join(parts)
