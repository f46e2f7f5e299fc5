"""FlashAttention-2 in Triton: a fused forward and backward kernel, and its autograd function.

Introduced in chapter 7, beside the algorithm of Dao (2023), "FlashAttention-2". Three kernels:

- ``flash_forward``: one program per ``(batch, head)`` and block of ``BLOCK_L`` queries. It
  keeps the block's queries, a running maximum ``m``, a running sum ``l`` and an accumulator
  ``acc`` on chip, streams the keys and values through in blocks of ``BLOCK_S``, and writes the
  output and one log-sum-exp ``m + log l`` per query. With ``CAUSAL`` the loop stops at the
  diagonal: blocks of keys after the block's last query are never read.
- ``flash_backward_kv``: one program per block of keys. It recomputes each block of weights from
  the saved log-sum-exp (``P = exp(S - lse)``, no softmax again) and sums ``dV = P^T dO`` and
  ``dK = scale * dS^T Q`` over the blocks of queries, where ``dS = P * (dP - delta)``,
  ``dP = dO V^T`` and ``delta = rowsum(dO * O)`` (which equals ``rowsum(P * dP)``, as O = P V).
- ``flash_backward_q``: one program per block of queries, summing ``dQ = scale * dS K``. Two
  kernels instead of the paper's atomic adds into ``dQ``: each program writes only its own rows,
  at the price of computing ``Q K^T``, ``P`` and ``dO V^T`` twice (seven matrix products per
  pair of blocks instead of five).

Every block of scores, ``m``, ``l``, ``acc`` and the gradient sums are float32; the inputs'
blocks go to the matrix units in their own dtype (float16, bfloat16 or float32), and the output
is rounded once. Masks: ``keep (N, S)`` (True = the key takes part) and the top-left causal mask,
as ``torch.nn.functional.scaled_dot_product_attention`` aligns it; a query with no key gets a
zero output and zero gradients. Offsets are 64-bit (``n`` is cast), so tensors of more than
2^31 elements are addressed correctly; the ``(batch * heads)`` axis is the grid's first, which
has no 65,535 limit. float32 products use ``input_precision="ieee"`` (no TF32), as PyTorch's
float32 attention does: exact, and slow on a GPU.

With ``TRITON_INTERPRET=1`` set before Triton is imported, the same source runs in Triton's
interpreter on CPU tensors: one program at a time, the same arithmetic in NumPy. It is slow,
and it is how the book's tests and assignment 6 check the kernel without a GPU; otherwise the
kernels compile for CUDA. ``import attnlab`` sets ``TRITON_INTERPRET=1`` on a machine without
a CUDA GPU (``attnlab.kernels``); only ``attnlab.kernels`` imports this module, and only when
Triton is installed.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

__all__ = ["INTERPRETED", "FlashAttentionFunction", "flash_backward", "flash_forward", "tiles"]

#: True when Triton was imported with ``TRITON_INTERPRET=1``: every kernel, Triton's own
#: ``tl.zeros`` and ``tl.max`` included, then runs in the interpreter (on CPU tensors); else they
#: compile for the GPU. The mode is fixed when Triton is first imported, for the whole process.
INTERPRETED = isinstance(tl.zeros, InterpretedFunction)


@triton.jit
def flash_forward_kernel(
    Q, K, V, O, LSE, KEEP,  # q (N, L, E), k (N, S, E), v (N, S, EV), o (N, L, EV), lse (N, L), keep (N, S)
    L, S, scale,
    E: tl.constexpr, EV: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr,
    BLOCK_L: tl.constexpr, BLOCK_S: tl.constexpr, CAUSAL: tl.constexpr, HAS_KEEP: tl.constexpr,
):  # fmt: skip
    # listing: forward
    n = tl.program_id(0).to(tl.int64)  # which (batch, head); 64-bit offsets
    start = tl.program_id(1) * BLOCK_L  # this program's first query
    rows = start + tl.arange(0, BLOCK_L)  # (BLOCK_L,) query positions
    e = tl.arange(0, BLOCK_E)  # the features of q and k, padded
    ev = tl.arange(0, BLOCK_EV)  # the features of v, padded
    q_at = Q + (n * L + rows[:, None]) * E + e[None, :]
    q_in = (rows[:, None] < L) & (e[None, :] < E)
    q = tl.load(q_at, mask=q_in, other=0.0)  # (BLOCK_L, BLOCK_E)
    m = tl.full([BLOCK_L], float("-inf"), tl.float32)  # running maximum
    l = tl.zeros([BLOCK_L], tl.float32)  # running sum of exp(s - m)
    acc = tl.zeros([BLOCK_L, BLOCK_EV], tl.float32)  # and of exp(s - m) v
    if CAUSAL:  # the causal skip: no key after the block's last query
        end = tl.minimum(S, start + BLOCK_L)
    else:
        end = S
    for j in range(0, end, BLOCK_S):
        keys = j + tl.arange(0, BLOCK_S)  # (BLOCK_S,) this step's keys
        k_at = K + (n * S + keys[:, None]) * E + e[None, :]
        k_in = (keys[:, None] < S) & (e[None, :] < E)
        k = tl.load(k_at, mask=k_in, other=0.0)
        # (BLOCK_L, BLOCK_S) scores, in float32
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        keep = keys[None, :] < S  # keys past the end take no part
        if HAS_KEEP:  # nor padded keys
            kept = tl.load(KEEP + n * S + keys, mask=keys < S, other=0)
            keep = keep & (kept != 0)[None, :]
        if CAUSAL:  # nor keys after the query
            keep = keep & (keys[None, :] <= rows[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        # a query that has seen no key yet: subtract 0, not -inf
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])  # the block's weights, unnormalised
        alpha = tl.exp(m - m_safe)  # rescales the sums of the old maximum
        l = l * alpha + tl.sum(p, 1)
        v_at = V + (n * S + keys[:, None]) * EV + ev[None, :]
        v_in = (keys[:, None] < S) & (ev[None, :] < EV)
        v = tl.load(v_at, mask=v_in, other=0.0)
        pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
        acc = acc * alpha[:, None] + pv
        m = m_new
    l_safe = tl.where(l == 0.0, 1.0, l)  # a query with no key: l = acc = 0
    out = (acc / l_safe[:, None]).to(O.dtype.element_ty)  # rounded once
    o_at = O + (n * L + rows[:, None]) * EV + ev[None, :]
    tl.store(o_at, out, mask=(rows[:, None] < L) & (ev[None, :] < EV))
    # +inf where no key: exp(s - lse) is then 0 in the backward pass
    lse = tl.where(l == 0.0, float("inf"), m + tl.log(l_safe))
    tl.store(LSE + n * L + rows, lse, mask=rows < L)
    # end listing: forward


@triton.jit
def flash_backward_kv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV, KEEP,  # do, dq (N, L, E or EV), dk, dv (N, S, E or EV), delta (N, L)
    L, S, scale,
    E: tl.constexpr, EV: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr,
    BLOCK_L: tl.constexpr, BLOCK_S: tl.constexpr, CAUSAL: tl.constexpr, HAS_KEEP: tl.constexpr,
):  # fmt: skip
    # listing: backward-kv
    n = tl.program_id(0).to(tl.int64)
    start = tl.program_id(1) * BLOCK_S  # this program's first key
    keys = start + tl.arange(0, BLOCK_S)
    e, ev = tl.arange(0, BLOCK_E), tl.arange(0, BLOCK_EV)
    k_in = (keys[:, None] < S) & (e[None, :] < E)
    v_in = (keys[:, None] < S) & (ev[None, :] < EV)
    k = tl.load(K + (n * S + keys[:, None]) * E + e[None, :], mask=k_in, other=0.0)
    v = tl.load(V + (n * S + keys[:, None]) * EV + ev[None, :], mask=v_in, other=0.0)
    key_ok = keys < S
    if HAS_KEEP:
        key_ok = key_ok & (tl.load(KEEP + n * S + keys, mask=keys < S, other=0) != 0)
    dk = tl.zeros([BLOCK_S, BLOCK_E], tl.float32)
    dv = tl.zeros([BLOCK_S, BLOCK_EV], tl.float32)
    if CAUSAL:
        begin = (start // BLOCK_L) * BLOCK_L  # the causal skip: no query before the first key
    else:
        begin = 0
    for i in range(begin, L, BLOCK_L):
        rows = i + tl.arange(0, BLOCK_L)
        q_in = (rows[:, None] < L) & (e[None, :] < E)
        do_in = (rows[:, None] < L) & (ev[None, :] < EV)
        q = tl.load(Q + (n * L + rows[:, None]) * E + e[None, :], mask=q_in, other=0.0)
        do = tl.load(DO + (n * L + rows[:, None]) * EV + ev[None, :], mask=do_in, other=0.0)
        lse = tl.load(LSE + n * L + rows, mask=rows < L, other=float("inf"))
        delta = tl.load(DELTA + n * L + rows, mask=rows < L, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale  # (BLOCK_L, BLOCK_S)
        keep = key_ok[None, :] & (rows[:, None] < L)
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None])
        p = tl.where(keep, tl.exp(s - lse[:, None]), 0.0)  # the weights again, from lse
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision="ieee")  # dV = P^T dO
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")  # dP = dO V^T
        ds = p * (dp - delta[:, None])  # dS = P * (dP - rowsum(dO * O))
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision="ieee")  # dK = dS^T Q
    dk_at = DK + (n * S + keys[:, None]) * E + e[None, :]
    tl.store(dk_at, (dk * scale).to(DK.dtype.element_ty), mask=k_in)
    tl.store(DV + (n * S + keys[:, None]) * EV + ev[None, :], dv.to(DV.dtype.element_ty), mask=v_in)
    # end listing: backward-kv


@triton.jit
def flash_backward_q_kernel(
    Q, K, V, DO, LSE, DELTA, DQ, KEEP,
    L, S, scale,
    E: tl.constexpr, EV: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_EV: tl.constexpr,
    BLOCK_L: tl.constexpr, BLOCK_S: tl.constexpr, CAUSAL: tl.constexpr, HAS_KEEP: tl.constexpr,
):  # fmt: skip
    # listing: backward-q
    n = tl.program_id(0).to(tl.int64)
    start = tl.program_id(1) * BLOCK_L
    rows = start + tl.arange(0, BLOCK_L)
    e, ev = tl.arange(0, BLOCK_E), tl.arange(0, BLOCK_EV)
    q_in = (rows[:, None] < L) & (e[None, :] < E)
    do_in = (rows[:, None] < L) & (ev[None, :] < EV)
    q = tl.load(Q + (n * L + rows[:, None]) * E + e[None, :], mask=q_in, other=0.0)
    do = tl.load(DO + (n * L + rows[:, None]) * EV + ev[None, :], mask=do_in, other=0.0)
    lse = tl.load(LSE + n * L + rows, mask=rows < L, other=float("inf"))
    delta = tl.load(DELTA + n * L + rows, mask=rows < L, other=0.0)
    dq = tl.zeros([BLOCK_L, BLOCK_E], tl.float32)
    if CAUSAL:
        end = tl.minimum(S, start + BLOCK_L)
    else:
        end = S
    for j in range(0, end, BLOCK_S):
        keys = j + tl.arange(0, BLOCK_S)
        k_in = (keys[:, None] < S) & (e[None, :] < E)
        v_in = (keys[:, None] < S) & (ev[None, :] < EV)
        k = tl.load(K + (n * S + keys[:, None]) * E + e[None, :], mask=k_in, other=0.0)
        v = tl.load(V + (n * S + keys[:, None]) * EV + ev[None, :], mask=v_in, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        keep = (keys[None, :] < S) & (rows[:, None] < L)
        if HAS_KEEP:
            keep = keep & (tl.load(KEEP + n * S + keys, mask=keys < S, other=0) != 0)[None, :]
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None])
        p = tl.where(keep, tl.exp(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision="ieee")
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision="ieee")  # dQ = dS K
    tl.store(DQ + (n * L + rows[:, None]) * E + e[None, :], (dq * scale).to(DQ.dtype.element_ty), mask=q_in)
    # end listing: backward-q


def tiles(
    dtype: torch.dtype, head_dim: int, backward: bool, capability: tuple[int, int] | None
) -> tuple[int, int, int, int]:
    """Default ``(BLOCK_L, BLOCK_S, num_warps, num_stages)`` of a launch on a GPU of compute
    ``capability`` (``None``: the CPU's interpreter), for ``head_dim`` the padded feature size.

    Chosen so that each kernel's shared memory fits every GPU's per-block limit, Turing's 64 KiB
    included, as Triton 3.9 compiles them (``scripts/kernel_memory.py`` compiles them ahead of time
    on the CPU and prints the figures; tests/unit/test_kernels.py checks the tightest): float16
    and bfloat16 need at most 74 KiB on sm_80 and later, 64 KiB on sm_75; float32, whose products
    run without tensor cores, goes in tiles of 32 (16 by 32 for sm_75's backward at head size
    128). Not tuned for speed. In the interpreter, tiles of 16, so that small tests cross several
    blocks.
    """
    if capability is None:
        return 16, 16, 1, 1
    warps = 8 if head_dim > 64 else 4
    if dtype == torch.float32:
        return (16, 32, 4, 2) if backward and head_dim > 64 and capability < (8, 0) else (32, 32, warps, 2)
    if capability >= (8, 0):
        return (64, 64, warps, 2) if backward else (128, 64, warps, 3)
    if backward:
        return 32, 32, warps, 2
    return (64, 64, warps, 2) if head_dim <= 64 else (64, 32, warps, 2)


def _sizes(
    q: torch.Tensor, v: torch.Tensor, block_l: int | None, block_s: int | None, backward: bool
) -> tuple[dict[str, Any], dict[str, int]]:
    """The constexpr sizes of a launch (feature sizes padded to a power of two, the tile) and, on
    CUDA, its ``num_warps`` and ``num_stages`` (the interpreter takes neither)."""
    E, EV = q.shape[-1], v.shape[-1]
    BLOCK_E, BLOCK_EV = max(16, triton.next_power_of_2(E)), max(16, triton.next_power_of_2(EV))
    capability = torch.cuda.get_device_capability(q.device) if q.is_cuda else None
    tile_l, tile_s, warps, stages = tiles(q.dtype, max(BLOCK_E, BLOCK_EV), backward, capability)
    sizes = {
        "E": E,
        "EV": EV,
        "BLOCK_E": BLOCK_E,
        "BLOCK_EV": BLOCK_EV,
        "BLOCK_L": tile_l if block_l is None else block_l,
        "BLOCK_S": tile_s if block_s is None else block_s,
    }
    return sizes, ({"num_warps": warps, "num_stages": stages} if q.is_cuda else {})


def flash_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    keep: torch.Tensor | None,
    causal: bool,
    scale: float,
    block_l: int | None = None,
    block_s: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Output ``(N, L, EV)`` and log-sum-exp ``(N, L)`` (float32) of contiguous ``q (N, L, E)``,
    ``k (N, S, E)``, ``v (N, S, EV)``; ``keep (N, S)`` as ``torch.int8`` or ``None``."""
    N, L, _ = q.shape
    S = k.shape[1]
    sizes, options = _sizes(q, v, block_l, block_s, backward=False)
    o = torch.empty((N, L, v.shape[-1]), dtype=q.dtype, device=q.device)
    lse = torch.empty((N, L), dtype=torch.float32, device=q.device)
    grid = (N, triton.cdiv(L, sizes["BLOCK_L"]))  # (batch * heads, blocks of queries)
    flash_forward_kernel[grid](
        q, k, v, o, lse, q if keep is None else keep, L, S, scale,
        **sizes, CAUSAL=causal, HAS_KEEP=keep is not None, **options,
    )  # fmt: skip
    return o, lse


def flash_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    do: torch.Tensor,
    keep: torch.Tensor | None,
    causal: bool,
    scale: float,
    block_l: int | None = None,
    block_s: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)`` from the forward pass's inputs, output and log-sum-exp and ``do = dL/do``."""
    N, L, _ = q.shape
    S = k.shape[1]
    sizes, options = _sizes(q, v, block_l, block_s, backward=True)
    do = do.contiguous()
    delta = (do.float() * o.float()).sum(-1)  # (N, L): rowsum(dO * O), the softmax's correction
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    keep_arg = q if keep is None else keep
    flags = {"CAUSAL": causal, "HAS_KEEP": keep is not None}
    grid_kv = (N, triton.cdiv(S, sizes["BLOCK_S"]))
    flash_backward_kv_kernel[grid_kv](
        q, k, v, do, lse, delta, dk, dv, keep_arg, L, S, scale, **sizes, **flags, **options
    )
    grid_q = (N, triton.cdiv(L, sizes["BLOCK_L"]))
    flash_backward_q_kernel[grid_q](q, k, v, do, lse, delta, dq, keep_arg, L, S, scale, **sizes, **flags, **options)
    return dq, dk, dv


class FlashAttentionFunction(torch.autograd.Function):
    """The kernels behind autograd: the forward saves the output and the log-sum-exp, never the
    ``(L, S)`` weights; the backward recomputes them block by block."""

    @staticmethod
    def forward(ctx, q, k, v, keep, causal, scale, block_l, block_s):
        o, lse = flash_forward(q, k, v, keep, causal, scale, block_l, block_s)
        ctx.save_for_backward(q, k, v, o, lse, keep)
        ctx.options = (causal, scale, block_l, block_s)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse, keep = ctx.saved_tensors
        causal, scale, block_l, block_s = ctx.options
        dq, dk, dv = flash_backward(q, k, v, o, lse, do, keep, causal, scale, block_l, block_s)
        return dq, dk, dv, None, None, None, None, None
