"""PagedAttention: a key/value cache kept in blocks of fixed size, the way an operating system pages memory.

Introduced in chapter 9, after Kwon et al. (2023), "Efficient Memory Management for Large Language
Model Serving with PagedAttention" (the paper of vLLM). A contiguous cache (chapter 8's ``LMCache``)
keeps each request's keys and values in one tensor, so a server that cannot know how long a reply
will be reserves ``max_length`` positions for every request, most of them never filled. Paging cuts
the cache into blocks of ``block_size`` positions, taken from one pool as a request grows: a request
holds at most one block that is not full, so fewer than ``block_size`` of its positions are reserved
and empty. Each request's block table maps its logical blocks to physical blocks anywhere in the
pool: position ``p`` lies in slot ``p % block_size`` of block ``table[p // block_size]``.

- ``KVBlockPool``: the pool, keys ``(P, G, bs, E)`` and values ``(P, G, bs, Ev)``, and its free list.
- ``PagedKVCache``: the block tables and lengths of ``B`` requests, a ``KeyValueCache``.
- ``paged_attention``: attention that reads each request's keys and values through its block table.
- ``cache_memory``: the bytes a contiguous and a paged cache reserve for requests of given lengths,
  and the bytes they fill.

Shapes: ``B`` requests, ``H`` query heads, ``G`` key and value heads (``H`` a multiple of ``G``),
``N`` new queries per request, ``P`` blocks in the pool, ``bs`` positions per block, ``M`` entries
per block table, ``t`` cached positions, ``E`` and ``Ev`` the sizes of a key and of a value head.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from attnlab.attention.cache import tensor_bytes
from attnlab.attention.grouped import grouped_query_attention
from attnlab.validation import (
    check_grouped_qkv,
    check_int,
    check_int_sequence,
    check_ints,
    check_number,
    check_tensor,
    describe,
)

__all__ = ["CacheMemory", "KVBlockPool", "PagedKVCache", "cache_memory", "paged_attention"]


def _gather_blocks(pool: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """The blocks ``table (B, M)`` names, laid end to end: ``(P, G, bs, X) -> (B, G, M bs, X)``."""
    B, M = table.shape
    _, G, bs, X = pool.shape
    blocks = pool[table]  # (B, M, G, bs, X)
    return blocks.transpose(1, 2).reshape(B, G, M * bs, X)  # (B, G, M, bs, X) -> (B, G, M bs, X)


class KVBlockPool:
    """The blocks every request's keys and values are kept in, and the list of those not in use (chapter 9).

    Kwon et al. (2023) allocate the whole cache up front as one pool of blocks, which requests take
    and give back: ``allocate()`` hands out the id of a free block, ``free(ids)`` returns blocks.
    Block ``i`` holds the keys ``key_pool[i]`` and values ``value_pool[i]`` of ``block_size``
    positions; which request's positions they are, only that request's block table says.

    Shapes: ``key_pool (P, G, bs, E)`` and ``value_pool (P, G, bs, Ev)``, with ``P = num_blocks``,
    ``G = num_kv_heads``, ``bs = block_size``, ``E = head_dim`` and ``Ev = value_dim``
    (``head_dim`` when ``None``). Both start as zeros.

    ``nbytes`` is the bytes of the two tensors, in use or not; ``bytes_per_token`` the bytes one
    position takes in it, ``G (E + Ev)`` numbers; ``block_nbytes`` those of one block.

    Raises:
        TypeError, ValueError: a size that is not an int >= 1, a ``dtype`` that is not floating.
        RuntimeError: ``allocate()`` on a pool with no free block.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        value_dim: int | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ):
        name = "KVBlockPool"
        check_ints(name, num_blocks=num_blocks, block_size=block_size, num_kv_heads=num_kv_heads, head_dim=head_dim)
        value_dim = head_dim if value_dim is None else check_int(name, "value_dim", value_dim)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"{name}: dtype must be a floating torch.dtype, got {dtype!r}")
        shape = (num_blocks, num_kv_heads, block_size)
        self.key_pool = torch.zeros(*shape, head_dim, dtype=dtype, device=device)  # (P, G, bs, E)
        self.value_pool = torch.zeros(*shape, value_dim, dtype=dtype, device=device)  # (P, G, bs, Ev)
        self._free = list(range(num_blocks - 1, -1, -1))  # a stack: block 0 is handed out first
        self._in_use = [False] * num_blocks

    @property
    def num_blocks(self) -> int:
        """``P``: the blocks of the pool, in use or not."""
        return self.key_pool.shape[0]

    @property
    def block_size(self) -> int:
        """``bs``: the positions a block holds."""
        return self.key_pool.shape[2]

    @property
    def num_free(self) -> int:
        """The blocks no request holds."""
        return len(self._free)

    @property
    def bytes_per_token(self) -> int:
        """The bytes of one position's keys and values: ``G (E + Ev)`` numbers."""
        _, G, _, E = self.key_pool.shape
        return G * (E + self.value_pool.shape[-1]) * self.key_pool.element_size()

    @property
    def block_nbytes(self) -> int:
        """The bytes of one block's keys and values: ``bs * bytes_per_token``."""
        return self.block_size * self.bytes_per_token

    @property
    def nbytes(self) -> int:
        """The bytes of the pool's two tensors, every block counted."""
        return tensor_bytes(self.key_pool, self.value_pool)

    def allocate(self) -> int:
        """The id of a free block, now in use; ``RuntimeError`` when every block is in use."""
        if not self._free:
            raise RuntimeError(
                f"KVBlockPool.allocate: the pool is exhausted, all its {self.num_blocks} blocks of "
                f"{self.block_size} positions are in use (free some, or make a larger pool)"
            )
        block = self._free.pop()
        self._in_use[block] = True
        return block

    def free(self, ids: Iterable[int]) -> None:
        """Give the blocks ``ids`` back to the pool. Nothing is freed unless every id is a block in use."""
        name = "KVBlockPool.free"
        if isinstance(ids, (str, bytes, torch.Tensor)) or not isinstance(ids, Iterable):
            raise TypeError(f"{name}: ids must be an iterable of block ids (ints), got {describe(ids)}")
        blocks, seen = list(ids), set()
        for i, block in enumerate(blocks):
            check_int(name, f"ids[{i}]", block, low=0, high=self.num_blocks - 1, note="a block of the pool")
            if not self._in_use[block] or block in seen:
                raise ValueError(f"{name}: block {block} is not in use (freed twice?)")
            seen.add(block)
        for block in blocks:
            self._in_use[block] = False
            self._free.append(block)


