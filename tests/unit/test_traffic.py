"""Chapter 8: the memory traffic of standard and tiled attention, counted and as formulas."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.attention import Traffic, attention_traffic, flash_block_sizes, standard_attention, tiled_attention


def _softmax_attention(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1) @ v


@pytest.mark.parametrize(("block_q", "block_k"), [(1, 1), (3, 4), (4, 3), (7, 5), (16, 16)])
def test_tiled_attention_is_exact(block_q, block_k):
    torch.manual_seed(0)
    q, k, v = (
        torch.randn(2, 3, 7, 8, dtype=torch.float64),
        torch.randn(2, 3, 5, 8, dtype=torch.float64),
        torch.randn(2, 3, 5, 6, dtype=torch.float64),
    )
    torch.testing.assert_close(tiled_attention(q, k, v, block_q, block_k), _softmax_attention(q, k, v))
    torch.testing.assert_close(standard_attention(q, k, v), _softmax_attention(q, k, v))


@pytest.mark.parametrize(("L", "S", "E", "Ev"), [(7, 5, 8, 6), (16, 16, 4, 4), (1, 9, 2, 3)])
@pytest.mark.parametrize(("block_q", "block_k"), [(1, 1), (3, 4), (4, 3), (8, 16)])
def test_the_formulas_count_what_the_kernels_move(L, S, E, Ev, block_q, block_k):
    torch.manual_seed(1)
    heads = 2 * 3
    q, k, v = torch.randn(2, 3, L, E), torch.randn(2, 3, S, E), torch.randn(2, 3, S, Ev)
    counted = Traffic()
    standard_attention(q, k, v, counted)
    assert counted == attention_traffic(L, S, E, Ev, heads=heads)
    counted = Traffic()
    tiled_attention(q, k, v, block_q, block_k, counted)
    assert counted == attention_traffic(L, S, E, Ev, block_q=block_q, block_k=block_k, heads=heads)


def test_tiles_move_fewer_elements_once_they_hold_enough_queries():
    """Each tile of queries reads every key and value again: 2 N^2 d / block_q elements against
    the standard kernel's 4 N^2, so tiling pays only with tiles of more than about d / 2 queries."""
    N, d = 1024, 64
    standard = attention_traffic(N, N, d).total
    totals = {b: attention_traffic(N, N, d, block_q=b, block_k=b).total for b in (16, 32, 64, 256)}
    assert totals[16] > totals[32] > totals[64] > totals[256]
    assert totals[16] > standard > totals[64]
    assert abs(totals[32] / standard - 1) < 0.05  # block_q = d / 2: about even
    # no (N, N) matrix reaches slow memory: writes are the output only
    assert attention_traffic(N, N, d, block_q=64, block_k=64).writes == N * d


def test_flash_traffic_follows_theorem_2():
    """Dao et al. (2022), Theorem 2: Theta(N^2 d^2 / M) accesses with their tile sizes: 4x the fast
    memory, about a quarter of the traffic (once the key and value reads dominate)."""
    N, d = 4096, 64
    counts = {}
    for M in (16_384, 65_536):
        bq, bk = flash_block_sizes(M, d)
        counts[M] = attention_traffic(N, N, d, block_q=bq, block_k=bk).total
    assert flash_block_sizes(65_536, 64) == (64, 256)
    # block_q is capped at d, so M and the traffic part ways once block_k > d: the theorem's
    # bound is reached with block_q = Theta(M / d), which the cap allows while M <= 4 d^2
    bq_small, _ = flash_block_sizes(16_384, d)
    assert bq_small == 64 and counts[16_384] == counts[65_536]
    small = {
        M: attention_traffic(N, N, d, block_q=flash_block_sizes(M, d)[0], block_k=flash_block_sizes(M, d)[1]).total
        for M in (1024, 4096)
    }
    assert 3.0 < small[1024] / small[4096] < 4.1


def test_bad_input_is_named():
    q = torch.randn(4, 8)
    with pytest.raises(ValueError, match="tiled_attention: block_q must be an int >= 1, got 0"):
        tiled_attention(q, q, q, 0, 2)
    with pytest.raises(TypeError, match="standard_attention: traffic must be a Traffic or None, got dict"):
        standard_attention(q, q, q, {})
    with pytest.raises(ValueError, match="attention_traffic: give both block_q and block_k"):
        attention_traffic(4, 4, 8, block_q=2)
    with pytest.raises(ValueError, match=r"flash_block_sizes: fast_memory must be an int >= 256 \(at least 4 E"):
        flash_block_sizes(100, 64)
    with pytest.raises(ValueError, match=r"tiled_attention: expected query \(\.\.\., L, E\)"):
        tiled_attention(q, torch.randn(4, 7), q, 2, 2)
