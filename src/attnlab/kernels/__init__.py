"""Fused kernels: FlashAttention-2 written in Triton (chapter 7).

``flash_attention(query, key, value)`` runs the book's own fused kernel, forward and backward: on
a CUDA GPU compiled by Triton, on the CPU through Triton's interpreter (slow: for small shapes,
tests and reading; without a GPU the interpreter is chosen before Triton's first import).
Triton is an optional dependency (``pip install "attnlab[triton]"``; Colab and every CUDA build
of PyTorch on Linux bring it); without it, ``triton_available()`` is False and
``flash_attention`` raises an ``ImportError`` that says what to install. The kernel module
itself, ``attnlab.kernels.flash_triton``, is imported only when Triton is.

Shapes: query ``(..., L, E)``, key ``(..., S, E)``, value ``(..., S, Ev)``, key-padding mask
``(..., S)`` (True = the key takes part), output ``(..., L, Ev)``; ``E`` and ``Ev`` from 1 to 128.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys

import torch
import torch.nn.functional as F

from attnlab.validation import check_bool, check_int, check_mask, check_number, check_qkv, check_tensor

__all__ = ["flash_attention", "triton_available"]

#: dtypes the kernel computes in (float32 accumulation for the half-precision ones)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 128  # the tiles are sized for head sizes up to 128


def triton_available() -> bool:
    """True when Triton can be imported (the kernel can then run: compiled on CUDA, interpreted on the CPU)."""
    return importlib.util.find_spec("triton") is not None


def _choose_triton_mode() -> None:
    """Before Triton's first import on a machine without a CUDA GPU, choose its interpreter.

    Triton fixes at import whether its kernels (its own ``tl.zeros`` and ``tl.max`` too) compile
    for the GPU or run in its interpreter on CPU tensors; ``TRITON_INTERPRET=1`` chooses the
    interpreter. Without a GPU nothing could be compiled, so the interpreter is the only way the
    kernel runs there. A variable set already, or a Triton imported already, is left alone. Run
    when this module is imported, which ``import attnlab`` does first: other modules import
    Triton too (``torch.utils.flop_counter``, which ``attnlab.complexity`` uses).
    """
    if "triton" not in sys.modules and not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


_choose_triton_mode()


def flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    key_padding_mask: torch.Tensor | None = None,
    *,
    causal: bool = False,
    scale: float | None = None,
    block_l: int | None = None,
    block_s: int | None = None,
) -> torch.Tensor:
    """``softmax(query @ key^T * scale) @ value`` by the book's FlashAttention-2 kernel in Triton.

    Introduced in chapter 7. Differentiable (the backward pass recomputes the weights from the
    log-sum-exp saved per query). A query whose keys are all masked gets a zero output.

    Args:
        query, key, value: ``(..., L, E)``, ``(..., S, E)``, ``(..., S, Ev)``, one dtype among
            float16, bfloat16 and float32, on a CUDA device or the CPU (the interpreter).
        key_padding_mask: ``None`` or boolean ``(..., S)``, True where a key takes part; the
            leading dimensions broadcast to the inputs' (``(B, 1, S)`` for ``(B, H, ...)``).
        causal: the top-left aligned causal mask (query ``i`` sees keys ``0..i``), as
            ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``.
        scale: multiplies the scores; ``1 / sqrt(E)`` when ``None``.
        block_l, block_s: the tile: queries per program and keys per step of the loop, powers
            of two from 16 (default: by dtype, head size and GPU, so that the kernels' shared
            memory fits; 16 and 16 on the CPU).

    Returns:
        ``(..., L, Ev)``, in the inputs' dtype.
    """
    name = "flash_attention"
    check_qkv(name, query, key, value)
    check_bool(name, "causal", causal)
    check_number(name, "scale", scale, none=True)
    for arg, block in (("block_l", block_l), ("block_s", block_s)):
        if block is not None:
            check_int(name, arg, block, low=16)
            if block & (block - 1):
                raise ValueError(f"{name}: {arg} must be a power of two >= 16, got {block}")
    if query.dtype not in DTYPES:
        raise TypeError(f"{name}: query, key and value must be float16, bfloat16 or float32, got {query.dtype}")
    for arg, size in (("query and key", query.shape[-1]), ("value", value.shape[-1])):
        if size > MAX_HEAD_DIM:
            raise ValueError(f"{name}: the feature size of {arg} must be at most {MAX_HEAD_DIM}, got {size}")
    if not (query.device == key.device == value.device):
        raise ValueError(
            f"{name}: query, key and value must be on one device, got {query.device}, {key.device}, {value.device}"
        )
    lead, (L, E), S, EV = query.shape[:-2], query.shape[-2:], key.shape[-2], value.shape[-1]
    if key_padding_mask is not None:
        check_tensor(name, "key_padding_mask", key_padding_mask, kind="bool", note="True = the key takes part")
        check_mask(name, "key_padding_mask", key_padding_mask, (*lead, S), shape_name=f"(..., S) = {(*lead, S)}")
        if key_padding_mask.device != query.device:
            raise ValueError(
                f"{name}: key_padding_mask must be on the inputs' device {query.device}, got {key_padding_mask.device}"
            )
    if query.device.type == "meta":  # shapes only: PyTorch's kernel gives them, and the autograd graph
        mask = None if key_padding_mask is None else key_padding_mask[..., None, :]  # (..., 1, S)
        if causal:
            tril = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
            mask = tril if mask is None else mask & tril
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale)
    if query.device.type not in ("cuda", "cpu"):
        raise ValueError(
            f"{name}: the Triton kernel runs on CUDA, or on the CPU through Triton's interpreter; "
            f"got tensors on {query.device.type}"
        )
    if not triton_available():
        raise ImportError(
            f"{name} needs Triton, which is not installed: pip install triton (or attnlab[triton]); "
            "scaled_dot_product_attention(backend='fast') runs PyTorch's own fused kernel instead"
        )
    from attnlab.kernels.flash_triton import INTERPRETED, FlashAttentionFunction

    if INTERPRETED and query.dtype == torch.bfloat16:
        raise TypeError(
            f"{name}: Triton's interpreter multiplies bfloat16 blocks wrongly (tl.dot), so bfloat16 runs "
            "compiled on CUDA only; on the CPU use float16 or float32"
        )
    if query.device.type == "cpu" and not INTERPRETED:
        raise ValueError(
            f"{name}: Triton was imported to compile for the GPU, so its kernels cannot take CPU tensors; "
            "move the tensors to cuda, or start Python with TRITON_INTERPRET=1 to run the kernel in Triton's "
            "interpreter on the CPU"
        )

    N = math.prod(lead)
    q = query.reshape(N, L, E).contiguous()
    k = key.reshape(N, S, E).contiguous()
    v = value.reshape(N, S, EV).contiguous()
    keep = None
    if key_padding_mask is not None:
        keep = key_padding_mask.expand(*lead, S).reshape(N, S).to(torch.int8).contiguous()
    scale_value = 1.0 / math.sqrt(E) if scale is None else float(scale)
    out = FlashAttentionFunction.apply(q, k, v, keep, causal, scale_value, block_l, block_s)
    return out.reshape(*lead, L, EV)
