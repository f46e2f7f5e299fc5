"""Why FlashAttention is fast: tiles of queries and keys, and the memory traffic they save.

Introduced in chapter 8, after chapter 7's ``blockwise_attention`` (tiled over keys only). A
GPU computes in a small fast memory (on-chip SRAM: 192 KB per streaming multiprocessor on
an A100) and keeps its tensors in a large slow one (HBM: 40-80 GB); moving numbers between the
two, not the arithmetic, bounds the speed of attention (Dao et al. 2022, section 2.1). The model here
counts the numbers moved, in elements (times the dtype's size for bytes):

- ``standard_attention``: Dao et al.'s Algorithm 0. The ``(L, S)`` scores are written to slow
  memory, read back for the softmax, the weights written, and read again for the product with
  the values: ``L E + S E + S Ev`` read and ``L Ev`` written for the inputs and the output,
  plus ``4 L S`` for the matrices. ``Theta(n d + n^2)`` for ``n`` queries and keys.
- ``tiled_attention``: tiles of ``block_q`` queries stay in fast memory while every tile of
  ``block_k`` keys and values passes through it once, with the online softmax of chapter 7 (the
  loop order of FlashAttention-2, Dao 2023): ``L E + ceil(L / block_q) S (E + Ev)`` read and
  ``L Ev`` written; no ``(L, S)`` matrix ever reaches slow memory. With the tiles that fill a
  fast memory of ``M`` elements, ``Theta(n^2 d^2 / M)`` (Dao et al. 2022, Theorem 2).
- ``attention_traffic``: the same counts as formulas, with the tile sizes as parameters; the
  chapter and the tests check them against the kernels' own ``Traffic``.

Both kernels compute exact softmax attention (tested equal to it). Shapes: query ``(..., L, E)``,
key ``(..., S, E)``, value ``(..., S, Ev)``; output ``(..., L, Ev)``. Counts are per batch
element and head times their number: all leading dimensions are carried along.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnlab.validation import check_int, check_ints, check_qkv_shapes

__all__ = ["Traffic", "attention_traffic", "flash_block_sizes", "standard_attention", "tiled_attention"]


@dataclass
class Traffic:
    """Elements moved between slow and fast memory, and the most held in fast memory at once.

    ``fast`` is the largest number of elements a tiled kernel holds in fast memory at one time
    (its tiles, their scores and the running softmax statistics); ``None`` for the standard
    kernel, whose matrix products may use tiles of any size.
    """

    reads: int = 0
    writes: int = 0
    fast: int | None = None

    @property
    def total(self) -> int:
        return self.reads + self.writes

    def load(self, t: torch.Tensor) -> torch.Tensor:
        """Count ``t`` as read from slow memory and return it."""
        self.reads += t.numel()
        return t

    def store(self, t: torch.Tensor) -> torch.Tensor:
        """Count ``t`` as written to slow memory and return it."""
        self.writes += t.numel()
        return t

    def hold(self, elements: int) -> None:
        """Note that ``elements`` numbers are in fast memory together."""
        self.fast = elements if self.fast is None else max(self.fast, elements)


def _check(name: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, traffic: Traffic | None) -> None:
    check_qkv_shapes(name, query, key, value)  # the same rule as linear attention's
    if traffic is not None and not isinstance(traffic, Traffic):
        raise TypeError(f"{name}: traffic must be a Traffic or None, got {type(traffic).__name__}")


def standard_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, traffic: Traffic | None = None
) -> torch.Tensor:
    """Softmax attention as Dao et al.'s Algorithm 0, counting what it moves in ``traffic``.

    Defined in chapter 8. Every intermediate ``(..., L, S)`` matrix goes through slow memory.
    """
    _check("standard_attention", query, key, value, traffic)
    t = Traffic() if traffic is None else traffic
    scale = 1 / math.sqrt(query.shape[-1])
    # listing: standard
    q, k = t.load(query), t.load(key)  # 1. read Q and K,
    scores = t.store(q @ k.transpose(-2, -1) * scale)  # compute S = Q K^T / sqrt(E), write S: (..., L, S)
    weights = t.store(torch.softmax(t.load(scores), dim=-1))  # 2. read S, write P = softmax(S)
    return t.store(t.load(weights) @ t.load(value))  # 3. read P and V, write O = P V: (..., L, Ev)
    # end listing: standard


def tiled_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    block_q: int,
    block_k: int,
    traffic: Traffic | None = None,
) -> torch.Tensor:
    """Exact softmax attention over tiles of queries and keys, counting what it moves (chapter 8).

    For each tile of ``block_q`` queries (read once), every tile of ``block_k`` keys and values is
    read, its scores are made and folded into the tile's running maximum ``m``, sum ``l`` and
    weighted sum ``acc`` (chapter 7's online softmax), all in fast memory; the tile's output
    ``acc / l`` is written once.

    It takes no mask: it is the loop whose memory traffic chapter 8 counts, kept to that loop.
    ``blockwise_attention`` (chapter 7) runs the same online softmax over blocks of keys with
    ``attn_mask`` and ``is_causal``, as ``scaled_dot_product_attention`` takes them.
    """
    _check("tiled_attention", query, key, value, traffic)
    check_ints("tiled_attention", block_q=block_q, block_k=block_k)
    t = Traffic() if traffic is None else traffic
    L, S = query.shape[-2], key.shape[-2]
    scale = 1 / math.sqrt(query.shape[-1])
    pairs = math.prod(query.shape[:-2])  # (batch, head) pairs: fast memory holds one pair's tiles
    outputs = []
    # listing: tiled
    for i in range(0, L, block_q):
        q = t.load(query[..., i : i + block_q, :]) * scale  # a tile of queries, in fast memory
        m = q.new_full(q.shape[:-1], -math.inf)  # (..., Bq): running maximum of the scores
        l = q.new_zeros(q.shape[:-1])  # (..., Bq): running sum of exp(score - m)
        acc = q.new_zeros(*q.shape[:-1], value.shape[-1])  # (..., Bq, Ev): running weighted sum
        for j in range(0, S, block_k):
            k, v = t.load(key[..., j : j + block_k, :]), t.load(value[..., j : j + block_k, :])
            s = q @ k.transpose(-2, -1)  # (..., Bq, Bk): scores of the tile, never written out
            t.hold(sum(x.numel() for x in (q, k, v, s, m, l, acc)) // pairs)
            m_new = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - m_new[..., None])  # (..., Bq, Bk)
            correction = torch.exp(m - m_new)  # rescale what was summed under the old maximum
            l = l * correction + p.sum(-1)
            acc = acc * correction[..., None] + p @ v
            m = m_new
        outputs.append(t.store(acc / l[..., None]))  # the tile's output, written once
    # end listing: tiled
    return torch.cat(outputs, dim=-2)  # (..., L, Ev)


def attention_traffic(
    L: int,
    S: int,
    E: int,
    Ev: int | None = None,
    *,
    block_q: int | None = None,
    block_k: int | None = None,
    heads: int = 1,
) -> Traffic:
    """The elements ``standard_attention`` (no blocks) or ``tiled_attention`` moves, as formulas.

    Defined in chapter 8. ``heads``: the number of independent (batch, head) pairs, which
    multiplies every count but the fast memory (one pair's tiles at a time). Give both block sizes,
    or neither.
    """
    check_ints("attention_traffic", L=L, S=S, E=E, heads=heads)
    Ev = E if Ev is None else check_int("attention_traffic", "Ev", Ev)
    if (block_q is None) != (block_k is None):
        raise ValueError(
            f"attention_traffic: give both block_q and block_k (tiled) or neither (standard), got {block_q}, {block_k}"
        )
    # listing: formulas
    if block_q is None or block_k is None:  # standard: inputs and output once, and the (L, S) matrix four times
        return Traffic(reads=heads * (L * E + S * E + 2 * L * S + S * Ev), writes=heads * (2 * L * S + L * Ev))
    check_ints("attention_traffic", block_q=block_q, block_k=block_k)
    tiles_q = -(-L // block_q)  # ceil(L / block_q): each query tile reads every key and value
    bq, bk = min(block_q, L), min(block_k, S)
    fast = bq * E + bk * (E + Ev) + bq * bk + bq * Ev + 2 * bq  # Q_i, K_j, V_j, S_ij, acc, m and l
    return Traffic(reads=heads * (L * E + tiles_q * S * (E + Ev)), writes=heads * L * Ev, fast=fast)
    # end listing: formulas


def flash_block_sizes(fast_memory: int, E: int) -> tuple[int, int]:
    """FlashAttention's tile sizes for a fast memory of ``fast_memory`` elements: ``(block_q, block_k)``.

    Dao et al. (2022), Algorithm 1, line 1: ``B_c = ceil(M / 4d)``, ``B_r = min(ceil(M / 4d), d)``.
    """
    check_int("flash_block_sizes", "E", E)
    check_int("flash_block_sizes", "fast_memory", fast_memory, low=4 * E, note="at least 4 E, one row of each tile")
    block_k = -(-fast_memory // (4 * E))
    return min(block_k, E), block_k
