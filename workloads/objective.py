"""What every algorithm minimises and scores: cross-entropy over classes.

A model's logits are ``(N, C)`` with one label per sample (classification), or
``(N, T, C)`` with one label per token (e.g. a language model over generated
tokens); the second form is flattened to the first, so a user's sequence model
trains under every algorithm without a loss of its own.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _flat(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if logits.dim() == 3:
        return logits.reshape(-1, logits.shape[-1]), y.reshape(-1)
    return logits, y


def loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits, y = _flat(logits, y)
    return F.cross_entropy(logits, y)


def scores(logits: torch.Tensor, y: torch.Tensor) -> tuple[int, float, int]:
    """(correct predictions, summed loss, predictions) of one evaluation batch."""
    logits, y = _flat(logits, y)
    return (int((logits.argmax(dim=1) == y).sum().item()), float(F.cross_entropy(logits, y, reduction="sum").item()),
            int(y.numel()))
