"""Sparse attention: fixed patterns as masks, and blocks of keys chosen by each query.

Introduced in the chapter "Beyond softmax". Dense self-attention scores ``n^2`` pairs of positions
(``n (n + 1) / 2`` with a causal mask). Sparse attention scores a subset, and the question is which.

**Fixed patterns** decide before seeing the data. Longformer (Beltagy et al. 2020) gives each
token a window of neighbours and makes a few chosen tokens global: they attend to every position
and every position attends to them (``longformer_mask``). Big Bird (Zaheer et al. 2020) works in
blocks of ``b`` positions: each query block attends to its neighbouring blocks, to global blocks
and to a few blocks drawn at random (``bigbird_mask``). Both keep ``O(n)`` pairs for a fixed
window; each function's docstring gives its exact count, which ``attended_pairs`` counts back.

**Learned block selection** lets each query choose (``block_select_attention``). The keys are cut
into blocks of ``block_size``, each block is summarised by one vector, each query scores the
summaries and keeps its ``top_k`` best blocks, and attends with a softmax over the keys of those
blocks only. Two recent designs differ in the details:

- MoBA (Lu et al. 2025, "Mixture of Block Attention") summarises a block by the *mean of its keys*
  and has no parameters of its own; a causal query always keeps its own block (causal inside it),
  and blocks that lie wholly in its future are never chosen. This module follows MoBA.
- NSA (Yuan et al. 2025, "Native Sparse Attention") summarises blocks with a *learned* compression
  MLP (with a position encoding inside the block), derives the selection scores from the
  attention weights of that compressed branch, and shares one selection among the query heads of
  a grouped-query group; it always keeps the first block and the two most recent ones. NSA has
  three branches, compressed, selected and a sliding window, each with its own output, mixed by
  learned sigmoid gates. Here ``window`` adds a sliding window to the *mask* of the selected keys
  instead (one softmax over the union), and there is no compressed branch; each query head makes
  its own selection, as in MoBA.

DeepSeek Sparse Attention (DeepSeek-V3.2-Exp, 2025) selects single keys, not blocks: a small
"lightning indexer" scores every earlier key and each query keeps its top 2048.

The selection is a top-k: it has no gradient. The gradient reaches the queries, keys and values
through the attention over the selected keys, as through any masked attention; what a query
chooses changes only as its scores against the block summaries change. (NSA's compressed branch,
whose output is used, is what trains its compression MLP.)

This module computes the scores of every pair and masks those not selected, so that its output can
be checked against dense attention with the same mask: it shows *which* pairs are computed, not the
saving. A sparse kernel gathers the selected blocks instead and computes ``attended_pairs`` scores.

Shapes: query ``(B, H, N, E)``, key ``(B, G, N, E)``, value ``(B, G, N, Ev)`` with ``H`` a multiple
of ``G`` (grouped-query attention: query head ``h`` reads key head ``h // (H / G)``); selection
``(B, H, N, num_blocks)``, ``num_blocks = ceil(N / block_size)``; masks ``(..., N, N)`` with
``True`` where a key takes part.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.attention.core import scaled_dot_product_attention
from attnlab.attention.grouped import repeat_kv
from attnlab.attention.local import band_mask
from attnlab.validation import (
    check_bool,
    check_grouped_qkv,
    check_int,
    check_int_sequence,
    check_ints,
    check_mask,
    check_tensor,
    describe,
)

__all__ = [
    "BlockSparseAttention",
    "attended_pairs",
    "bigbird_mask",
    "block_select_attention",
    "block_selection_mask",
    "longformer_mask",
    "sparse_recall",
]


# --- fixed patterns -------------------------------------------------------------------------------


def longformer_mask(
    n: int,
    window: int,
    global_positions: tuple[int, ...] | list[int],
    *,
    causal: bool = False,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Longformer's pattern: a sliding window, plus global positions that see and are seen by all.

    Defined in the chapter "Beyond softmax", after Beltagy et al. (2020). Query ``i`` sees key
    ``j`` when ``|i - j| <= window`` (``band_mask``: ``window`` positions on each side, so the
    paper's window of ``w`` tokens is ``window = w / 2``), or when ``i`` or ``j`` is one of the
    ``global_positions``; with ``causal`` also only when ``j <= i``.

    Number of attended pairs (``attended_pairs``), with ``w = min(window, n - 1)``, ``G`` the
    global positions and ``far(p) = max(0, p - w) + max(0, n - 1 - p - w)`` the positions more
    than ``w`` away from ``p``:

        band = n (2w + 1) - w (w + 1)
        extra = 2 * sum_{p in G} far(p) - #{(p, q) in G x G : |p - q| > w}
        pairs = band + extra;   causal: (band + extra + n) / 2

    (each global row and column adds its ``far(p)`` pairs outside the band; a pair of two global
    positions far apart lies in a row and in a column, so it is subtracted once). The causal
    count follows because the mask is symmetric with a full diagonal. For a fixed window and
    number of globals, ``O(n)`` pairs instead of ``n^2``.

    Shapes:
        returns: ``(n, n)``, dtype ``torch.bool``; ``True`` = takes part.

    Raises:
        TypeError: ``n`` or ``window`` is not an int, ``global_positions`` is not a tuple or list
            of ints, ``causal`` is not a bool.
        ValueError: ``n < 1``, ``window < 0``, or ``global_positions`` is empty, holds a position
            outside ``[0, n)`` or holds one twice.
    """
    name = "longformer_mask"
    check_int(name, "n", n)
    check_int(name, "window", window, low=0)
    positions = check_int_sequence(name, "global_positions", global_positions, low=0, types=(tuple, list))
    check_bool(name, "causal", causal)
    if max(positions) >= n:
        raise ValueError(f"{name}: global_positions must lie in [0, n) = [0, {n}), got {list(positions)}")
    if len(set(positions)) != len(positions):
        raise ValueError(f"{name}: global_positions must be distinct, got {list(positions)}")
    # listing: longformer
    is_global = torch.zeros(n, dtype=torch.bool, device=device)
    is_global[torch.tensor(positions, device=device)] = True  # (n,)
    mask = band_mask(n, window, device=device)  # the sliding window: |i - j| <= window
    mask = mask | is_global[:, None] | is_global[None, :]  # global rows see all; global columns are seen by all
    # end listing: longformer
    if causal:
        mask = mask & torch.ones(n, n, dtype=torch.bool, device=device).tril()
    return mask


