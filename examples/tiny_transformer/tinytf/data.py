"""Token sequences from a random Markov chain: next-token prediction that a model can learn."""

from __future__ import annotations

import numpy as np


def make_dataset(params: dict, seed: int) -> dict:
    """scalestudy's dataset factory: inputs (N, T) of token ids, labels (N, T) = the next tokens.

    The corpus is the same for every seed (the seed drives model init and batch order);
    ``params`` may set ``vocab``, ``length`` and ``samples``."""
    vocab, length, n = int(params.get("vocab", 16)), int(params.get("length", 24)), int(params.get("samples", 2048))
    rng = np.random.default_rng(7)
    # each token has two likely successors: a learnable but not trivial chain
    transition = np.full((vocab, vocab), 0.2 / vocab)
    for a in range(vocab):
        transition[a, rng.choice(vocab, size=2, replace=False)] += 0.4
    transition /= transition.sum(axis=1, keepdims=True)
    tokens = np.empty((n, length + 1), dtype=np.int64)
    tokens[:, 0] = rng.integers(0, vocab, size=n)
    for t in range(length):
        cum = transition[tokens[:, t]].cumsum(axis=1)
        tokens[:, t + 1] = (rng.random((n, 1)) < cum).argmax(axis=1)
    split = n * 4 // 5
    x, y = tokens[:, :-1], tokens[:, 1:]
    return {"x_train": x[:split], "y_train": y[:split], "x_test": x[split:], "y_test": y[split:],
            "num_classes": vocab, "kind": "sequence"}
