"""Blockwise exact attention with an online softmax (chapter 7): equal to the naive kernel and to
PyTorch's, in values and gradients, for every block size; its backward keeps no score blocks."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.attention import blockwise_attention, scaled_dot_product_attention


def _qkv(shape_q, S, Ev, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    *lead, L, E = shape_q
    q = torch.randn(*lead, L, E, generator=g, dtype=dtype)
    k = torch.randn(*lead, S, E, generator=g, dtype=dtype)
    v = torch.randn(*lead, S, Ev, generator=g, dtype=dtype)
    return [t.requires_grad_() for t in (q, k, v)]


def _grads(fn, q, k, v, upstream):
    out = fn(q, k, v)
    grads = torch.autograd.grad(out, (q, k, v), upstream)
    return out, grads


@settings(max_examples=60, deadline=None)
@given(
    L=st.integers(1, 20),
    S=st.integers(1, 20),
    E=st.integers(1, 6),
    block=st.integers(1, 25),
    mask_kind=st.sampled_from(["none", "causal", "bool", "float", "padding"]),
    seed=st.integers(0, 2**16),
)
def test_equals_the_naive_kernel_and_its_gradients(L, S, E, block, mask_kind, seed):
    q, k, v = _qkv((2, 3, L, E), S, 4, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    mask, causal = None, mask_kind == "causal"
    if mask_kind == "bool":
        mask = torch.rand(2, 1, L, S, generator=g) > 0.4  # some rows may be fully masked
    elif mask_kind == "float":
        mask = torch.randn(L, S, generator=g, dtype=torch.float64)
    elif mask_kind == "padding":
        mask = torch.arange(S)[None, None, None, :] < torch.tensor([S, max(1, S // 2)])[:, None, None, None]
    upstream = torch.randn(2, 3, L, 4, generator=g, dtype=torch.float64)

    def ours(q, k, v):
        return blockwise_attention(q, k, v, mask, is_causal=causal, block_size=block)

    def naive(q, k, v):
        return scaled_dot_product_attention(q, k, v, mask, is_causal=causal, backend="naive")

    out, grads = _grads(ours, q, k, v, upstream)
    expected, expected_grads = _grads(naive, q, k, v, upstream)
    torch.testing.assert_close(out, expected)
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block", [1, 7, 64, 100])
def test_equals_torch_in_float32(causal, block):
    q, k, v = _qkv((2, 4, 70, 16), 70, 16, dtype=torch.float32)
    upstream = torch.randn(2, 4, 70, 16)
    out, grads = _grads(
        lambda q, k, v: blockwise_attention(q, k, v, is_causal=causal, block_size=block), q, k, v, upstream
    )
    expected, expected_grads = _grads(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), q, k, v, upstream
    )
    torch.testing.assert_close(out, expected, atol=2e-5, rtol=1e-4)
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_gradcheck():
    q, k, v = _qkv((1, 2, 5, 3), 6, 2)
    assert torch.autograd.gradcheck(lambda q, k, v: blockwise_attention(q, k, v, block_size=2), (q, k, v))
    assert torch.autograd.gradcheck(
        lambda q, k, v: blockwise_attention(q, k, v, is_causal=True, block_size=4), (q, k, v)
    )


def test_fully_masked_queries_get_zeros_and_zero_gradients():
    q, k, v = _qkv((1, 1, 3, 4), 5, 2)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    out = blockwise_attention(q, k, v, mask, block_size=2)
    assert torch.all(out[0, 0, 1] == 0) and not torch.isnan(out).any()
    out.sum().backward()
    assert torch.all(q.grad[0, 0, 1] == 0) and not torch.isnan(k.grad).any()


def test_backward_keeps_only_inputs_output_and_log_sum_exp():
    """What autograd saves does not grow like L x S: the point of the custom backward."""
    saved = []

    def pack(t):
        saved.append(t.numel())
        return t

    n, block = 512, 64
    q, k, v = (torch.randn(1, 1, n, 8, requires_grad=True) for _ in range(3))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        blockwise_attention(q, k, v, block_size=block)
    assert sum(saved) <= 4 * n * 8 + n  # q, k, v, output and one log-sum-exp per query
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        scaled_dot_product_attention(q, k, v, backend="naive")
    assert sum(saved) >= n * n  # the naive kernel keeps the weights


def test_errors_name_the_argument():
    q, k, v = _qkv((1, 2, 4, 3), 4, 2)
    with pytest.raises(ValueError, match="block_size must be an int >= 1, got 0"):
        blockwise_attention(q, k, v, block_size=0)
    with pytest.raises(ValueError, match="not both"):
        blockwise_attention(q, k, v, torch.ones(4, 4, dtype=torch.bool), is_causal=True)
    with pytest.raises(ValueError, match=r"the shape of attn_mask is \(3, 4\)"):
        blockwise_attention(q, k, v, torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="query and key must have the same feature size"):
        blockwise_attention(q, k[..., :2], v)


def test_signature_is_pytorchs():
    """query, key, value, attn_mask, dropout_p, is_causal, then keyword-only scale: torch's order."""
    torch_like = list(inspect.signature(scaled_dot_product_attention).parameters.values())[:7]
    ours = list(inspect.signature(blockwise_attention).parameters.values())[:7]
    assert [(p.name, p.kind, p.default) for p in ours] == [(p.name, p.kind, p.default) for p in torch_like]
    assert inspect.signature(blockwise_attention).parameters["block_size"].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize(
    ("fifth", "error"), [(True, TypeError), (0.5, ValueError), (1, ValueError), (False, TypeError)]
)
def test_the_fifth_argument_is_dropout_p_not_is_causal(fifth, error):
    """A call ported from torch, or written for the old order, must not silently mean causal."""
    q, k, v = _qkv((1, 2, 6, 3), 6, 2)
    with pytest.raises(
        error, match=r"does not implement dropout, so dropout_p must be 0\.0.*pass is_causal=True by keyword"
    ):
        blockwise_attention(q, k, v, None, fifth)


def test_dropout_p_zero_is_accepted_in_torchs_place():
    q, k, v = _qkv((1, 2, 6, 3), 6, 2)
    expected = F.scaled_dot_product_attention(q, k, v, None, 0.0, True)
    torch.testing.assert_close(blockwise_attention(q, k, v, None, 0.0, True, block_size=4), expected)
    torch.testing.assert_close(
        blockwise_attention(q, k, v, None, 0, block_size=4), F.scaled_dot_product_attention(q, k, v)
    )
