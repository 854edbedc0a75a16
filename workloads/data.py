"""Data sets that need no download, and the global-batch sharding of data parallelism.

Every rank draws the same shuffled order of the training set (seeded by seed and
epoch) and takes its own contiguous slice of each global batch, so that N ranks with
batch b see exactly the samples one process with batch N*b would see. That makes
"4 ranks == 1 process with the global batch" a testable statement.
"""

from __future__ import annotations

import math
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
    num_classes: int | None   # None: a regression (float targets), which has no classes
    kind: str  # "image" (N,C,H,W), "vector" (N,1,L), "sequence" (N,T) of token ids, "regression" (N,F)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def task(self) -> str:
        """``regression`` where the targets are floats (the objective is then the mean squared
        error, ``workloads.objective``), else ``classification``."""
        return "regression" if self.y_train.is_floating_point() else "classification"


def _split(name: str, kind: str, x: np.ndarray, y: np.ndarray, num_classes: int, test_fraction: float = 0.2) -> Dataset:
    # The split is fixed (not tied to the run's seed) so every run is scored on the same samples.
    order = np.random.default_rng(12345).permutation(len(x))
    n_test = int(round(len(x) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return Dataset(name, torch.from_numpy(x[train]), torch.from_numpy(y[train]),
                   torch.from_numpy(x[test]), torch.from_numpy(y[test]), num_classes, kind)


def load_digits(path: str | None = None) -> Dataset:
    """scikit-learn's 8x8 handwritten digits (1797 images), shipped inside the package.

    Importing scikit-learn costs every rank 1.2 s of CPU on the test machine, more than the
    small runs that use this set take to train; so the arrays are kept once, per scikit-learn
    release, in the user's cache (``$XDG_CACHE_HOME/scalestudy``, ``~/.cache`` by default) and
    each rank reads them from there (``benchmarks/RESULTS.md``, issue 59)."""
    x, y = _digits_arrays()
    return _split("digits", "image", (x.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8), y.astype(np.int64), 10)


def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    import os
    import socket
    import zipfile
    from importlib import metadata
    from pathlib import Path

    try:
        release = metadata.version("scikit-learn")
    except metadata.PackageNotFoundError:
        release = "unknown"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "scalestudy" / f"digits-sklearn-{release}.npz"
    try:
        with np.load(cache) as kept:
            return kept["data"], kept["target"]
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        pass    # not kept yet (or a torn copy): from scikit-learn, then kept for the next rank
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        # a name no other rank shares, on this node or another (a home folder shared by the nodes)
        partial = cache.with_name(f"{cache.stem}.{socket.gethostname()}.{os.getpid()}.tmp.npz")
        np.savez(partial, data=bunch.data, target=bunch.target)
        os.replace(partial, cache)      # whole or not at all: ranks starting together may race here
    except OSError:
        pass    # a read-only home: every rank imports scikit-learn, as before
    return bunch.data, bunch.target


def synthetic_images(path: str | None = None, n: int = 3072, size: int = 32, classes: int = 10) -> Dataset:
    """CIFAR-shaped images (3x32x32): a smooth random template per class plus noise."""
    rng = np.random.default_rng(2024)
    coarse = rng.normal(size=(classes, 3, size // 4, size // 4)).astype(np.float32)
    templates = coarse.repeat(4, axis=2).repeat(4, axis=3)
    y = rng.integers(0, classes, size=n).astype(np.int64)
    x = templates[y] + rng.normal(scale=1.5, size=(n, 3, size, size)).astype(np.float32)
    return _split("synthetic_images", "image", x, y, classes)


def nt3_synthetic(path: str | None = None, n: int = 1024, length: int = 1000, classes: int = 2) -> Dataset:
    """NT3-shaped 1-D expression profiles: class-specific bumps at random places in noise."""
    rng = np.random.default_rng(2025)
    centers = rng.integers(50, length - 50, size=(classes, 8))
    grid = np.arange(length)
    profiles = np.zeros((classes, length), np.float32)
    for c in range(classes):
        for mu in centers[c]:
            profiles[c] += np.exp(-0.5 * ((grid - mu) / 6.0) ** 2).astype(np.float32)
    y = rng.integers(0, classes, size=n).astype(np.int64)
    x = (profiles[y] + rng.normal(scale=0.5, size=(n, length)).astype(np.float32))[:, None, :]
    return _split("nt3_synthetic", "vector", x, y, classes)


HYPERPLANE_SEED = 8193   # ours: the paper gives no generator (see ``hyperplane``)


def hyperplane(path: str | None = None, n: int = 32_768, features: int = 8_192, n_test: int = 4_096,
               noise: float = 1.0, seed: int = HYPERPLANE_SEED) -> Dataset:
    """Points near a random hyperplane: the regression of eager-SGD's first experiment (Li et al.,
    PPoPP'20, sec. 7.2.1: 32,768 points, 8,192 features, a one-layer MLP of 8,193 parameters,
    trained to a validation MSE of 4.7).

    The paper does not give its generator; this one is ours: ``x ~ N(0, I)`` in ``features``
    dimensions, ``y = w*.x + b* + e`` with ``w* ~ N(0, I)``, ``b* ~ N(0, 1)`` and noise
    ``e ~ N(0, noise^2)``, all drawn from ``seed`` (fixed, so every run fits the same plane;
    torch's generator, the same on every rank for one torch version). ``n`` training points and
    ``n_test`` more, from the same law, held out for validation. A model that predicts ``y``
    perfectly up to the noise has a validation MSE of ``noise^2`` (1.0); the least-squares fit
    to the training points about ``noise^2 (1 + features / (n - features))`` (1.33); the
    initial model (PyTorch's default init) about ``|w*|^2 + b*^2 + noise^2``, some 8,000.
    So eager-SGD's target, MSE 4.7, lies on the geometric part of SGD's descent, 3.7 noise
    variances above the floor: it takes most of the descent to reach, and no luck to cross
    (docs/explanation/eager-sgd-hyperplane.md).
    Targets are floats of shape (N,): ``workloads.objective`` scores them by squared error.
    """
    g = torch.Generator().manual_seed(int(seed))
    w = torch.randn(features, generator=g)
    b = torch.randn((), generator=g)
    x = torch.randn(n + n_test, features, generator=g)
    y = x @ w + b + noise * torch.randn(n + n_test, generator=g)
    return Dataset("hyperplane", x[:n], y[:n], x[n:], y[n:], None, "regression")


PAD = 0  # token id of padding; real tokens are >= 1


def token_sequences(path: str | None = None, n: int = 2048, length: int = 32, vocab: int = 32, classes: int = 4,
                    variable_length: bool = False) -> Dataset:
    """Token sequences whose class is the last real token, among distractor tokens.

    With ``variable_length`` lengths follow a long-tailed (log-normal) law between 8
    and 8 x ``length``, padded with ``PAD``: a batch costs what its longest sequence
    costs, so step times vary from rank to rank (inherent load imbalance).
    """
    rng = np.random.default_rng(2026)
    max_len = 8 * length if variable_length else length
    x = rng.integers(classes + 1, vocab, size=(n, max_len)).astype(np.int64)
    y = rng.integers(0, classes, size=n).astype(np.int64)
    if variable_length:
        lengths = np.clip(rng.lognormal(math.log(length), 0.8, size=n).astype(int), 8, max_len)
        x[np.arange(max_len)[None, :] >= lengths[:, None]] = PAD
    else:
        lengths = np.full(n, max_len)
    x[np.arange(n), lengths - 1] = y + 1
    return _split("sequences", "sequence", x, y, classes)


def cifar10(path: str | None) -> Dataset:
    """A local copy of CIFAR-10's python version (data_batch_1..5, test_batch)."""
    import pickle
    from pathlib import Path

    if not path:
        raise ValueError("dataset=cifar10 needs dataset_path, the folder with data_batch_* and test_batch")
    root = Path(path)

    def read(files):
        xs, ys = [], []
        for f in files:
            with open(f, "rb") as fh:
                batch = pickle.load(fh, encoding="bytes")
            xs.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
            ys.append(np.asarray(batch[b"labels"], dtype=np.int64))
        return np.concatenate(xs).astype(np.float32) / 255.0, np.concatenate(ys)

    train_files = sorted(root.glob("data_batch_*"))
    if not train_files or not (root / "test_batch").is_file():
        raise ValueError(f"dataset_path={path!r}: expected CIFAR-10 python batches (data_batch_1.., test_batch)")
    x_train, y_train = read(train_files)
    x_test, y_test = read([root / "test_batch"])
    mean = x_train.mean(axis=(0, 2, 3), keepdims=True)
    std = x_train.std(axis=(0, 2, 3), keepdims=True) + 1e-6
    return Dataset("cifar10", torch.from_numpy((x_train - mean) / std), torch.from_numpy(y_train),
                   torch.from_numpy((x_test - mean) / std), torch.from_numpy(y_test), 10, "image")


_IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".ppm"}


def image_folder(path: str | None, size: int = 32) -> Dataset:
    """``root/<class>/*.png`` (or ``root/train`` and ``root/test`` with class folders), resized to 32x32 RGB."""
    from pathlib import Path

    from PIL import Image

    if not path:
        raise ValueError("dataset=imagefolder needs dataset_path, a folder with one sub-folder per class")
    root = Path(path)

    def read(folder: Path, classes: list[str]):
        xs, ys = [], []
        for label, cls in enumerate(classes):
            for f in sorted((folder / cls).iterdir()):
                if f.suffix.lower() in _IMAGE_SUFFIXES:
                    with Image.open(f) as im:
                        xs.append(np.asarray(im.convert("RGB").resize((size, size)), dtype=np.float32) / 255.0)
                    ys.append(label)
        if not xs:
            raise ValueError(f"dataset_path={str(folder)!r}: no images in its class folders")
        return np.stack(xs).transpose(0, 3, 1, 2).copy(), np.asarray(ys, dtype=np.int64)

    if (root / "train").is_dir() and (root / "test").is_dir():
        classes = sorted(d.name for d in (root / "train").iterdir() if d.is_dir())
        (x_train, y_train), (x_test, y_test) = read(root / "train", classes), read(root / "test", classes)
        return Dataset("imagefolder", torch.from_numpy(x_train), torch.from_numpy(y_train),
                       torch.from_numpy(x_test), torch.from_numpy(y_test), len(classes), "image")
    if not root.is_dir():
        raise ValueError(f"dataset_path={path!r}: no such folder")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    if not classes:
        raise ValueError(f"dataset_path={path!r}: expected one sub-folder per class")
    x, y = read(root, classes)
    return _split("imagefolder", "image", x, y, len(classes))


_LOADERS = {
    "digits": load_digits,
    "synthetic_images": synthetic_images,
    "nt3_synthetic": nt3_synthetic,
    "sequences": token_sequences,
    "cifar10": cifar10,
    "imagefolder": image_folder,
    "hyperplane": hyperplane,
}


def load_dataset(name: str, path: str | None = None, variable_length: bool = False,
                 params: dict | None = None, seed: int = 0) -> Dataset:
    """A built-in data set by name, or the user's factory (see ``from_factory``)."""
    if name not in _LOADERS:
        return from_factory(name, path, params, seed)
    loader = _LOADERS[name]
    if variable_length:
        if name != "sequences":
            raise ValueError(f"variable-length samples (imbalance.kind=inherent) need dataset=sequences, not {name!r}")
        return token_sequences(path, variable_length=True)
    return loader(path)


def from_factory(name: str, path: str | None, params: dict | None, seed: int) -> Dataset:
    """The user's data set: a factory (import path or registered short name) that may take
    ``params``, ``seed`` and ``path`` and returns a ``Dataset``, or a mapping with
    ``x_train``, ``y_train``, ``x_test``, ``y_test`` (tensors or arrays; labels are class
    indices, per sample or per token) and optionally ``num_classes`` and ``kind``."""
    from .registry import call_factory, load_factory

    made = call_factory("dataset", load_factory("dataset", name), {"params": dict(params or {}), "seed": seed,
                                                                  "path": path})
    if isinstance(made, Dataset):
        return made
    if not isinstance(made, dict):
        raise TypeError(f"dataset factory {name} returned a {type(made).__name__}; expected a workloads.data.Dataset "
                        "or a dict with x_train, y_train, x_test, y_test")
    missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in made]
    if missing:
        raise ValueError(f"dataset factory {name} returned no {', '.join(missing)}")
    tensors = {k: torch.as_tensor(made[k]) for k in ("x_train", "y_train", "x_test", "y_test")}
    for k in ("y_train", "y_test"):
        tensors[k] = tensors[k].long()
    num_classes = int(made.get("num_classes") or int(max(tensors["y_train"].max(), tensors["y_test"].max())) + 1)
    return Dataset(name, tensors["x_train"], tensors["y_train"], tensors["x_test"], tensors["y_test"], num_classes,
                   str(made.get("kind", "custom")))


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
