"""Multi-head attention and positional encodings of chapter 5."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.attention import (
    LearnedPositionalEmbedding,
    MultiHeadAttention,
    copy_from_torch,
    relative_rotation,
    sinusoidal_encoding,
)


def _pair(D=16, H=4, dtype=torch.float32, **kwargs):
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(D, H, batch_first=True, **kwargs).to(dtype).eval()
    ours = (
        MultiHeadAttention(D, H, kdim=kwargs.get("kdim"), vdim=kwargs.get("vdim"), bias=kwargs.get("bias", True))
        .to(dtype)
        .eval()
    )
    return copy_from_torch(ours, theirs), theirs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("average", [True, False])
def test_parity_with_torch_without_masks(dtype, average):
    ours, theirs = _pair(dtype=dtype)
    x, y = torch.randn(2, 5, 16, dtype=dtype), torch.randn(2, 7, 16, dtype=dtype)
    for q, kv in ((x, x), (x, y)):  # self- and cross-attention
        a, wa = theirs(q, kv, kv, average_attn_weights=average)
        b, wb = ours(q, kv, kv, need_weights=True, average_attn_weights=average)
        torch.testing.assert_close(b, a)
        torch.testing.assert_close(wb, wa)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_parity_with_torch_with_masks(dtype):
    ours, theirs = _pair(dtype=dtype)
    x = torch.randn(2, 5, 16, dtype=dtype)
    key_padding_mask = torch.tensor([[False] * 5, [False, False, False, True, True]])  # True = padding
    forbid = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)  # torch: True = forbidden
    bias = torch.randn(5, 5, dtype=dtype)
    cases = [
        ({"key_padding_mask": key_padding_mask}, {"key_padding_mask": key_padding_mask}),
        ({"attn_mask": forbid}, {"attn_mask": ~forbid}),  # the boolean convention flips
        ({"attn_mask": bias}, {"attn_mask": bias}),  # float masks are added in both
        (
            {"attn_mask": forbid, "key_padding_mask": key_padding_mask},
            {"is_causal": True, "key_padding_mask": key_padding_mask},
        ),
    ]
    for theirs_kwargs, ours_kwargs in cases:
        a, wa = theirs(x, x, x, **theirs_kwargs)
        for backend in ("fast", "naive"):
            ours.backend = backend
            b, _ = ours(x, x, x, **ours_kwargs)
            torch.testing.assert_close(b, a)
        _, wb = ours(x, x, x, need_weights=True, **ours_kwargs)
        torch.testing.assert_close(wb, wa)


def test_parity_with_torch_for_other_key_and_value_sizes():
    ours, theirs = _pair(kdim=6, vdim=9)
    q, k, v = torch.randn(2, 3, 16), torch.randn(2, 4, 6), torch.randn(2, 4, 9)
    a, wa = theirs(q, k, v)
    b, wb = ours(q, k, v, need_weights=True)
    torch.testing.assert_close(b, a)
    torch.testing.assert_close(wb, wa)


def test_weights_are_returned_not_stored():
    ours, _ = _pair()
    x = torch.randn(1, 3, 16)
    _, weights = ours(x, x, x)
    assert weights is None
    _, weights = ours(x, x, x, need_weights=True, average_attn_weights=False)
    assert weights.shape == (1, 4, 3, 3)
    assert not any(isinstance(v, torch.Tensor) and v.shape == weights.shape for v in vars(ours).values())


def test_causal_outputs_ignore_the_future():
    ours, _ = _pair()
    x = torch.randn(1, 6, 16)
    changed = x.clone()
    changed[:, 4:] = torch.randn(1, 2, 16)  # change the last two tokens
    a, _ = ours(x, x, x, is_causal=True)
    b, _ = ours(changed, changed, changed, is_causal=True)
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:])


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 8), seed=st.integers(0, 2**16))
def test_self_attention_without_positions_is_permutation_equivariant(n, seed):
    ours, _ = _pair(dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, n, 16, generator=g, dtype=torch.float64)
    perm = torch.randperm(n, generator=g)
    out, _ = ours(x, x, x)
    out_perm, _ = ours(x[:, perm], x[:, perm], x[:, perm])
    torch.testing.assert_close(out_perm, out[:, perm])  # a bag of words
    pe = sinusoidal_encoding(n, 16, dtype=torch.float64)[None]
    y = x + pe
    y_perm = x[:, perm] + pe
    if not torch.equal(perm, torch.arange(n)):
        with_pe, _ = ours(y, y, y)
        with_pe_perm, _ = ours(y_perm, y_perm, y_perm)
        assert not torch.allclose(with_pe_perm, with_pe[:, perm])  # positions break the symmetry


def test_multihead_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"embed_dim \(10\) must be divisible by num_heads \(4\)"):
        MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match="only batch_first=True"):
        MultiHeadAttention(8, 2, batch_first=False)
    with pytest.raises(ValueError, match="backend must be one of"):
        MultiHeadAttention(8, 2, backend="flash")
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"query must have shape \(B, N, 8\), got \(2, 3, 7\)"):
        mha(torch.zeros(2, 3, 7), torch.zeros(2, 3, 8), torch.zeros(2, 3, 8))
    with pytest.raises(ValueError, match="must share B"):
        mha(torch.zeros(2, 3, 8), torch.zeros(1, 3, 8), torch.zeros(1, 3, 8))
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(2, 3\) \(True = padding\), got \(2, 4\)"):
        x = torch.zeros(2, 3, 8)
        mha(x, x, x, key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="differ"):
        copy_from_torch(MultiHeadAttention(8, 2), torch.nn.MultiheadAttention(8, 4, batch_first=True))
    with pytest.raises(TypeError, match="expected"):
        copy_from_torch(torch.nn.Linear(2, 2), torch.nn.MultiheadAttention(8, 4))


def test_sinusoidal_encoding_follows_the_formula():
    pe = sinusoidal_encoding(20, 8, dtype=torch.float64)
    assert pe.shape == (20, 8)
    for p in (0, 3, 19):
        for i in range(4):
            w = 1 / 10_000 ** (2 * i / 8)
            assert pe[p, 2 * i].item() == pytest.approx(math.sin(p * w))
            assert pe[p, 2 * i + 1].item() == pytest.approx(math.cos(p * w))


@pytest.mark.parametrize("offset", [1, 5, -3, 40])
def test_relative_rotation_shifts_positions(offset):
    pe = sinusoidal_encoding(100, 16, dtype=torch.float64)
    M = relative_rotation(offset, 16)
    p = torch.arange(max(0, -offset), min(100, 100 - offset))
    torch.testing.assert_close(pe[p + offset], pe[p] @ M.T)
    torch.testing.assert_close(M @ M.T, torch.eye(16, dtype=torch.float64))  # a rotation


def test_positional_errors():
    with pytest.raises(ValueError, match="d_model must be even"):
        sinusoidal_encoding(4, 5)
    with pytest.raises(ValueError, match="max_len must be an int >= 1, got 0"):
        sinusoidal_encoding(0, 4)
    with pytest.raises(TypeError, match=r"offset must be an int, got float \(1.5\)"):
        relative_rotation(1.5, 4)
    learned = LearnedPositionalEmbedding(4, 8)
    assert learned(torch.zeros(2, 3, 8)).shape == (2, 3, 8)
    with pytest.raises(ValueError, match="sequence length 5 exceeds max_len 4"):
        learned(torch.zeros(1, 5, 8))
    with pytest.raises(ValueError, match=r"x must have shape \(B, N, 8\)"):
        learned(torch.zeros(1, 3, 7))
