"""Attention at inference: serving many requests from one memory, and decoding long contexts fast.

Introduced in chapter 9, "Attention at inference". One module per idea:

- ``paged``: PagedAttention (Kwon et al. 2023, vLLM): the key/value cache kept in blocks of a
  pool (``KVBlockPool``), each request's blocks listed in its block table (``PagedKVCache``, a
  ``KeyValueCache``), attention read through the block tables (``paged_attention``), and the
  memory a contiguous and a paged cache reserve (``cache_memory``, ``CacheMemory``).
- ``decode``: split-KV decoding (Flash-Decoding, Dao et al. 2023): attention over chunks of the
  keys, merged exactly by their log-sum-exps (``split_kv_attention``, ``merge_attention_partials``).
- ``speculative``: speculative decoding, a small draft model proposing tokens that the target
  model verifies in one pass (``speculative_decode``, ``verify_draft``, ``SpeculativeResult``).

This package sits above ``attnlab.attention`` and below ``attnlab.models``: models are passed in,
never imported.
"""

from attnlab.inference.decode import merge_attention_partials, split_kv_attention
from attnlab.inference.paged import CacheMemory, KVBlockPool, PagedKVCache, cache_memory, paged_attention
from attnlab.inference.speculative import SpeculativeResult, speculative_decode, verify_draft

__all__ = [
    "CacheMemory",
    "KVBlockPool",
    "PagedKVCache",
    "SpeculativeResult",
    "cache_memory",
    "merge_attention_partials",
    "paged_attention",
    "speculative_decode",
    "split_kv_attention",
    "verify_draft",
]
