"""Tensor fusion: many small gradients travel in one collective.

A collective has a fixed latency cost; ResNet-50's 161 gradient tensors sent one by
one pay it 161 times. Packing ready tensors into one contiguous buffer (up to a
threshold, Horovod's ``HOROVOD_FUSION_THRESHOLD``) pays it once per buffer.
"""

from __future__ import annotations

from typing import Sequence

import torch


def plan_fusion(ready: Sequence[int], nbytes: Sequence[int], threshold_bytes: int) -> list[list[int]]:
    """Split ``ready`` (in the order given) into groups of at most ``threshold_bytes``.

    ``threshold_bytes == 0`` disables fusion (one group per tensor); a tensor larger
    than the threshold travels alone. Every rank calls this on the same inputs, so
    every rank performs the same collectives in the same order.
    """
    if threshold_bytes <= 0:
        return [[i] for i in ready]
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i in ready:
        if current and size + nbytes[i] > threshold_bytes:
            groups.append(current)
            current, size = [], 0
        current.append(i)
        size += nbytes[i]
    if current:
        groups.append(current)
    return groups


class FusionBuffer:
    """A reusable contiguous float32 buffer that packs and unpacks gradient tensors, on the
    device of the tensors it packs."""

    def __init__(self, capacity: int = 0) -> None:
        self._flat = torch.empty(capacity, dtype=torch.float32)

    def _reserve(self, numel: int, device: torch.device) -> torch.Tensor:
        if self._flat.numel() < numel or self._flat.device != device:
            self._flat = torch.empty(max(numel, self._flat.numel()), dtype=torch.float32, device=device)
        return self._flat[:numel]

    def pack(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        flat = self._reserve(sum(t.numel() for t in tensors), tensors[0].device)
        offset = 0
        for t in tensors:
            n = t.numel()
            flat[offset:offset + n].copy_(t.reshape(-1))
            offset += n
        return flat

    def unpack(self, flat: torch.Tensor, tensors: Sequence[torch.Tensor], scale: float = 1.0) -> None:
        """Copy ``flat`` back into ``tensors``, multiplied by ``scale``."""
        offset = 0
        for t in tensors:
            n = t.numel()
            src = flat[offset:offset + n].view_as(t)
            if scale == 1.0:
                t.copy_(src)
            else:
                torch.mul(src, scale, out=t)
            offset += n
