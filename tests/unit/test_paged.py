"""Chapter 9: PagedAttention (attnlab.inference.paged), against contiguous attention in float64.

The paged kernel must equal attention over each row's keys laid end to end, whatever blocks of the
pool the rows hold and in whatever order; the cache must hand back what was appended; its bytes
must be cache_memory's paged count; bad input must be named.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from attnlab.attention import KeyValueCache, padding_mask
from attnlab.inference import CacheMemory, KVBlockPool, PagedKVCache, cache_memory, paged_attention

E, EV = 8, 6


def _reference(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    """One row: query (H, N, E) attends causally (bottom-right) to keys (G, t, E); float64, torch's own SDPA."""
    H, N, _ = query.shape
    G, t, _ = keys.shape
    mask = torch.ones(N, t, dtype=torch.bool).tril(diagonal=t - N)  # query i sees positions 0 .. t - N + i
    k = keys.double().repeat_interleave(H // G, dim=0)  # (G, t, E) -> (H, t, E)
    v = values.double().repeat_interleave(H // G, dim=0)
    return F.scaled_dot_product_attention(query.double(), k, v, attn_mask=mask, scale=scale)  # (H, N, Ev)


def _shuffled_pool(lengths, G, bs, *, dtype=torch.float64, seed=0, spare=5):
    """A pool whose blocks are handed to the rows in a random order; each row's keys and values contiguous too.

    Returns key_pool (P, G, bs, E), value_pool (P, G, bs, Ev), block_tables (B, M) padded with -1, and the
    rows' contiguous keys and values, (G, t_b, E) and (G, t_b, Ev).
    """
    g = torch.Generator().manual_seed(seed)
    counts = [math.ceil(t / bs) for t in lengths]
    P = sum(counts) + spare  # some blocks no row holds
    key_pool = torch.randn(P, G, bs, E, generator=g, dtype=dtype)  # unheld blocks hold noise, never read
    value_pool = torch.randn(P, G, bs, EV, generator=g, dtype=dtype)
    order = torch.randperm(P, generator=g).tolist()
    M = max(counts) + 1  # one entry more than any row uses: padding
    tables, keys, values = [], [], []
    for t, count in zip(lengths, counts, strict=True):
        blocks, order = order[:count], order[count:]
        k = torch.randn(G, t, E, generator=g, dtype=dtype)
        v = torch.randn(G, t, EV, generator=g, dtype=dtype)
        for p in range(t):
            key_pool[blocks[p // bs], :, p % bs] = k[:, p]
            value_pool[blocks[p // bs], :, p % bs] = v[:, p]
        tables.append(blocks + [-1] * (M - count))
        keys.append(k)
        values.append(v)
    return key_pool, value_pool, torch.tensor(tables), keys, values


@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (6, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("N", [1, 3])
@pytest.mark.parametrize("bs", [1, 4, 5])
def test_paged_attention_equals_attention_over_each_rows_keys(heads, N, bs):
    H, G = heads
    lengths = [7, 3, 13, 4, 5]  # mixed, one of them a whole number of blocks for each bs
    key_pool, value_pool, tables, keys, values = _shuffled_pool(lengths, G, bs)
    query = torch.randn(len(lengths), H, N, E, dtype=torch.float64)
    out = paged_attention(query, key_pool, value_pool, tables, torch.tensor(lengths))
    assert out.shape == (len(lengths), H, N, EV) and out.dtype == torch.float64
    for b in range(len(lengths)):
        torch.testing.assert_close(out[b], _reference(query[b], keys[b], values[b]), rtol=1e-12, atol=1e-12)


def test_paged_attention_scales_the_scores():
    lengths = [5, 2]
    key_pool, value_pool, tables, keys, values = _shuffled_pool(lengths, 1, 2)
    query = torch.randn(2, 2, 2, E, dtype=torch.float64)
    out = paged_attention(query, key_pool, value_pool, tables, torch.tensor(lengths), scale=0.9)
    for b in range(2):
        torch.testing.assert_close(out[b], _reference(query[b], keys[b], values[b], 0.9), rtol=1e-12, atol=1e-12)


def test_paged_attention_in_half_and_single_precision():
    lengths = [9, 2, 17]
    key_pool, value_pool, tables, _, _ = _shuffled_pool(lengths, 2, 4)
    query = torch.randn(3, 4, 2, E, dtype=torch.float64)
    for dtype, tol in ((torch.float32, 1e-6), (torch.float16, 2e-3), (torch.bfloat16, 2e-2)):
        q, kp, vp = query.to(dtype), key_pool.to(dtype), value_pool.to(dtype)
        out = paged_attention(q, kp, vp, tables, torch.tensor(lengths))
        assert out.dtype == dtype
        for b, t in enumerate(lengths):
            count = math.ceil(t / 4)
            k = kp[tables[b, :count]].transpose(0, 1).reshape(2, -1, E)[:, :t]  # the rounded keys, end to end
            v = vp[tables[b, :count]].transpose(0, 1).reshape(2, -1, EV)[:, :t]
            torch.testing.assert_close(out[b].double(), _reference(q[b], k, v), rtol=0, atol=tol)


def test_paged_attention_reads_only_what_the_rows_use():
    lengths = [6, 3]
    key_pool, value_pool, tables, _, _ = _shuffled_pool(lengths, 2, 4)
    query = torch.randn(2, 2, 1, E, dtype=torch.float64)
    out = paged_attention(query, key_pool, value_pool, tables, torch.tensor(lengths))
    held = set(tables[tables >= 0].tolist())
    unheld = [i for i in range(len(key_pool)) if i not in held]
    key_pool[unheld], value_pool[unheld] = float("nan"), float("nan")  # blocks no row holds
    key_pool[tables[0, 1], :, 2:] = float("nan")  # the empty slots of row 0's last block (6 = 4 + 2)
    padded = tables.clone()
    padded[padded < 0] = 10**6  # padding that points nowhere
    again = paged_attention(query, key_pool, value_pool, padded, torch.tensor(lengths))
    torch.testing.assert_close(again, out, rtol=0, atol=0)


def test_paged_attention_gradients():
    lengths = [3, 5]
    key_pool, value_pool, tables, _, _ = _shuffled_pool(lengths, 1, 2, spare=1)
    query = torch.randn(2, 2, 2, E, dtype=torch.float64, requires_grad=True)
    key_pool.requires_grad_(True)
    value_pool.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda q, k, v: paged_attention(q, k, v, tables, torch.tensor(lengths)), (query, key_pool, value_pool)
    )


def test_the_cache_gives_back_what_was_appended_in_lockstep():
    B, G, bs = 3, 2, 4
    pool = KVBlockPool(12, bs, G, E, EV, dtype=torch.float64)
    cache = PagedKVCache(pool, B)
    assert isinstance(cache, KeyValueCache)
    keys, values = [], []
    for step, n in enumerate((6, 1, 1, 3)):  # a prompt of 6 positions, two steps, then 3 at once
        k, v = torch.randn(B, G, n, E, dtype=torch.float64), torch.randn(B, G, n, EV, dtype=torch.float64)
        keys.append(k)
        values.append(v)
        got_k, got_v = cache.append(k, v)
        t = sum(x.shape[2] for x in keys)
        torch.testing.assert_close(got_k, torch.cat(keys, dim=2), rtol=0, atol=0)
        torch.testing.assert_close(got_v, torch.cat(values, dim=2), rtol=0, atol=0)
        assert cache.cached_length == t and cache.lengths == (t,) * B, step
        assert all(len(table) == math.ceil(t / bs) for table in cache.block_tables)
        assert cache.nbytes == B * math.ceil(t / bs) * bs * G * (E + EV) * 8  # whole blocks of float64
        assert pool.num_free == 12 - B * math.ceil(t / bs)
    # the last step: 3 new queries per row, attending causally through the block tables
    query = torch.randn(B, 4, 3, E, dtype=torch.float64)
    out = paged_attention(query, pool.key_pool, pool.value_pool, cache.block_table_tensor(), cache.length_tensor())
    for b in range(B):
        torch.testing.assert_close(out[b], _reference(query[b], got_k[b], got_v[b]), rtol=1e-12, atol=1e-12)
    cache.free()
    assert pool.num_free == 12 and cache.nbytes == 0 and cache.cached_keys is None and cache.lengths == (0,) * B


def test_requests_of_mixed_lengths_share_the_pool():
    G, bs = 2, 3
    pool = KVBlockPool(16, bs, G, E, EV, dtype=torch.float64)
    pool.key_pool.fill_(float("nan"))  # what a block held before (NaN here) is never read
    pool.value_pool.fill_(float("nan"))
    cache = PagedKVCache(pool, 3)
    g = torch.Generator().manual_seed(1)
    written: list[list[torch.Tensor]] = [[], [], []]
    written_v: list[list[torch.Tensor]] = [[], [], []]
    for row, n in [(0, 5), (1, 2), (2, 7), (1, 1), (0, 1), (1, 4), (2, 1), (0, 2)]:  # interleaved: scattered blocks
        k, v = torch.randn(G, n, E, generator=g, dtype=torch.float64), torch.randn(G, n, EV, generator=g).double()
        written[row].append(k)
        written_v[row].append(v)
        got_k, got_v = cache.append_row(row, k, v)
        torch.testing.assert_close(got_k, torch.cat(written[row], dim=1), rtol=0, atol=0)
        torch.testing.assert_close(got_v, torch.cat(written_v[row], dim=1), rtol=0, atol=0)
    assert cache.lengths == (8, 7, 8)
    assert cache.block_tables == [[0, 1, 8], [2, 6, 7], [3, 4, 5]]  # the order the rows filled their blocks
    table = cache.block_table_tensor()
    assert table.dtype == torch.long and table.shape == (3, 3)
    query = torch.randn(3, 4, 2, E, dtype=torch.float64)
    out = paged_attention(query, pool.key_pool, pool.value_pool, table, cache.length_tensor())
    for b in range(3):
        keys, values = torch.cat(written[b], dim=1), torch.cat(written_v[b], dim=1)
        torch.testing.assert_close(out[b], _reference(query[b], keys, values), rtol=1e-12, atol=1e-12)
    # as a KeyValueCache: the longest row's length, shorter rows padded with zeros a padding mask removes
    assert cache.cached_length == 8
    cached = cache.cached_keys
    assert cached is not None and cached.shape == (3, G, 8, E)
    assert torch.equal(cached[1, :, 7], torch.zeros(G, E))
    assert padding_mask(cache.length_tensor())[:, 0, 0].tolist() == [[True] * 8, [True] * 7 + [False], [True] * 8]
    # a request that ends gives its blocks back; the next request takes them
    cache.free(1)
    assert cache.lengths == (8, 0, 8) and pool.num_free == 16 - 6 and cache.block_tables[1] == []
    cache.append_row(1, torch.zeros(G, 4, E, dtype=torch.float64), torch.zeros(G, 4, EV, dtype=torch.float64))
    assert cache.block_tables[1] == [7, 6] and cache.block_table_tensor()[1].tolist() == [
        7,
        6,
        -1,
    ]  # the last freed first


def test_the_cache_bytes_are_cache_memorys_paged_count():
    pool = KVBlockPool(20, 4, 2, E, EV, dtype=torch.float16)
    cache = PagedKVCache(pool, 4)
    lengths = (9, 1, 4, 14)
    for row, t in enumerate(lengths):
        cache.append_row(row, torch.zeros(2, t, E, dtype=torch.float16), torch.zeros(2, t, EV, dtype=torch.float16))
    assert pool.bytes_per_token == 2 * (E + EV) * 2 and pool.block_nbytes == 4 * pool.bytes_per_token
    memory = cache_memory(lengths, max_length=16, block_size=4, bytes_per_token=pool.bytes_per_token)
    assert cache.nbytes == memory.paged_bytes == (3 + 1 + 1 + 4) * pool.block_nbytes
    assert memory.filled_bytes == sum(lengths) * pool.bytes_per_token
    assert pool.nbytes == 20 * pool.block_nbytes  # the pool's tensors, every block


def test_cache_memory_counts_by_hand():
    memory = cache_memory([5, 1, 9, 0], max_length=16, block_size=4, bytes_per_token=10)
    assert memory == CacheMemory(filled_bytes=150, contiguous_bytes=640, paged_bytes=240)
    assert memory.contiguous_waste == pytest.approx(1 - 150 / 640)
    assert memory.paged_waste == pytest.approx(1 - 150 / 240)
    assert cache_memory(torch.tensor([4, 8]), max_length=8, block_size=4, bytes_per_token=1) == CacheMemory(12, 16, 12)
    assert CacheMemory(12, 16, 12).paged_waste == 0.0
    empty = cache_memory((0,), max_length=1, block_size=4, bytes_per_token=3)
    assert empty.paged_bytes == 0 and empty.paged_waste == 0.0 and empty.contiguous_waste == 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        memory.paged_bytes = 0  # type: ignore[misc]


@pytest.mark.parametrize("bs", [1, 3, 16])
def test_paging_wastes_less_than_a_block_per_request(bs):
    g = torch.Generator().manual_seed(bs)
    lengths = torch.randint(1, 200, (50,), generator=g).tolist()
    memory = cache_memory(lengths, max_length=200, block_size=bs, bytes_per_token=2)
    assert 0 <= memory.paged_bytes - memory.filled_bytes < len(lengths) * bs * 2
    assert memory.filled_bytes <= memory.paged_bytes <= memory.contiguous_bytes


# --- the pool -----------------------------------------------------------------------------------


def test_the_pool_hands_out_and_takes_back_blocks():
    pool = KVBlockPool(3, 2, 1, 4, dtype=torch.float64)
    assert pool.key_pool.shape == (3, 1, 2, 4) and pool.value_pool.shape == (3, 1, 2, 4)
    assert [pool.allocate() for _ in range(3)] == [0, 1, 2] and pool.num_free == 0
    with pytest.raises(RuntimeError, match=r"KVBlockPool.allocate: the pool is exhausted, all its 3 blocks of 2"):
        pool.allocate()
    pool.free([1])
    assert pool.num_free == 1 and pool.allocate() == 1
    with pytest.raises(ValueError, match=r"KVBlockPool.free: block 2 is not in use \(freed twice\?\)"):
        pool.free([2, 2])
    assert pool.num_free == 0  # nothing freed: the second id was refused before the first was freed
    with pytest.raises(ValueError, match=r"KVBlockPool.free: ids\[0\] must be an int in \[0, 2\] \(a block of the"):
        pool.free([3])
    with pytest.raises(TypeError, match=r"KVBlockPool.free: ids must be an iterable of block ids \(ints\), got int"):
        pool.free(1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"KVBlockPool.free: ids\[0\] must be an int, got float"):
        pool.free([1.0])  # type: ignore[list-item]


def test_the_pool_names_bad_sizes():
    with pytest.raises(ValueError, match=r"KVBlockPool: num_blocks must be an int >= 1, got 0"):
        KVBlockPool(0, 2, 1, 4)
    with pytest.raises(TypeError, match=r"KVBlockPool: block_size must be an int, got float"):
        KVBlockPool(2, 2.0, 1, 4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"KVBlockPool: value_dim must be an int >= 1, got 0"):
        KVBlockPool(2, 2, 1, 4, 0)
    with pytest.raises(TypeError, match=r"KVBlockPool: dtype must be a floating torch.dtype, got torch.int64"):
        KVBlockPool(2, 2, 1, 4, dtype=torch.long)


def test_the_cache_names_what_does_not_fit():
    pool = KVBlockPool(4, 2, 2, E, EV)
    cache = PagedKVCache(pool, 2)
    with pytest.raises(TypeError, match=r"PagedKVCache: pool must be a KVBlockPool, got str"):
        PagedKVCache("pool", 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"PagedKVCache: batch_size must be an int >= 1, got 0"):
        PagedKVCache(pool, 0)
    with pytest.raises(
        ValueError, match=r"PagedKVCache.append: key must have shape \(2, 2, n, 8\), got \(2, 3, 1, 8\)"
    ):
        cache.append(torch.zeros(2, 3, 1, E), torch.zeros(2, 3, 1, EV))
    with pytest.raises(
        ValueError, match=r"PagedKVCache.append: value must have shape \(2, 2, 1, 6\), got \(2, 2, 2, 6\)"
    ):
        cache.append(torch.zeros(2, 2, 1, E), torch.zeros(2, 2, 2, EV))
    with pytest.raises(TypeError, match=r"PagedKVCache.append: key and value must have the pool's dtype torch.float32"):
        cache.append(torch.zeros(2, 2, 1, E).double(), torch.zeros(2, 2, 1, EV).double())
    with pytest.raises(ValueError, match=r"PagedKVCache.append_row: row must be an int in \[0, 1\], got 2"):
        cache.append_row(2, torch.zeros(2, 1, E), torch.zeros(2, 1, EV))
    with pytest.raises(ValueError, match=r"PagedKVCache.append_row: key must have shape \(2, n, 8\)"):
        cache.append_row(0, torch.zeros(1, 2, 1, E), torch.zeros(1, 2, 1, EV))
    cache.append_row(0, torch.zeros(2, 3, E), torch.zeros(2, 3, EV))
    with pytest.raises(ValueError, match=r"PagedKVCache.append: the rows hold different lengths \(3, 0\)"):
        cache.append(torch.zeros(2, 2, 1, E), torch.zeros(2, 2, 1, EV))
    with pytest.raises(
        RuntimeError, match=r"append_row: the pool is exhausted: 5 more positions need 3 blocks, and 2 of its 4"
    ):
        cache.append_row(1, torch.zeros(2, 5, E), torch.zeros(2, 5, EV))
    assert pool.num_free == 2 and cache.lengths == (3, 0)  # all or nothing: no block was taken
    with pytest.raises(ValueError, match=r"PagedKVCache.free: row must be an int in \[0, 1\], got -1"):
        cache.free(-1)


# --- paged_attention's arguments -----------------------------------------------------------------


def _args(**change):
    args = dict(
        query=torch.zeros(2, 4, 1, E),
        key_pool=torch.zeros(5, 2, 4, E),
        value_pool=torch.zeros(5, 2, 4, EV),
        block_tables=torch.tensor([[0, 1], [2, -1]]),
        lengths=torch.tensor([6, 3]),
    )
    args.update(change)
    return args


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (dict(query=torch.zeros(2, 3, 1, E)), ValueError, r"the query's heads H must be a multiple of the key's"),
        (dict(query=torch.zeros(2, 4, 1, E + 1)), ValueError, r"query and key_pool must have the same feature size E"),
        (dict(query=torch.zeros(4, 1, E)), ValueError, r"query must have shape \(B, H, N, E\), got shape \(4, 1, 8\)"),
        (
            dict(value_pool=torch.zeros(5, 2, 3, EV)),
            ValueError,
            r"key_pool \(P, G, bs, E\) and value_pool \(P, G, bs, Ev\) must agree but in the last size",
        ),
        (
            dict(value_pool=torch.zeros(5, 2, 4, EV).double()),
            TypeError,
            r"query, key_pool and value_pool must share one dtype, got torch.float32, torch.float32, torch.float64",
        ),
        (dict(key_pool=torch.zeros(5, 2, 4, E).long()), TypeError, r"key_pool must be a floating-point tensor"),
        (dict(block_tables=torch.tensor([[0, 1], [2, -1]]).int()), TypeError, r"block_tables must be a torch.long"),
        (dict(block_tables=torch.tensor([0, 1])), ValueError, r"block_tables must have shape \(B, M\) = \(2, M\)"),
        (dict(lengths=torch.tensor([6.0, 3.0])), TypeError, r"lengths must be a torch.long tensor, got torch.float32"),
        (dict(lengths=torch.tensor([6, 3, 1])), ValueError, r"lengths must have shape \(B,\) = \(2,\), got \(3,\)"),
        (dict(lengths=torch.tensor([6, 9])), ValueError, r"lengths must be at most M \* bs = 2 \* 4 = 8, .* \[6, 9\]"),
        (
            dict(query=torch.zeros(2, 4, 4, E)),
            ValueError,
            r"every row must hold at least N = 4 positions \(its queries are its last N\), got lengths \[6, 3\]",
        ),
        (dict(lengths=torch.tensor([6, -1])), ValueError, r"every row must hold at least N = 1 positions"),
        (
            dict(block_tables=torch.tensor([[0, 5], [2, -1]])),
            ValueError,
            r"block_tables must hold block ids in \[0, P\) = \[0, 5\) where a row uses .* row 0 holds 5 at entry 1",
        ),
        (
            dict(block_tables=torch.tensor([[0, 1], [-1, 2]])),
            ValueError,
            r"block_tables must hold block ids .* row 1 holds -1 at entry 0",
        ),
    ],
)
def test_paged_attention_names_bad_input(change, error, message):
    with pytest.raises(error, match=r"^paged_attention: " + message):
        paged_attention(**_args(**change))
    paged_attention(**_args())  # the unchanged arguments are fine


def test_paged_attention_names_a_bad_scale():
    with pytest.raises(TypeError, match=r"paged_attention: scale must be a number or None, got str"):
        paged_attention(**_args(), scale="1")


def test_the_value_checks_need_values_and_are_skipped_on_meta():
    """The meta device has no values to read: the shapes are checked there, the block ids and lengths are not."""
    meta = {k: v.to("meta") for k, v in _args(block_tables=torch.tensor([[0, 9], [2, -1]])).items()}
    assert paged_attention(**meta).shape == (2, 4, 1, EV)
    with pytest.raises(ValueError, match=r"row 0 holds 9 at entry 1"):
        paged_attention(**_args(block_tables=torch.tensor([[0, 9], [2, -1]])))
    meta["block_tables"] = meta["block_tables"].int()
    with pytest.raises(TypeError, match=r"block_tables must be a torch.long tensor"):
        paged_attention(**meta)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (dict(lengths=[]), ValueError, r"lengths must be a tuple or list of ints, non-empty, each >= 0; got \[\]"),
        (
            dict(lengths=[3, -1]),
            ValueError,
            r"lengths must be a tuple or list of ints, non-empty, each >= 0; got \[3, -1\]",
        ),
        (dict(lengths=[3, 1.5]), TypeError, r"lengths must be a tuple or list of ints, got list"),
        (dict(lengths=torch.tensor([1.0])), TypeError, r"lengths must be an integer tensor, got torch.float32"),
        (dict(max_length=5), ValueError, r"max_length must be an int >= 9 \(the longest request\), got 5"),
        (dict(block_size=0), ValueError, r"block_size must be an int >= 1, got 0"),
        (dict(bytes_per_token=2.0), TypeError, r"bytes_per_token must be an int, got float"),
    ],
)
def test_cache_memory_names_bad_input(kwargs, error, message):
    args = dict(lengths=[3, 9], max_length=16, block_size=4, bytes_per_token=2) | kwargs
    with pytest.raises(error, match=r"^cache_memory: " + message):
        cache_memory(**args)
