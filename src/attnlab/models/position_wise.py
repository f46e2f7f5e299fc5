"""The Transformer's position-wise parts: the feed-forward network and the token embedding.

Introduced in chapter 6, smallest piece first: each part treats every position on its own, and
the attention between positions is the rest of ``attnlab.models.transformer``.
``FeedForward`` is also the second sub-layer of chapter 8's ``LMBlock``.

Shapes: tokens ``(B, N)``, model size ``D = d_model``, feed-forward size ``F``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from attnlab.attention.positional import sinusoidal_encoding

__all__ = ["ACTIVATIONS", "FeedForward", "TokenEmbedding"]


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": nn.functional.relu,
    "gelu": nn.functional.gelu,
}


class FeedForward(nn.Module):
    """Position-wise feed-forward network ``W_2 act(W_1 x + b_1) + b_2`` (chapter 6).

    The same two linear layers are applied at every position (a 1 x 1 convolution); in the
    paper ``512 -> 2048 -> 512``. Shapes: ``(B, N, D) -> (B, N, D)``.
    """

    def __init__(self, d_model: int, dim_feedforward: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))  # (B, N, D) -> (B, N, F) -> (B, N, D)


class TokenEmbedding(nn.Module):
    """Token embedding times ``sqrt(d_model)``, plus sinusoidal positions, then dropout (chapter 6).

    The embedding is initialised with standard deviation ``d_model ** -0.5``, so that after the
    scaling the token part has unit variance, comparable with the positional part (whose entries
    have variance 1/2). Initialised from a standard normal instead, the scaled tokens are ``sqrt(d_model)`` times
    larger than the positions and drown them.
    """

    pe: torch.Tensor  # (max_len, D), a buffer

    def __init__(self, vocab_size: int, d_model: int, max_len: int, dropout: float = 0.0):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.embedding = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        """``tokens (B, N)`` at positions ``start .. start + N - 1`` -> ``(B, N, D)``."""
        end = start + tokens.shape[1]
        if end > self.max_len:
            raise ValueError(f"TokenEmbedding: positions up to {end} exceed max_len {self.max_len}")
        x = self.embedding(tokens) * math.sqrt(self.d_model)  # (B, N) -> (B, N, D)
        return self.dropout(x + self.pe[start:end])  # + (N, D)
