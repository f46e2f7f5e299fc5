"""Exact attention in blocks, with an online softmax: memory O(n) instead of O(n^2).

Introduced in chapter 7. The naive kernel materialises the ``(L, S)`` weight matrix, which at
``L = S = 16384`` with 8 heads is 8 GiB in float32. The same result can be computed one block
of keys at a time, keeping for every query only a running maximum ``m``, a running sum ``l``
of exponentials and a running weighted sum ``acc`` of values (the recurrence of FlashAttention,
Dao et al. 2022). When a new block raises the maximum from ``m`` to ``m'``, the earlier sums are
rescaled by ``exp(m - m')``:

    m' = max(m, max_j s_j),  l' = l e^{m - m'} + sum_j e^{s_j - m'},
    acc' = acc e^{m - m'} + sum_j e^{s_j - m'} v_j,  output = acc / l.

The backward pass (a custom ``torch.autograd.Function``) does not keep the blocks either: it
saves only the output and the log-sum-exp ``m + log l`` of each query, and recomputes each
block's weights from them. Plain autograd through the loop would keep every block and use as
much memory as the naive kernel.

Conventions as in ``scaled_dot_product_attention``: boolean masks are True where a key takes
part, float masks are added, ``is_causal`` is top-left aligned, and fully masked queries get
zeros. Shapes: query ``(..., L, E)``, key ``(..., S, E)``, value ``(..., S, Ev)``.
"""

from __future__ import annotations

import math

import torch

from attnlab.attention.core import _check_mask, _check_qkv

__all__ = ["blockwise_attention"]


def _block_bias(
    attn_mask: torch.Tensor | None, is_causal: bool, q_start: int, L: int, j0: int, j1: int, like: torch.Tensor
) -> torch.Tensor | None:
    """Additive bias for queries ``q_start..L-1`` and keys ``j0..j1-1``, or None when nothing is masked."""
    bias = None
    if attn_mask is not None:
        block = attn_mask[..., q_start:L, j0:j1]
        if block.dtype == torch.bool:
            bias = torch.zeros(block.shape, dtype=like.dtype, device=like.device).masked_fill(~block, float("-inf"))
        else:
            bias = block.to(like.dtype)
    if is_causal:
        i = torch.arange(q_start, L, device=like.device)[:, None]
        j = torch.arange(j0, j1, device=like.device)[None, :]
        causal = torch.zeros(i.shape[0], j.shape[1], dtype=like.dtype, device=like.device)
        causal = causal.masked_fill(j > i, float("-inf"))  # (L - q_start, j1 - j0)
        bias = causal if bias is None else bias + causal
    return bias


def _first_query(is_causal: bool, j0: int) -> int:
    """With a causal mask, queries before ``j0`` see no key of a block starting at ``j0``: skip them."""
    return j0 if is_causal else 0