class PagedKVCache:
    """The keys and values of ``B`` requests, in blocks of a ``KVBlockPool`` (chapter 9, Kwon et al. 2023).

    Each row (request) has a block table, the ids of its blocks in the order of its positions, and
    a length; a row takes a block from the pool when its last one is full, and ``free()`` gives its
    blocks back. Two ways to fill it:

    - ``append(key, value)``: the ``KeyValueCache`` protocol, for ``B`` rows generated in lockstep
      (every row the same length): writes ``n`` new positions of every row and returns every
      cached key and value, gathered into contiguous ``(B, G, t, E)`` and ``(B, G, t, Ev)``.
    - ``append_row(row, key, value)``: ``n`` new positions of one row, for requests of different
      lengths; attention then reads the pool directly, ``paged_attention(query, pool.key_pool,
      pool.value_pool, cache.block_table_tensor(), cache.length_tensor())``.

    Shapes: ``append``: key ``(B, G, n, E)``, value ``(B, G, n, Ev)``; ``append_row``: key
    ``(G, n, E)``, value ``(G, n, Ev)``, returns that row's ``(G, t_row, E)``, ``(G, t_row, Ev)``.

    As a ``KeyValueCache``: ``cached_length`` is ``t``, the longest row's length; ``cached_keys``
    and ``cached_values`` gather ``(B, G, t, E)`` and ``(B, G, t, Ev)`` (``None`` while every row is
    empty). Where the rows differ, a shorter row's positions past its own length are zeros: mask
    them (``padding_mask(cache.length_tensor())``). ``nbytes`` is the bytes of the blocks the
    cache holds, whole blocks, their empty slots included (``cache_memory``'s ``paged_bytes``).

    Writing into the pool is storage, not computation: no gradient flows back through the pool to
    the keys and values appended (the tensors returned read the pool's values).
    """

    def __init__(self, pool: KVBlockPool, batch_size: int):
        if not isinstance(pool, KVBlockPool):
            raise TypeError(f"PagedKVCache: pool must be a KVBlockPool, got {describe(pool)}")
        self.pool = pool
        self.batch_size = check_int("PagedKVCache", "batch_size", batch_size)
        self._tables: list[list[int]] = [[] for _ in range(batch_size)]
        self._lengths = [0] * batch_size

    @property
    def lengths(self) -> tuple[int, ...]:
        """Each row's number of cached positions."""
        return tuple(self._lengths)

    @property
    def block_tables(self) -> list[list[int]]:
        """Each row's block ids, in the order of its positions (a copy)."""
        return [list(table) for table in self._tables]

    def block_table_tensor(self) -> torch.Tensor:
        """The block tables as one ``(B, M)`` torch.long tensor on the pool's device, ``M`` the
        longest table, shorter ones padded with -1 (``paged_attention``'s ``block_tables``)."""
        M = max(len(table) for table in self._tables)
        rows = [table + [-1] * (M - len(table)) for table in self._tables]
        return torch.tensor(rows, dtype=torch.long, device=self.pool.key_pool.device).reshape(self.batch_size, M)

    def length_tensor(self) -> torch.Tensor:
        """The lengths as a ``(B,)`` torch.long tensor on the pool's device (``paged_attention``'s ``lengths``)."""
        return torch.tensor(self._lengths, dtype=torch.long, device=self.pool.key_pool.device)

    def _check(self, where: str, key: object, value: object, lead: tuple[int, ...]) -> int:
        """Check ``key (*lead, G, n, E)`` and ``value (*lead, G, n, Ev)`` against the pool; return ``n``."""
        _, G, _, E = self.pool.key_pool.shape
        Ev = self.pool.value_pool.shape[-1]
        sizes = "".join(f"{s}, " for s in lead)
        key = check_tensor(where, "key", key, kind="float", shape=(*lead, G, None, E), names=f"({sizes}{G}, n, {E})")
        n = key.shape[-2]
        value = check_tensor(
            where, "value", value, kind="float", shape=(*lead, G, n, Ev), names=f"({sizes}{G}, {n}, {Ev})"
        )
        dtype = self.pool.key_pool.dtype
        if key.dtype != dtype or value.dtype != dtype:
            raise TypeError(
                f"{where}: key and value must have the pool's dtype {dtype}, got {key.dtype} and {value.dtype}"
            )
        return n

    def _reserve(self, where: str, rows: Sequence[int], n: int) -> None:
        """Take from the pool the blocks that ``n`` more positions of ``rows`` need, all or none."""
        bs = self.pool.block_size
        needed = [math.ceil((self._lengths[r] + n) / bs) - len(self._tables[r]) for r in rows]
        if sum(needed) > self.pool.num_free:
            raise RuntimeError(
                f"{where}: the pool is exhausted: {n} more positions need {sum(needed)} blocks, and "
                f"{self.pool.num_free} of its {self.pool.num_blocks} blocks are free"
            )
        for r, count in zip(rows, needed, strict=True):
            self._tables[r] += [self.pool.allocate() for _ in range(count)]

    def _write(self, rows: Sequence[int], key: torch.Tensor, value: torch.Tensor) -> None:
        """Write ``key (R, G, n, E)`` and ``value (R, G, n, Ev)`` after the cached positions of ``rows``."""
        n, bs, device = key.shape[2], self.pool.block_size, self.pool.key_pool.device
        # listing: address
        positions = [range(self._lengths[r], self._lengths[r] + n) for r in rows]
        blocks = [[self._tables[r][p // bs] for p in ps] for r, ps in zip(rows, positions, strict=True)]  # (R, n)
        slots = [[p % bs for p in ps] for ps in positions]  # (R, n)
        b = torch.tensor(blocks, dtype=torch.long, device=device).reshape(len(rows), n)
        s = torch.tensor(slots, dtype=torch.long, device=device).reshape(len(rows), n)
        with torch.no_grad():  # storage: the pool keeps values, not a graph
            self.pool.key_pool[b, :, s] = key.transpose(1, 2)  # (R, G, n, E) -> (R, n, G, E), one (block, slot) each
            self.pool.value_pool[b, :, s] = value.transpose(1, 2)  # (R, G, n, Ev) -> (R, n, G, Ev)
        # end listing: address
        for r in rows:
            self._lengths[r] += n

    def _gathered(self, rows: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys ``(R, G, t, E)`` and values ``(R, G, t, Ev)`` of ``rows``, ``t`` their longest length;
        zeros past a row's own length."""
        t = max(self._lengths[r] for r in rows)
        table = self.block_table_tensor()[list(rows)]  # (R, M)
        used = torch.tensor([[self._lengths[r]] for r in rows], device=table.device)  # (R, 1)
        positions = torch.arange(table.shape[1] * self.pool.block_size, device=table.device)  # (M bs,)
        empty = (positions >= used)[:, None, :, None]  # (R, 1, M bs, 1): True past a row's length
        keys = _gather_blocks(self.pool.key_pool, table.clamp(min=0)).masked_fill(empty, 0.0)  # (R, G, M bs, E)
        values = _gather_blocks(self.pool.value_pool, table.clamp(min=0)).masked_fill(empty, 0.0)  # (R, G, M bs, Ev)
        return keys[:, :, :t], values[:, :, :t]

    def append(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add ``n`` positions to every row, which must all have the same length; return every cached
        key ``(B, G, t, E)`` and value ``(B, G, t, Ev)``, gathered from the blocks."""
        where = "PagedKVCache.append"
        n = self._check(where, key, value, (self.batch_size,))
        if len(set(self._lengths)) > 1:
            raise ValueError(
                f"{where}: the rows hold different lengths {self.lengths}, and append writes them in lockstep; "
                "use append_row, and paged_attention to attend"
            )
        rows = range(self.batch_size)
        self._reserve(where, rows, n)
        self._write(rows, key, value)
        return self._gathered(rows)

    def append_row(self, row: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add ``n`` positions to row ``row``: ``key (G, n, E)``, ``value (G, n, Ev)``; return that row's
        keys ``(G, t_row, E)`` and values ``(G, t_row, Ev)``."""
        where = "PagedKVCache.append_row"
        check_int(where, "row", row, low=0, high=self.batch_size - 1)
        n = self._check(where, key, value, ())
        self._reserve(where, [row], n)
        self._write([row], key[None], value[None])  # (G, n, E) -> (1, G, n, E)
        keys, values = self._gathered([row])
        return keys[0], values[0]

    def free(self, row: int | None = None) -> None:
        """Give the blocks of row ``row`` (of every row when ``None``) back to the pool; the row is empty again."""
        if row is None:
            rows: Sequence[int] = range(self.batch_size)
        else:
            rows = [check_int("PagedKVCache.free", "row", row, low=0, high=self.batch_size - 1)]
        for r in rows:
            self.pool.free(self._tables[r])
            self._tables[r], self._lengths[r] = [], 0

    @property
    def cached_length(self) -> int:
        """``t``: the longest row's number of cached positions (every row's, in lockstep)."""
        return max(self._lengths)

    @property
    def cached_keys(self) -> torch.Tensor | None:
        """Every row's keys ``(B, G, t, E)``, zeros past a shorter row's length; ``None`` while all are empty."""
        return None if self.cached_length == 0 else self._gathered(range(self.batch_size))[0]

    @property
    def cached_values(self) -> torch.Tensor | None:
        """Every row's values ``(B, G, t, Ev)``, zeros past a shorter row's length; ``None`` while all are empty."""
        return None if self.cached_length == 0 else self._gathered(range(self.batch_size))[1]

    @property
    def nbytes(self) -> int:
        """The bytes of the blocks the cache holds: whole blocks, their empty slots included."""
        return sum(len(table) for table in self._tables) * self.pool.block_nbytes


def _check_tables(
    where: str, block_tables: torch.Tensor, lengths: torch.Tensor, *, num_blocks: int, block_size: int, num_queries: int
) -> None:
    """The values of the lengths and of the block table entries in use: two host reads."""
    M = block_tables.shape[1]
    lens = lengths.tolist()
    if any(n < num_queries for n in lens):
        raise ValueError(
            f"{where}: every row must hold at least N = {num_queries} positions (its queries are its last N), "
            f"got lengths {lens}"
        )
    if any(n > M * block_size for n in lens):
        raise ValueError(
            f"{where}: lengths must be at most M * bs = {M} * {block_size} = {M * block_size}, the positions the "
            f"block tables address; got lengths {lens}"
        )
    used = torch.arange(M, device=block_tables.device) * block_size < lengths[:, None]  # (B, M)
    bad = used & ((block_tables < 0) | (block_tables >= num_blocks))  # (B, M)
    if bad.any():
        b, j = (int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"{where}: block_tables must hold block ids in [0, P) = [0, {num_blocks}) where a row uses them (its "
            f"first ceil(length / bs) entries); row {b} holds {int(block_tables[b, j])} at entry {j}"
        )


def paged_attention(
    query: torch.Tensor,
    key_pool: torch.Tensor,
    value_pool: torch.Tensor,
    block_tables: torch.Tensor,
    lengths: torch.Tensor,
    *,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention in which each row reads its keys and values from a pool of blocks, through its block table.

    Defined in chapter 9 (the attention kernel of Kwon et al. 2023). Row ``b`` has ``lengths[b]``
    positions; position ``p`` is slot ``p % bs`` of block ``block_tables[b, p // bs]``. Its ``N``
    queries are its last ``N`` positions, so query ``i`` attends to positions ``0 ..
    lengths[b] - N + i`` (causal, aligned bottom-right: ``N = 1`` is one decoding step, ``N > 1`` a
    prompt or several tokens at once). Query head ``h`` reads key and value head ``h // (H / G)``.
    The result equals ``grouped_query_attention`` over each row's keys laid end to end.

    Block table entries past the ones a row uses (``ceil(lengths[b] / bs)``) are never read: pad
    with anything (``PagedKVCache.block_table_tensor`` pads with -1).

    Shapes:
        query: ``(B, H, N, E)``; key_pool: ``(P, G, bs, E)``; value_pool: ``(P, G, bs, Ev)``;
        block_tables: ``(B, M)`` torch.long; lengths: ``(B,)`` torch.long; returns ``(B, H, N, Ev)``.

    ``scale`` multiplies the scores (``1 / sqrt(E)`` when ``None``). Half precision is computed in
    float32 and rounded once, as ``scaled_dot_product_attention`` does.

    Raises:
        TypeError: a tensor of the wrong dtype (the three floating ones must share one).
        ValueError: a shape that does not fit; on a device with values (not ``meta``, which has none
        to read): a length below ``N`` or above ``M * bs``, or a block id outside ``[0, P)`` where
        it is used.
    """
    name = "paged_attention"
    check_grouped_qkv(
        name,
        query,
        key_pool,
        value_pool,
        args=("query", "key_pool", "value_pool"),
        shapes=("(B, H, N, E)", "(P, G, bs, E)", "(P, G, bs, Ev)"),
        same_batch=False,
    )
    B, _, N, _ = query.shape
    P, _, bs, _ = key_pool.shape
    check_tensor(name, "block_tables", block_tables, kind="long", shape=(B, None), names=f"(B, M) = ({B}, M)")
    check_tensor(name, "lengths", lengths, kind="long", shape=(B,), names=f"(B,) = ({B},)")
    check_number(name, "scale", scale, none=True)
    if not (block_tables.is_meta or lengths.is_meta):
        _check_tables(name, block_tables, lengths, num_blocks=P, block_size=bs, num_queries=N)
    M = block_tables.shape[1]
    device = query.device
    # listing: paged
    used = torch.arange(M, device=device) * bs < lengths[:, None]  # (B, M): the entries each row uses
    table = torch.where(used, block_tables, 0)  # (B, M): unused entries read block 0, then masked out
    keys = _gather_blocks(key_pool, table)  # (P, G, bs, E) -> (B, G, M bs, E)
    values = _gather_blocks(value_pool, table)  # (P, G, bs, Ev) -> (B, G, M bs, Ev)
    positions = torch.arange(M * bs, device=device)  # (M bs,)
    empty = (positions >= lengths[:, None])[:, None, :, None]  # (B, 1, M bs, 1): slots past a row's length
    values = values.masked_fill(empty, 0.0)  # a weight of 0 times whatever they hold (NaN too) is then 0
    query_positions = lengths[:, None] - N + torch.arange(N, device=device)  # (B, N): each row's last N positions
    mask = positions[None, None, :] <= query_positions[:, :, None]  # (B, N, M bs): causal, nothing past the length
    return grouped_query_attention(query, keys, values, mask[:, None], scale=scale)  # (B, H, N, Ev)
    # end listing: paged


@dataclass(frozen=True)
class CacheMemory:
    """The memory of a key/value cache for a batch of requests (chapter 9; ``cache_memory`` fills it).

    Fields, in bytes: ``filled_bytes``, the positions the requests hold; ``contiguous_bytes``, what
    a contiguous cache reserves, ``max_length`` positions per request; ``paged_bytes``, what a paged
    cache reserves, whole blocks. ``contiguous_waste`` and ``paged_waste``: the fraction of each that
    is reserved but empty (0 when nothing is reserved).
    """

    filled_bytes: int
    contiguous_bytes: int
    paged_bytes: int
    contiguous_waste: float = field(init=False)
    paged_waste: float = field(init=False)

    def __post_init__(self) -> None:
        for reserved, waste in ((self.contiguous_bytes, "contiguous_waste"), (self.paged_bytes, "paged_waste")):
            object.__setattr__(self, waste, 1 - self.filled_bytes / reserved if reserved else 0.0)


def cache_memory(
    lengths: Sequence[int] | torch.Tensor, *, max_length: int, block_size: int, bytes_per_token: int
) -> CacheMemory:
    """The bytes a contiguous and a paged cache reserve for requests that end at ``lengths``, and the bytes filled.

    Defined in chapter 9, the count behind Kwon et al.'s (2023) argument: a contiguous cache
    reserves ``max_length`` positions per request, however long the request turns out;
    a paged one ``ceil(length / block_size)`` whole blocks, so fewer than ``block_size`` empty
    positions per request. ``bytes_per_token`` is one position's keys and values (for a whole model,
    ``kv_cache_bytes_per_token``; for one pool, ``KVBlockPool.bytes_per_token``, and then
    ``paged_bytes`` is the ``nbytes`` of a ``PagedKVCache`` holding those lengths).

    Shapes: ``lengths``: a tuple or list of ints, or a 1-D integer tensor ``(B,)``, each >= 0.

    Raises:
        TypeError, ValueError: lengths that are not ints >= 0, ``max_length`` below the longest
        request, a size that is not an int >= 1.
    """
    name = "cache_memory"
    if isinstance(lengths, torch.Tensor):
        lengths = check_tensor(name, "lengths", lengths, kind="integer", dim=1, names="(B,)").tolist()
    lens = check_int_sequence(name, "lengths", lengths, low=0, types=(tuple, list))
    check_int(name, "max_length", max_length, low=max(1, *lens), note="the longest request")
    check_ints(name, block_size=block_size, bytes_per_token=bytes_per_token)
    # listing: memory
    filled = sum(lens) * bytes_per_token
    contiguous = len(lens) * max_length * bytes_per_token  # every request reserves max_length positions
    paged = sum(math.ceil(n / block_size) for n in lens) * block_size * bytes_per_token  # whole blocks
    # end listing: memory
    return CacheMemory(filled_bytes=filled, contiguous_bytes=contiguous, paged_bytes=paged)
