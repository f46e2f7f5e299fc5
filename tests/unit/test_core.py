"""The three stages and scaled dot-product attention (naive and fast backends) of chapter 3."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.attention import (
    CosineScore,
    ScaledDotScore,
    attention,
    causal_mask,
    make_score,
    scaled_dot_product_attention,
    to_float_mask,
)

BACKENDS = ["naive", "fast"]
TOLERANCE = {torch.float32: {}, torch.float64: {}, torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2}}


def _qkv(batch, L, S, E, Ev, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(*batch, L, E, generator=g).to(dtype),
        torch.randn(*batch, S, E, generator=g).to(dtype),
        torch.randn(*batch, S, Ev, generator=g).to(dtype),
    )


def _reference(q, k, v, mask=None, causal=False, scale=None):
    """PyTorch's own kernel, computed in float64 for the comparison."""
    out = F.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=mask, is_causal=causal, scale=scale
    )
    return out.to(q.dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize(("batch", "L", "S"), [((), 4, 4), ((2,), 3, 5), ((2, 3), 5, 3), ((1, 4), 1, 7)])
def test_parity_without_mask_and_causal(backend, dtype, batch, L, S):
    q, k, v = _qkv(batch, L, S, 8, 6, dtype)
    for causal in (False, True):
        got = scaled_dot_product_attention(q, k, v, is_causal=causal, backend=backend)
        torch.testing.assert_close(got, _reference(q, k, v, causal=causal), **TOLERANCE[dtype])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mask_shape", [(5, 7), (2, 1, 5, 7), (1, 3, 1, 7), (2, 3, 5, 7)])
def test_parity_with_boolean_and_float_masks(backend, mask_shape):
    q, k, v = _qkv((2, 3), 5, 7, 8, 4, torch.float64)
    g = torch.Generator().manual_seed(1)
    mask = torch.rand(mask_shape, generator=g) > 0.4
    mask[..., 0] = True  # no fully masked rows: PyTorch's own answer there differs by backend
    for m in (mask, to_float_mask(mask, torch.float64), torch.randn(mask_shape, generator=g, dtype=torch.float64)):
        got = scaled_dot_product_attention(q, k, v, m, backend=backend)
        torch.testing.assert_close(got, _reference(q, k, v, mask=m))


@pytest.mark.parametrize("backend", BACKENDS)
def test_scale_argument(backend):
    q, k, v = _qkv((2,), 3, 4, 8, 8, torch.float64)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, scale=0.3, backend=backend), _reference(q, k, v, scale=0.3)
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_fully_masked_queries_get_zero_output(backend):
    q, k, v = _qkv((2,), 3, 4, 8, 5, torch.float64)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[1, 2] = False  # the last query of the second example may see nothing
    for m in (mask, to_float_mask(mask, torch.float64)):
        out = scaled_dot_product_attention(q, k, v, m, backend=backend)
        assert torch.equal(out[1, 2], torch.zeros(5, dtype=torch.float64))
        assert not torch.isnan(out).any()
        torch.testing.assert_close(out[0], _reference(q[0], k[0], v[0]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("float_mask", [False, True])
def test_gradients_through_fully_masked_rows(dtype, float_mask):
    """The fast path's gradients where a query sees no key: finite everywhere (PyTorch's kernel
    computes NaN weights there, and a NaN times a zero gradient is still NaN), zero for that query,
    and equal to the naive path's."""
    q, k, v = _qkv((2, 2), 3, 4, 5, 6, dtype)
    mask = torch.ones(2, 2, 3, 4, dtype=torch.bool)
    mask[1, 0, 2] = False  # example 1, head 0, query 2 sees nothing
    m = to_float_mask(mask, dtype) if float_mask else mask
    grads = {}
    for backend in BACKENDS:
        inputs = [t.clone().requires_grad_() for t in (q, k, v)]
        out = scaled_dot_product_attention(*inputs, m, backend=backend)
        weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=dtype)
        grads[backend] = torch.autograd.grad((out * weight).sum(), inputs)
        assert all(torch.isfinite(g).all() for g in grads[backend]), backend
        assert not grads[backend][0][1, 0, 2].any(), backend  # that query changes nothing
    for fast, naive in zip(grads["fast"], grads["naive"], strict=True):
        torch.testing.assert_close(fast, naive)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradcheck_float64(backend):
    q, k, v = (t.requires_grad_() for t in _qkv((2,), 3, 4, 5, 3, torch.float64))
    mask = torch.tensor([[1, 1, 0, 1], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.autograd.gradcheck(
        lambda q, k, v: scaled_dot_product_attention(q, k, v, mask, backend=backend), (q, k, v)
    )


def test_attention_returns_the_three_stages():
    q, k, v = _qkv((2,), 3, 4, 8, 5, torch.float64)
    out, weights = attention(q, k, v)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    torch.testing.assert_close(weights, torch.softmax(scores, -1))
    torch.testing.assert_close(out, weights @ v)
    torch.testing.assert_close(out, _reference(q, k, v))


def test_attention_takes_any_score_module():
    q, k, v = _qkv((2,), 3, 4, 8, 5)
    out, weights = attention(q, k, v, score=ScaledDotScore(8))
    torch.testing.assert_close(out, _reference(q, k, v))
    for name in ("dot", "cosine", "general", "additive", "concat"):
        out, weights = attention(q, k, v, score=make_score(name, 8, 8, 6))
        assert out.shape == (2, 3, 5)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3))


def test_cosine_score_ignores_length():
    q, k = torch.randn(1, 2, 4), torch.randn(1, 3, 4)
    score = CosineScore(4, scale=1.0)
    torch.testing.assert_close(score(q * 7.0, k * 0.1), score(q, k))
    assert score(q, k).abs().max() <= 1.0 + 1e-6
    with pytest.raises(ValueError, match="scale must be a number > 0, got 0"):
        CosineScore(4, scale=0)


def test_bottom_right_causal_mask_matches_torch_causal_lower_right():
    from torch.nn.attention.bias import causal_lower_right

    q, k, v = _qkv((1, 2), 3, 6, 8, 4, torch.float64)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(3, 6))
    for backend in BACKENDS:
        got = scaled_dot_product_attention(q, k, v, causal_mask(3, 6, align="bottom-right"), backend=backend)
        torch.testing.assert_close(got, expected)
    with pytest.raises(ValueError, match="align must be"):
        causal_mask(3, 6, align="center")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"key": torch.zeros(2, 5, 8)}, ValueError, "key and value must have the same length S"),
        ({"query": torch.zeros(2, 3, 7)}, ValueError, "query and key must have the same feature size E"),
        ({"query": torch.zeros(3)}, ValueError, "query must have at least 2 dimensions"),
        ({"query": torch.zeros(2, 3, 8, dtype=torch.long)}, TypeError, "query must be a floating-point tensor"),
        (
            {"attn_mask": torch.ones(4, 4, dtype=torch.bool)},
            ValueError,
            r"the shape of attn_mask is \(4, 4\), but it must broadcast to \(..., L, S\) = \(2, 3, 4\)",
        ),
        ({"attn_mask": torch.ones(3, 4, dtype=torch.long)}, TypeError, "attn_mask must be boolean"),
        ({"dropout_p": 1.0}, ValueError, r"dropout_p must be a number in \[0, 1\)"),
        ({"attn_mask": torch.ones(3, 4, dtype=torch.bool), "is_causal": True}, ValueError, "not both"),
        ({"backend": "flash"}, ValueError, "backend must be one of"),
        ({"value": torch.zeros(2, 4, 5, dtype=torch.float64)}, TypeError, "must share one dtype"),
    ],
)
def test_bad_input_is_explained(kwargs, error, message):
    args = {"query": torch.zeros(2, 3, 8), "key": torch.zeros(2, 4, 8), "value": torch.zeros(2, 4, 5)}
    args.update(kwargs)
    with pytest.raises(error, match=message):
        scaled_dot_product_attention(**args)


