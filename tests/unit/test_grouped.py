"""Chapter 8: multi-query and grouped-query attention."""

from __future__ import annotations

import pytest
import torch

from attnlab.attention import (
    GroupedQueryAttention,
    MultiHeadAttention,
    grouped_query_attention,
    kv_cache_bytes_per_token,
    repeat_kv,
    scaled_dot_product_attention,
)


def test_repeat_kv_gives_each_group_its_query_heads():
    x = torch.arange(2 * 3 * 4 * 5.0).reshape(2, 3, 4, 5)
    y = repeat_kv(x, 2)
    assert y.shape == (2, 6, 4, 5)
    for h in range(6):
        assert torch.equal(y[:, h], x[:, h // 2])
    assert repeat_kv(x, 1) is x


def test_groups_equal_to_heads_is_multi_head_attention():
    torch.manual_seed(0)
    D, H = 16, 4
    gqa, mha = GroupedQueryAttention(D, H, H, backend="naive"), MultiHeadAttention(D, H, backend="naive")
    gqa.load_state_dict(mha.state_dict())  # the same four projections
    x = torch.randn(2, 7, D)
    torch.testing.assert_close(gqa(x, is_causal=True), mha(x, x, x, is_causal=True)[0])
    torch.testing.assert_close(gqa(x), mha(x, x, x)[0])


def test_one_group_is_multi_query_attention():
    """Shazeer (2019): every head has its own queries; one key head and one value head for all."""
    torch.manual_seed(1)
    B, H, L, S, E = 2, 4, 5, 6, 8
    q, k, v = torch.randn(B, H, L, E), torch.randn(B, 1, S, E), torch.randn(B, 1, S, 3)
    scores = torch.einsum("bhle,bse->bhls", q, k[:, 0]) / E**0.5  # the shared keys, by broadcasting
    expected = torch.einsum("bhls,bsv->bhlv", torch.softmax(scores, -1), v[:, 0])
    torch.testing.assert_close(grouped_query_attention(q, k, v), expected)
    torch.manual_seed(2)
    mqa = GroupedQueryAttention(16, 4, 1)
    assert mqa.k_proj.out_features == 4 and mqa.v_proj.out_features == 4  # one head of E = 4


@pytest.mark.parametrize("backend", ["naive", "fast"])
def test_grouped_heads_read_their_groups_keys(backend):
    """Head h of 6 with 2 groups uses key head h // 3: equal to attention head by head."""
    torch.manual_seed(3)
    q, k, v = torch.randn(1, 6, 4, 8), torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    out = grouped_query_attention(q, k, v, is_causal=True, backend=backend)
    for h in range(6):
        head = scaled_dot_product_attention(q[:, h], k[:, h // 3], v[:, h // 3], is_causal=True)
        torch.testing.assert_close(out[:, h], head)


def test_kv_cache_bytes_per_token():
    assert kv_cache_bytes_per_token(2, 8, 64) == 2 * 2 * 8 * 64 * 4
    assert kv_cache_bytes_per_token(32, 8, 128, torch.float16) == 2 * 32 * 8 * 128 * 2
    with pytest.raises(TypeError, match=r"kv_cache_bytes_per_token: dtype must be a torch\.dtype, got str"):
        kv_cache_bytes_per_token(1, 1, 1, "float16")


def test_bad_input_is_named():
    with pytest.raises(ValueError, match=r"num_heads \(4\), and num_heads by num_kv_heads \(3\)"):
        GroupedQueryAttention(16, 4, 3)
    with pytest.raises(ValueError, match="grouped_query_attention: the query's heads H must be a multiple"):
        grouped_query_attention(torch.randn(1, 4, 2, 8), torch.randn(1, 3, 2, 8), torch.randn(1, 3, 2, 8))
    with pytest.raises(ValueError, match=r"grouped_query_attention: key must have shape \(B, G, S, E\)"):
        grouped_query_attention(torch.randn(1, 4, 2, 8), torch.randn(2, 8), torch.randn(1, 1, 2, 8))
    with pytest.raises(ValueError, match=r"GroupedQueryAttention: x must have shape \(B, N, 16\)"):
        GroupedQueryAttention(16, 4, 2)(torch.randn(2, 3, 8))
    with pytest.raises(ValueError, match=r"repeat_kv: repeats must be an int >= 1, got 0"):
        repeat_kv(torch.randn(1, 1, 2, 2), 0)


@pytest.mark.parametrize("backend", ["naive", "fast"])
@pytest.mark.parametrize("groups", [1, 2, 6])
def test_grouped_query_attention_matches_pytorchs_enable_gqa(backend, groups):
    """PyTorch's own grouped-query attention (``enable_gqa=True``) with a mask and causally."""
    torch.manual_seed(4)
    B, H, L, S, E, Ev = 2, 6, 5, 7, 8, 3
    q, k, v = torch.randn(B, H, L, E), torch.randn(B, groups, S, E), torch.randn(B, groups, S, Ev)
    mask = torch.rand(B, 1, L, S) > 0.3
    mask[..., 0] = True  # every query keeps a key
    F = torch.nn.functional
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(grouped_query_attention(q, k, v, mask, backend=backend), expected)
    k, v = k[:, :, :L], v[:, :, :L]
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.5, enable_gqa=True)
    actual = grouped_query_attention(q, k, v, is_causal=True, scale=0.5, backend=backend)
    torch.testing.assert_close(actual, expected)
