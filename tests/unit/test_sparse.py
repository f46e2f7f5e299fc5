"""Sparse attention (attnlab.attention.sparse) against brute-force constructions in float64.

The fixed patterns are rebuilt pair by pair from their definitions, and their pair counts checked
against the formulas of their docstrings. Block selection is recomputed query by query (the mean
of each block's keys, the own block kept, future blocks never), and its output compared with
dense attention under the mask that the selection implies, computed here from the definition.
"""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.attention import (
    BlockSparseAttention,
    attended_pairs,
    bigbird_mask,
    block_select_attention,
    block_selection_mask,
    longformer_mask,
    sparse_recall,
)

F64 = torch.float64


def _randn(*shape: int, seed: int = 0, grad: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=F64).requires_grad_(grad)


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


# --- block selection: references ---------------------------------------------------------------------


def _reference_selection(q: torch.Tensor, k: torch.Tensor, bs: int, top_k: int, causal: bool) -> torch.Tensor:
    """MoBA's gate, query by query: the mean of each block's keys, the own block and no future one."""
    B, H, N, _ = q.shape
    per_group = H // k.shape[1]
    m = math.ceil(N / bs)
    selected = torch.zeros(B, H, N, m, dtype=torch.bool)
    for b in range(B):
        for h in range(H):
            keys = k[b, h // per_group]
            means = [keys[c * bs : min(N, (c + 1) * bs)].mean(0) for c in range(m)]
            for i in range(N):
                own = i // bs
                score = {c: float(q[b, h, i] @ means[c]) for c in range(own + 1 if causal else m)}
                ranked = sorted(score, key=lambda c: -score[c])
                chosen = [own, *[c for c in ranked if c != own][: top_k - 1]] if causal else ranked[:top_k]
                selected[b, h, i, chosen] = True
    return selected


def _reference_mask(selected: torch.Tensor, bs: int, causal: bool, window: int | None) -> torch.Tensor:
    *lead, N, _ = selected.shape
    mask = torch.zeros(*lead, N, N, dtype=torch.bool)
    for i in range(N):
        for j in range(N):
            if causal and j > i:
                continue
            in_window = window is not None and abs(i - j) <= window
            mask[..., i, j] = selected[..., i, j // bs] | in_window
    return mask


def _reference_attention(q, k, v, mask):
    """Dense softmax attention in float64, key head ``h // (H / G)`` for query head ``h``."""
    per_group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(per_group, 1), v.repeat_interleave(per_group, 1)
    scores = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, -1) @ v


def _qkv(B=2, H=4, G=2, N=11, E=5, Ev=3, seed=0, grad=False):
    return (
        _randn(B, H, N, E, seed=seed, grad=grad),
        _randn(B, G, N, E, seed=seed + 1, grad=grad),
        _randn(B, G, N, Ev, seed=seed + 2, grad=grad),
    )


def _causal(n: int) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool).tril()


# --- block selection ---------------------------------------------------------------------------------


SHAPES = [  # H, G, N, block_size, top_k
    (4, 2, 11, 3, 2),  # GQA; N not a multiple of the block size
    (2, 2, 16, 4, 2),
    (3, 1, 13, 4, 3),  # one key head for three query heads
    (2, 2, 9, 2, 1),  # top_k = 1: the own block only
    (2, 1, 10, 1, 4),  # blocks of one key
]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("H", "G", "N", "bs", "top_k"), SHAPES)
def test_the_selection_is_moba_gate(H, G, N, bs, top_k, causal):
    """Own block kept, future blocks never, the rest by ``q . mean(block's keys)``; with GQA, query
    head ``h`` scores the blocks of key head ``h // (H / G)``."""
    q, k, v = _qkv(H=H, G=G, N=N)
    _, selected = block_select_attention(q, k, v, block_size=bs, top_k=top_k, causal=causal)
    assert selected.shape == (2, H, N, math.ceil(N / bs)) and selected.dtype == torch.bool
    assert torch.equal(selected, _reference_selection(q, k, bs, top_k, causal))


