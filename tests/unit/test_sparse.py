"""Sparse attention (attnlab.attention.sparse) against brute-force constructions.

The fixed patterns are rebuilt pair by pair from their definitions, and their pair counts checked
against the formulas of their docstrings.
"""

from __future__ import annotations

import pytest
import torch

from attnlab.attention import attended_pairs, bigbird_mask, longformer_mask

# --- Longformer -------------------------------------------------------------------------------------


def _longformer_brute_force(n: int, window: int, positions: list[int], causal: bool) -> torch.Tensor:
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(n):
            mask[i, j] = (abs(i - j) <= window or i in positions or j in positions) and (j <= i or not causal)
    return mask


def _longformer_pairs(n: int, window: int, positions: list[int], causal: bool) -> int:
    """The docstring's formula."""
    w = min(window, n - 1)
    band = n * (2 * w + 1) - w * (w + 1)
    far = sum(max(0, p - w) + max(0, n - 1 - p - w) for p in positions)
    extra = 2 * far - sum(1 for p in positions for q in positions if abs(p - q) > w)
    return (band + extra + n) // 2 if causal else band + extra


LONGFORMER = [
    (1, 0, [0]),
    (9, 1, [0]),
    (12, 2, [0, 5, 11]),
    (12, 0, [3, 4]),
    (10, 3, [9, 0, 6]),
    (7, 20, [2]),  # the window covers everything
    (16, 1, [1, 2, 3, 14]),
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("n", "window", "positions"), LONGFORMER)
def test_longformer_mask_is_its_definition_and_counts_its_formula(n, window, positions, causal):
    mask = longformer_mask(n, window, positions, causal=causal)
    assert mask.dtype == torch.bool and mask.shape == (n, n)
    assert torch.equal(mask, _longformer_brute_force(n, window, positions, causal))
    assert int(attended_pairs(mask)) == _longformer_pairs(n, window, positions, causal)


def test_longformer_is_linear_in_n_for_a_fixed_window():
    pairs = [int(attended_pairs(longformer_mask(n, 4, [0, 1]))) for n in (256, 512)]
    assert pairs[1] - pairs[0] == 256 * (2 * 4 + 1 + 2 * 2)  # each new row: a band of 9 and 2 global keys


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(n=0, window=1, global_positions=[0]), ValueError, r"longformer_mask: n must be an int >= 1, got 0"),
        (dict(n=4, window=-1, global_positions=[0]), ValueError, r"window must be an int >= 0, got -1"),
        (dict(n=4, window=1.0, global_positions=[0]), TypeError, r"window must be an int, got float"),
        (dict(n=4, window=1, global_positions=[]), ValueError, r"global_positions must be a tuple or list of ints"),
        (dict(n=4, window=1, global_positions=[4]), ValueError, r"global_positions must lie in \[0, n\) = \[0, 4\)"),
        (dict(n=4, window=1, global_positions=[1, 1]), ValueError, r"global_positions must be distinct, got \[1, 1\]"),
        (dict(n=4, window=1, global_positions=torch.tensor([0])), TypeError, r"global_positions must be a tuple or"),
        (dict(n=4, window=1, global_positions=[0], causal=1), TypeError, r"causal must be a bool, got int"),
    ],
)
def test_longformer_mask_names_bad_input(kwargs, error, message):
    with pytest.raises(error, match=message):
        longformer_mask(**kwargs)


# --- Big Bird ---------------------------------------------------------------------------------------


def _bigbird_pairs(n: int, b: int, w: int, g: int, r: int) -> int:
    """The docstring's formula."""
    m = n // b
    total = g * m
    for q in range(g, m):
        a = g + min(m - 1, q + w) - max(g, q - w) + 1
        total += min(m, a + r)
    return b * b * total


BIGBIRD = [  # n, block_size, window_blocks, global_blocks, random_blocks
    (24, 3, 1, 1, 1),
    (40, 4, 1, 2, 2),
    (30, 2, 0, 0, 3),
    (32, 4, 2, 1, 0),
    (12, 3, 1, 4, 1),  # every block global: dense
    (16, 2, 1, 1, 9),  # more random blocks than remain: all of them
    (5, 1, 1, 0, 1),
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("n", "b", "w", "g", "r"), BIGBIRD)
def test_bigbird_mask_is_its_definition_and_counts_its_formula(n, b, w, g, r, seed):
    mask = bigbird_mask(
        n, b, window_blocks=w, global_blocks=g, random_blocks=r, generator=torch.Generator().manual_seed(seed)
    )
    assert mask.dtype == torch.bool and mask.shape == (n, n)
    m = n // b
    blocks = mask[::b, ::b]  # one entry per (query block, key block)
    assert torch.equal(mask, blocks.repeat_interleave(b, 0).repeat_interleave(b, 1)), "not constant on blocks"
    for q in range(m):
        fixed = {k for k in range(m) if abs(q - k) <= w or k < g}
        seen = {k for k in range(m) if blocks[q, k]}
        if q < g:
            assert seen == set(range(m)), f"global query block {q}"
        else:
            assert fixed <= seen, f"query block {q} misses its window or a global block"
            assert len(seen - fixed) == min(r, m - len(fixed)), f"query block {q}: wrong number of random blocks"
    assert int(attended_pairs(mask)) == _bigbird_pairs(n, b, w, g, r)


def test_bigbird_random_blocks_follow_the_generator():
    def draw(seed: int) -> torch.Tensor:
        return bigbird_mask(64, 2, random_blocks=3, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(draw(0), draw(0))
    assert not torch.equal(draw(0), draw(1))
    assert int(attended_pairs(draw(0))) == int(attended_pairs(draw(1))) == _bigbird_pairs(64, 2, 1, 1, 3)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(n=10, block_size=0), ValueError, r"bigbird_mask: block_size must be an int >= 1, got 0"),
        (dict(n=10, block_size=4), ValueError, r"n must be a multiple of block_size \(4\), got 10"),
        (dict(n=8, block_size=2, window_blocks=-1), ValueError, r"window_blocks must be an int >= 0, got -1"),
        (dict(n=8, block_size=2, random_blocks=-1), ValueError, r"random_blocks must be an int >= 0, got -1"),
        (dict(n=8, block_size=2, global_blocks=5), ValueError, r"global_blocks must be an int in \[0, 4\]"),
        (dict(n=8, block_size=2.0), TypeError, r"block_size must be an int, got float"),
        (dict(n=8, block_size=2, generator=0), TypeError, r"generator must be a torch.Generator or None, got int"),
    ],
)
def test_bigbird_mask_names_bad_input(kwargs, error, message):
    with pytest.raises(error, match=message):
        bigbird_mask(**kwargs)


# --- measures ----------------------------------------------------------------------------------------


def _causal(n: int) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool).tril()


def test_attended_pairs_counts_per_mask():
    assert int(attended_pairs(_causal(10))) == 10 * 11 // 2
    masks = torch.stack([_causal(4), torch.ones(4, 4, dtype=torch.bool)]).expand(3, 2, 4, 4)
    assert torch.equal(attended_pairs(masks), torch.tensor([10, 16]).expand(3, 2))
    with pytest.raises(TypeError, match=r"attended_pairs: mask must be a boolean tensor"):
        attended_pairs(torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"attended_pairs: mask must have shape \(..., L, S\), got \(3,\)"):
        attended_pairs(torch.ones(3, dtype=torch.bool))
