"""Models trained by the workloads, looked up by the spec's ``model`` name."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn


class SmallCNN(nn.Module):
    """Two 3x3 convolutions and two dense layers: enough to learn 8x8 digits in seconds."""

    def __init__(self, in_channels: int, height: int, width: int, num_classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        flat = 32 * (height // 2) * (width // 2)
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(flat, 64), nn.ReLU(), nn.Linear(64, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def _small_cnn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    c, h, w = input_shape
    return SmallCNN(c, h, w, num_classes)


_BUILDERS: dict[str, Callable[[tuple[int, ...], int], nn.Module]] = {"small_cnn": _small_cnn}


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, seed: int) -> nn.Module:
    try:
        builder = _BUILDERS[name]
    except KeyError:
        raise ValueError(f"model={name!r} is unknown; known: {', '.join(sorted(_BUILDERS))}") from None
    torch.manual_seed(seed)
    return builder(input_shape, num_classes)
