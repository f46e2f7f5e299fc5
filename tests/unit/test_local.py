"""Restricted (banded) self-attention of chapter 5."""

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.attention import attention, band_mask, band_to_dense, banded_attention


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(1, 40),
    window=st.integers(0, 14),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
    heads=st.integers(1, 3),
    chunk=st.one_of(st.none(), st.integers(1, 8)),
)
def test_banded_attention_equals_full_attention_with_a_band_mask(n, window, causal, seed, heads, chunk):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(2, heads, n, 6, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, heads, n, 4, generator=g, dtype=torch.float64)
    out, banded = banded_attention(q, k, v, window, causal=causal, chunk_size=chunk)
    expected, weights = attention(q, k, v, mask=band_mask(n, window, causal=causal))
    assert banded.shape == (2, heads, n, 2 * window + 1)  # never an (n, n) score matrix
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(band_to_dense(banded, window), weights)


def test_band_mask_shape_and_content():
    assert band_mask(5, 1).int().tolist() == [
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [0, 1, 1, 1, 0],
        [0, 0, 1, 1, 1],
        [0, 0, 0, 1, 1],
    ]
    assert band_mask(4, 2, causal=True).int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1]]


def test_banded_attention_gradcheck():
    q, k, v = (torch.randn(1, 5, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    assert torch.autograd.gradcheck(lambda q, k, v: banded_attention(q, k, v, 1, causal=True)[0], (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v: banded_attention(q, k, v, 2, chunk_size=2)[0], (q, k, v))


def test_banded_attention_memory_grows_linearly():
    """Peak memory for N = 1024 and 2048 at a fixed window: twice, not four times."""
    from attnlab.complexity import measure

    peaks = []
    for n in (1024, 2048):
        q, k, v = (torch.randn(1, 1, n, 16) for _ in range(3))
        peaks.append(measure(functools.partial(banded_attention, q, k, v, 8), repeats=1, warmup=0).peak_bytes)
    assert 1.6 < peaks[1] / peaks[0] < 2.4


def test_local_errors_name_the_argument():
    x = torch.zeros(2, 4, 3)
    with pytest.raises(ValueError, match="window must be an int >= 0, got -1"):
        banded_attention(x, x, x, -1)
    with pytest.raises(TypeError, match=r"query must be a floating-point tensor, got torch\.int64"):
        banded_attention(x.long(), x, x, 1)
    with pytest.raises(ValueError, match=r"key must have shape \(..., N, features\), got \(3,\)"):
        banded_attention(x, torch.zeros(3), x, 1)
    with pytest.raises(ValueError, match="self-attention needs"):
        banded_attention(x, torch.zeros(2, 5, 3), torch.zeros(2, 5, 3), 1)
    with pytest.raises(ValueError, match=r"weights must have shape \(..., N, 3\)"):
        band_to_dense(torch.zeros(4, 5), 1)
    with pytest.raises(ValueError, match="n must be an int >= 1, got 0"):
        band_mask(0, 1)
    with pytest.raises(ValueError, match="chunk_size must be an int >= 1, got 0"):
        banded_attention(x, x, x, 1, chunk_size=0)


# --- chapter 8: sliding windows while generating ---------------------------------------------------


def test_rolling_cache_decoding_equals_full_sliding_window_attention():
    from attnlab.attention import RollingKVCache, scaled_dot_product_attention

    torch.manual_seed(20)
    B, H, N, E, w = 2, 3, 13, 4, 3
    q, k, v = torch.randn(B, H, N, E), torch.randn(B, H, N, E), torch.randn(B, H, N, 5)
    full = scaled_dot_product_attention(q, k, v, band_mask(N, w, causal=True))
    cache, sizes, steps = RollingKVCache(w), [], []
    for i in range(N):
        keys, values = cache.append(k[:, :, i : i + 1], v[:, :, i : i + 1])
        steps.append(scaled_dot_product_attention(q[:, :, i : i + 1], keys, values))
        sizes.append(cache.nbytes)
    torch.testing.assert_close(torch.cat(steps, dim=2), full)
    assert keys.shape == (B, H, w + 1, E)
    assert len(set(sizes)) == 1 and sizes[0] == (w + 1) * B * H * (E + 5) * 4  # constant from the first token


def test_rolling_cache_rejects_bad_input():
    from attnlab.attention import RollingKVCache

    with pytest.raises(ValueError, match="RollingKVCache: window must be an int >= 0, got -1"):
        RollingKVCache(-1)
    cache = RollingKVCache(2)
    assert cache.nbytes == 0
    with pytest.raises(ValueError, match=r"RollingKVCache: key must have shape \(B, H, 1, E\) \(one new position\)"):
        cache.append(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    cache.append(torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4))
    with pytest.raises(ValueError, match=r"RollingKVCache: key must have shape \(1, 2, 1, 4\) like the cached ones"):
        cache.append(torch.randn(1, 2, 1, 6), torch.randn(1, 2, 1, 4))


@pytest.mark.parametrize(("layers", "window"), [(1, 2), (3, 2), (2, 5)])
def test_receptive_field_is_what_the_gradient_reaches(layers, window):
    """Output i of `layers` stacked causal windows depends on input j iff 0 <= i - j <= layers * w."""
    from attnlab.attention import receptive_field

    torch.manual_seed(21)
    N, E = 24, 4
    x = torch.randn(1, N, E, dtype=torch.float64, requires_grad=True)
    mask = band_mask(N, window, causal=True)
    h = x
    for _ in range(layers):
        h = h + torch.softmax((h @ h.transpose(-2, -1)).masked_fill(~mask, float("-inf")), -1) @ h
    i = N - 1
    (grad,) = torch.autograd.grad(h[0, i].sum(), x)
    reached = grad[0].abs().sum(-1) > 0
    distance = i - torch.arange(N)
    assert torch.equal(reached, (distance >= 0) & (distance <= receptive_field(layers, window)))