@pytest.mark.parametrize("window", [None, 0, 2, 5])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("H", "G", "N", "bs", "top_k"), SHAPES)
def test_the_output_is_dense_attention_under_the_selections_mask(H, G, N, bs, top_k, causal, window):
    q, k, v = _qkv(H=H, G=G, N=N, seed=3)
    out, selected = block_select_attention(q, k, v, block_size=bs, top_k=top_k, causal=causal, window=window)
    mask = _reference_mask(selected, bs, causal, window)
    assert torch.equal(block_selection_mask(selected, bs, causal=causal, window=window), mask)
    torch.testing.assert_close(out, _reference_attention(q, k, v, mask))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("N", "bs"), [(11, 3), (12, 4), (7, 7), (5, 8)])
def test_enough_blocks_is_dense_attention(N, bs, causal):
    q, k, v = _qkv(N=N, seed=5)
    m = math.ceil(N / bs)
    out, selected = block_select_attention(q, k, v, block_size=bs, top_k=m + 1, causal=causal)
    full = _causal(N) if causal else torch.ones(N, N, dtype=torch.bool)
    torch.testing.assert_close(out, _reference_attention(q, k, v, full))
    assert torch.equal(block_selection_mask(selected, bs, causal=causal), full.expand(2, 4, N, N))


def test_the_block_whose_keys_match_the_query_is_selected():
    """Keys of block 1 point along the last query; the other keys are small noise."""
    N, bs, E = 15, 3, 4
    direction = torch.tensor([1.0, -2.0, 0.5, 1.0], dtype=F64)
    q = 0.1 * _randn(1, 1, N, E, seed=7)
    k = 0.1 * _randn(1, 1, N, E, seed=8)
    q[0, 0, -1] = direction
    k[0, 0, bs : 2 * bs] += 3 * direction
    v = _randn(1, 1, N, 2, seed=9)
    _, selected = block_select_attention(q, k, v, block_size=bs, top_k=2)
    assert selected[0, 0, -1].tolist() == [False, True, False, False, True]  # block 1, and its own block 4
    moved = torch.roll(k, 2 * bs, dims=2)  # the matching keys now in block 3
    _, selected = block_select_attention(q, moved, v, block_size=bs, top_k=2)
    assert selected[0, 0, -1].tolist() == [False, False, False, True, True]


@pytest.mark.parametrize(("N", "bs", "top_k"), [(11, 3, 1), (11, 3, 2), (20, 4, 3), (9, 1, 2)])
def test_own_block_always_and_no_future_block(N, bs, top_k):
    q, k, v = _qkv(N=N, seed=11)
    _, selected = block_select_attention(q, k, v, block_size=bs, top_k=top_k)
    query_block = torch.arange(N)[:, None] // bs
    block = torch.arange(selected.shape[-1])[None, :]
    assert selected[..., block == query_block].all(), "a query lost its own block"
    assert not selected[..., (block > query_block).expand(N, -1)].any(), "a future block was selected"
    assert torch.equal(selected.sum(-1), (query_block + 1).clamp(max=top_k).squeeze(-1).expand(2, 4, N))


