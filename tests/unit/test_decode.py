"""Chapter 9: split-KV decoding (attnlab.inference.decode), against full attention in float64.

Attention over chunks of the keys, merged by their log-sum-exps, must equal attention over all the
keys whatever the number of chunks, with masks, grouped queries and half precision; fully masked
queries must give zeros, never NaN; bad input must be named.
"""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch
import torch.nn.functional as F

import attnlab.inference.decode as decode
from attnlab.attention import causal_mask, scaled_dot_product_attention
from attnlab.inference import merge_attention_partials, split_kv_attention

E, EV = 8, 6


def _qkv(B=2, H=4, G=2, N=1, S=13, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, N, E, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(B, G, S, E, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(B, G, S, EV, generator=g, dtype=torch.float64).to(dtype)
    return q, k, v


def _reference(q, k, v, attn_mask=None, scale=None):
    """Full attention in float64 (torch's SDPA), keys repeated for each query head of their group; zeros
    for a query whose keys are all masked (the package's convention; torch gives NaN there)."""
    r = q.shape[1] // k.shape[1]
    k, v = (
        k.double().repeat_interleave(r, dim=1),
        v.double().repeat_interleave(r, dim=1),
    )  # (B, G, S, E) -> (B, H, S, E)
    if attn_mask is not None and attn_mask.dtype.is_floating_point:
        attn_mask = attn_mask.double()
    out = F.scaled_dot_product_attention(q.double(), k, v, attn_mask=attn_mask, scale=scale)
    return out.nan_to_num(0.0)


@pytest.mark.parametrize("S", [1, 7, 13, 64])
@pytest.mark.parametrize("num_splits", [1, 2, 3, 5, "S", "S+3"])
@pytest.mark.parametrize(("H", "G", "N"), [(4, 4, 1), (4, 2, 1), (6, 1, 3)], ids=["mha-1", "gqa-1", "mqa-3"])
def test_split_attention_equals_full_attention(S, num_splits, H, G, N):
    splits = {"S": S, "S+3": S + 3}.get(num_splits, num_splits)
    q, k, v = _qkv(H=H, G=G, N=N, S=S)
    out = split_kv_attention(q, k, v, num_splits=splits)
    assert out.shape == (2, H, N, EV) and out.dtype == torch.float64
    torch.testing.assert_close(out, _reference(q, k, v), rtol=1e-12, atol=1e-12)
    out32 = split_kv_attention(q.float(), k.float(), v.float(), num_splits=splits)
    assert out32.dtype == torch.float32
    torch.testing.assert_close(out32.double(), _reference(q, k, v), rtol=0, atol=1e-6)


def test_the_chunks_differ_by_at_most_one_key(monkeypatch):
    sizes: list[int] = []
    chunk = decode._chunk_attention

    def recording(q, k, v, mask, scale):
        sizes.append(k.shape[-2])
        return chunk(q, k, v, mask, scale)

    monkeypatch.setattr(decode, "_chunk_attention", recording)
    q, k, v = _qkv(S=13)
    for num_splits, expected in [(1, [13]), (4, [3, 3, 3, 4]), (5, [2, 3, 2, 3, 3]), (13, [1] * 13), (20, [1] * 13)]:
        sizes.clear()
        split_kv_attention(q, k, v, num_splits=num_splits)
        assert sizes == expected, num_splits


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float16, 2e-3), (torch.bfloat16, 1.6e-2)])
def test_half_precision_is_accumulated_in_float32(dtype, tol):
    q, k, v = _qkv(B=2, H=4, G=2, N=2, S=300, dtype=dtype)
    q = q * 4  # sharp weights: scores up to about 25, where float16 keeps 2 to 3 decimal digits
    out = split_kv_attention(q, k, v, num_splits=7)
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), _reference(q, k, v), rtol=0, atol=tol)
    # the package's kernel in float32 then rounded once: the two differ by at most a rounding or two
    full = scaled_dot_product_attention(q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1))
    torch.testing.assert_close(out, full, rtol=0, atol=2 * torch.finfo(dtype).eps)


def test_large_scores_do_not_overflow():
    """exp of a score of several hundred overflows float32: each chunk, and the merge, subtract their maximum."""
    q, k, v = _qkv(N=2, S=20)
    q = q * 60  # scores in the hundreds
    out = split_kv_attention(q.float(), k.float(), v.float(), num_splits=3)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), _reference(q, k, v), rtol=0, atol=1e-5)


