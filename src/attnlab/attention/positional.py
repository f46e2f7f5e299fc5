"""Positional encodings: how self-attention learns where a token is.

Introduced in chapter 5. Self-attention without positions is a bag of words: permuting the input
rows permutes the output rows. Adding a position vector to each token breaks that symmetry.

- ``sinusoidal_encoding``: Vaswani et al.'s fixed encoding,
  PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d)).
- ``relative_rotation``: the matrix M_k with PE(p + k) = M_k PE(p) for every p (a rotation of
  each (sin, cos) pair), the reason the encoding lets attention express relative offsets.
- ``LearnedPositionalEmbedding``: one trained vector per position.

Chapter 8 adds the two ways today's models give positions to attention itself, instead of to
the tokens:

- ``rotary_embedding`` (RoPE, Su et al. 2021): rotate each pair of features of a query or key
  at position p by the angle ``p * w_i``, so that the score of a query at m and a key at n
  depends on the offset ``n - m`` only (chapter 5's rotation, applied to q and k).
- ``alibi_slopes``, ``alibi_bias`` (Press et al. 2022): no position vectors at all; each head
  adds ``-m_h |i - j|`` to its scores, a penalty that grows with the distance.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnlab.validation import check_int, check_ints, check_number, check_tensor

__all__ = [
    "LearnedPositionalEmbedding",
    "alibi_bias",
    "alibi_slopes",
    "relative_rotation",
    "rotary_embedding",
    "sinusoidal_encoding",
]


def _frequencies(d_model: int, base: float, dtype: torch.dtype, device: torch.device | str | None) -> torch.Tensor:
    return torch.exp(-math.log(base) * torch.arange(0, d_model, 2, dtype=dtype, device=device) / d_model)  # (d/2,)


def sinusoidal_encoding(
    max_len: int,
    d_model: int,
    *,
    base: float = 10_000.0,
    dtype: torch.dtype = torch.float32,
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
    offset: int,
    d_model: int,
    *,
    base: float = 10_000.0,
    dtype: torch.dtype = torch.float64,
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
                f"LearnedPositionalEmbedding: x must have shape (B, N, {self.embedding.embedding_dim}), "
                f"got {tuple(x.shape)}"
            )
        if x.shape[1] > self.max_len:
            raise ValueError(f"LearnedPositionalEmbedding: sequence length {x.shape[1]} exceeds max_len {self.max_len}")
        positions = torch.arange(x.shape[1], device=x.device)  # (N,)
        return x + self.embedding(positions)[None]  # (B, N, D) + (1, N, D)


def rotary_embedding(x: torch.Tensor, positions: torch.Tensor | None = None, *, base: float = 10_000.0) -> torch.Tensor:
    """Rotary position embedding (RoPE): ``x`` with each feature pair rotated by its position's angle.

    Defined in chapter 8, after Su et al. (2021). Features ``(2i, 2i+1)`` of the row at
    position ``p`` are rotated by the angle ``p * w_i``, ``w_i = base^(-2i/E)`` (the frequencies
    of ``sinusoidal_encoding``): as a complex number, ``x_{2i} + i x_{2i+1}`` is multiplied by
    ``e^{i p w_i}``. Applied to queries and keys (never to values), it makes the score
    ``rope(q, m) . rope(k, n)`` a function of ``q``, ``k`` and the offset ``n - m`` only.

    Args:
        x: ``(..., N, E)``, ``E`` even: queries or keys (per head: ``(B, H, N, E)``).
        positions: ``(N,)`` positions of the rows (``0, ..., N-1`` when ``None``; a decoder with
            a cache passes ``t, ..., t + N - 1``).
        base: the base of the frequencies.

    Returns:
        A tensor of the shape and dtype of ``x``.
    """
    check_tensor("rotary_embedding", "x", x, kind="float")
    if x.dim() < 2 or x.shape[-1] % 2:
        raise ValueError(f"rotary_embedding: x must have shape (..., N, E) with E even, got {tuple(x.shape)}")
    check_number("rotary_embedding", "base", base, low=1, low_open=True)
    n = x.shape[-2]
    if positions is None:
        positions = torch.arange(n, device=x.device)
    else:
        check_tensor("rotary_embedding", "positions", positions, dim=1, shape=(n,), names=f"(N,) = ({n},)")
    # listing: rope
    dtype = torch.promote_types(x.dtype, torch.float32)  # the angles in float32 at least
    angles = positions.to(dtype)[:, None] * _frequencies(x.shape[-1], base, dtype, x.device)  # (N, E/2)
    cos, sin = torch.cos(angles), torch.sin(angles)
    even, odd = x[..., 0::2].to(dtype), x[..., 1::2].to(dtype)  # (..., N, E/2) each
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (..., N, E/2, 2)
    return rotated.flatten(-2).to(x.dtype)  # (..., N, E)
    # end listing: rope


def alibi_slopes(num_heads: int, *, device: torch.device | str | None = None) -> torch.Tensor:
    """ALiBi's slope ``m_h`` for each head, shape ``(num_heads,)`` (defined in chapter 8).

    Press et al. (2022), section 3: for ``n`` heads, a geometric sequence that starts at
    ``2^(-8/n)`` with that ratio (``1/2, 1/4, ..., 1/256`` for 8 heads). When ``n`` is not a power
    of two, the slopes of the closest smaller power of two, followed by every other slope of
    twice that many heads (as in the authors' code).
    """
    check_int("alibi_slopes", "num_heads", num_heads)

    def geometric(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    closest = 2 ** int(math.log2(num_heads))
    slopes = geometric(closest) + geometric(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32, device=device)


def alibi_bias(
    num_heads: int,
    num_queries: int,
    num_keys: int | None = None,
    *,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """ALiBi's bias ``-m_h |i - j|``, shape ``(num_heads, L, S)``: a float mask added to the scores.

    Defined in chapter 8, after Press et al. (2022). Query ``i`` sits at position ``S - L + i``
    (aligned bottom-right, like a decoder's new tokens after its cache), key ``j`` at ``j``. In a
    causal model only keys ``j <= i`` take part, and there the bias is the paper's
    ``-m_h (i - j)``. Pass it, broadcast over the batch, as ``attn_mask`` (combine it with a
    causal mask by putting ``-inf`` where the causal mask is False).
    """
    check_ints("alibi_bias", num_heads=num_heads, num_queries=num_queries)
    num_keys = num_queries if num_keys is None else num_keys
    check_int("alibi_bias", "num_keys", num_keys, low=num_queries, note="at least num_queries")
    i = torch.arange(num_keys - num_queries, num_keys, device=device)[:, None]  # (L, 1): query positions
    j = torch.arange(num_keys, device=device)[None, :]  # (1, S)
    distance = (i - j).abs().to(torch.float32)  # (L, S)
    return -alibi_slopes(num_heads, device=device)[:, None, None] * distance  # (H, L, S)
