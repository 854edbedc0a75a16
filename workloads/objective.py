"""What every algorithm minimises and scores: cross-entropy over classes, or the mean squared
error of a regression; the targets decide which.

- **Classification** (integer targets): a model's logits are ``(N, C)`` with one label per
  sample, or ``(N, T, C)`` with one label per token (e.g. a language model over generated
  tokens); the second form is flattened to the first, so a user's sequence model trains
  under every algorithm without a loss of its own. The loss is cross-entropy.
- **Regression** (floating-point targets, e.g. ``workloads.data.hyperplane``): the output
  holds one prediction per target value (``(N, 1)`` against targets ``(N,)``, or any shapes
  of the same number of elements); the loss is the mean squared error over those elements.

The contract of ``scores`` (one evaluation batch), which the training loops sum over batches
and ranks:

- classification: ``(correct, summed cross-entropy, predictions)``, so top-1 = correct / n
  and the loss = summed / n;
- regression: ``(None, summed squared error, target values)``: ``None`` says there is no
  top-1 (the caller reports it as NaN, ``top1``), and summed / n is the validation MSE.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def is_regression(y: torch.Tensor) -> bool:
    """Floating-point targets: a regression (mean squared error); integers are class labels."""
    return y.is_floating_point()


def _flat(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if logits.dim() == 3:
        return logits.reshape(-1, logits.shape[-1]), y.reshape(-1)
    return logits, y


def _paired(output: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A regression's predictions and targets as two flat vectors of one dtype."""
    if output.numel() != y.numel():
        raise ValueError(f"a regression's output {tuple(output.shape)} holds {output.numel()} predictions for "
                         f"{y.numel()} target values {tuple(y.shape)}: expected one per value")
    return output.reshape(-1), y.reshape(-1).to(output.dtype)


def loss(output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The training loss of one batch: mean cross-entropy, or mean squared error (float targets)."""
    if is_regression(y):
        return F.mse_loss(*_paired(output, y))
    output, y = _flat(output, y)
    return F.cross_entropy(output, y)


def scores(output: torch.Tensor, y: torch.Tensor) -> tuple[int | None, float, int]:
    """(correct predictions or None, summed loss, predictions) of one evaluation batch (the
    module docstring says what each is for either task)."""
    if is_regression(y):
        pred, target = _paired(output, y)
        return None, float(((pred - target) ** 2).sum().item()), int(target.numel())
    output, y = _flat(output, y)
    return (int((output.argmax(dim=1) == y).sum().item()), float(F.cross_entropy(output, y, reduction="sum").item()),
            int(y.numel()))


def top1(correct: float | None, count: float) -> float:
    """Top-1 accuracy from summed ``scores``: NaN where there is none (a regression's None)."""
    return math.nan if correct is None or count == 0 else float(correct) / float(count)
