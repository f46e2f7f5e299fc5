"""Positional encodings: how self-attention learns where a token is.

Introduced in chapter 5. Self-attention without positions is a bag of words: permuting the input
rows permutes the output rows. Adding a position vector to each token breaks that symmetry.

- ``sinusoidal_encoding``: Vaswani et al.'s fixed encoding,
  PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d)).
- ``relative_rotation``: the matrix M_k with PE(p + k) = M_k PE(p) for every p (a rotation of
  each (sin, cos) pair), the reason the encoding lets attention express relative offsets.
- ``LearnedPositionalEmbedding``: one trained vector per position.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnlab.validation import check_int, check_ints

__all__ = ["LearnedPositionalEmbedding", "relative_rotation", "sinusoidal_encoding"]


def _frequencies(d_model: int, base: float, dtype: torch.dtype, device: torch.device | str | None) -> torch.Tensor:
    return torch.exp(-math.log(base) * torch.arange(0, d_model, 2, dtype=dtype, device=device) / d_model)  # (d/2,)


def sinusoidal_encoding(
    max_len: int, d_model: int, *, base: float = 10_000.0, dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The sinusoidal positional encoding, shape ``(max_len, d_model)`` (defined in chapter 5).

    Even columns hold sines and odd columns cosines of ``p * w_i`` with ``w_i = base^(-2i/d)``.
    Made on ``device`` (PyTorch's default, the CPU, when ``None``); a module that registers it
    as a buffer takes it along when it moves.

    Raises:
        TypeError: a size is not an int.
        ValueError: a size is below 1, or ``d_model`` is odd.
    """
    check_ints("sinusoidal_encoding", max_len=max_len, d_model=d_model)
    if d_model % 2:
        raise ValueError(f"sinusoidal_encoding: d_model must be even (sin/cos pairs), got {d_model}")
    positions = torch.arange(max_len, dtype=dtype, device=device)[:, None]  # (max_len, 1)
    angles = positions * _frequencies(d_model, base, dtype, device)[None, :]  # (max_len, d/2)
    pe = torch.zeros(max_len, d_model, dtype=dtype, device=device)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe


def relative_rotation(
    offset: int, d_model: int, *, base: float = 10_000.0, dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The matrix ``M_k`` of shape ``(d_model, d_model)`` with ``PE(p + k) = M_k @ PE(p)`` (chapter 5).

    Each pair (sin(p w), cos(p w)) is rotated by the angle ``k w``:
    sin((p+k)w) = cos(kw) sin(pw) + sin(kw) cos(pw); cos((p+k)w) = -sin(kw) sin(pw) + cos(kw) cos(pw).
    Made on ``device`` (the CPU when ``None``), like ``sinusoidal_encoding``.
    """
    check_int("relative_rotation", "offset", offset, low=None)
    check_int("relative_rotation", "d_model", d_model)
    if d_model % 2:
        raise ValueError(f"relative_rotation: d_model must be even, got {d_model}")
    angles = offset * _frequencies(d_model, base, dtype, device)  # (d/2,)
    m = torch.zeros(d_model, d_model, dtype=dtype, device=device)
    c, s = torch.cos(angles), torch.sin(angles)
    idx = torch.arange(0, d_model, 2, device=device)
    m[idx, idx], m[idx, idx + 1] = c, s  # new sin = cos(kw) sin + sin(kw) cos
    m[idx + 1, idx], m[idx + 1, idx + 1] = -s, c  # new cos = -sin(kw) sin + cos(kw) cos
    return m


class LearnedPositionalEmbedding(nn.Module):
    """One trained vector per position, added to the token embeddings (defined in chapter 5).

    Shapes: input ``(B, N, d_model)`` with ``N <= max_len``; output the same.
    """

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        check_ints("LearnedPositionalEmbedding", max_len=max_len, d_model=d_model)
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3 or x.shape[-1] != self.embedding.embedding_dim:
            raise ValueError(
                f"LearnedPositionalEmbedding: x must have shape (B, N, {self.embedding.embedding_dim}), got {tuple(x.shape)}"
            )
        if x.shape[1] > self.max_len:
            raise ValueError(f"LearnedPositionalEmbedding: sequence length {x.shape[1]} exceeds max_len {self.max_len}")
        positions = torch.arange(x.shape[1], device=x.device)  # (N,)
        return x + self.embedding(positions)[None]  # (B, N, D) + (1, N, D)
