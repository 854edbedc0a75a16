"""Models trained by the workloads, looked up by the spec's ``model`` name.

They stress gradient fusion differently: ResNets have many small tensors (a conv
and two batch-norm vectors per layer), NT3 has a few tensors with one dense layer
holding most parameters, the LSTM has a few large fused-gate matrices.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn


class SmallCNN(nn.Module):
    """Two 3x3 convolutions and two dense layers: enough to learn 8x8 digits in seconds."""

    def __init__(self, in_channels: int, height: int, width: int, num_classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2),
        )
        flat = 32 * (height // 2) * (width // 2)
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(flat, 64), nn.ReLU(), nn.Linear(64, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int) -> None:
        super().__init__()
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != out:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        return torch.relu(self.bn3(self.conv3(y)) + self.shortcut(x))


class ResNet(nn.Module):
    """ResNet for small images (CIFAR-style stem); ``resnet50`` has ImageNet ResNet-50's 161 tensors."""

    def __init__(self, block, layers: list[int], widths: list[int], in_channels: int, num_classes: int,
                 stem: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, stem, 7 if block is Bottleneck else 3,
                               1, 3 if block is Bottleneck else 1, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        stages, cin = [], stem
        for i, (n, width) in enumerate(zip(layers, widths)):
            blocks = []
            for j in range(n):
                blocks.append(block(cin, width, 2 if (i > 0 and j == 0) else 1))
                cin = width * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        return self.fc(torch.flatten(self.pool(self.stages(x)), 1))


class NT3(nn.Module):
    """CANDLE NT3's shape: two 1-D convolutions, then a dense layer that holds most parameters."""

    def __init__(self, length: int, num_classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, 128, 20), nn.ReLU(), nn.MaxPool1d(1),
            nn.Conv1d(128, 128, 10), nn.ReLU(), nn.MaxPool1d(10),
        )
        flat = 128 * ((length - 19 - 9) // 10)
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(flat, 200), nn.ReLU(), nn.Dropout(0.1),
            nn.Linear(200, 20), nn.ReLU(), nn.Dropout(0.1), nn.Linear(20, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class LSTMClassifier(nn.Module):
    """Embedding, one LSTM layer, and a linear head on the last hidden state."""

    def __init__(self, vocab: int, num_classes: int, embed: int = 64, hidden: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lengths = (x != 0).sum(dim=1).clamp(min=1)  # token 0 is padding
        x = x[:, : int(lengths.max())]               # a batch costs what its longest sequence costs
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(x), lengths.cpu(), batch_first=True,
                                                   enforce_sorted=False)
        _, (h, _) = self.lstm(packed)
        return self.head(h[-1])


class HyperplaneMLP(nn.Module):
    """eager-SGD's hyperplane regression model (Li et al., PPoPP'20, sec. 7.2.1): one dense layer
    from the features to one output, with bias (8,192 inputs: 8,193 parameters)."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.fc = nn.Linear(features, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


_VOCAB = 32  # workloads.data.token_sequences

_BUILDERS: dict[str, Callable[[tuple[int, ...], int], nn.Module]] = {
    "small_cnn": lambda shape, k: SmallCNN(shape[0], shape[1], shape[2], k),
    "resnet20": lambda shape, k: ResNet(BasicBlock, [3, 3, 3], [16, 32, 64], shape[0], k, stem=16),
    "resnet32": lambda shape, k: ResNet(BasicBlock, [5, 5, 5], [16, 32, 64], shape[0], k, stem=16),
    "resnet50": lambda shape, k: ResNet(Bottleneck, [3, 4, 6, 3], [64, 128, 256, 512], shape[0], k, stem=64),
    "nt3": lambda shape, k: NT3(shape[-1], k),
    "lstm": lambda shape, k: LSTMClassifier(_VOCAB, k),
    "hyperplane_mlp": lambda shape, k: HyperplaneMLP(math.prod(shape)),   # a regression: no k
}


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int | None, seed: int,
                params: dict | None = None) -> nn.Module:
    """A built-in model by name, or the user's factory (an import path or a registered
    short name; see ``workloads.registry``), seeded the same way on every rank."""
    torch.manual_seed(seed)
    if name in _BUILDERS:
        return _BUILDERS[name](input_shape, num_classes)
    from .registry import call_factory, load_factory

    factory = load_factory("model", name)
    model = call_factory("model", factory, {"input_shape": tuple(input_shape), "num_classes": num_classes,
                                            "params": dict(params or {}), "seed": seed})
    if not isinstance(model, nn.Module):
        raise TypeError(f"model factory {name} returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def resnet50_gradient_shapes() -> list[tuple[int, ...]]:
    """ResNet-50's parameter shapes (ImageNet head: 1000 classes): 161 tensors, 25.6 M values."""
    model = ResNet(Bottleneck, [3, 4, 6, 3], [64, 128, 256, 512], 3, 1000, stem=64)
    return [tuple(p.shape) for p in model.parameters()]
