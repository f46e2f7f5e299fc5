"""Sparse attention: fixed patterns as masks, and the pairs they attend.

Introduced in the chapter "Beyond softmax". Dense self-attention scores ``n^2`` pairs of positions
(``n (n + 1) / 2`` with a causal mask). Sparse attention scores a subset, and the question is which.

**Fixed patterns** decide before seeing the data. Longformer (Beltagy et al. 2020) gives each
token a window of neighbours and makes a few chosen tokens global: they attend to every position
and every position attends to them (``longformer_mask``). Big Bird (Zaheer et al. 2020) works in
blocks of ``b`` positions: each query block attends to its neighbouring blocks, to global blocks
and to a few blocks drawn at random (``bigbird_mask``). Both keep ``O(n)`` pairs for a fixed
window; each function's docstring gives its exact count, which ``attended_pairs`` counts back.

Shapes: masks ``(n, n)`` with ``True`` where a key takes part.
"""

from __future__ import annotations

import torch

from attnlab.attention.local import band_mask
from attnlab.validation import check_bool, check_int, check_int_sequence, check_ints, check_tensor, describe

__all__ = ["attended_pairs", "bigbird_mask", "longformer_mask"]


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