@pytest.mark.parametrize(("N", "bs", "top_k"), [(11, 3, 2), (32, 4, 2), (30, 5, 3), (9, 1, 4)])
def test_causal_pairs_follow_the_formula(N, bs, top_k):
    q, k, v = _qkv(N=N, seed=13)
    _, selected = block_select_attention(q, k, v, block_size=bs, top_k=top_k)
    per_head = attended_pairs(block_selection_mask(selected, bs))  # (B, H)
    formula = sum((min(top_k, i // bs + 1) - 1) * bs + i % bs + 1 for i in range(N))
    assert torch.equal(per_head, torch.full((2, 4), formula))
    assert formula <= N * (N + 1) // 2 and formula <= N * top_k * bs


def test_gradients_flow_through_the_selected_keys():
    """The same gradients as dense attention under the selection's mask, and each query's output
    depends on exactly the keys and values its mask keeps."""
    q, k, v = _qkv(N=12, seed=17, grad=True)
    out, selected = block_select_attention(q, k, v, block_size=3, top_k=2, window=1)
    upstream = _randn(*out.shape, seed=18)
    grads = torch.autograd.grad((out * upstream).sum(), (q, k, v), retain_graph=True)
    mask = _reference_mask(selected, 3, True, 1)
    expected = torch.autograd.grad((_reference_attention(q, k, v, mask) * upstream).sum(), (q, k, v))
    for got, want, name in zip(grads, expected, "qkv", strict=True):
        torch.testing.assert_close(got, want, msg=f"gradient of {name}")
        assert got.abs().sum() > 0, name
    for h, i in [(0, 11), (1, 11), (3, 7), (2, 10)]:  # query head h reads key head h // 2
        dk, dv = torch.autograd.grad(out[0, h, i].sum(), (k, v), retain_graph=True)
        keep = mask[0, h, i]
        assert keep.sum() < i + 1, "the case must leave out some earlier key"
        assert torch.equal(dv[0, h // 2].abs().sum(-1) > 0, keep), (h, i)
        assert torch.equal(dk[0, h // 2].abs().sum(-1) > 0, keep), (h, i)


def test_gradcheck_where_the_selection_is_stable():
    """Scores far apart, so the finite differences do not change the selection."""
    q, k, v = _qkv(B=1, H=2, G=1, N=7, E=3, Ev=2, seed=19)
    k = (k + 2 * torch.arange(7, dtype=F64)[:, None]).detach().requires_grad_(True)
    q, v = q.detach().requires_grad_(True), v.detach().requires_grad_(True)

    def run(q, k, v):
        return block_select_attention(q, k, v, block_size=2, top_k=2)[0]

    assert torch.autograd.gradcheck(run, (q, k, v))


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (dict(block_size=0), ValueError, r"block_select_attention: block_size must be an int >= 1, got 0"),
        (dict(top_k=0), ValueError, r"block_select_attention: top_k must be an int >= 1, got 0"),
        (dict(window=-1), ValueError, r"block_select_attention: window must be an int >= 0, got -1"),
        (dict(block_size=2.0), TypeError, r"block_size must be an int, got float"),
        (dict(top_k=True), TypeError, r"top_k must be an int, got bool"),
        (dict(causal=None), TypeError, r"causal must be a bool, got NoneType"),
        (dict(query=_randn(2, 3, 11, 5)), ValueError, r"the query's heads H must be a multiple of the key's"),
        (dict(key=_randn(2, 2, 10, 5), value=_randn(2, 2, 10, 3)), ValueError, r"one length N for query and key"),
        (dict(query=_randn(2, 4, 11)), ValueError, r"query must have shape \(B, H, N, E\)"),
        (dict(value=_randn(2, 2, 11, 3).float()), TypeError, r"must share one dtype"),
    ],
)
def test_block_select_attention_names_bad_input(change, error, message):
    q, k, v = _qkv()
    args = dict(query=q, key=k, value=v, block_size=3, top_k=2) | change
    with pytest.raises(error, match=message):
        block_select_attention(**args)


def test_block_selection_mask_names_bad_input():
    with pytest.raises(ValueError, match=r"selected must have shape \(..., N, ceil\(N / block_size\)\)"):
        block_selection_mask(torch.ones(5, 3, dtype=torch.bool), 3)  # 5 keys in blocks of 3: 2 blocks
    with pytest.raises(TypeError, match=r"block_selection_mask: selected must be a boolean tensor"):
        block_selection_mask(torch.ones(5, 2), 3)


# --- measures ----------------------------------------------------------------------------------------


def test_attended_pairs_counts_per_mask():
    assert int(attended_pairs(_causal(10))) == 10 * 11 // 2
    masks = torch.stack([_causal(4), torch.ones(4, 4, dtype=torch.bool)]).expand(3, 2, 4, 4)
    assert torch.equal(attended_pairs(masks), torch.tensor([10, 16]).expand(3, 2))
    with pytest.raises(TypeError, match=r"attended_pairs: mask must be a boolean tensor"):
        attended_pairs(torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"attended_pairs: mask must have shape \(..., L, S\), got \(3,\)"):
        attended_pairs(torch.ones(3, dtype=torch.bool))


def test_sparse_recall_is_the_kept_share_of_dense_weight():
    weights = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]], dtype=F64)
    mask = torch.tensor([[True, False, True], [False, False, True]])
    torch.testing.assert_close(sparse_recall(weights, mask), torch.tensor([0.7, 0.8], dtype=F64))
    dense = torch.softmax(_randn(2, 3, 6, 6, seed=23), -1)
    torch.testing.assert_close(sparse_recall(dense, torch.ones(6, 6, dtype=torch.bool)), torch.ones(2, 3, 6, dtype=F64))
    with pytest.raises(ValueError, match=r"sparse_recall: the shape of mask is \(4, 3\), but it must broadcast"):
        sparse_recall(weights, torch.ones(4, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"sparse_recall: mask must be a boolean tensor"):
        sparse_recall(weights, torch.ones(2, 3))


def test_selection_keeps_more_of_dense_weight_than_chance():
    """Keys in clusters, each query near one cluster: the gate finds the block that matters."""
    g = torch.Generator().manual_seed(29)
    N, bs, E = 64, 8, 16
    centres = 3 * torch.randn(N // bs, E, generator=g, dtype=F64)
    k = (centres.repeat_interleave(bs, 0) + torch.randn(N, E, generator=g, dtype=F64))[None, None]
    q = (centres[torch.randint(0, N // bs, (N,), generator=g)] + torch.randn(N, E, generator=g, dtype=F64))[None, None]
    v = torch.randn(1, 1, N, 4, generator=g, dtype=F64)
    _, selected = block_select_attention(q, k, v, block_size=bs, top_k=2, causal=False)
    scores = q @ k.transpose(-1, -2) / math.sqrt(E)
    recall = sparse_recall(torch.softmax(scores, -1), block_selection_mask(selected, bs, causal=False))
    assert recall.mean() > 0.9  # 2 blocks of 8 out of 64 keys: 0.25 by chance


# --- the module --------------------------------------------------------------------------------------


def test_block_sparse_attention_projects_then_selects():
    torch.manual_seed(0)
    module = BlockSparseAttention(8, 2, block_size=3, top_k=2, window=1).double()
    x = _randn(2, 10, 8, seed=31, grad=True)
    out, selected = module(x, need_selection=True)
    assert out.shape == (2, 10, 8) and selected.shape == (2, 2, 10, 4)

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.view(2, 10, 2, 4).transpose(1, 2)  # (B, N, H, E) -> (B, H, N, E)

    q, k, v = heads(module.q_proj(x)), heads(module.k_proj(x)), heads(module.v_proj(x))
    expected, expected_selected = block_select_attention(q, k, v, block_size=3, top_k=2, window=1)
    torch.testing.assert_close(out, module.out_proj(expected.transpose(1, 2).reshape(2, 10, 8)))
    assert torch.equal(selected, expected_selected)
    out.sum().backward()
    assert x.grad is not None and all(p.grad is not None for p in module.parameters())
    assert module(x, causal=False).shape == (2, 10, 8)


def test_block_sparse_attention_names_bad_input():
    with pytest.raises(ValueError, match=r"BlockSparseAttention: embed_dim \(10\) must be divisible by num_heads"):
        BlockSparseAttention(10, 4, block_size=2, top_k=1)
    with pytest.raises(ValueError, match=r"BlockSparseAttention: top_k must be an int >= 1, got 0"):
        BlockSparseAttention(8, 2, block_size=2, top_k=0)
    with pytest.raises(ValueError, match=r"BlockSparseAttention: window must be an int >= 0, got -2"):
        BlockSparseAttention(8, 2, block_size=2, top_k=1, window=-2)
    with pytest.raises(ValueError, match=r"BlockSparseAttention: x must have shape \(B, N, 8\)"):
        BlockSparseAttention(8, 2, block_size=2, top_k=1)(torch.randn(2, 5, 6))
