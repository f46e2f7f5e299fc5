"""Chapter 9: multi-head latent attention (DeepSeek-V2), checked in float64 against the paper's
equations written out head by head, its absorbed form against its plain form, decoding with a
cache against one forward pass, and its cache against the formula for its bytes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.attention import (
    MultiHeadLatentAttention,
    kv_cache_bytes_per_token,
    latent_cache_bytes_per_token,
    rotary_embedding,
)
from attnlab.models import KVCache, LMCache

B, N, D, H = 2, 7, 12, 3
LATENT, ROPE = 10, 4
EXACT = dict(rtol=1e-10, atol=1e-12)  # float64: what rounding alone leaves
CONFIGS = {  # name: the module's options beyond (D, H, latent_dim, rope_dim)
    "plain": {},
    "head_dim-query_latent-bias": dict(head_dim=6, query_latent_dim=8, bias=True),
}


def make(seed: int = 0, **options: object) -> MultiHeadLatentAttention:
    torch.manual_seed(seed)
    return MultiHeadLatentAttention(D, H, latent_dim=LATENT, rope_dim=ROPE, **options).double()


def inputs(seed: int = 1, n: int = N) -> torch.Tensor:
    return torch.randn(B, n, D, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def reference(mla: MultiHeadLatentAttention, x: torch.Tensor, start: int = 0, causal: bool = True) -> torch.Tensor:
    """DeepSeek-V2, Section 2.1.2-2.1.3, one head at a time, from the module's weights."""
    _, n, _ = x.shape
    E, R = mla.head_dim, mla.rope_dim
    positions = torch.arange(start, start + n)

    def linear(layer, t):
        return F.linear(t, layer.weight, layer.bias)

    c = linear(mla.kv_down, x)  # c_KV = W_DKV h
    k_rope = rotary_embedding(linear(mla.key_rope, x), positions)  # k_R = RoPE(W_KR h)
    h_q = x if mla.query_down is None else linear(mla.query_down, x)  # c_Q = W_DQ h
    heads = []
    for i in range(H):
        rows = slice(i * E, (i + 1) * E)
        q_content = F.linear(
            h_q, mla.query_up.weight[rows], None if mla.query_up.bias is None else mla.query_up.bias[rows]
        )
        rope_rows = slice(i * R, (i + 1) * R)
        q_rope = F.linear(
            h_q,
            mla.query_rope.weight[rope_rows],
            None if mla.query_rope.bias is None else mla.query_rope.bias[rope_rows],
        )
        q = torch.cat([q_content, rotary_embedding(q_rope, positions)], dim=-1)  # [q_C; q_R]
        k = torch.cat([c @ mla.key_up.weight[rows].T, k_rope], dim=-1)  # [W_UK c; k_R]
        v = c @ mla.value_up.weight[rows].T  # W_UV c
        scores = q @ k.transpose(1, 2) / math.sqrt(E + R)
        if causal:
            scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
        heads.append(torch.softmax(scores, dim=-1) @ v)
    return linear(mla.out_proj, torch.cat(heads, dim=-1))  # W_O [o_1; ...; o_H]


