"""Data sets that need no download, and the global-batch sharding of data parallelism.

Every rank draws the same shuffled order of the training set (seeded by seed and
epoch) and takes its own contiguous slice of each global batch, so that N ranks with
batch b see exactly the samples one process with batch N*b would see. That makes
"4 ranks == 1 process with the global batch" a testable statement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch


@dataclass(frozen=True)
class Dataset:
    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def load_digits(test_fraction: float = 0.2) -> Dataset:
    """scikit-learn's 8x8 handwritten digits (1797 images), shipped inside the package."""
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    x = (bunch.data.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = bunch.target.astype(np.int64)
    # The split is fixed (not tied to the run's seed) so every run is scored on the
    # same held-out images.
    order = np.random.default_rng(12345).permutation(len(x))
    n_test = int(round(len(x) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return Dataset(
        name="digits",
        x_train=torch.from_numpy(x[train]),
        y_train=torch.from_numpy(y[train]),
        x_test=torch.from_numpy(x[test]),
        y_test=torch.from_numpy(y[test]),
        num_classes=10,
    )


_LOADERS = {"digits": load_digits}


def load_dataset(name: str) -> Dataset:
    try:
        loader = _LOADERS[name]
    except KeyError:
        raise ValueError(f"dataset={name!r} is unknown; known: {', '.join(sorted(_LOADERS))}") from None
    return loader()


@dataclass(frozen=True)
class GlobalBatchSampler:
    """Yields, per step, the sample indices of this rank's share of the global batch."""

    num_samples: int
    batch_size: int
    rank: int
    world_size: int
    seed: int
    max_steps: int | None = None

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.world_size

    def steps_per_epoch(self) -> int:
        full = self.num_samples // self.global_batch_size
        if full == 0:
            raise ValueError(
                f"global batch {self.global_batch_size} (batch_size={self.batch_size} x {self.world_size} ranks) "
                f"exceeds the {self.num_samples} training samples"
            )
        return full if self.max_steps is None else min(full, self.max_steps)

    def epoch(self, epoch: int) -> Iterator[np.ndarray]:
        order = np.random.default_rng([self.seed, epoch]).permutation(self.num_samples)
        g = self.global_batch_size
        lo = self.rank * self.batch_size
        for step in range(self.steps_per_epoch()):
            start = step * g + lo
            yield order[start:start + self.batch_size]


def shard(num_samples: int, rank: int, world_size: int) -> slice:
    """Contiguous, near-equal slice of an evaluation set for one rank."""
    per, extra = divmod(num_samples, world_size)
    start = rank * per + min(rank, extra)
    return slice(start, start + per + (1 if rank < extra else 0))
