"""Split-KV decoding: the keys of one query cut into chunks that are attended to side by side.

Introduced in chapter 9, after Dao, Haziza, Massa and Sizov (2023), "Flash-Decoding for
long-context inference" (a blog post of the PyTorch and Stanford CRFM sites). While a decoder
generates, a step has one query per head and ``S`` cached keys. FlashAttention spreads its work
over the batch, the heads and blocks of queries; with one query there is little to spread, and
one block of threads walks all ``S`` keys alone. Flash-Decoding also cuts the keys into chunks:
attention within chunk ``i`` gives a partial output ``out_i`` and the log-sum-exp ``lse_i`` of its
scores, and a last step merges the partials, exactly:

    lse = log sum_i exp(lse_i),    out = sum_i exp(lse_i - lse) out_i.

``exp(lse_i - lse)`` is the share of chunk ``i`` in the softmax's denominator: the rescaling of
chapter 7's online softmax, done once at the end instead of after every block.

- ``merge_attention_partials``: the merge.
- ``split_kv_attention``: attention through chunks and the merge, with grouped queries and masks.

Conventions of ``scaled_dot_product_attention``: boolean masks are True where a key takes part,
float masks are added, and a query whose keys are all masked gets zeros (its log-sum-exp is
``-inf``). Half precision (float16, bfloat16) is computed in float32 (scores, partials, merge) and
rounded to the input dtype once, at the end.

Shapes: query ``(B, H, N, E)``, key ``(B, G, S, E)``, value ``(B, G, S, Ev)``, ``H`` a multiple of
``G``; ``C`` chunks.
"""

from __future__ import annotations

import math
from itertools import pairwise

import torch

from attnlab.validation import check_attn_mask, check_grouped_qkv, check_int, check_number, check_tensor

__all__ = ["merge_attention_partials", "split_kv_attention"]