@pytest.mark.parametrize("absorb", [False, True], ids=["plain", "absorbed"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("options", CONFIGS.values(), ids=CONFIGS.keys())
def test_matches_the_papers_equations(options, causal, absorb):
    mla, x = make(**options), inputs()
    for start in (0, 5):
        torch.testing.assert_close(
            mla(x, start, causal=causal, absorb=absorb), reference(mla, x, start, causal), **EXACT
        )


@pytest.mark.parametrize("options", CONFIGS.values(), ids=CONFIGS.keys())
def test_absorbed_equals_plain(options):
    """W_UK folded into the queries and W_UV into the output change nothing, with a cache too."""
    mla, x = make(**options), inputs()
    for causal in (True, False):
        torch.testing.assert_close(mla(x, causal=causal, absorb=True), mla(x, causal=causal), **EXACT)
    plain, absorbed = LMCache(), LMCache()
    for begin, end in ((0, 3), (3, 4), (4, 7)):
        chunk = x[:, begin:end]
        torch.testing.assert_close(mla(chunk, begin, absorbed, absorb=True), mla(chunk, begin, plain), **EXACT)


@pytest.mark.parametrize("cache_class", [LMCache, KVCache])
@pytest.mark.parametrize("absorb", [False, True], ids=["plain", "absorbed"])
def test_decoding_with_a_cache_equals_one_forward(absorb, cache_class):
    """A prompt of 3 positions, then one token at a time, then 2 at once: the causal forward of all 7."""
    mla, x = make(**CONFIGS["head_dim-query_latent-bias"]), inputs()
    full = mla(x)
    cache = cache_class()
    steps = [(0, 3), (3, 4), (4, 5), (5, 7)]
    decoded = torch.cat([mla(x[:, begin:end], begin, cache, absorb=absorb) for begin, end in steps], dim=1)
    torch.testing.assert_close(decoded, full, **EXACT)
    assert cache.cached_length == N


def test_the_cache_holds_the_latent_and_the_rotary_key_only():
    """Per token and layer, C + R numbers: nbytes is latent_cache_bytes_per_token's count."""
    layers = [make(seed) for seed in range(2)]  # two layers, a cache each
    caches = [LMCache() for _ in layers]
    x = inputs()
    for t in range(N):
        for mla, cache in zip(layers, caches, strict=True):
            mla(x[:, t : t + 1], t, cache, absorb=True)
    for mla, cache in zip(layers, caches, strict=True):
        assert cache.cached_keys is not None and cache.cached_values is not None
        assert cache.cached_keys.shape == (B, 1, N, ROPE) and cache.cached_values.shape == (B, 1, N, LATENT)
        torch.testing.assert_close(cache.cached_values[:, 0], mla.kv_down(x), **EXACT)  # the latent c itself
        positions = torch.arange(N)
        torch.testing.assert_close(cache.cached_keys[:, 0], rotary_embedding(mla.key_rope(x), positions), **EXACT)
    per_token = sum(cache.nbytes for cache in caches) / (B * N)
    assert per_token == latent_cache_bytes_per_token(2, LATENT, ROPE, torch.float64) == 2 * (LATENT + ROPE) * 8
    assert per_token < kv_cache_bytes_per_token(2, H, D // H, torch.float64)  # 2 * 2 * 12 * 8: multi-head's


def test_latent_cache_bytes_per_token():
    assert latent_cache_bytes_per_token(3, 512, 64) == 3 * 576 * 4
    assert latent_cache_bytes_per_token(1, 512, 64, torch.bfloat16) == 576 * 2
    # DeepSeek-V2's sizes (H = 128, E = 128): multi-head attention would cache 32,768 numbers per
    # token and layer where MLA caches 576, as much as grouped-query attention with 2.25 groups
    assert kv_cache_bytes_per_token(1, 128, 128) == 32_768 * 4
    assert latent_cache_bytes_per_token(1, 512, 64) == 2 * 2.25 * 128 * 4
    with pytest.raises(TypeError, match=r"latent_cache_bytes_per_token: dtype must be a torch\.dtype, got str"):
        latent_cache_bytes_per_token(1, 1, 2, "float16")
    with pytest.raises(ValueError, match=r"latent_cache_bytes_per_token: rope_dim must be an int >= 1, got 0"):
        latent_cache_bytes_per_token(1, 1, 0)


@pytest.mark.parametrize("absorb", [False, True], ids=["plain", "absorbed"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_rotary_positions_are_relative(causal, absorb):
    """Shifting every position by the same amount changes no score, so no output."""
    mla, x = make(), inputs()
    out = mla(x, causal=causal, absorb=absorb)
    for start in (1, 11, 1000):
        torch.testing.assert_close(mla(x, start, causal=causal, absorb=absorb), out, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("absorb", [False, True], ids=["plain", "absorbed"])
def test_positions_make_order_matter(absorb):
    """Without a mask, attention without positions commutes with a permutation of the tokens;
    the rotary key and query break that (and a wrong start breaks decoding)."""
    mla, x = make(), inputs()
    perm = torch.randperm(N, generator=torch.Generator().manual_seed(0))
    moved = mla(x[:, perm], causal=False, absorb=absorb)
    assert (moved - mla(x, causal=False, absorb=absorb)[:, perm]).abs().max() > 1e-3
    cache = LMCache()
    mla(x[:, :3], 0, cache, absorb=absorb)
    right = mla(x[:, 3:4], 3, LMCache(key=cache.key, value=cache.value), absorb=absorb)
    wrong = mla(x[:, 3:4], 5, LMCache(key=cache.key, value=cache.value), absorb=absorb)
    assert (right - wrong).abs().max() > 1e-3


@pytest.mark.parametrize("absorb", [False, True], ids=["plain", "absorbed"])
@pytest.mark.parametrize("options", CONFIGS.values(), ids=CONFIGS.keys())
def test_gradients_reach_every_parameter(options, absorb):
    mla, x = make(**options), inputs().requires_grad_()
    mla(x, absorb=absorb).square().sum().backward()
    for name, p in [*mla.named_parameters(), ("x", x)]:
        assert p.grad is not None and p.grad.abs().max() > 0, name


@pytest.mark.parametrize("absorb", [False, True], ids=["plain", "absorbed"])
def test_gradcheck(absorb):
    torch.manual_seed(0)
    mla = MultiHeadLatentAttention(4, 2, latent_dim=3, rope_dim=2, query_latent_dim=3, bias=True).double()
    x = torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: mla(t, 2, absorb=absorb), (x,))


def test_sizes_follow_the_arguments():
    mla = MultiHeadLatentAttention(12, 3, latent_dim=10, rope_dim=4, head_dim=6, query_latent_dim=8)
    assert mla.kv_down.weight.shape == (10, 12) and mla.key_rope.weight.shape == (4, 12)
    assert mla.key_up.weight.shape == mla.value_up.weight.shape == (3 * 6, 10)
    assert mla.query_down is not None and mla.query_down.weight.shape == (8, 12)
    assert mla.query_up.weight.shape == (18, 8) and mla.query_rope.weight.shape == (3 * 4, 8)
    assert mla.out_proj.weight.shape == (12, 18)
    assert all(m.bias is None for m in mla.modules() if isinstance(m, torch.nn.Linear))
    plain = MultiHeadLatentAttention(12, 3, latent_dim=10, rope_dim=4, bias=True)
    assert plain.head_dim == 4 and plain.query_down is None and plain.query_up.weight.shape == (12, 12)
    assert plain.key_up.bias is None and plain.value_up.bias is None and plain.kv_down.bias is not None


BAD_MODULES = [
    (dict(embed_dim=10, num_heads=3), ValueError, r"embed_dim \(10\) must be divisible by num_heads \(3\)"),
    (dict(rope_dim=3), ValueError, r"rope_dim must be even .*, got 3"),
    (dict(rope_dim=0), ValueError, r"rope_dim must be an int >= 1, got 0"),
    (dict(latent_dim=0), ValueError, r"latent_dim must be an int >= 1, got 0"),
    (dict(num_heads=-1), ValueError, r"num_heads must be an int >= 1, got -1"),
    (dict(head_dim=0), ValueError, r"head_dim must be an int >= 1, got 0"),
    (dict(query_latent_dim=0), ValueError, r"query_latent_dim must be an int >= 1, got 0"),
    (dict(latent_dim=2.0), TypeError, r"latent_dim must be an int, got float"),
    (dict(bias=1), TypeError, r"bias must be a bool, got int"),
]


@pytest.mark.parametrize(("changes", "error", "message"), BAD_MODULES)
def test_bad_sizes_are_named(changes, error, message):
    arguments = dict(embed_dim=12, num_heads=3, latent_dim=10, rope_dim=4) | changes
    embed_dim, num_heads = arguments.pop("embed_dim"), arguments.pop("num_heads")
    with pytest.raises(error, match="^MultiHeadLatentAttention: " + message):
        MultiHeadLatentAttention(embed_dim, num_heads, **arguments)


def test_head_dim_frees_embed_dim_from_num_heads():
    mla = MultiHeadLatentAttention(10, 3, latent_dim=4, rope_dim=2, head_dim=5)
    assert mla(torch.randn(1, 2, 10)).shape == (1, 2, 10)


BAD_CALLS = [
    (lambda m: m(torch.randn(2, 3, 8)), ValueError, r"x must have shape \(B, N, 12\), got \(2, 3, 8\)"),
    (lambda m: m(torch.randn(3, 12)), ValueError, r"x must have shape \(B, N, 12\), got \(3, 12\)"),
    (lambda m: m(torch.zeros(2, 3, 12, dtype=torch.long)), TypeError, r"x must be a floating-point tensor"),
    (lambda m: m([[0.0] * 12]), TypeError, r"x must be a floating-point tensor, got list"),
    (lambda m: m(torch.randn(2, 0, 12)), ValueError, r"x must hold at least one position, got shape \(2, 0, 12\)"),
    (lambda m: m(torch.randn(2, 3, 12), -1), ValueError, r"start must be an int >= 0, got -1"),
    (lambda m: m(torch.randn(2, 3, 12), 1.0), TypeError, r"start must be an int, got float"),
    (lambda m: m(torch.randn(2, 3, 12), 0, {}), TypeError, r"cache must be a KeyValueCache .* got dict"),
    (lambda m: m(torch.randn(2, 3, 12), causal=None), TypeError, r"causal must be a bool, got NoneType"),
    (lambda m: m(torch.randn(2, 3, 12), absorb="yes"), TypeError, r"absorb must be a bool, got str"),
]


@pytest.mark.parametrize(("call", "error", "message"), BAD_CALLS)
def test_bad_calls_are_named(call, error, message):
    mla = MultiHeadLatentAttention(12, 3, latent_dim=10, rope_dim=4)
    with pytest.raises(error, match="^MultiHeadLatentAttention: " + message):
        call(mla)


def test_a_cache_of_another_size_is_refused_by_the_cache():
    mla = MultiHeadLatentAttention(12, 3, latent_dim=10, rope_dim=4)
    cache = LMCache()
    MultiHeadLatentAttention(12, 3, latent_dim=6, rope_dim=4)(torch.randn(2, 3, 12), 0, cache)
    with pytest.raises(ValueError, match=r"LMCache\.append: key and value must have the batch, heads and sizes"):
        mla(torch.randn(2, 1, 12), 3, cache)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("absorb", [False, True], ids=["plain", "absorbed"])
def test_on_cuda_against_float64_on_the_cpu(absorb):
    mla, x = make(**CONFIGS["head_dim-query_latent-bias"]), inputs()
    expected = reference(mla, x, 3)
    gpu = mla.float().cuda()
    cache = LMCache()
    out = torch.cat(
        [gpu(x[:, :4].float().cuda(), 3, cache, absorb=absorb)]
        + [gpu(x[:, t : t + 1].float().cuda(), 3 + t, cache, absorb=absorb) for t in range(4, N)],
        dim=1,
    )
    assert out.device.type == "cuda" and cache.nbytes == B * N * latent_cache_bytes_per_token(1, LATENT, ROPE)
    torch.testing.assert_close(out.double().cpu(), expected, rtol=1e-4, atol=1e-5)
