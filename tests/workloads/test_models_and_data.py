"""Models and data sets: shapes, learnability, and local data sets read from generated files."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from workloads.data import GlobalBatchSampler, load_dataset, shard
from workloads.models import build_model, resnet50_gradient_shapes
from workloads.registry import DATASETS, MODELS


def test_resnet50_gradient_shapes_are_resnet50s():
    shapes = resnet50_gradient_shapes()
    assert len(shapes) == 161 and sum(math.prod(s) for s in shapes) == 25_557_032


@pytest.mark.parametrize("model, dataset", [("small_cnn", "digits"), ("resnet20", "synthetic_images"),
                                            ("nt3", "nt3_synthetic"), ("lstm", "sequences")])
@pytest.mark.sweep
def test_each_model_learns_its_data(model, dataset):
    torch.set_num_threads(1)
    data = load_dataset(dataset)
    assert MODELS[model] == DATASETS[dataset][0] == data.kind
    net = build_model(model, data.input_shape, data.num_classes, seed=0)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    x, y = data.x_train[:16], data.y_train[:16]
    first = F.cross_entropy(net(x), y).item()
    for _ in range(30):
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
    assert loss.item() < first * 0.5, f"{model} did not fit 16 samples: {first:.3f} -> {loss.item():.3f}"


def test_nt3_keeps_most_parameters_in_one_dense_layer():
    net = build_model("nt3", (1, 2000), 2, seed=0)
    sizes = sorted((p.numel() for p in net.parameters()), reverse=True)
    assert sizes[0] > 0.9 * sum(sizes)


def test_global_batches_partition_the_epoch():
    samplers = [GlobalBatchSampler(100, 8, r, 3, seed=1) for r in range(3)]
    steps = [list(s.epoch(0)) for s in samplers]
    assert all(len(st) == 100 // 24 for st in steps)
    for k in range(len(steps[0])):
        together = np.concatenate([steps[r][k] for r in range(3)])
        assert len(set(together)) == 24  # disjoint shares of one global batch
    one = GlobalBatchSampler(100, 24, 0, 1, seed=1)
    assert [list(b) for b in one.epoch(0)] == [list(np.concatenate([steps[r][k] for r in range(3)]))
                                               for k in range(len(steps[0]))]
    assert [shard(10, r, 3) for r in range(3)] == [slice(0, 4), slice(4, 7), slice(7, 10)]


def test_cifar10_from_a_local_copy(tmp_path):
    rng = np.random.default_rng(0)
    for name, n in [("data_batch_1", 20), ("data_batch_2", 10), ("test_batch", 8)]:
        batch = {b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
                 b"labels": list(rng.integers(0, 10, size=n))}
        with open(tmp_path / name, "wb") as fh:
            pickle.dump(batch, fh)
    data = load_dataset("cifar10", str(tmp_path))
    assert data.x_train.shape == (30, 3, 32, 32) and data.x_test.shape == (8, 3, 32, 32)
    assert data.kind == "image" and data.num_classes == 10
    assert abs(float(data.x_train.mean())) < 1e-4  # normalised per channel


def test_cifar10_path_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="needs dataset_path"):
        load_dataset("cifar10", None)
    with pytest.raises(ValueError, match="expected CIFAR-10 python batches"):
        load_dataset("cifar10", str(tmp_path))


def test_image_folder_from_generated_pngs(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in (("train", 6), ("test", 2)):
        for cls in ("cats", "dogs", "owls"):
            (tmp_path / split / cls).mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 256, size=(40, 50, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(tmp_path / split / cls / f"{i}.png")
    data = load_dataset("imagefolder", str(tmp_path))
    assert data.x_train.shape == (18, 3, 32, 32) and data.x_test.shape == (6, 3, 32, 32)
    assert data.num_classes == 3 and sorted(set(data.y_train.tolist())) == [0, 1, 2]
    assert 0.0 <= float(data.x_train.min()) and float(data.x_train.max()) <= 1.0
    # without train/test folders the classes are split 80/20
    flat = load_dataset("imagefolder", str(tmp_path / "train"))
    assert len(flat.x_train) + len(flat.x_test) == 18 and flat.num_classes == 3


def test_digits_are_scikit_learns_and_kept_so_a_rank_need_not_import_it(tmp_path):
    """The first load keeps scikit-learn's arrays in the cache; a later rank reads them without
    importing scikit-learn (1.2 s of CPU a rank here), and gets the same data. A torn copy is
    not trusted: the set comes from scikit-learn again (the control)."""
    import os
    import subprocess
    import sys

    from sklearn.datasets import load_digits

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    program = ("import sys, torch; from workloads.data import load_digits; d = load_digits(); "
               "torch.save((d.x_train, d.y_train, d.x_test, d.y_test), sys.argv[1]); "
               "print('sklearn' in sys.modules)")
    seen = []
    for name in ("first", "kept", "torn"):
        if name == "torn":
            [kept] = (tmp_path / "scalestudy").glob("digits-sklearn-*.npz")
            kept.write_bytes(kept.read_bytes()[:100])
        out = subprocess.run([sys.executable, "-c", program, str(tmp_path / f"{name}.pt")], env=env,
                             capture_output=True, text=True, check=True)
        seen.append(out.stdout.strip())
    assert seen == ["True", "False", "True"]
    first, kept, torn = (torch.load(tmp_path / f"{n}.pt") for n in ("first", "kept", "torn"))
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(first, kept, torn))
    bunch = load_digits()
    images = torch.cat([first[0], first[2]]).reshape(len(bunch.data), -1) * 16
    assert sorted(map(tuple, images.tolist())) == sorted(map(tuple, bunch.data.tolist()))