def bigbird_mask(
    n: int,
    block_size: int,
    *,
    window_blocks: int = 1,
    global_blocks: int = 1,
    random_blocks: int = 1,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Big Bird's block-sparse pattern: window, global and random blocks for each query block.

    Defined in the chapter "Beyond softmax", after Zaheer et al. (2020), whose implementation
    ("ITC", global tokens taken from the sequence) works in blocks of ``b = block_size``
    positions; ``n`` must be a multiple of ``b``, giving ``m = n / b`` blocks. Query block ``q``
    attends to every key of:

    - the ``window_blocks`` blocks on each side of it and itself (``|q - k| <= window_blocks``;
      the paper's window of 3 blocks is ``window_blocks=1``);
    - the first ``global_blocks`` blocks, which also attend to every key themselves (Big Bird's
      released code makes the first and the last block global; the first ones keep the formula
      below short);
    - ``random_blocks`` other blocks, drawn for each query block without replacement among those
      not already attended (all of them, where fewer remain), with ``generator`` if given. The
      draw is made on the generator's device (``device`` without one) and the mask moved to
      ``device``.

    Number of attended pairs, with ``g = global_blocks``, ``w = window_blocks``, ``r =
    random_blocks`` and ``a_q = g + min(m - 1, q + w) - max(g, q - w) + 1`` the blocks that query
    block ``q >= g`` sees through its window or the global blocks:

        pairs = b^2 (g m + sum_{q = g}^{m - 1} min(m, a_q + r))

    Away from the edges ``a_q = g + 2w + 1``, so ``pairs <= n b (2g + 2w + 1 + r)``: linear in
    ``n`` for a fixed block size. The count does not depend on the draw.

    Shapes:
        returns: ``(n, n)``, dtype ``torch.bool``; ``True`` = takes part.

    Raises:
        TypeError: a size is not an int, or ``generator`` is not a ``torch.Generator``.
        ValueError: ``n`` or ``block_size`` is below 1, ``n`` is not a multiple of ``block_size``,
            a number of blocks is negative, or ``global_blocks`` exceeds ``n / block_size``.
    """
    name = "bigbird_mask"
    check_ints(name, n=n, block_size=block_size)
    check_ints(name, low=0, window_blocks=window_blocks, random_blocks=random_blocks)
    if n % block_size:
        raise ValueError(f"{name}: n must be a multiple of block_size ({block_size}), got {n}")
    m = n // block_size
    check_int(name, "global_blocks", global_blocks, low=0, high=m, note="the number of blocks, n / block_size")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"{name}: generator must be a torch.Generator or None, got {describe(generator)}")
    draw_on = generator.device if generator is not None else device
    # listing: bigbird
    q = torch.arange(m, device=draw_on)[:, None]  # query blocks (m, 1)
    k = torch.arange(m, device=draw_on)[None, :]  # key blocks (1, m)
    seen = ((q - k).abs() <= window_blocks) | (k < global_blocks)  # window and global keys (m, m)
    # random keys: the r highest of uniform noise among the blocks not yet seen (seen ones get -1)
    noise = torch.rand(m, m, generator=generator, device=draw_on).masked_fill(seen, -1.0)
    drawn = torch.zeros_like(seen).scatter(-1, noise.topk(min(random_blocks, m), dim=-1).indices, True)
    blocks = seen | (drawn & ~seen) | (q < global_blocks)  # global query blocks see every key
    # end listing: bigbird
    blocks = blocks.to(device)
    index = torch.arange(n, device=blocks.device) // block_size  # the block of each position (n,)
    return blocks[index[:, None], index[None, :]]  # (m, m) -> (n, n)


def attended_pairs(mask: torch.Tensor) -> torch.Tensor:
    """The number of (query, key) pairs a boolean mask lets attention score: its ``True`` entries.

    Defined in the chapter "Beyond softmax", to compare the compute of sparse patterns with dense
    attention's ``n^2`` pairs, or ``n (n + 1) / 2`` causal. Counted per mask over the last two
    dimensions, as a tensor, so that nothing is read back to the host: ``int(attended_pairs(m))``
    for one ``(n, n)`` mask.

    Shapes:
        mask: ``(..., L, S)`` boolean; returns ``(...)``, ``torch.long``.
    """
    check_tensor("attended_pairs", "mask", mask, kind="bool", note="True = takes part")
    if mask.dim() < 2:
        raise ValueError(f"attended_pairs: mask must have shape (..., L, S), got {tuple(mask.shape)}")
    return mask.sum(dim=(-2, -1))


# --- learned block selection ---------------------------------------------------------------------


def _block_means(key: torch.Tensor, block_size: int) -> torch.Tensor:
    """The mean of the keys of each block, ``(..., N, E) -> (..., num_blocks, E)``; the last block
    may be shorter, and is the mean of the keys it has."""
    n = key.shape[-2]
    m = -(-n // block_size)  # blocks, the last one possibly partial
    padded = F.pad(key, (0, 0, 0, m * block_size - n))  # zero keys after the last: (..., m b, E)
    sums = padded.unflatten(-2, (m, block_size)).sum(-2)  # (..., m, b, E) -> (..., m, E)
    counts = (n - torch.arange(m, device=key.device) * block_size).clamp(max=block_size)  # keys per block (m,)
    return sums / counts[:, None].to(key.dtype)


def _select_blocks(query: torch.Tensor, key: torch.Tensor, block_size: int, top_k: int, causal: bool) -> torch.Tensor:
    """Each query's ``top_k`` blocks by ``q . mean(block's keys)`` (MoBA's gate), ``(B, H, N, m)`` bool."""
    n = query.shape[-2]
    # listing: select
    summaries = _block_means(key.detach(), block_size)  # (B, H, m, E): no gradient through a top-k
    scores = query.detach() @ summaries.transpose(-1, -2)  # (B, H, N, m)
    m = scores.shape[-1]
    query_block = torch.arange(n, device=query.device)[:, None] // block_size  # (N, 1)
    block = torch.arange(m, device=query.device)[None, :]  # (1, m)
    future = block > query_block if causal else torch.zeros_like(block > query_block)  # (N, m)
    if causal:
        scores = scores.masked_fill(future, float("-inf"))  # never a block wholly after the query
        scores = scores.masked_fill(block == query_block, float("inf"))  # always the query's own block
    chosen = scores.topk(min(top_k, m), dim=-1).indices  # (B, H, N, k)
    selected = torch.zeros(scores.shape, dtype=torch.bool, device=query.device).scatter(-1, chosen, True)
    return selected & ~future  # a query with fewer than top_k earlier blocks keeps them all, no more
    # end listing: select


def block_selection_mask(
    selected: torch.Tensor, block_size: int, *, causal: bool = True, window: int | None = None
) -> torch.Tensor:
    """The keys a block selection lets each query see: ``(..., N, num_blocks) -> (..., N, N)`` bool.

    Defined in the chapter "Beyond softmax". Query ``i`` sees key ``j`` when ``j``'s block,
    ``j // block_size``, is selected for ``i`` (and ``j <= i`` if ``causal``), or when ``j`` lies
    in the sliding window of ``band_mask(N, window, causal=causal)``: ``i - window <= j <= i``
    when causal. ``block_select_attention`` attends with this mask; ``attended_pairs`` counts it.

    Raises:
        TypeError: ``selected`` is not a boolean tensor, or a size is not an int.
        ValueError: ``selected`` has fewer than 2 dimensions or a last size other than
            ``ceil(N / block_size)``, ``block_size < 1`` or ``window < 0``.
    """
    name = "block_selection_mask"
    check_tensor(name, "selected", selected, kind="bool")
    check_int(name, "block_size", block_size)
    check_bool(name, "causal", causal)
    check_int(name, "window", window, low=0, none=True)
    if selected.dim() < 2 or selected.shape[-1] != -(-selected.shape[-2] // block_size):
        raise ValueError(
            f"{name}: selected must have shape (..., N, ceil(N / block_size)) with block_size = {block_size}, "
            f"got {tuple(selected.shape)}"
        )
    n = selected.shape[-2]
    # listing: selection-mask
    key_block = torch.arange(n, device=selected.device) // block_size  # the block of each key (N,)
    mask = selected[..., key_block]  # (..., N, m) -> (..., N, N)
    if causal:
        mask = mask & torch.ones(n, n, dtype=torch.bool, device=selected.device).tril()
    if window is not None:
        mask = mask | band_mask(n, window, causal=causal, device=selected.device)  # NSA's sliding window
    # end listing: selection-mask
    return mask


def block_select_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    block_size: int,
    top_k: int,
    causal: bool = True,
    window: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Self-attention over the keys of each query's ``top_k`` best blocks, MoBA's way.

    Defined in the chapter "Beyond softmax", after MoBA (Lu et al. 2025) and the selection branch
    of NSA (Yuan et al. 2025); the module docstring says where they differ. The ``N`` keys are cut
    into ``ceil(N / block_size)`` blocks (the last may be shorter). Each block is summarised by the
    mean of its keys; query ``i`` scores every summary by a dot product and keeps the ``top_k``
    highest. With ``causal`` (a decoder) the query's own block is always kept, blocks that start
    after ``i`` are never kept, and inside its own block ``i`` sees keys ``j <= i``. The output is
    scaled dot-product attention, one softmax over the keys of the kept blocks, unioned with the
    sliding window of ``window`` earlier positions when ``window`` is given (``block_selection_mask``).
    ``top_k >= ceil(N / block_size)`` and no window is dense (causal) attention.

    The selection has no gradient (a top-k); the gradients of ``query``, ``key`` and ``value`` flow
    through the attention over the selected keys.

    Number of attended pairs, causal and without a window: query ``i`` in block ``b_i = i //
    block_size`` keeps ``min(top_k, b_i + 1)`` blocks, all full but its own, so

        pairs = sum_i ((min(top_k, b_i + 1) - 1) block_size + (i mod block_size) + 1)

    against ``N (N + 1) / 2`` dense: at most ``N top_k block_size`` pairs, linear in ``N``.

    Args:
        query, key, value: ``(B, H, N, E)``, ``(B, G, N, E)``, ``(B, G, N, Ev)``, ``H`` a multiple
            of ``G``; floating, one dtype.
        block_size: positions per block, ``>= 1``.
        top_k: blocks kept per query, ``>= 1`` (the own block counts among them when causal).
        causal: a decoder's attention (the default), or an encoder's, where every block may be
            chosen and none is kept by force.
        window: ``None``, or the number of earlier positions (and the query's own) always seen.

    Returns:
        ``(output, selected)``: ``(B, H, N, Ev)``, and the kept blocks ``(B, H, N, num_blocks)``
        bool.

    Raises:
        TypeError: a tensor is not floating, the dtypes differ, or an argument has the wrong type.
        ValueError: the shapes do not fit (4-D, ``H`` a multiple of ``G``, one length ``N``), or
            ``block_size < 1``, ``top_k < 1``, ``window < 0``.
    """
    name = "block_select_attention"
    check_grouped_qkv(name, query, key, value, shapes=("(B, H, N, E)", "(B, G, N, E)", "(B, G, N, Ev)"))
    if query.shape[2] != key.shape[2]:
        raise ValueError(
            f"{name}: self-attention needs one length N for query and key, got query {tuple(query.shape)} and key "
            f"{tuple(key.shape)}"
        )
    check_int(name, "block_size", block_size)
    check_int(name, "top_k", top_k)
    check_bool(name, "causal", causal)
    check_int(name, "window", window, low=0, none=True)
    # listing: block-select
    repeats = query.shape[1] // key.shape[1]
    key, value = repeat_kv(key, repeats), repeat_kv(value, repeats)  # (B, G, N, E) -> (B, H, N, E)
    selected = _select_blocks(query, key, block_size, top_k, causal)  # (B, H, N, m)
    mask = block_selection_mask(selected, block_size, causal=causal, window=window)  # (B, H, N, N)
    out = scaled_dot_product_attention(query, key, value, mask)  # (B, H, N, Ev)
    # end listing: block-select
    return out, selected


def sparse_recall(weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The fraction of dense attention's weight that a sparse mask keeps, per query.

    Defined in the chapter "Beyond softmax": ``sum_j weights[i, j] * mask[i, j]``, for the weights
    of *dense* attention (rows summing to one) and the mask of a sparse pattern
    (``block_selection_mask``, ``longformer_mask``). A recall near 1 says the pattern keeps the keys
    that dense attention relies on.

    Shapes:
        weights: ``(..., L, S)`` floating; mask: boolean, broadcastable to it; returns ``(..., L)``.
    """
    check_tensor("sparse_recall", "weights", weights, kind="float")
    if weights.dim() < 2:
        raise ValueError(f"sparse_recall: weights must have shape (..., L, S), got {tuple(weights.shape)}")
    check_tensor("sparse_recall", "mask", mask, kind="bool", note="True = takes part")
    check_mask("sparse_recall", "mask", mask, weights.shape, shape_name=f"the shape of weights {tuple(weights.shape)}")
    return torch.where(mask, weights, 0.0).sum(-1)


class BlockSparseAttention(nn.Module):
    """Self-attention whose queries attend only to their ``top_k`` blocks of keys (chapter "Beyond softmax").

    A token mixer with the projections of ``MultiHeadAttention``: ``x`` is projected to queries,
    keys and values of ``num_heads`` heads, ``block_select_attention`` attends, and an output
    projection mixes the heads. Selecting blocks adds no parameter (MoBA's gate).

    Shapes: ``x (B, N, embed_dim)``; ``forward`` returns ``(B, N, embed_dim)``, and with
    ``need_selection=True`` also the selection ``(B, num_heads, N, ceil(N / block_size))``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        block_size: int,
        top_k: int,
        window: int | None = None,
        bias: bool = True,
    ):
        super().__init__()
        name = "BlockSparseAttention"
        check_ints(name, embed_dim=embed_dim, num_heads=num_heads, block_size=block_size, top_k=top_k)
        check_int(name, "window", window, low=0, none=True)
        check_bool(name, "bias", bias)
        if embed_dim % num_heads:
            raise ValueError(f"{name}: embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.block_size, self.top_k, self.window = block_size, top_k, window
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(
        self, x: torch.Tensor, *, causal: bool = True, need_selection: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        D = self.q_proj.in_features
        check_tensor("BlockSparseAttention", "x", x, kind="float", shape=(None, None, D), names=f"(B, N, {D})")
        check_bool("BlockSparseAttention", "need_selection", need_selection)
        B, N, _ = x.shape
        q, k, v = (
            proj(x).view(B, N, self.num_heads, self.head_dim).transpose(1, 2)  # (B, N, H, E) -> (B, H, N, E)
            for proj in (self.q_proj, self.k_proj, self.v_proj)
        )
        out, selected = block_select_attention(
            q, k, v, block_size=self.block_size, top_k=self.top_k, causal=causal, window=self.window
        )
        out = self.out_proj(out.transpose(1, 2).reshape(B, N, D))  # (B, H, N, E) -> (B, N, H E)
        return (out, selected) if need_selection else out
