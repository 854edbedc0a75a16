"""The host mirror's contract with a device whose copies run after the host moves on.

A stand-in for CUDA's copy stream (this machine has no GPU): ``join`` holds the device's
stream and not the host, so a host -> device copy reads the pinned buffer when the device
runs it, later. A write into the buffer before that copy has run would send the device the
new values for the old step: eager-SGD, applying several missed rounds' results in a row
through one buffer, wrote the next result while the last was still to be copied.
"""

from __future__ import annotations

import numpy as np
import torch

from workloads.comm.data_path import HostMirror


class LateCopyStream:
    """Copies run only when the host waits for them (or a later one): CUDA's order, at its latest."""

    copies_are_async = True

    def __init__(self) -> None:
        self.pending: list[tuple[torch.Tensor, torch.Tensor]] = []

    def host_buffer(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.zeros(numel, dtype=dtype)

    def mark(self):
        return None

    def copy_after(self, dst, src, after):
        self.pending.append((dst, src))
        return len(self.pending)

    def join(self, event) -> None:
        """The device's stream waits for the copy; the host goes on."""

    def wait(self, event) -> None:
        if event is None:
            return
        while self.pending and event > 0:
            dst, src = self.pending.pop(0)
            dst.copy_(src)
            event -= 1


def test_a_second_write_waits_for_the_copy_that_reads_the_first():
    device = torch.zeros(4)
    mirror = HostMirror(LateCopyStream(), device, separate=True)
    mirror.fill(torch.full((4,), 1.0))
    mirror.to_device()                     # on the copy stream: reads the buffer later
    mirror.fill(torch.full((4,), 2.0))     # must not overwrite what that copy has yet to read
    assert torch.equal(device, torch.full((4,), 1.0))
    mirror.to_device()
    np.testing.assert_array_equal(mirror.writable(), np.full(4, 2.0))
    assert torch.equal(device, torch.full((4,), 2.0))


def test_the_stand_in_catches_a_write_that_does_not_wait():
    """The control: written straight into the buffer, the first step's values are lost."""
    device = torch.zeros(4)
    mirror = HostMirror(LateCopyStream(), device, separate=True)
    mirror.host.copy_(torch.full((4,), 1.0))
    mirror.to_device()
    mirror.host.copy_(torch.full((4,), 2.0))
    mirror.device.wait(len(mirror.device.pending))
    assert torch.equal(device, torch.full((4,), 2.0))   # the 1.0 step never reached the device
