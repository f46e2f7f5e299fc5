"""Chapter 8: linear attention (Katharopoulos et al. 2020), its parallel and recurrent forms."""

from __future__ import annotations

import pytest
import torch

from attnlab.attention import (
    elu_feature_map,
    linear_attention,
    linear_attention_recurrent,
    linear_attention_weights,
)


def _direct(q, k, v, causal):
    """sum_j phi(q_i).phi(k_j) v_j / sum_j phi(q_i).phi(k_j), term by term."""
    fq, fk = elu_feature_map(q), elu_feature_map(k)
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for i in range(q.shape[-2]):
        keys = range(i + 1) if causal else range(k.shape[-2])
        w = torch.stack([(fq[..., i, :] * fk[..., j, :]).sum(-1) for j in keys], -1)  # (..., n)
        out[..., i, :] = (w[..., None] * v[..., list(keys), :]).sum(-2) / w.sum(-1, keepdim=True)
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_parallel_form_equals_the_formula_and_the_weights(causal):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 4, dtype=torch.float64) for _ in range(3))
    out = linear_attention(q, k, v, causal=causal, eps=0.0)
    torch.testing.assert_close(out, _direct(q, k, v, causal))
    torch.testing.assert_close(linear_attention_weights(q, k, causal=causal, eps=0.0) @ v, out)


def test_recurrent_form_equals_the_parallel_form_and_carries_its_state():
    torch.manual_seed(1)
    q, k, v = (
        torch.randn(2, 9, 4, dtype=torch.float64),
        torch.randn(2, 9, 4, dtype=torch.float64),
        torch.randn(2, 9, 5, dtype=torch.float64),
    )
    parallel = linear_attention(q, k, v, causal=True)
    recurrent, (s, z) = linear_attention_recurrent(q, k, v)
    torch.testing.assert_close(recurrent, parallel)
    assert s.shape == (2, 4, 5) and z.shape == (2, 4)
    first, state = linear_attention_recurrent(q[:, :4], k[:, :4], v[:, :4])  # in two pieces, the state carried
    rest, _ = linear_attention_recurrent(q[:, 4:], k[:, 4:], v[:, 4:], state)
    torch.testing.assert_close(torch.cat([first, rest], 1), parallel)
    one_at_a_time, state = [], None
    for i in range(9):  # as a generator runs it: one token, a state of fixed size
        out, state = linear_attention_recurrent(q[:, i : i + 1], k[:, i : i + 1], v[:, i : i + 1], state)
        one_at_a_time.append(out)
        assert state[0].shape == (2, 4, 5)
    torch.testing.assert_close(torch.cat(one_at_a_time, 1), parallel)


def test_causal_output_ignores_the_future_and_weights_sum_to_one():
    torch.manual_seed(2)
    q, k, v = torch.randn(1, 6, 4), torch.randn(1, 6, 4), torch.randn(1, 6, 3)
    k2, v2 = k.clone(), v.clone()
    k2[:, 4:], v2[:, 4:] = torch.randn(1, 2, 4), torch.randn(1, 2, 3)
    a, b = linear_attention(q, k, v, causal=True), linear_attention(q, k2, v2, causal=True)
    torch.testing.assert_close(a[:, :4], b[:, :4])
    w = linear_attention_weights(q, k, causal=True, eps=0.0)
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 6))
    assert bool((w >= 0).all()) and bool((w.triu(1) == 0).all())


def test_cross_attention_lengths_may_differ_and_bad_input_is_named():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 7, 4), torch.randn(2, 7, 5)
    assert linear_attention(q, k, v).shape == (2, 3, 5)
    with pytest.raises(ValueError, match="linear_attention: causal needs as many queries as keys, got 3 and 7"):
        linear_attention(q, k, v, causal=True)
    with pytest.raises(ValueError, match=r"linear_attention: expected query \(\.\.\., L, E\)"):
        linear_attention(q, torch.randn(2, 7, 3), v)
    with pytest.raises(TypeError, match="linear_attention_recurrent: state must be a tuple"):
        linear_attention_recurrent(q, q, q, state=[1, 2])
    with pytest.raises(ValueError, match=r"linear_attention_recurrent: state's S must have shape \(2, 4, 4\)"):
        linear_attention_recurrent(q, q, q, state=(torch.zeros(2, 4, 3), torch.zeros(2, 4)))
    with pytest.raises(ValueError, match="linear_attention: eps must be a number >= 0"):
        linear_attention(q, k, v, eps=-1.0)
