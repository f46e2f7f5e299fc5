"""Restricted (banded) self-attention: each position attends only to a window around itself.

Introduced in chapter 5; measured in chapter 7. Vaswani et al. list "self-attention (restricted)"
with window ``r``: per-layer cost O(r n d) instead of O(n^2 d). The point of the implementation is
that cost: it gathers, for every query, the ``2r + 1`` keys of its window (``unfold``), and never
builds the ``n x n`` score matrix. ``band_mask`` gives the equivalent full mask, so that the
banded computation can be checked against full attention.

Shapes: query ``(..., N, E)``, key ``(..., N, E)``, value ``(..., N, Ev)`` (self-attention:
queries and keys have the same length ``N``); banded weights ``(..., N, 2r + 1)``, where column
``r + o`` holds the weight of key ``i + o`` for query ``i``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnlab.attention.masking import masked_softmax

__all__ = ["band_mask", "band_to_dense", "banded_attention"]


def _check_window(name: str, window: int) -> None:
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ValueError(f"{name}: window must be a non-negative int, got {window!r}")


def band_mask(n: int, window: int, *, causal: bool = False, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean ``(n, n)`` mask, True where ``|i - j| <= window`` (and ``j <= i`` if ``causal``)."""
    _check_window("band_mask", window)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"band_mask: n must be a positive int, got {n!r}")
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    mask = (i - j).abs() <= window
    return mask & (j <= i) if causal else mask


def banded_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    window: int,
    *,
    causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product self-attention restricted to a window of ``window`` positions each side.

    Defined in chapter 5. Equal to full attention with ``band_mask(N, window, causal=causal)``, in
    ``O(N (2r + 1) E)`` time and memory instead of ``O(N^2)``.

    Returns:
        ``(output, banded_weights)``: ``(..., N, Ev)`` and ``(..., N, 2 * window + 1)``.

    Raises:
        TypeError / ValueError: the tensors are not floating, their shapes do not match, or the
        window is not a non-negative int.
    """
    _check_window("banded_attention", window)
    for arg, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor) or not t.dtype.is_floating_point or t.dim() < 2:
            got = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"banded_attention: {arg} must be a floating tensor (..., N, features), got {got}")
    if query.shape[:-1] != key.shape[:-1] or key.shape[:-1] != value.shape[:-1] or query.shape[-1] != key.shape[-1]:
        raise ValueError(
            "banded_attention: self-attention needs query (..., N, E), key (..., N, E), value (..., N, Ev); got "
            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    n, width = query.shape[-2], 2 * window + 1
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    # Pad the sequence by `window` on both sides, then take every window of 2r + 1 positions.
    k_pad = F.pad(key, (0, 0, window, window))  # (..., N, E) -> (..., N + 2r, E)
    v_pad = F.pad(value, (0, 0, window, window))  # (..., N, Ev) -> (..., N + 2r, Ev)
    k_win = k_pad.unfold(-2, width, 1).transpose(-1, -2)  # (..., N, E, 2r+1) -> (..., N, 2r+1, E)
    v_win = v_pad.unfold(-2, width, 1).transpose(-1, -2)  # (..., N, Ev, 2r+1) -> (..., N, 2r+1, Ev)
    scores = (query[..., None, :] * k_win).sum(-1) * scale  # (..., N, 1, E) * (..., N, 2r+1, E) -> (..., N, 2r+1)
    offsets = torch.arange(-window, window + 1, device=query.device)  # (2r+1,)
    positions = torch.arange(n, device=query.device)[:, None] + offsets[None, :]  # (N, 2r+1): key index
    valid = (positions >= 0) & (positions < n)  # window cells that fall inside the sequence
    if causal:
        valid = valid & (offsets[None, :] <= 0)
    weights = masked_softmax(scores, valid)  # (..., N, 2r+1)
    out = (weights[..., None] * v_win).sum(-2)  # (..., N, 2r+1, 1) * (..., N, 2r+1, Ev) -> (..., N, Ev)
    return out, weights


def band_to_dense(weights: torch.Tensor, window: int) -> torch.Tensor:
    """Banded weights ``(..., N, 2r + 1)`` as the full ``(..., N, N)`` matrix (zeros off the band)."""
    _check_window("band_to_dense", window)
    if not isinstance(weights, torch.Tensor) or weights.dim() < 2 or weights.shape[-1] != 2 * window + 1:
        got = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise ValueError(f"band_to_dense: weights must have shape (..., N, {2 * window + 1}), got {got}")
    n = weights.shape[-2]
    dense = weights.new_zeros(*weights.shape[:-1], n + 2 * window)  # (..., N, N + 2r)
    rows = torch.arange(n, device=weights.device)[:, None]
    cols = rows + torch.arange(2 * window + 1, device=weights.device)[None, :]  # (N, 2r+1) padded index
    dense[..., rows, cols] = weights
    return dense[..., window : window + n]  # drop the padding columns: (..., N, N)
