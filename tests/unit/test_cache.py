"""One cache protocol (attnlab.attention.cache.KeyValueCache), checked on each of the four caches
against a hand count: what append returns, the cached keys and values, their length, the bytes."""

from __future__ import annotations

import pytest
import torch

from attnlab.attention import KeyValueCache, RollingKVCache, SinkKVCache, sliding_window_mask
from attnlab.attention.cache import tensor_bytes
from attnlab.inference import KVBlockPool, PagedKVCache
from attnlab.models import KVCache, LMCache, LMConfig, Transformer, TransformerConfig, TransformerLM

B, G, E, EV = 2, 3, 4, 5
FLOAT = 4  # bytes of a float32


def _kv(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, G, n, E, generator=g), torch.randn(B, G, n, EV, generator=g)


BLOCK = 2  # positions per block of the paged cache


def _paged() -> PagedKVCache:
    return PagedKVCache(KVBlockPool(8, BLOCK, G, E, EV), B)


CACHES = {
    "KVCache": KVCache,
    "LMCache": LMCache,
    "RollingKVCache": lambda: RollingKVCache(window=2),
    "SinkKVCache": lambda: SinkKVCache(window=2, sinks=1),
    "PagedKVCache": _paged,
}
# the growing caches, and the positions each reserves for t cached ones: a paged cache whole blocks
GROWING = {
    "KVCache": (KVCache, lambda t: t),
    "LMCache": (LMCache, lambda t: t),
    "PagedKVCache": (_paged, lambda t: -(-t // BLOCK) * BLOCK),
}


@pytest.mark.parametrize("make", CACHES.values(), ids=CACHES.keys())
def test_every_cache_follows_the_protocol(make):
    cache = make()
    assert isinstance(cache, KeyValueCache)
    assert cache.cached_keys is None and cache.cached_values is None
    assert cache.cached_length == 0 and cache.nbytes == 0


@pytest.mark.parametrize(("make", "reserved"), GROWING.values(), ids=GROWING.keys())
def test_a_growing_cache_appends_and_counts(make, reserved):
    cache, keys, values = make(), [], []
    for step, n in enumerate((3, 1, 2)):  # a prompt of 3 positions, then 1, then 2
        k, v = _kv(n, step)
        keys.append(k)
        values.append(v)
        got_k, got_v = cache.append(k, v)
        t = sum(x.shape[2] for x in keys)
        torch.testing.assert_close(got_k, torch.cat(keys, dim=2), rtol=0, atol=0)
        torch.testing.assert_close(got_v, torch.cat(values, dim=2), rtol=0, atol=0)
        if isinstance(cache, PagedKVCache):  # gathered from the blocks anew
            assert torch.equal(cache.cached_keys, got_k) and torch.equal(cache.cached_values, got_v)
        else:  # the cache's own tensors
            assert cache.cached_keys is got_k and cache.cached_values is got_v
        assert cache.cached_length == t == got_k.shape[2]
        assert cache.nbytes == B * G * reserved(t) * (E + EV) * FLOAT


def test_a_rolling_cache_holds_the_last_window_and_never_grows():
    window, cache, keys, values = 2, RollingKVCache(window=2), [], []
    for step in range(6):
        k, v = _kv(1, step)
        keys.append(k)
        values.append(v)
        got_k, got_v = cache.append(k, v)
        held = min(step + 1, window + 1)
        assert cache.cached_length == held and cache.length == step + 1
        assert torch.equal(cache.cached_keys, got_k) and torch.equal(cache.cached_values, got_v)
        # the slots hold the last `held` positions, position p in slot p mod (window + 1)
        slots = {p % (window + 1): p for p in range(step + 1 - held, step + 1)}
        for slot, p in slots.items():
            assert torch.equal(got_k[:, :, slot], keys[p][:, :, 0]) and torch.equal(
                got_v[:, :, slot], values[p][:, :, 0]
            )
        assert cache.nbytes == B * G * (window + 1) * (E + EV) * FLOAT  # the whole buffer, from the first token


@pytest.mark.parametrize("sinks", [0, 2])
def test_a_sink_cache_returns_what_the_new_queries_see_and_keeps_the_sinks_and_window(sinks):
    """Appended in pieces (a prompt of 4, then 1, 3, 1, 1), the cache returns the held positions and
    the new ones, in order, with their positions; it then holds the first `sinks` and the last
    `window` positions: what the next query may see, by sliding_window_mask."""
    window, cache, keys, values, seen = 3, SinkKVCache(window=3, sinks=sinks), [], [], 0
    for step, n in enumerate((4, 1, 3, 1, 1)):
        k, v = _kv(n, step)
        keys.append(k)
        values.append(v)
        all_k, all_v = torch.cat(keys, dim=2), torch.cat(values, dim=2)
        held_before = [p for p in range(seen) if p < sinks or p >= seen - window]
        got_k, got_v = cache.append(k, v)
        expected = held_before + list(range(seen, seen + n))
        assert cache.key_positions.tolist() == expected
        assert torch.equal(got_k, all_k[:, :, expected]) and torch.equal(got_v, all_v[:, :, expected])
        seen += n
        held = [p for p in range(seen) if p < sinks or p >= seen - window]
        assert cache.held == held and cache.cached_length == len(held) <= sinks + window
        assert torch.equal(cache.cached_keys, all_k[:, :, held]) and torch.equal(cache.cached_values, all_v[:, :, held])
        assert cache.nbytes == B * G * len(held) * (E + EV) * FLOAT
        # exactly the held positions are those the next query, at position `seen`, sees
        next_query = sliding_window_mask(torch.tensor([seen]), torch.arange(seen + 1), window, sinks=sinks)[0]
        assert next_query[:-1].nonzero().flatten().tolist() == held


def test_the_sliding_window_mask_is_the_causal_band_plus_the_sinks():
    n = 9
    positions = torch.arange(n)
    assert torch.equal(sliding_window_mask(positions, positions, None), torch.ones(n, n).tril().bool())
    band = torch.ones(n, n).tril().triu(-3).bool()  # i - 3 <= j <= i
    assert torch.equal(sliding_window_mask(positions, positions, 3), band)
    with_sinks = band.clone()
    with_sinks[:, :2] = torch.ones(n, 2).tril().bool()  # the first two positions, causally
    assert torch.equal(sliding_window_mask(positions, positions, 3, sinks=2), with_sinks)
    # positions in any order: the mask follows them, not the columns
    shuffled = torch.tensor([5, 0, 8, 2])
    assert torch.equal(sliding_window_mask(positions, shuffled, 3, sinks=2), with_sinks[:, shuffled])
    with pytest.raises(TypeError, match=r"sliding_window_mask: key_positions must be a torch\.long tensor"):
        sliding_window_mask(positions, positions.float(), 3)
    with pytest.raises(ValueError, match="sliding_window_mask: window must be an int >= 0"):
        sliding_window_mask(positions, positions, -1)
    with pytest.raises(ValueError, match="sliding_window_mask: sinks must be an int >= 0"):
        sliding_window_mask(positions, positions, 2, sinks=-1)
    with pytest.raises(ValueError, match="SinkKVCache: window must be an int >= 1"):
        SinkKVCache(0)
    cache = SinkKVCache(2)
    cache.append(*_kv(1, 0))
    with pytest.raises(ValueError, match="SinkKVCache: key must have the batch, heads and size"):
        cache.append(torch.zeros(B, G + 1, 1, E), torch.zeros(B, G + 1, 1, EV))


def test_the_bytes_count_what_else_a_cache_holds():
    kv = KVCache(cross_k=torch.zeros(B, G, 7, E), cross_v=torch.zeros(B, G, 7, EV))
    kv.append(*_kv(2, 0))
    assert kv.nbytes == B * G * (2 + 7) * (E + EV) * FLOAT  # the cross-attention's keys and values too
    lm = LMCache(state=(torch.zeros(B, G, E, EV), torch.zeros(B, G, E)))
    assert lm.cached_length == 0 and lm.nbytes == B * G * (E * EV + E) * FLOAT  # a linear state holds no position
    assert tensor_bytes(None, torch.zeros(3, dtype=torch.float16)) == 6


@pytest.mark.parametrize("make", [KVCache, LMCache], ids=["KVCache", "LMCache"])
def test_append_names_what_does_not_fit(make):
    cache = make()
    with pytest.raises(TypeError, match=r"append: key must be a floating-point tensor"):
        cache.append(torch.zeros(B, G, 1, E, dtype=torch.long), torch.zeros(B, G, 1, EV))
    with pytest.raises(ValueError, match=r"append: value must have shape \(2, 3, 1, Ev\)"):
        cache.append(torch.zeros(B, G, 1, E), torch.zeros(B, G, 2, EV))
    cache.append(*_kv(1, 0))
    with pytest.raises(ValueError, match=r"append: key and value must have the batch, heads and sizes of the cached"):
        cache.append(torch.zeros(B, G + 1, 1, E), torch.zeros(B, G + 1, 1, EV))


def test_the_models_fill_their_caches_through_the_protocol():
    torch.manual_seed(0)
    lm = TransformerLM(LMConfig(vocab_size=11, d_model=16, num_heads=4, num_kv_heads=2, num_layers=2)).eval()
    caches = lm.new_caches()
    with torch.no_grad():
        lm(torch.randint(0, 11, (B, 5)), 0, caches)
        lm(torch.randint(0, 11, (B, 1)), 5, caches)
    for cache in caches:
        assert cache.cached_length == cache.length == 6
        assert cache.nbytes == B * 2 * 6 * (4 + 4) * FLOAT  # G = 2 key and value heads of size 16 / 4

    model = Transformer(TransformerConfig(9, 9, d_model=16, num_heads=4)).eval()
    src, lengths = torch.randint(3, 9, (B, 7)), torch.tensor([7, 5])
    layers = [KVCache() for _ in model.decoder.layers]
    with torch.no_grad():
        memory, mask, _ = model.encode(src, lengths)
        model.decode(torch.randint(3, 9, (B, 3)), memory, mask, layers)
    for cache in layers:
        assert cache.cached_length == 3 and cache.nbytes == B * 4 * (3 + 7) * (4 + 4) * FLOAT  # self and cross