@pytest.mark.parametrize("num_splits", [1, 3, 6])
def test_masks_bool_and_float(num_splits):
    q, k, v = _qkv(B=2, H=4, G=2, N=3, S=11)
    causal = causal_mask(3, 11, align="bottom-right")  # (N, S): three new tokens of a sequence of 11
    torch.testing.assert_close(
        split_kv_attention(q, k, v, num_splits=num_splits, attn_mask=causal),
        _reference(q, k, v, causal),
        rtol=1e-12,
        atol=1e-12,
    )
    g = torch.Generator().manual_seed(3)
    keep = torch.rand(2, 4, 3, 11, generator=g) < 0.4  # (B, H, N, S): whole chunks of keys masked somewhere
    bias = torch.randn(2, 1, 3, 11, generator=g, dtype=torch.float64).masked_fill(~keep[:, :1], float("-inf"))
    for mask in (keep, bias):
        out = split_kv_attention(q, k, v, num_splits=num_splits, attn_mask=mask)
        torch.testing.assert_close(out, _reference(q, k, v, mask), rtol=1e-12, atol=1e-12)


def test_fully_masked_queries_get_zeros_and_zero_gradients():
    q, k, v = _qkv(B=2, H=4, G=2, N=3, S=10)
    q, k, v = (t.float().requires_grad_() for t in (q, k, v))
    mask = torch.ones(2, 4, 3, 10, dtype=torch.bool)
    mask[0, 1, 2] = False  # query 2 of head 1 of row 0 sees no key
    mask[1, :, 0, :7] = False  # query 0 of row 1 sees keys 7..9 only: a chunk of its keys holds none
    out = split_kv_attention(q, k, v, num_splits=3, attn_mask=mask)
    assert torch.equal(out[0, 1, 2], torch.zeros(EV))
    torch.testing.assert_close(out.double(), _reference(q.detach(), k.detach(), v.detach(), mask), rtol=0, atol=1e-6)
    out.sum().backward()
    for t in (q, k, v):
        assert t.grad is not None and torch.isfinite(t.grad).all()
    assert torch.equal(q.grad[0, 1, 2], torch.zeros(E))
    empty = split_kv_attention(q, k, v, num_splits=2, attn_mask=torch.zeros(10, dtype=torch.bool))
    assert torch.equal(empty, torch.zeros(2, 4, 3, EV))
    float_empty = torch.full((10,), float("-inf"))
    assert torch.equal(split_kv_attention(q, k, v, num_splits=4, attn_mask=float_empty), torch.zeros(2, 4, 3, EV))


def test_the_scale_multiplies_the_scores():
    q, k, v = _qkv(N=2, S=9)
    out = split_kv_attention(q, k, v, num_splits=2, scale=0.7)
    torch.testing.assert_close(out, _reference(q, k, v, scale=0.7), rtol=1e-12, atol=1e-12)


def test_no_keys_give_zeros():
    q, k, v = _qkv(S=0)
    assert torch.equal(split_kv_attention(q, k, v, num_splits=3), torch.zeros(2, 4, 1, EV, dtype=torch.float64))


def test_split_attention_gradients():
    q, k, v = _qkv(B=1, H=2, G=1, N=2, S=5)
    mask = causal_mask(2, 5, align="bottom-right")
    assert torch.autograd.gradcheck(
        lambda q, k, v: split_kv_attention(q, k, v, num_splits=2, attn_mask=mask),
        tuple(t.requires_grad_() for t in (q, k, v)),
    )


# --- the merge ----------------------------------------------------------------------------------


def _partials(scores: torch.Tensor, values: torch.Tensor, bounds: list[int]):
    """Softmax attention of one query over each part of ``scores (S,)``, in float64: outputs, lses."""
    outputs, lses = [], []
    for a, b in pairwise(bounds):
        outputs.append(torch.softmax(scores[a:b], 0) @ values[a:b])
        lses.append(torch.logsumexp(scores[a:b], 0))
    return torch.stack(outputs), torch.stack(lses)


def test_the_merge_of_partials_is_attention_over_the_whole():
    g = torch.Generator().manual_seed(0)
    scores, values = 3 * torch.randn(17, generator=g, dtype=torch.float64), torch.randn(17, 5, dtype=torch.float64)
    outputs, lses = _partials(scores, values, [0, 4, 5, 12, 17])
    out, lse = merge_attention_partials(outputs, lses)
    torch.testing.assert_close(out, torch.softmax(scores, 0) @ values, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, torch.logsumexp(scores, 0), rtol=1e-12, atol=1e-12)
    # the weights exp(lse_i - lse) are each part's share of the softmax's denominator
    shares = torch.exp(lses - lse)
    torch.testing.assert_close(shares.sum(), torch.tensor(1.0, dtype=torch.float64))