def test_attention_checks_what_the_score_returns():
    q, k, v = _qkv((2,), 3, 4, 8, 5)
    with pytest.raises(
        ValueError, match=r"score's output must have shape \(..., L, S\) = \(2, 3, 4\), got \(2, 3, 3\)"
    ):
        attention(q, k, v, score=lambda q, k: q @ q.transpose(-2, -1))


def test_to_float_mask_errors():
    with pytest.raises(TypeError, match="mask must be a boolean tensor"):
        to_float_mask(torch.zeros(2))
    with pytest.raises(TypeError, match="dtype must be a floating"):
        to_float_mask(torch.ones(2, dtype=torch.bool), torch.int32)


@settings(max_examples=40, deadline=None)
@given(
    L=st.integers(1, 5),
    S=st.integers(1, 6),
    seed=st.integers(0, 2**16),
    shift=st.floats(-30, 30),
    backend=st.sampled_from(BACKENDS),
)
def test_properties(L, S, seed, shift, backend):
    q, k, v = _qkv((2,), L, S, 4, 3, torch.float64, seed)
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(2, L, S, generator=g) > 0.4
    out, weights = attention(q, k, v, mask=mask)
    has_key = mask.any(-1)
    # weights: a distribution over the allowed keys, exactly zero elsewhere, no NaN anywhere
    torch.testing.assert_close(weights.sum(-1)[has_key], torch.ones_like(weights.sum(-1)[has_key]))
    assert torch.equal(weights[~mask], torch.zeros_like(weights[~mask]))
    assert not torch.isnan(out).any()
    assert torch.equal(out[~has_key], torch.zeros_like(out[~has_key]))
    # the kernel agrees with the three stages, and adding a constant to a row changes nothing
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, mask, backend=backend), out)
    bias = torch.full((2, L, S), shift, dtype=torch.float64).masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, bias, backend=backend), out)
