"""Chapter 8's positions: rotary embeddings (RoPE), their scaling past the trained length, and ALiBi's biases."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from attnlab.attention import (
    ROPE_SCALINGS,
    RopeScaling,
    alibi_bias,
    alibi_slopes,
    relative_rotation,
    rotary_embedding,
    rotary_frequencies,
    sinusoidal_encoding,
)


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


# --- rotary positions past the trained length ----------------------------------------------------

L_TRAINED = 4096  # with E = 16 and base 10^4, pairs 0-2 are left alone by YaRN, 3-5 blended, 6-7 interpolated


def scalings(factor: float) -> list[RopeScaling]:
    return [RopeScaling(method, factor, original_length=L_TRAINED) for method in ROPE_SCALINGS]


def test_every_scaling_at_factor_one_is_plain_rope():
    torch.manual_seed(4)
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    positions = torch.tensor([0, 1, 5, 64, 999, 4096, 10_000])
    for scaling in scalings(1):
        torch.testing.assert_close(rotary_embedding(x, positions, scaling=scaling), rotary_embedding(x, positions))
        torch.testing.assert_close(
            rotary_frequencies(16, scaling=scaling, dtype=torch.float64), rotary_frequencies(16, dtype=torch.float64)
        )
        assert scaling.attention_factor == 1.0
    assert [s.method for s in scalings(1)] == ["linear", "ntk", "yarn", "llama3"]


def test_plain_frequencies_are_the_sinusoidal_encodings():
    w = rotary_frequencies(16, dtype=torch.float64)
    torch.testing.assert_close(w, 10_000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16))
    torch.testing.assert_close(sinusoidal_encoding(2, 16, dtype=torch.float64)[1, 0::2], torch.sin(w))


def test_linear_interpolation_is_rope_at_positions_divided_by_the_factor():
    """Chen et al. (2023): position p of the long sequence is read as p / s."""
    torch.manual_seed(5)
    x = torch.randn(3, 6, 16, dtype=torch.float64)
    positions = torch.tensor([0, 3, 7, 100, 4095, 16_383])
    for s in (2, 4, 7.5):
        scaled = rotary_embedding(x, positions, scaling=RopeScaling("linear", s))
        torch.testing.assert_close(scaled, _rope_complex(x, positions.double() / s))
        torch.testing.assert_close(
            rotary_embedding(x, positions * s, scaling=RopeScaling("linear", s)), rotary_embedding(x, positions)
        )


def test_ntk_multiplies_the_base_by_s_to_the_e_over_e_minus_2():
    """bloc97's rule, as the YaRN paper (Section 3.1) writes it: b' = b s^(E/(E-2)); the lowest
    frequency is divided by s, the highest (1) kept."""
    torch.manual_seed(6)
    x = torch.randn(5, 16, dtype=torch.float64)
    positions = torch.tensor([0, 2, 9, 300, 20_000])
    for E, base, s in ((16, 10_000.0, 4), (8, 500_000.0, 8), (64, 10_000.0, 2.5)):
        new_base = base * s ** (E / (E - 2))
        expected = torch.tensor([new_base ** (-2 * i / E) for i in range(E // 2)], dtype=torch.float64)
        w = rotary_frequencies(E, base=base, scaling=RopeScaling("ntk", s), dtype=torch.float64)
        torch.testing.assert_close(w, expected)
        plain = rotary_frequencies(E, base=base, dtype=torch.float64)
        torch.testing.assert_close(w[[0, -1]], torch.stack([plain[0], plain[-1] / s]))
    torch.testing.assert_close(
        rotary_embedding(x, positions, scaling=RopeScaling("ntk", 4)),
        _rope_complex(x, positions, base=10_000.0 * 4 ** (16 / 14)),
    )
    # one pair: its frequency is 1 whatever the base, so NTK changes nothing
    assert rotary_frequencies(2, scaling=RopeScaling("ntk", 4)).tolist() == [1.0]


def _ntk_by_parts(E: int, base: float, s: float, L: int, alpha: float, beta: float) -> list[float]:
    """YaRN's Section 3.2 by hand, pair by pair: wavelength lambda = 2 pi / w, r = L / lambda."""
    out = []
    for i in range(E // 2):
        w = base ** (-2 * i / E)
        wavelength = 2 * math.pi / w
        if wavelength < L / beta:  # turns more than beta times over L: left alone
            out.append(w)
        elif wavelength > L / alpha:  # turns less than alpha times: interpolated like PI
            out.append(w / s)
        else:
            gamma = (L / wavelength - alpha) / (beta - alpha)
            out.append((1 - gamma) * w / s + gamma * w)
    return out


def test_yarn_frequencies_follow_the_ramp_by_wavelength():
    E, base, s = 16, 10_000.0, 8
    yarn = RopeScaling("yarn", s, original_length=L_TRAINED)
    assert (yarn.alpha, yarn.beta) == (1.0, 32.0)  # the paper's values for Llama
    w = rotary_frequencies(E, base=base, scaling=yarn, dtype=torch.float64)
    torch.testing.assert_close(w, torch.tensor(_ntk_by_parts(E, base, s, L_TRAINED, 1.0, 32.0), dtype=torch.float64))
    plain = rotary_frequencies(E, base=base, dtype=torch.float64)
    kept, interpolated = torch.isclose(w, plain, rtol=1e-12), torch.isclose(w, plain / s, rtol=1e-12)
    assert kept.tolist() == [True] * 3 + [False] * 5  # wavelengths 6.3, 20, 63 < 4096 / 32
    assert interpolated.tolist() == [False] * 6 + [True] * 2  # wavelengths 6283, 19869 > 4096
    assert ((w < plain) & (w > plain / s))[3:6].all()  # between: blended
    own = RopeScaling("yarn", s, original_length=L_TRAINED, alpha=2, beta=16)
    torch.testing.assert_close(
        rotary_frequencies(E, base=base, scaling=own, dtype=torch.float64),
        torch.tensor(_ntk_by_parts(E, base, s, L_TRAINED, 2.0, 16.0), dtype=torch.float64),
    )


def test_yarns_temperature_is_point_one_log_s_plus_one_on_queries_and_keys():
    """sqrt(1/t) = 0.1 ln(s) + 1 (YaRN, Section 3.4); DeepSeek-V3's s = 40 gives 1.3689 on q and k."""
    assert RopeScaling("yarn", 40, original_length=4096).attention_factor == pytest.approx(1.3688879454113936)
    assert RopeScaling("yarn", 4, original_length=64).attention_factor == pytest.approx(0.1 * math.log(4) + 1)
    for method in ("linear", "ntk", "llama3"):
        assert RopeScaling(method, 40, original_length=4096).attention_factor == 1.0


def _llama3_rule(E: int, base: float, factor: float, low: float, high: float, old: int) -> list[float]:
    """Llama 3.1's apply_scaling (llama-models, models/llama3/model.py), one frequency at a time."""
    out = []
    for i in range(E // 2):
        freq = 1 / base ** (2 * i / E)
        wavelength = 2 * math.pi / freq
        if wavelength < old / high:
            out.append(freq)
        elif wavelength > old / low:
            out.append(freq / factor)
        else:
            smooth = (old / wavelength - low) / (high - low)
            out.append((1 - smooth) * freq / factor + smooth * freq)
    return out


def test_llama3_frequencies_follow_llama_3_1s_rule():
    """Head size 128, theta 500,000, factor 8, low 1, high 4, original 8192: Llama 3.1's values."""
    llama = RopeScaling("llama3", 8, original_length=8192)
    assert (llama.alpha, llama.beta) == (1.0, 4.0)
    w = rotary_frequencies(128, base=500_000.0, scaling=llama, dtype=torch.float64)
    expected = torch.tensor(_llama3_rule(128, 500_000.0, 8, 1, 4, 8192), dtype=torch.float64)
    torch.testing.assert_close(w, expected)
    plain = rotary_frequencies(128, base=500_000.0, dtype=torch.float64)
    changed = ~torch.isclose(w, plain, rtol=1e-12)
    assert 0 < int(changed.sum()) < 64 and not changed[0]  # the fast pairs kept, the slow ones divided
    torch.testing.assert_close(w[-1], plain[-1] / 8)
    own = RopeScaling("llama3", 4, original_length=512, alpha=2, beta=8)
    torch.testing.assert_close(
        rotary_frequencies(32, scaling=own, dtype=torch.float64),
        torch.tensor(_llama3_rule(32, 10_000.0, 4, 2, 8, 512), dtype=torch.float64),
    )


def test_every_scaling_keeps_scores_relative_and_rotations_norm_preserving():
    """Scaled frequencies are still one frequency per pair: rope(q, m) . rope(k, n) depends on
    n - m only, and each pair keeps its norm (YaRN's temperature is not applied here)."""
    torch.manual_seed(7)
    q, k = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
    for scaling in scalings(4):

        def score(m: int, n: int, scaling=scaling) -> torch.Tensor:
            rq = rotary_embedding(q[None], torch.tensor([m]), scaling=scaling)
            rk = rotary_embedding(k[None], torch.tensor([n]), scaling=scaling)
            return (rq * rk).sum()

        for m, n in [(0, 0), (3, 1), (2, 9), (50, 7000)]:
            for shift in (1, 13, 10_000):
                torch.testing.assert_close(score(m + shift, n + shift), score(m, n))
        assert not torch.allclose(score(0, 1), score(0, 2)), scaling.method
        y = rotary_embedding(q.expand(5, 16), torch.arange(5) * 999, scaling=scaling)
        torch.testing.assert_close(
            y.unflatten(-1, (8, 2)).norm(dim=-1), q.unflatten(-1, (8, 2)).norm(dim=-1).expand(5, 8)
        )


def test_scaled_rope_keeps_the_dtype_of_x():
    x = torch.randn(4, 6, dtype=torch.float16)
    for scaling in scalings(4):
        assert rotary_embedding(x, scaling=scaling).dtype == torch.float16


def test_rope_scaling_is_a_frozen_value_with_its_ramp_filled_in():
    yarn = RopeScaling("yarn", 4, original_length=64)
    assert yarn == RopeScaling("yarn", 4, original_length=64, alpha=1.0, beta=32.0)
    assert RopeScaling("linear", 4).original_length is None and RopeScaling("ntk", 4).alpha is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        yarn.factor = 8  # type: ignore[misc]
    assert len({yarn, RopeScaling("yarn", 4, original_length=64)}) == 1


def test_bad_scalings_get_named_errors():
    with pytest.raises(ValueError, match=r"RopeScaling: factor must be a number >= 1, got 0"):
        RopeScaling("linear", 0)
    with pytest.raises(ValueError, match=r"RopeScaling: factor must be a number >= 1, got -2"):
        RopeScaling("yarn", -2, original_length=64)
    with pytest.raises(ValueError, match=r"RopeScaling: factor must be a number >= 1, got 0.5"):
        RopeScaling("ntk", 0.5)
    with pytest.raises(TypeError, match=r"RopeScaling: factor must be a number, got str \('4'\)"):
        RopeScaling("linear", "4")
    with pytest.raises(
        ValueError, match=r"RopeScaling: method must be one of \('linear', 'ntk', 'yarn', 'llama3'\), got 'dynamic'"
    ):
        RopeScaling("dynamic", 2)
    for method in ("yarn", "llama3"):
        with pytest.raises(ValueError, match=rf"RopeScaling: '{method}' needs original_length, .*got None"):
            RopeScaling(method, 4)
    with pytest.raises(TypeError, match=r"RopeScaling: original_length must be an int or None, got float \(64.0\)"):
        RopeScaling("yarn", 4, original_length=64.0)
    with pytest.raises(ValueError, match=r"RopeScaling: original_length must be an int >= 1, got 0"):
        RopeScaling("yarn", 4, original_length=0)
    with pytest.raises(
        ValueError, match=r"RopeScaling: alpha and beta are the ramp of 'yarn' and 'llama3'; 'linear' has none"
    ):
        RopeScaling("linear", 4, alpha=1)
    with pytest.raises(ValueError, match=r"RopeScaling: alpha must be a number > 0, got 0"):
        RopeScaling("yarn", 4, original_length=64, alpha=0)
    with pytest.raises(ValueError, match=r"RopeScaling: beta must be a number > 2, got 2"):
        RopeScaling("llama3", 4, original_length=64, alpha=2, beta=2)
    with pytest.raises(TypeError, match=r"rotary_embedding: scaling must be a RopeScaling or None, got str \('yarn'\)"):
        rotary_embedding(torch.randn(4, 6), scaling="yarn")
    with pytest.raises(TypeError, match=r"rotary_frequencies: scaling must be a RopeScaling or None, got dict"):
        rotary_frequencies(8, scaling={"rope_type": "yarn", "factor": 4.0})
    with pytest.raises(
        ValueError, match=r"rotary_frequencies: head_dim must be even \(the features rotate in pairs\), got 7"
    ):
        rotary_frequencies(7)
    with pytest.raises(ValueError, match=r"rotary_frequencies: head_dim must be an int >= 2, got 0"):
        rotary_frequencies(0)
    with pytest.raises(TypeError, match=r"rotary_frequencies: head_dim must be an int, got float"):
        rotary_frequencies(8.0)
    with pytest.raises(ValueError, match=r"rotary_frequencies: base must be a number > 1, got 1"):
        rotary_frequencies(8, base=1)
