"""Chapter 8's positions: rotary embeddings (RoPE) and ALiBi's biases."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.attention import alibi_bias, alibi_slopes, relative_rotation, rotary_embedding, sinusoidal_encoding


def _rope_complex(x: torch.Tensor, positions: torch.Tensor, base: float = 10_000.0) -> torch.Tensor:
    """Su et al.'s eq. (34) written with complex numbers: (x_2i + i x_2i+1) e^(i p w_i)."""
    E = x.shape[-1]
    w = base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)  # (E/2,)
    z = torch.complex(x[..., 0::2].double(), x[..., 1::2].double())  # (..., N, E/2)
    rotated = z * torch.polar(torch.ones_like(w), positions.double()[:, None] * w)  # times e^(i p w)
    return torch.stack([rotated.real, rotated.imag], dim=-1).flatten(-2)


def test_rope_equals_the_complex_number_formula():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 8, dtype=torch.float64)
    positions = torch.tensor([0, 1, 2, 5, 9, 100, 4096])
    torch.testing.assert_close(rotary_embedding(x, positions), _rope_complex(x, positions))
    torch.testing.assert_close(rotary_embedding(x), _rope_complex(x, torch.arange(7)))


def test_rope_score_depends_only_on_the_offset():
    """rope(q, m) . rope(k, n) is the same for (m, n) and (m + s, n + s): the offset property."""
    torch.manual_seed(1)
    q, k = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)

    def score(m: int, n: int) -> torch.Tensor:
        rq = rotary_embedding(q[None], torch.tensor([m]))
        rk = rotary_embedding(k[None], torch.tensor([n]))
        return (rq * rk).sum()

    for m, n in [(0, 0), (3, 1), (2, 9), (50, 7)]:
        for shift in (1, 13, 1000):
            torch.testing.assert_close(score(m + shift, n + shift), score(m, n))
    assert not torch.allclose(score(0, 1), score(0, 2)), "the score must change with the offset"


def test_rope_rotates_each_pair_keeping_its_norm_and_positions_zero_is_identity():
    torch.manual_seed(2)
    x = torch.randn(5, 6, dtype=torch.float64)
    y = rotary_embedding(x, torch.arange(5) * 7)
    torch.testing.assert_close(y[0], x[0])  # position 0: angle 0
    pairs = lambda t: t.unflatten(-1, (3, 2)).norm(dim=-1)  # noqa: E731
    torch.testing.assert_close(pairs(y), pairs(x))


def test_rope_is_chapter_5s_rotation_applied_to_the_query():
    """Chapter 5: PE(p + k) = M_k PE(p). RoPE rotates by the same angles p w_i: rotating the
    sinusoidal encoding's (cos, sin) pairs read as (x_2i, x_2i+1) = (cos, sin) by k w_i gives
    the encoding of position p + k."""
    p, k, d = 3, 5, 8
    pe = sinusoidal_encoding(20, d, dtype=torch.float64)
    as_pairs = torch.stack([pe[:, 1::2], pe[:, 0::2]], dim=-1).flatten(-2)  # (cos, sin) pairs
    moved = rotary_embedding(as_pairs[p][None], torch.tensor([k]))[0]
    torch.testing.assert_close(moved, as_pairs[p + k])
    torch.testing.assert_close(relative_rotation(k, d) @ pe[p], pe[p + k])


def test_rope_keeps_dtype_and_rejects_bad_input():
    x = torch.randn(4, 6, dtype=torch.float16)
    assert rotary_embedding(x).dtype == torch.float16
    with pytest.raises(ValueError, match=r"rotary_embedding: x must have shape \(\.\.\., N, E\) with E even"):
        rotary_embedding(torch.randn(4, 5))
    with pytest.raises(TypeError, match="rotary_embedding: x must be a floating-point tensor"):
        rotary_embedding(torch.ones(4, 6, dtype=torch.long))
    with pytest.raises(ValueError, match=r"rotary_embedding: positions must have shape \(N,\) = \(4,\)"):
        rotary_embedding(torch.randn(4, 6), torch.arange(3))
    with pytest.raises(ValueError, match="rotary_embedding: base must be a number > 1"):
        rotary_embedding(torch.randn(4, 6), base=1)


def test_alibi_slopes_follow_press_et_al():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -(h + 1) for h in range(8)]))
    torch.testing.assert_close(alibi_slopes(4), torch.tensor([0.25, 0.0625, 2.0**-6, 2.0**-8]))
    # 6 heads: the 4 slopes of 4 heads, then every other slope of 8 heads (the authors' code)
    expected = [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    torch.testing.assert_close(alibi_slopes(6), torch.tensor(expected))
    with pytest.raises(ValueError, match="alibi_slopes: num_heads must be an int >= 1, got 0"):
        alibi_slopes(0)


def test_alibi_bias_is_minus_slope_times_distance_aligned_bottom_right():
    bias = alibi_bias(2, 3)
    assert bias.shape == (2, 3, 3)
    torch.testing.assert_close(bias[0], -(2.0**-4) * torch.tensor([[0.0, 1, 2], [1, 0, 1], [2, 1, 0]]))
    cached = alibi_bias(2, 1, 5)  # one new query at position 4 after 4 cached keys
    torch.testing.assert_close(cached[1, 0], -(2.0**-8) * torch.tensor([4.0, 3, 2, 1, 0]))
    torch.testing.assert_close(alibi_bias(4, 2, 6), alibi_bias(4, 6)[:, 4:])
    with pytest.raises(ValueError, match=r"alibi_bias: num_keys must be an int >= 3 \(at least num_queries\), got 2"):
        alibi_bias(2, 3, 2)


def test_alibi_scores_are_shift_invariant():
    """Adding the bias to scores of shifted sequences gives the same weights: ALiBi sees distances only."""
    torch.manual_seed(3)
    s = torch.randn(2, 4, 4)
    keep = torch.ones(4, 4, dtype=torch.bool).tril()
    w = torch.softmax((s + alibi_bias(2, 4)).masked_fill(~keep, -math.inf), -1)
    shifted = alibi_bias(2, 4, 10)[:, :, 6:]  # the same queries and keys, 6 positions later
    torch.testing.assert_close(torch.softmax((s + shifted).masked_fill(~keep, -math.inf), -1), w)
