"""The host's hardware as a rank records it (``workloads.hardware``), read from the kernel's own
files: checked on a two-socket /proc/cpuinfo written out here (an independent count: 2 sockets x 2
cores x 2 threads) and on this machine's, against what ``os`` and ``platform`` say."""

from __future__ import annotations

import os
import platform

from workloads.hardware import describe, host_hardware


def _cpu(n: int, socket: int, core: int) -> str:
    return (f"processor\t: {n}\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz\n"
            f"physical id\t: {socket}\ncore id\t\t: {core}\n")


def test_sockets_cores_and_threads_are_counted_from_cpuinfo(tmp_path):
    proc, etc = tmp_path / "proc", tmp_path / "etc"
    proc.mkdir(), etc.mkdir()
    blocks = [_cpu(n, socket, core) for n, (socket, core) in enumerate((s, c) for s in (0, 1) for c in (0, 1)
                                                                         for _ in (0, 1))]
    (proc / "cpuinfo").write_text("\n".join(blocks) + "\n")
    (proc / "meminfo").write_text("MemTotal:       196608000 kB\nMemFree: 1 kB\n")
    (etc / "os-release").write_text('NAME="SLES"\nPRETTY_NAME="SUSE Linux Enterprise Server 15 SP4"\n')
    h = host_hardware(proc, etc)
    assert (h["sockets"], h["cores"], h["hardware_threads"]) == (2, 4, 8)
    assert h["memory_gib"] == round(196608000 / 2**20, 1) and h["os"] == "SUSE Linux Enterprise Server 15 SP4"
    assert describe(h).startswith("Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz, 2 sockets, 4 cores (8 hardware threads)")


def test_a_host_that_says_nothing_gives_none_not_a_guess(tmp_path):
    h = host_hardware(tmp_path / "none", tmp_path / "none")
    assert h["cpu_model"] is None and h["sockets"] is None and h["memory_gib"] is None
    assert h["hardware_threads"] == os.cpu_count() and h["kernel"] == platform.release()
    assert describe(None) == "not recorded"


def test_this_machine(tmp_path):
    h = host_hardware()
    assert h["hardware_threads"] == os.cpu_count() and h["kernel"] == platform.release()
    assert h["memory_gib"] and h["memory_gib"] > 0
