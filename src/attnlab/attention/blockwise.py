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

Half precision (float16, bfloat16) is computed as FlashAttention computes it: every block of
scores, the running ``m``, ``l`` and ``acc``, the log-sum-exp and, in the backward pass, the
gradient sums are float32 (the blocks of the inputs are converted as they are read), and the
result is rounded to the input dtype once, at the end. Rounding ``m``, ``l`` and ``acc`` to
float16 after every block would add one rounding error per block; this way the output is about
as accurate as PyTorch's fused kernel. float32 and float64 inputs are computed in their own dtype.

Conventions and signature as in ``torch.nn.functional.scaled_dot_product_attention``: boolean
masks are True where a key takes part, float masks are added, ``is_causal`` is top-left
aligned, and fully masked queries get zeros. Shapes: query ``(..., L, E)``, key ``(..., S, E)``,
value ``(..., S, Ev)``.
"""

from __future__ import annotations

import math

import torch

from attnlab.validation import check_attn_mask, check_int, check_number, check_qkv

__all__ = ["blockwise_attention"]


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for float16 and bfloat16, else ``dtype`` itself: the dtype the loop computes in."""
    return torch.promote_types(dtype, torch.float32)


def _add_masks(
    s: torch.Tensor, attn_mask: torch.Tensor | None, is_causal: bool, q0: int, L: int, j0: int, j1: int
) -> None:
    """Add the masks, in place, to the scores ``s`` of queries ``q0..L-1`` and keys ``j0..j1-1``."""
    if attn_mask is not None:
        block = attn_mask[..., q0:L, j0:j1]
        if block.dtype == torch.bool:
            s.masked_fill_(~block, float("-inf"))
        else:
            s.add_(block.to(s.dtype))
    if is_causal:
        # Only the first j1 - j0 rows (queries j0..j1-1) can see a key after themselves: the
        # diagonal tile. Every later query sees the whole block, so nothing else is masked.
        rows = min(j1 - j0, L - q0)
        i = torch.arange(q0, q0 + rows, device=s.device)[:, None]
        j = torch.arange(j0, j1, device=s.device)[None, :]
        s[..., :rows, :].masked_fill_(j > i, float("-inf"))


class _Buffers:
    """Reusable output storage for the matrix products of the block loop.

    A fresh multi-megabyte tensor per block costs more than the arithmetic on the CPU (the
    allocator returns large blocks to the system, and touching new pages is slow), so every
    product is written with ``out=`` into storage allocated once per name.
    """

    def __init__(self, like: torch.Tensor, lead: torch.Size):
        self.like, self.lead = like, tuple(lead)
        self.store: dict[str, torch.Tensor] = {}  # name -> its storage, flat

    def matmul(self, name: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        shape = (*self.lead, a.shape[-2], b.shape[-1])
        n = math.prod(shape)
        flat = self.store.get(name)
        if flat is None or flat.numel() < n:
            flat = self.store[name] = torch.empty(n, dtype=self.like.dtype, device=self.like.device)
        out = flat[:n].view(shape)
        return torch.matmul(a, b, out=out)


def _first_query(is_causal: bool, j0: int) -> int:
    """With a causal mask, queries before ``j0`` see no key of a block starting at ``j0``: skip them."""
    return j0 if is_causal else 0


class _BlockwiseAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, attn_mask, is_causal, scale, block_size):
        L, S = query.shape[-2], key.shape[-2]
        dtype = _accumulation_dtype(query.dtype)  # float32 for half inputs; .to(dtype) is then a no-op
        scaled = query.to(dtype) * scale  # (..., L, E): scale once, not every block
        lead = query.shape[:-2]
        buffers = _Buffers(scaled, lead)
        m = torch.full((*query.shape[:-1], 1), float("-inf"), dtype=dtype, device=query.device)  # (..., L, 1)
        l = torch.zeros_like(m)  # (..., L, 1): running sum of exponentials
        acc = torch.zeros((*query.shape[:-1], value.shape[-1]), dtype=dtype, device=query.device)  # (..., L, Ev)
        # listing: online-softmax
        for j0 in range(0, S, block_size):
            j1 = min(j0 + block_size, S)
            q0 = _first_query(is_causal, j0)
            if q0 >= L:
                break
            k, v = key[..., j0:j1, :].to(dtype), value[..., j0:j1, :].to(dtype)  # (..., b, E), (..., b, Ev)
            s = buffers.matmul("s", scaled[..., q0:, :], k.transpose(-2, -1))  # (..., L', b)
            _add_masks(s, attn_mask, is_causal, q0, L, j0, j1)
            m_old = m[..., q0:, :]
            m_new = torch.maximum(m_old, s.amax(-1, keepdim=True))  # (..., L', 1)
            safe = m_new.masked_fill(torch.isneginf(m_new), 0.0)  # no -inf - -inf
            p = s.sub_(safe).exp_()  # (..., L', b), in place; exactly 0 where masked
            correction = (m_old - safe).exp_()  # rescales the sums of earlier blocks
            l[..., q0:, :].mul_(correction).add_(p.sum(-1, keepdim=True))
            acc[..., q0:, :].mul_(correction).add_(buffers.matmul("pv", p, v))
            m_old.copy_(m_new)
        empty = l == 0  # queries with no key: output zeros, as the book's other kernels
        out = acc.div_(l.masked_fill(empty, 1.0)).to(query.dtype)  # (..., L, Ev), rounded once
        lse = torch.where(empty, torch.full_like(m, float("inf")), m + torch.log(l))  # (..., L, 1), in dtype
        # end listing: online-softmax
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.attn_mask, ctx.is_causal, ctx.scale, ctx.block_size = attn_mask, is_causal, scale, block_size
        return out

    @staticmethod
    def backward(ctx, grad_out):
        query, key, value, out, lse = ctx.saved_tensors
        attn_mask, is_causal, scale, block_size = ctx.attn_mask, ctx.is_causal, ctx.scale, ctx.block_size
        L, S = query.shape[-2], key.shape[-2]
        dtype = lse.dtype  # the forward's accumulation dtype: float32 for half inputs
        grad_out = grad_out.contiguous().to(dtype)
        delta = (grad_out * out.to(dtype)).sum(-1, keepdim=True)  # (..., L, 1): rowsum(dO * O)
        scaled = query.to(dtype) * scale
        buffers = _Buffers(scaled, query.shape[:-2])
        dq = torch.zeros_like(query, dtype=dtype)  # the gradients are summed over blocks in dtype too
        dk = torch.zeros_like(key, dtype=dtype)
        dv = torch.zeros_like(value, dtype=dtype)
        for j0 in range(0, S, block_size):
            j1 = min(j0 + block_size, S)
            q0 = _first_query(is_causal, j0)
            if q0 >= L:
                break
            k, v = key[..., j0:j1, :].to(dtype), value[..., j0:j1, :].to(dtype)
            s = buffers.matmul("s", scaled[..., q0:, :], k.transpose(-2, -1))  # (..., L', b), recomputed
            _add_masks(s, attn_mask, is_causal, q0, L, j0, j1)
            p = s.sub_(lse[..., q0:, :]).exp_()  # the weights of this block, (..., L', b)
            do = grad_out[..., q0:, :]
            dv[..., j0:j1, :] += buffers.matmul("dv", p.transpose(-2, -1), do)  # (..., b, Ev)
            ds = buffers.matmul("ds", do, v.transpose(-2, -1)).sub_(delta[..., q0:, :]).mul_(p)  # (..., L', b)
            dq[..., q0:, :] += buffers.matmul("dq", ds, k)  # (..., L', E)
            dk[..., j0:j1, :] += buffers.matmul("dk", ds.transpose(-2, -1), scaled[..., q0:, :])  # scale included
        return dq.mul_(scale).to(query.dtype), dk.to(key.dtype), dv.to(value.dtype), None, None, None, None


