"""The mask convention and the masked softmax (the normalisation stage)."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab import causal_mask, from_key_padding_mask, masked_softmax, padding_mask


def test_causal_mask_is_the_lower_triangle():
    mask = causal_mask(4)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool))


@pytest.mark.parametrize(("L", "S"), [(3, 5), (5, 3), (1, 4), (4, 4)])
def test_causal_mask_matches_sdpa_is_causal_when_lengths_differ(L, S):
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, L, 8), torch.randn(1, 2, S, 8), torch.randn(1, 2, S, 8)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(L, S))
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("bad", [0, -2])
def test_causal_mask_rejects_non_positive_lengths(bad):
    with pytest.raises(ValueError, match=r"num_queries must be an int >= 1, got -?[0-9]"):
        causal_mask(bad)
    with pytest.raises(ValueError, match=r"num_keys must be an int >= 1, got -?[0-9]"):
        causal_mask(2, bad)


def test_causal_mask_rejects_non_integers():
    with pytest.raises(TypeError, match="num_queries must be an int"):
        causal_mask(2.0)


def test_padding_mask_marks_real_tokens():
    mask = padding_mask(torch.tensor([2, 0, 3]), max_len=4)
    assert mask.shape == (3, 1, 1, 4)
    assert mask[:, 0, 0].int().tolist() == [[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 0]]


def test_padding_mask_errors_name_the_argument():
    with pytest.raises(TypeError, match="lengths must be an integer tensor"):
        padding_mask(torch.tensor([2.0, 3.0]))
    with pytest.raises(TypeError, match="lengths must be an integer tensor"):
        padding_mask([2, 3])
    with pytest.raises(ValueError, match=r"lengths must have shape \(B,\), got \(2, 1\)"):
        padding_mask(torch.tensor([[2], [3]]))
    with pytest.raises(ValueError, match="non-negative"):
        padding_mask(torch.tensor([2, -1]))
    with pytest.raises(ValueError, match=r"max_len must be an int >= 3 \(the largest length\), got 2"):
        padding_mask(torch.tensor([2, 3]), max_len=2)


def test_masked_softmax_without_mask_equals_torch_softmax():
    torch.manual_seed(0)
    scores = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    for dim in (-1, 0, 2):
        torch.testing.assert_close(masked_softmax(scores, dim=dim), torch.softmax(scores, dim=dim))


def test_masked_softmax_is_stable_for_huge_scores():
    scores = torch.tensor([1000.0, 1001.0, 1002.0])
    assert torch.isnan(torch.exp(scores) / torch.exp(scores).sum()).all()  # the naive formula fails
    torch.testing.assert_close(masked_softmax(scores), torch.softmax(scores - 1000, dim=-1))


def test_masked_softmax_matches_sdpa_with_a_boolean_mask():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 5)
    mask = torch.rand(2, 1, 4, 6) > 0.4
    mask[..., 0] = True  # no fully masked rows: torch's answer for those differs by backend
    weights = masked_softmax(q @ k.transpose(-2, -1) / math.sqrt(8), mask)
    torch.testing.assert_close(weights @ v, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_masked_softmax_adds_float_masks():
    scores = torch.tensor([[0.5, 1.0, -2.0]])
    float_mask = torch.tensor([[0.0, float("-inf"), 0.0]])
    bool_mask = torch.tensor([[True, False, True]])
    torch.testing.assert_close(masked_softmax(scores, float_mask), masked_softmax(scores, bool_mask))
    bias = torch.tensor([[0.0, 1.0, 2.0]])
    torch.testing.assert_close(masked_softmax(scores, bias), torch.softmax(scores + bias, dim=-1))


def test_fully_masked_rows_give_zeros_and_zero_gradients():
    scores = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True, True, False, True], [False, False, False, False]])
    weights = masked_softmax(scores, mask)
    assert torch.equal(weights[1], torch.zeros(4, dtype=torch.float64))
    assert torch.isnan(torch.softmax(scores.detach().masked_fill(~mask, float("-inf")), -1)[1]).all()
    (weights * torch.arange(4.0, dtype=torch.float64)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert torch.equal(scores.grad[1], torch.zeros(4, dtype=torch.float64))
    assert torch.equal(scores.grad[0, 2], torch.tensor(0.0, dtype=torch.float64))


def test_masked_softmax_gradcheck_float64():
    scores = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 1, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.autograd.gradcheck(lambda s: masked_softmax(s, mask), (scores,))


def test_masked_softmax_keeps_half_precision_finite():
    scores = torch.tensor([[60000.0, 0.0, -60000.0]], dtype=torch.float16)
    mask = torch.tensor([[True, False, True]])
    weights = masked_softmax(scores, mask)
    assert weights.dtype == torch.float16
    assert torch.isfinite(weights).all()
    assert weights.tolist() == [[1.0, 0.0, 0.0]]


def test_masked_softmax_errors_name_the_argument():
    with pytest.raises(TypeError, match=r"scores must be a floating-point tensor, got torch\.int64"):
        masked_softmax(torch.tensor([1, 2]))
    with pytest.raises(TypeError, match="mask must be boolean"):
        masked_softmax(torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.int64))
    with pytest.raises(TypeError, match=r"mask must be a tensor, got list"):
        masked_softmax(torch.zeros(2, 3), [[True] * 3] * 2)
    with pytest.raises(
        ValueError, match=r"the shape of mask is \(4,\), but it must broadcast to the shape of scores \(2, 3\)"
    ):
        masked_softmax(torch.zeros(2, 3), torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"the shape of mask is \(2, 2, 3\)"):
        masked_softmax(torch.zeros(2, 3), torch.ones(2, 2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="dim must be an int in"):
        masked_softmax(torch.zeros(2, 3), dim=2)


shapes = st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(1, 6))


@settings(max_examples=60, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**16), shift=st.floats(-50, 50))
def test_masked_softmax_properties(shape, seed, shift):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(shape, generator=generator, dtype=torch.float64) * 5
    mask = torch.rand(shape, generator=generator) > 0.3
    weights = masked_softmax(scores, mask)
    # exactly zero where masked, and no NaN anywhere
    assert torch.equal(weights[~mask], torch.zeros_like(weights[~mask]))
    assert not torch.isnan(weights).any()
    # rows with at least one kept key sum to one; fully masked rows sum to zero
    sums = weights.sum(-1)
    has_key = mask.any(-1)
    torch.testing.assert_close(sums[has_key], torch.ones_like(sums[has_key]))
    assert torch.equal(sums[~has_key], torch.zeros_like(sums[~has_key]))
    # adding a constant to every score of a row changes nothing
    torch.testing.assert_close(masked_softmax(scores + shift, mask), weights)


def test_from_key_padding_mask_flips_the_convention_like_multiheadattention():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(embed_dim=8, num_heads=2, batch_first=True).eval()
    x = torch.randn(2, 5, 8)
    key_padding_mask = torch.tensor([[False] * 5, [False, False, False, True, True]])  # True = ignore
    _, expected = mha(x, x, x, key_padding_mask=key_padding_mask, average_attn_weights=False)
    mask = from_key_padding_mask(key_padding_mask)
    assert mask.shape == (2, 1, 1, 5)
    q, k = (
        F.linear(x, mha.in_proj_weight[:8], mha.in_proj_bias[:8]),
        F.linear(x, mha.in_proj_weight[8:16], mha.in_proj_bias[8:16]),
    )
    q, k = q.view(2, 5, 2, 4).transpose(1, 2), k.view(2, 5, 2, 4).transpose(1, 2)  # (B, L, H*E) -> (B, H, L, E)
    weights = masked_softmax(q @ k.transpose(-2, -1) / 2.0, mask)
    torch.testing.assert_close(weights, expected)


def test_from_key_padding_mask_errors_name_the_argument():
    with pytest.raises(TypeError, match="key_padding_mask must be a boolean tensor"):
        from_key_padding_mask(torch.zeros(2, 3))
    with pytest.raises(
        ValueError, match=r"key_padding_mask must have shape \(B, S\) \(True = ignore\), got shape \(3,\)"
    ):
        from_key_padding_mask(torch.zeros(3, dtype=torch.bool))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_float_masks_take_the_dtype_of_the_scores(dtype):
    """The weights have the scores' dtype: a float32 mask must not turn float16 attention into float32."""
    torch.manual_seed(0)
    scores = (torch.randn(2, 3, 4, 5) * 3).to(dtype)
    mask = torch.randn(4, 5)  # float32, whatever the scores
    mask[1, 2:] = float("-inf")
    mask[2] = float("-inf")  # a fully masked query: -inf survives the conversion
    weights = masked_softmax(scores, mask)
    assert weights.dtype == dtype
    assert torch.equal(weights, masked_softmax(scores, mask.to(dtype)))  # the rule: the mask is converted first
    assert torch.equal(weights[..., 2, :], torch.zeros_like(weights[..., 2, :]))
    assert torch.equal(weights[..., 1, 2:], torch.zeros_like(weights[..., 1, 2:]))
    assert torch.isfinite(weights).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_fully_masked_rows_in_half_precision(dtype, kind):
    scores = torch.randn(2, 4).to(dtype).requires_grad_()
    keep = torch.tensor([[True, False, True, True], [False, False, False, False]])
    mask = keep if kind == "bool" else torch.zeros(2, 4).masked_fill(~keep, float("-inf"))
    weights = masked_softmax(scores, mask)
    assert weights.dtype == dtype
    assert torch.equal(weights[1], torch.zeros(4, dtype=dtype))
    (weights * torch.arange(4.0).to(dtype)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert torch.equal(scores.grad[1], torch.zeros(4, dtype=dtype))


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_masked_softmax_gradcheck_with_fully_masked_rows(kind):
    scores = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    keep = torch.tensor([[1, 1, 0, 1, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    mask = keep if kind == "bool" else torch.randn(3, 5, dtype=torch.float64).masked_fill(~keep, float("-inf"))
    assert torch.autograd.gradcheck(lambda s: masked_softmax(s, mask), (scores,))
    assert torch.autograd.gradgradcheck(lambda s: masked_softmax(s, mask), (scores,))


def test_masked_softmax_leaves_its_inputs_alone():
    """It fills the masked copy of the scores in place, never the caller's scores or mask."""
    scores = torch.randn(3, 4, requires_grad=True)
    keep = torch.tensor([[True, False, True, True], [False] * 4, [True] * 4])
    float_mask = torch.zeros(3, 4).masked_fill(~keep, float("-inf"))
    before = scores.detach().clone(), float_mask.clone()
    for mask in (keep, float_mask, None):
        masked_softmax(scores, mask).sum().backward()
        with torch.no_grad():
            masked_softmax(scores, mask)
    assert torch.equal(scores.detach(), before[0]) and torch.equal(float_mask, before[1])


def test_masked_softmax_waits_for_no_value():
    """No host synchronisation: on the meta device (shapes, no values) reading a value raises."""
    scores = torch.randn(2, 3, 4, 5, device="meta", dtype=torch.float16, requires_grad=True)
    bool_mask = torch.ones(4, 5, dtype=torch.bool, device="meta")
    float_mask = torch.zeros(1, 1, 4, 5, device="meta")  # float32: the weights stay float16
    for mask in (bool_mask, float_mask):
        weights = masked_softmax(scores, mask)
        assert weights.shape == scores.shape and weights.dtype == torch.float16 and weights.is_meta
        weights.sum().backward()
        with torch.no_grad():
            assert masked_softmax(scores, mask).is_meta
    assert scores.grad.shape == scores.shape
