"""Attention as three stages, and scaled dot-product attention with PyTorch's signature.

Introduced in chapter 3. ``attention`` is the definition of the lecture notes written out:
scores, normalisation, weighted sum, with the weights returned. ``scaled_dot_product_attention``
has the signature of ``torch.nn.functional.scaled_dot_product_attention`` and three backends:

- ``"naive"`` mirrors the reference implementation in PyTorch's documentation line by line
  (and keeps the full ``(..., L, S)`` weight matrix in memory);
- ``"fast"`` calls PyTorch's fused kernel;
- ``"triton"`` calls the book's own FlashAttention-2 kernel in Triton (chapter 7;
  ``attnlab.kernels.flash_attention``): causal or key-padding masks only, no dropout. It is
  chosen only when asked for.

Both follow the book's conventions: boolean masks are ``True`` where a key takes part, float
masks are added, and a query whose keys are all masked gets a zero output (never NaN).

Shapes: query ``(..., L, E)``, key ``(..., S, E)``, value ``(..., S, Ev)``, weights
``(..., L, S)``, output ``(..., L, Ev)``; ``...`` is typically ``(B, H)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from attnlab.attention.masking import masked_softmax
from attnlab.kernels import flash_attention
from attnlab.validation import check_attn_mask, check_choice, check_number, check_qkv, check_tensor

__all__ = ["BACKENDS", "attention", "scaled_dot_product_attention"]

BACKENDS = ("naive", "fast", "triton")

ScoreFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    score: ScoreFn | None = None,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention as three stages: score every key, normalise, take the weighted sum of values.

    Defined in chapter 3. ``score(query, key)`` must return ``(..., L, S)``; the default is the
    scaled dot product ``query @ key^T / sqrt(E)``. The score modules of
    ``attnlab.attention.scoring`` fit, for 3-D inputs.

    Returns:
        ``(output, weights)`` with shapes ``(..., L, Ev)`` and ``(..., L, S)``.
    """
    check_qkv("attention", query, key, value)
    check_attn_mask("attention", mask, query, key)
    # listing: stages
    if score is None:
        scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])  # stage 1: (..., L, S)
    else:
        scores = score(query, key)  # stage 1: (..., L, S)
        expected = (*query.shape[:-1], key.shape[-2])
        check_tensor("attention", "score's output", scores, shape=expected, names=f"(..., L, S) = {expected}")
    weights = masked_softmax(scores, mask)  # stage 2: (..., L, S)
    return weights @ value, weights  # stage 3: (..., L, S) @ (..., S, Ev) -> (..., L, Ev)
    # end listing: stages


def _naive(query, key, value, attn_mask, dropout_p, is_causal, scale):
    # PyTorch's reference code for torch.nn.functional.scaled_dot_product_attention, except
    # that the query is scaled before the product ((L, E) numbers instead of (L, S)), the mask
    # goes straight to masked_softmax (a boolean mask removes keys, a float mask is added)
    # instead of into an (L, S) bias that is added even when it is all zeros, and fully masked
    # rows give zeros, not NaN. Half-precision inputs are computed in float32 (scores, softmax,
    # weighted sum) and the output is rounded once, as fused kernels do: rounding the (L, S)
    # scores to float16 would cost more accuracy than any other step.
    # listing: kernel
    L, S = query.size(-2), key.size(-2)
    scale_factor = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    if is_causal:
        attn_mask = torch.ones(L, S, dtype=torch.bool, device=query.device).tril(diagonal=0)
    dtype = torch.promote_types(query.dtype, torch.float32)  # float16, bfloat16 -> float32
    attn_weight = (query.to(dtype) * scale_factor) @ key.to(dtype).transpose(-2, -1)  # (..., L, S)
    attn_weight = masked_softmax(attn_weight, attn_mask, dim=-1)
    if dropout_p > 0.0:
        attn_weight = torch.dropout(attn_weight, dropout_p, train=True)
    return (attn_weight @ value.to(dtype)).to(query.dtype)  # (..., L, S) @ (..., S, Ev) -> (..., L, Ev)
    # end listing: kernel


def _triton(query, key, value, attn_mask, dropout_p, is_causal, scale):
    """The Triton kernel, given what it takes: a causal mask or a key-padding mask, no dropout."""
    name = "scaled_dot_product_attention"
    if dropout_p > 0:
        raise ValueError(f"{name}: backend='triton' has no dropout; dropout_p must be 0, got {dropout_p}")
    keep = None
    if attn_mask is not None:
        if attn_mask.dtype != torch.bool or (attn_mask.dim() >= 2 and attn_mask.shape[-2] != 1):
            raise ValueError(
                f"{name}: backend='triton' takes a key-padding mask only: boolean of shape (..., 1, S), "
                f"got {attn_mask.dtype} of shape {tuple(attn_mask.shape)} (use is_causal=True for the causal mask)"
            )
        keep = attn_mask[..., 0, :] if attn_mask.dim() >= 2 else attn_mask
    return flash_attention(query, key, value, keep, causal=is_causal, scale=scale)


def _fully_masked_rows(attn_mask: torch.Tensor) -> torch.Tensor:
    """``(..., L, 1)``: True where a query has no key left. No branch on the values (no host read)."""
    if attn_mask.dtype == torch.bool:
        return ~attn_mask.any(-1, keepdim=True)
    return torch.isneginf(attn_mask).all(-1, keepdim=True)


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scale: float | None = None,
    backend: str = "naive",
) -> torch.Tensor:
    """``softmax(query @ key^T * scale + mask) @ value``, with PyTorch's signature.

    Defined in chapter 3. ``backend="naive"`` mirrors the formula (and PyTorch's reference code)
    line by line; ``backend="fast"`` calls ``torch.nn.functional.scaled_dot_product_attention``;
    ``backend="triton"`` runs the book's Triton kernel of chapter 7, which takes a causal mask or
    a boolean key-padding mask of shape ``(..., 1, S)`` and no dropout. They are tested equal.
    ``is_causal=True`` uses the top-left aligned causal mask, as PyTorch does, and cannot be
    combined with ``attn_mask`` (PyTorch refuses it too).

    Args:
        query, key, value: ``(..., L, E)``, ``(..., S, E)``, ``(..., S, Ev)``; same dtype.
        attn_mask: ``None``, boolean (True = takes part) or float (added), broadcastable to
            ``(..., L, S)``.
        dropout_p: dropout probability on the weights, in ``[0, 1)``.
        is_causal: apply the causal mask.
        scale: multiplies the scores; ``1 / sqrt(E)`` when ``None``.
        backend: ``"naive"``, ``"fast"`` or ``"triton"``.

    Returns:
        ``(..., L, Ev)``. Queries whose keys are all masked get zeros.
    """
    name = "scaled_dot_product_attention"
    check_qkv(name, query, key, value)
    check_attn_mask(name, attn_mask, query, key, is_causal=is_causal)
    check_choice(name, "backend", backend, BACKENDS)
    check_number(name, "dropout_p", dropout_p, low=0, high=1, high_open=True)
    check_number(name, "scale", scale, none=True)
    if backend == "naive":
        return _naive(query, key, value, attn_mask, dropout_p, is_causal, scale)
    if backend == "triton":
        return _triton(query, key, value, attn_mask, dropout_p, is_causal, scale)
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale
    )
    if attn_mask is not None:  # the book's convention, whatever the backend returned there
        out = out.masked_fill(_fully_masked_rows(attn_mask), 0.0)
    return out