class _BlockwiseAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, attn_mask, is_causal, scale, block_size):
        L, S = query.shape[-2], key.shape[-2]
        m = torch.full((*query.shape[:-1], 1), float("-inf"), dtype=query.dtype, device=query.device)  # (..., L, 1)
        l = torch.zeros_like(m)  # (..., L, 1): running sum of exponentials
        acc = torch.zeros((*query.shape[:-1], value.shape[-1]), dtype=query.dtype, device=query.device)  # (..., L, Ev)
        for j0 in range(0, S, block_size):
            j1 = min(j0 + block_size, S)
            q0 = _first_query(is_causal, j0)
            if q0 >= L:
                break
            s = query[..., q0:, :] @ key[..., j0:j1, :].transpose(-2, -1) * scale  # (..., L', b)
            bias = _block_bias(attn_mask, is_causal, q0, L, j0, j1, s)
            if bias is not None:
                s = s + bias
            m_old = m[..., q0:, :]
            m_new = torch.maximum(m_old, s.amax(-1, keepdim=True))  # (..., L', 1)
            safe = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)  # no -inf - -inf
            p = torch.exp(s - safe)  # (..., L', b); exactly 0 where masked
            correction = torch.exp(m_old - safe)  # rescales the sums of earlier blocks
            l[..., q0:, :] = l[..., q0:, :] * correction + p.sum(-1, keepdim=True)
            acc[..., q0:, :] = acc[..., q0:, :] * correction + p @ value[..., j0:j1, :]
            m[..., q0:, :] = m_new
        empty = l == 0  # queries with no key: output zeros, as the book's other kernels
        out = acc / torch.where(empty, torch.ones_like(l), l)  # (..., L, Ev)
        lse = torch.where(empty, torch.full_like(m, float("inf")), m + torch.log(l))  # (..., L, 1)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.attn_mask, ctx.is_causal, ctx.scale, ctx.block_size = attn_mask, is_causal, scale, block_size
        return out

    @staticmethod
    def backward(ctx, grad_out):
        query, key, value, out, lse = ctx.saved_tensors
        attn_mask, is_causal, scale, block_size = ctx.attn_mask, ctx.is_causal, ctx.scale, ctx.block_size
        L, S = query.shape[-2], key.shape[-2]
        grad_out = grad_out.contiguous()
        delta = (grad_out * out).sum(-1, keepdim=True)  # (..., L, 1): rowsum(dO * O)
        dq = torch.zeros_like(query)
        dk = torch.zeros_like(key)
        dv = torch.zeros_like(value)
        for j0 in range(0, S, block_size):
            j1 = min(j0 + block_size, S)
            q0 = _first_query(is_causal, j0)
            if q0 >= L:
                break
            q, k, v = query[..., q0:, :], key[..., j0:j1, :], value[..., j0:j1, :]
            s = q @ k.transpose(-2, -1) * scale  # (..., L', b), recomputed
            bias = _block_bias(attn_mask, is_causal, q0, L, j0, j1, s)
            if bias is not None:
                s = s + bias
            p = torch.exp(s - lse[..., q0:, :])  # the weights of this block, (..., L', b)
            do = grad_out[..., q0:, :]
            dv_block = p.transpose(-2, -1) @ do  # (..., b, Ev)
            dp = do @ v.transpose(-2, -1)  # (..., L', b)
            ds = p * (dp - delta[..., q0:, :])  # softmax backward
            dq[..., q0:, :] += ds @ k * scale
            dk_block = ds.transpose(-2, -1) @ q * scale  # (..., b, E)
            dk[..., j0:j1, :] += dk_block
            dv[..., j0:j1, :] += dv_block
        return dq, dk, dv, None, None, None, None


def blockwise_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    *,
    scale: float | None = None,
    block_size: int = 256,
) -> torch.Tensor:
    """Exact scaled dot-product attention computed ``block_size`` keys at a time (chapter 7).

    Equal, up to float rounding, to ``scaled_dot_product_attention`` for every block size, in
    its values and its gradients; it never holds more than ``L x block_size`` scores, and its
    backward pass recomputes them instead of storing them. With ``is_causal`` the queries that
    cannot see a block are skipped, so causal attention costs about half.

    Args:
        query, key, value: ``(..., L, E)``, ``(..., S, E)``, ``(..., S, Ev)``; same dtype.
        attn_mask: ``None``, boolean (True = takes part) or float (added), broadcastable to
            ``(..., L, S)``; it is not differentiated.
        is_causal: the top-left aligned causal mask (not together with ``attn_mask``).
        scale: multiplies the scores; ``1 / sqrt(E)`` when ``None``.
        block_size: keys per block, a positive int.

    Returns:
        ``(..., L, Ev)``; queries whose keys are all masked get zeros.
    """
    name = "blockwise_attention"
    _check_qkv(name, query, key, value)
    _check_mask(name, attn_mask, query, key)
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"{name}: block_size must be a positive int, got {block_size!r}")
    if is_causal and attn_mask is not None:
        raise ValueError(f"{name}: pass either is_causal=True or attn_mask, not both (combine them into one mask)")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        raise TypeError(f"{name}: scale must be a number or None, got {type(scale).__name__}")
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    if attn_mask is not None:  # a broadcast view (no copy) of shape (..., L, S), sliced per block
        lead = torch.broadcast_shapes(query.shape[:-2], attn_mask.shape[:-2])
        attn_mask = attn_mask.expand(*lead, query.shape[-2], key.shape[-2])
    return _BlockwiseAttention.apply(query, key, value, attn_mask, bool(is_causal), scale, block_size)