def blockwise_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scale: float | None = None,
    block_size: int = 256,
) -> torch.Tensor:
    """Exact scaled dot-product attention computed ``block_size`` keys at a time (chapter 7).

    Equal, up to float rounding, to ``scaled_dot_product_attention`` for every block size, in
    its values and its gradients; it never holds more than ``L x block_size`` scores, and its
    backward pass recomputes them instead of storing them. With ``is_causal`` the queries that
    cannot see a block are skipped, so causal attention costs about half. The signature is
    PyTorch's, so that a call can be moved between the two; ``block_size`` is keyword-only.

    Args:
        query, key, value: ``(..., L, E)``, ``(..., S, E)``, ``(..., S, Ev)``; same dtype.
            float16 and bfloat16 are computed in float32 and the output rounded back.
        attn_mask: ``None``, boolean (True = takes part) or float (added), broadcastable to
            ``(..., L, S)``; it is not differentiated.
        dropout_p: must be 0.0: blockwise attention does not implement dropout. It is here, in
            PyTorch's fifth place, so that ``is_causal`` cannot be passed there by mistake.
        is_causal: the top-left aligned causal mask (not together with ``attn_mask``).
        scale: multiplies the scores; ``1 / sqrt(E)`` when ``None``.
        block_size: keys per block, a positive int.

    Returns:
        ``(..., L, Ev)``, in the dtype of ``query``; queries whose keys are all masked get zeros.

    Raises:
        TypeError: ``dropout_p`` is a bool (``is_causal`` passed fifth), or ``block_size`` not an int.
        ValueError: ``dropout_p`` is not 0.0, a shape does not fit, or ``block_size`` is below 1.
    """
    name = "blockwise_attention"
    check_qkv(name, query, key, value)
    check_attn_mask(name, attn_mask, query, key, is_causal=is_causal)
    if isinstance(dropout_p, bool) or check_number(name, "dropout_p", dropout_p) != 0.0:
        error = TypeError if isinstance(dropout_p, bool) else ValueError  # a bool is is_causal in the wrong place
        raise error(
            f"{name}: blockwise attention does not implement dropout, so dropout_p must be 0.0, got {dropout_p!r} "
            "(dropout_p is the fifth positional argument, as in PyTorch; pass is_causal=True by keyword)"
        )
    check_int(name, "block_size", block_size)
    check_number(name, "scale", scale, none=True)
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    if attn_mask is not None:  # a broadcast view (no copy) of shape (..., L, S), sliced per block
        lead = torch.broadcast_shapes(query.shape[:-2], attn_mask.shape[:-2])
        attn_mask = attn_mask.expand(*lead, query.shape[-2], key.shape[-2])
    return _BlockwiseAttention.apply(query, key, value, attn_mask, bool(is_causal), scale, block_size)
