"""One protocol for every key/value cache: what a decoder keeps of the positions before the new ones.

Introduced with the caches it describes: chapter 6's ``KVCache`` (one decoder layer of the
encoder-decoder Transformer), chapter 8's ``LMCache`` (one block of a ``TransformerLM``, softmax or
linear attention) and ``RollingKVCache`` (sliding-window attention's buffer of fixed size). Each
keeps its own names for what is particular to it (``KVCache.cross_k``, ``LMCache.state``,
``RollingKVCache.window``), and all three speak this vocabulary, as does chapter 9's paged cache
(``attnlab.inference.PagedKVCache``, whose ``block_tables`` are its own):

- ``append(key, value) -> (keys, values)``: add the keys ``(B, G, n, E)`` and values
  ``(B, G, n, Ev)`` of ``n`` new positions (``RollingKVCache``: one at a time) and return the
  keys and values a query now attends to: ``(cached_keys, cached_values)``.
- ``cached_keys``, ``cached_values``: those keys ``(B, G, t, E)`` and values ``(B, G, t, Ev)``,
  ``None`` before the first ``append``.
- ``cached_length``: ``t``, the number of positions whose keys and values are held (for a
  rolling buffer at most ``window + 1``; for linear attention's state, which holds none, 0).
- ``nbytes``: the bytes the cache holds, all its tensors counted (a rolling buffer's empty slots
  and a linear state included).

``G`` is the number of key and value heads (``H`` but for grouped-query attention). The
protocol is structural: a class follows it by having these members, and
``isinstance(cache, KeyValueCache)`` checks that it has them.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

__all__ = ["KeyValueCache", "tensor_bytes"]


@runtime_checkable
class KeyValueCache(Protocol):
    """What every key/value cache of the package offers (see the module's docstring)."""

    def append(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the keys and values of new positions; return every cached one."""
        ...

    @property
    def cached_keys(self) -> torch.Tensor | None:
        """The keys a query attends to, ``(B, G, t, E)``; ``None`` before the first ``append``."""
        ...

    @property
    def cached_values(self) -> torch.Tensor | None:
        """The values a query attends to, ``(B, G, t, Ev)``; ``None`` before the first ``append``."""
        ...

    @property
    def cached_length(self) -> int:
        """``t``: the number of positions whose keys and values are held."""
        ...

    @property
    def nbytes(self) -> int:
        """The bytes the cache holds."""
        ...


def tensor_bytes(*tensors: torch.Tensor | None) -> int:
    """The bytes of ``tensors`` (``None`` holds none): ``numel() * element_size()`` summed."""
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)
