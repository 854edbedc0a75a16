"""A small causal transformer language model: logits (batch, time, vocabulary)."""

from __future__ import annotations

import torch
from torch import nn


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int, length: int, d_model: int, layers: int, heads: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.position = nn.Parameter(torch.zeros(1, length, d_model))
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(length), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        h = self.embed(tokens) + self.position[:, :t]
        return self.head(self.encoder(h, mask=self.mask[:t, :t], is_causal=True))


def make_model(input_shape: tuple[int, ...], num_classes: int, params: dict) -> nn.Module:
    """scalestudy's model factory: ``input_shape`` is (time,), ``num_classes`` the vocabulary;
    ``params`` holds the run's free parameters (+params.d_model=64 ...)."""
    return TinyTransformer(vocab=num_classes, length=input_shape[0], d_model=int(params.get("d_model", 32)),
                           layers=int(params.get("layers", 2)), heads=int(params.get("heads", 2)))
