"""The caches of the decoders that generate: chapter 6's ``KVCache`` and chapter 8's ``LMCache``.

While a decoder generates, each layer keeps the keys and values of the positions it has already
seen, so that a step projects only the new token. ``KVCache`` is one layer's of the
encoder-decoder ``Transformer`` (the self-attention's, which grow, and the cross-attention's,
computed once); ``LMCache`` is one block's of a ``TransformerLM`` (keys and values for softmax
attention, a state of fixed size for linear attention). Both are ``KeyValueCache``s
(``attnlab.attention.cache``), as is the rolling buffer of sliding-window attention,
``attnlab.attention.RollingKVCache``; ``attnlab.models.transformer`` and ``attnlab.models.lm``
export them too.

Shapes: ``B`` batch, ``H`` heads (``G`` key and value heads, for grouped-query attention), ``t``
cached positions, ``E`` the size of a head.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.attention.cache import tensor_bytes
from attnlab.validation import check_tensor

__all__ = ["KVCache", "LMCache"]


def _appended(
    where: str,
    cached_key: torch.Tensor | None,
    cached_value: torch.Tensor | None,
    key: torch.Tensor,
    value: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``key`` and ``value`` ``(B, G, n, E)`` after the cached ones ``(B, G, t, E)``: ``(B, G, t + n, E)``."""
    check_tensor(where, "key", key, kind="float", dim=4, names="(B, G, n, E)")
    B, G, n, _ = key.shape
    check_tensor(where, "value", value, kind="float", shape=(B, G, n, None), names=f"({B}, {G}, {n}, Ev)")
    if cached_key is None or cached_value is None:
        return key, value
    fits = key.shape[:2] == cached_key.shape[:2] and key.shape[-1] == cached_key.shape[-1]
    if not fits or value.shape[-1] != cached_value.shape[-1]:
        raise ValueError(
            f"{where}: key and value must have the batch, heads and sizes of the cached ones, "
            f"{tuple(cached_key.shape)} and {tuple(cached_value.shape)}; "
            f"got {tuple(key.shape)} and {tuple(value.shape)}"
        )
    return torch.cat([cached_key, key], dim=2), torch.cat([cached_value, value], dim=2)  # (B, G, t + n, E)


@dataclass
class KVCache:
    """Keys and values a decoder layer has already computed (chapter 6).

    ``self_k``, ``self_v``: ``(B, H, t, E)`` for the ``t`` target positions decoded so far;
    ``cross_k``, ``cross_v``: ``(B, H, S, E)`` for the encoder output, computed once.

    A ``KeyValueCache``: ``append`` adds the self-attention's keys and values of new target
    positions; ``cached_keys`` and ``cached_values`` are ``self_k`` and ``self_v``,
    ``cached_length`` is ``length``, and ``nbytes`` counts the cross-attention's tensors too.
    """

    self_k: torch.Tensor | None = None
    self_v: torch.Tensor | None = None
    cross_k: torch.Tensor | None = None
    cross_v: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.self_k is None else self.self_k.shape[2]

    def append(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the self-attention's keys and values of ``L`` new target positions, ``(B, H, L, E)``
        each; returns all of them, ``(B, H, t + L, E)`` (the cache is updated in place)."""
        self.self_k, self.self_v = _appended("KVCache.append", self.self_k, self.self_v, key, value)
        return self.self_k, self.self_v

    @property
    def cached_keys(self) -> torch.Tensor | None:
        return self.self_k

    @property
    def cached_values(self) -> torch.Tensor | None:
        return self.self_v

    @property
    def cached_length(self) -> int:
        return self.length

    @property
    def nbytes(self) -> int:
        """Bytes the cache holds: the self-attention's keys and values and the cross-attention's."""
        return tensor_bytes(self.self_k, self.self_v, self.cross_k, self.cross_v)


@dataclass
class LMCache:
    """What one block keeps while a decoder-only model generates (chapter 8).

    Softmax attention: ``key``, ``value`` ``(B, G, t, E)`` for the ``t`` positions so far, growing
    by one per token. Linear attention: ``state`` ``(S (B, H, E, E), z (B, H, E))``, gated
    attention: ``(S (B, H, E, E),)``, and with a short convolution of ``K`` taps the last
    ``K - 1`` inputs ``(B, K - 1, D)`` after it; neither grows. ``length`` counts the positions seen.

    A ``KeyValueCache``: ``append`` adds the keys and values of new positions; ``cached_keys`` and
    ``cached_values`` are ``key`` and ``value``, ``cached_length`` the number of positions they
    hold (0 for linear attention, whose state holds none), ``nbytes`` counts the state too.
    (``length`` is the block's to advance: it counts the positions seen, whatever the attention.)
    """

    key: torch.Tensor | None = None
    value: torch.Tensor | None = None
    state: tuple[torch.Tensor, ...] | None = None
    length: int = 0

    @property
    def nbytes(self) -> int:
        """Bytes the cache holds."""
        return tensor_bytes(self.key, self.value, *(self.state or ()))

    def append(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the keys and values of ``N`` new positions, ``(B, G, N, E)`` each; returns all of
        them, ``(B, G, t + N, E)`` (the cache is updated in place; ``length`` is not)."""
        self.key, self.value = _appended("LMCache.append", self.key, self.value, key, value)
        return self.key, self.value

    @property
    def cached_keys(self) -> torch.Tensor | None:
        return self.key

    @property
    def cached_values(self) -> torch.Tensor | None:
        return self.value

    @property
    def cached_length(self) -> int:
        return 0 if self.key is None else self.key.shape[2]