def test_the_merge_keeps_large_and_empty_parts_finite():
    outputs = torch.tensor([[1.0, 2.0], [3.0, 4.0], [0.0, 0.0]])
    lses = torch.tensor([1000.0, 1000.0 + torch.log(torch.tensor(3.0)).item(), float("-inf")])  # part 2 has no key
    out, lse = merge_attention_partials(outputs, lses)
    torch.testing.assert_close(out, torch.tensor([2.5, 3.5]))  # weights 1/4 and 3/4: exp(1000) never computed
    torch.testing.assert_close(lse, torch.tensor(1000.0 + torch.log(torch.tensor(4.0)).item()))
    out, lse = merge_attention_partials(torch.zeros(3, 4, 2), torch.full((3, 4), float("-inf")))  # no part has a key
    assert torch.equal(out, torch.zeros(4, 2)) and torch.equal(lse, torch.full((4,), float("-inf")))
    half, half_lse = merge_attention_partials(outputs.half(), lses.float())
    assert half.dtype == torch.float16 and half_lse.dtype == torch.float32


def test_the_merge_gradients():
    g = torch.Generator().manual_seed(1)
    outputs = torch.randn(3, 2, 4, generator=g, dtype=torch.float64, requires_grad=True)
    lses = torch.randn(3, 2, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(merge_attention_partials, (outputs, lses))


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (dict(num_splits=0), ValueError, r"num_splits must be an int >= 1, got 0"),
        (dict(num_splits=-2), ValueError, r"num_splits must be an int >= 1, got -2"),
        (dict(num_splits=2.0), TypeError, r"num_splits must be an int, got float \(2.0\)"),
        (dict(num_splits=True), TypeError, r"num_splits must be an int, got bool \(True\)"),
        (dict(num_splits=None), TypeError, r"num_splits must be an int, got NoneType"),
        (dict(query=torch.zeros(2, 3, 1, E)), ValueError, r"the query's heads H must be a multiple of the key's"),
        (dict(query=torch.zeros(2, 4, 1, E + 1)), ValueError, r"query and key must have the same feature size E"),
        (dict(query=torch.zeros(3, 4, 1, E)), ValueError, r"query and key must have the same batch size B"),
        (dict(query=torch.zeros(4, 1, E)), ValueError, r"query must have shape \(B, H, N, E\), got shape \(4, 1, 8\)"),
        (dict(value=torch.zeros(2, 2, 12, EV)), ValueError, r"key \(B, G, S, E\) and value \(B, G, S, Ev\) must agree"),
        (dict(value=torch.zeros(2, 2, 13, EV).half()), TypeError, r"query, key and value must share one dtype"),
        (dict(key=torch.zeros(2, 2, 13, E).long()), TypeError, r"key must be a floating-point tensor, got torch.int64"),
        (
            dict(attn_mask=torch.ones(2, 4, 1, 12, dtype=torch.bool)),
            ValueError,
            r"the shape of attn_mask is \(2, 4, 1, 12\)",
        ),
        (
            dict(attn_mask=torch.ones(13, dtype=torch.long)),
            TypeError,
            r"attn_mask must be boolean \(True = takes part\)",
        ),
        (dict(scale="1"), TypeError, r"scale must be a number or None, got str"),
    ],
)
def test_split_attention_names_bad_input(change, error, message):
    args = dict(
        query=torch.zeros(2, 4, 1, E), key=torch.zeros(2, 2, 13, E), value=torch.zeros(2, 2, 13, EV), num_splits=3
    )
    args.update(change)
    with pytest.raises(error, match=r"^split_kv_attention: " + message):
        split_kv_attention(**args)


@pytest.mark.parametrize(
    ("outputs", "lses", "error", "message"),
    [
        (torch.zeros(3, 4, 2).long(), torch.zeros(3, 4), TypeError, r"outputs must be a floating-point tensor"),
        (torch.zeros(3), torch.zeros(3), ValueError, r"outputs must have shape \(C, ..., Ev\) with C >= 1, got \(3,\)"),
        (
            torch.zeros(0, 4, 2),
            torch.zeros(0, 4),
            ValueError,
            r"outputs must have shape \(C, ..., Ev\) with C >= 1, got \(0, 4, 2\)",
        ),
        (
            torch.zeros(3, 4, 2),
            torch.zeros(3, 5),
            ValueError,
            r"lses must have shape \(C, ...\) = \(3, 4\) .*, got \(3, 5\)",
        ),
        (torch.zeros(3, 4, 2), [0.0] * 3, TypeError, r"lses must be a floating-point tensor .*, got list"),
    ],
)
def test_the_merge_names_bad_input(outputs, lses, error, message):
    with pytest.raises(error, match=r"^merge_attention_partials: " + message):
        merge_attention_partials(outputs, lses)