def merge_attention_partials(outputs: torch.Tensor, lses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge the outputs of attention over ``C`` parts of the keys into attention over all of them.

    Defined in chapter 9 (the reduction of Flash-Decoding, Dao et al. 2023). Part ``i`` attended
    to its keys alone, giving ``outputs[i]`` and the log-sum-exp ``lses[i]`` of its scores. Then
    ``lse = logsumexp_i lses[i]`` and ``out = sum_i exp(lses[i] - lse) outputs[i]``, computed after
    subtracting the largest ``lses[i]``, so that no ``exp`` overflows. A part with no key
    (``lses[i] = -inf``) has a weight of 0; where every part has none, ``out`` is 0 and ``lse``
    ``-inf`` (no NaN, in the output or in the gradients).

    Shapes:
        outputs: ``(C, ..., Ev)``; lses: ``(C, ...)``; returns ``(out (..., Ev), lse (...))`` in the
        dtypes of ``outputs`` and ``lses`` (float16 and bfloat16 are merged in float32).

    Raises:
        TypeError: a tensor that is not floating.
        ValueError: ``outputs`` with fewer than 2 dimensions or no part, or ``lses`` of another shape
        than ``outputs.shape[:-1]``.
    """
    name = "merge_attention_partials"
    check_tensor(name, "outputs", outputs, kind="float")
    if outputs.dim() < 2 or outputs.shape[0] == 0:
        raise ValueError(f"{name}: outputs must have shape (C, ..., Ev) with C >= 1, got {tuple(outputs.shape)}")
    lead = tuple(outputs.shape[:-1])
    check_tensor(name, "lses", lses, kind="float", shape=lead, names=f"(C, ...) = {lead}", note="outputs' without Ev")
    dtype = torch.promote_types(torch.promote_types(outputs.dtype, lses.dtype), torch.float32)
    o, s = outputs.to(dtype), lses.to(dtype)
    # listing: merge
    top = s.amax(dim=0)  # (...): the largest log-sum-exp of a query
    top = top.masked_fill(torch.isneginf(top), 0.0)  # no part has a key: exp(-inf - 0) = 0, not NaN
    w = torch.exp(s - top)  # (C, ...): each part's sum of exponentials, over the largest one's
    total = w.sum(dim=0)  # (...)
    empty = total == 0  # (...): a query no part gave a key
    out = (w[..., None] * o).sum(dim=0) / total.masked_fill(empty, 1.0)[..., None]  # sum_i exp(lse_i - lse) out_i
    lse = (top + torch.log(total.masked_fill(empty, 1.0))).masked_fill(empty, float("-inf"))  # (...)
    # end listing: merge
    return out.to(outputs.dtype), lse.to(lses.dtype)


def _chunk_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of ``q (..., R, E)`` to one chunk ``k (..., c, E)``, ``v (..., c, Ev)``: the output
    ``(..., R, Ev)`` (zeros where every key is masked) and the log-sum-exp ``(..., R)`` of the scores."""
    # listing: chunk
    scores = (q * scale) @ k.transpose(-2, -1)  # (..., R, c)
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.to(scores.dtype)
    top = scores.amax(dim=-1, keepdim=True)  # (..., R, 1): the largest score
    top = top.masked_fill(torch.isneginf(top), 0.0)  # every key masked: exp(-inf - 0) = 0, not NaN
    p = torch.exp(scores - top)  # (..., R, c), each at most 1: no overflow
    total = p.sum(dim=-1, keepdim=True)  # (..., R, 1)
    empty = total == 0
    out = (p @ v) / total.masked_fill(empty, 1.0)  # (..., R, Ev)
    lse = (top + torch.log(total.masked_fill(empty, 1.0))).masked_fill(empty, float("-inf"))  # (..., R, 1)
    # end listing: chunk
    return out, lse.squeeze(-1)


def split_kv_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    num_splits: int,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention with the keys cut into ``num_splits`` chunks, each attended to alone, then merged.

    Defined in chapter 9 (Flash-Decoding, Dao et al. 2023). The ``S`` keys are cut into
    ``C = min(num_splits, S)`` chunks of consecutive keys whose sizes differ by at most one (chunk
    ``i`` holds keys ``i S // C`` to ``(i + 1) S // C - 1``; a chunk holds at least one key, so
    ``num_splits`` above ``S`` gives ``S`` chunks). Each chunk gives a partial output and its
    log-sum-exp, and ``merge_attention_partials`` combines them: the result equals
    ``grouped_query_attention`` up to rounding, whatever ``num_splits``.

    Grouped queries: the ``H / G`` query heads of a group read the same keys, so they are attended
    to as one block of ``(H / G) N`` queries, and no key is copied.

    Shapes:
        query: ``(B, H, N, E)``; key: ``(B, G, S, E)``; value: ``(B, G, S, Ev)``; attn_mask:
        ``None``, boolean (True = takes part) or float (added), broadcastable to ``(B, H, N, S)``;
        returns ``(B, H, N, Ev)``, in the query's dtype.

    ``scale`` multiplies the scores (``1 / sqrt(E)`` when ``None``). A query whose keys are all
    masked gets zeros; ``S = 0`` gives zeros too.

    Raises:
        TypeError: a tensor of the wrong dtype, ``num_splits`` that is not an int.
        ValueError: shapes that do not fit, ``num_splits`` below 1.
    """
    name = "split_kv_attention"
    check_grouped_qkv(name, query, key, value, shapes=("(B, H, N, E)", "(B, G, S, E)", "(B, G, S, Ev)"))
    check_int(name, "num_splits", num_splits)
    check_attn_mask(name, attn_mask, query, key)
    check_number(name, "scale", scale, none=True)
    B, H, N, E = query.shape
    _, G, S, Ev = value.shape
    r = H // G
    if S == 0:
        return query.new_zeros(B, H, N, Ev)
    scale = 1 / math.sqrt(E) if scale is None else scale
    dtype = torch.promote_types(query.dtype, torch.float32)  # float16, bfloat16 -> float32
    q = query.to(dtype).reshape(B, G, r * N, E)  # (B, H, N, E) -> (B, G, r N, E): a group's heads side by side
    mask = None if attn_mask is None else attn_mask.expand(B, H, N, S).reshape(B, G, r * N, S)  # (B, G, r N, S)
    # listing: split
    C = min(num_splits, S)
    bounds = [i * S // C for i in range(C + 1)]  # chunk i: keys bounds[i] .. bounds[i + 1] - 1
    partials = [
        _chunk_attention(
            q, key[:, :, a:b].to(dtype), value[:, :, a:b].to(dtype), None if mask is None else mask[..., a:b], scale
        )
        for a, b in pairwise(bounds)
    ]  # C pairs: (B, G, r N, Ev) and (B, G, r N)
    outputs = torch.stack([out for out, _ in partials])  # (C, B, G, r N, Ev)
    lses = torch.stack([lse for _, lse in partials])  # (C, B, G, r N)
    out, _ = merge_attention_partials(outputs, lses)  # (B, G, r N, Ev)
    # end listing: split
    return out.reshape(B, H, N, Ev).to(query.dtype)  # (B, G, r N, Ev) -> (B, H, N, Ev)
