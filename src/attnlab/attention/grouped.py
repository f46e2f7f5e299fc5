"""Keys and values shared across heads: multi-query and grouped-query attention.

Introduced in chapter 8. While a decoder generates, it keeps every earlier token's keys and
values (the KV cache of chapter 6); with ``H`` heads of size ``E`` that is ``2 H E`` numbers per
token and layer, and reading them back dominates the time of a decoding step. Multi-query
attention (Shazeer 2019) gives all the heads one key head and one value head; grouped-query
attention (Ainslie et al. 2023) gives each of ``G`` groups of ``H / G`` query heads one key and
one value head. ``G = H`` is multi-head attention, ``G = 1`` multi-query attention; the cache
shrinks by ``H / G``.

Shapes: query ``(B, H, L, E)``, key ``(B, G, S, E)``, value ``(B, G, S, Ev)``; query head ``h``
reads key and value head ``h // (H / G)``.
"""

from __future__ import annotations

import torch
from torch import nn

from attnlab.attention.core import BACKENDS, scaled_dot_product_attention
from attnlab.validation import check_choice, check_dtype, check_int, check_ints, check_tensor

__all__ = ["GroupedQueryAttention", "grouped_query_attention", "kv_cache_bytes_per_token", "repeat_kv"]


def repeat_kv(x: torch.Tensor, repeats: int) -> torch.Tensor:
    """Each key or value head ``repeats`` times in a row: ``(B, G, S, E) -> (B, G * repeats, S, E)``.

    Defined in chapter 8: head ``g`` becomes heads ``g * repeats, ..., g * repeats + repeats - 1``,
    the query heads of its group. A view (``expand``) until the final reshape copies it.
    """
    check_tensor("repeat_kv", "x", x, dim=4, names="(B, G, S, E)")
    check_int("repeat_kv", "repeats", repeats)
    if repeats == 1:
        return x
    B, G, S, E = x.shape
    return x[:, :, None].expand(B, G, repeats, S, E).reshape(B, G * repeats, S, E)  # (B, G, r, S, E) -> (B, G r, S, E)


def grouped_query_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    *,
    scale: float | None = None,
    backend: str = "naive",
) -> torch.Tensor:
    """Scaled dot-product attention where ``H`` query heads share ``G`` key and value heads.

    Defined in chapter 8. ``query (B, H, L, E)``, ``key (B, G, S, E)``, ``value (B, G, S, Ev)``
    with ``H`` a multiple of ``G``; the other arguments are ``scaled_dot_product_attention``'s.
    Returns ``(B, H, L, Ev)``.
    """
    name = "grouped_query_attention"
    check_tensor(name, "query", query, kind="float", dim=4, names="(B, H, L, E)")
    check_tensor(name, "key", key, kind="float", dim=4, names="(B, G, S, E)")
    check_tensor(name, "value", value, kind="float", dim=4, names="(B, G, S, Ev)")
    H, G = query.shape[1], key.shape[1]
    if value.shape[1] != G or H % G:
        raise ValueError(
            f"{name}: the query's heads H must be a multiple of the key's and value's heads G (the same for both); "
            f"got query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    check_choice(name, "backend", backend, BACKENDS)
    # listing: gqa
    key, value = repeat_kv(key, H // G), repeat_kv(value, H // G)  # (B, G, S, E) -> (B, H, S, E)
    return scaled_dot_product_attention(query, key, value, attn_mask, is_causal=is_causal, scale=scale, backend=backend)
    # end listing: gqa


def kv_cache_bytes_per_token(
    num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype = torch.float32
) -> int:
    """Bytes of keys and values a decoder keeps per generated token: ``2 * layers * G * E * size``.

    Defined in chapter 8, where it is checked against the caches' own tensors.
    """
    check_ints("kv_cache_bytes_per_token", num_layers=num_layers, num_kv_heads=num_kv_heads, head_dim=head_dim)
    check_dtype("kv_cache_bytes_per_token", "dtype", dtype)
    return 2 * num_layers * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


class GroupedQueryAttention(nn.Module):
    """Self-attention with ``num_heads`` query heads and ``num_kv_heads`` key and value heads (chapter 8).

    ``num_kv_heads = num_heads`` is multi-head attention (with the projections of
    ``MultiHeadAttention``, so that its weights can be copied in), ``num_kv_heads = 1``
    multi-query attention. The key and value projections are ``num_heads / num_kv_heads`` times
    smaller than the query's.

    Shapes: ``x (B, N, embed_dim)``; ``forward`` returns ``(B, N, embed_dim)``.
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int, *, bias: bool = True, backend: str = "fast"):
        super().__init__()
        name = "GroupedQueryAttention"
        check_ints(name, embed_dim=embed_dim, num_heads=num_heads, num_kv_heads=num_kv_heads)
        if embed_dim % num_heads or num_heads % num_kv_heads:
            raise ValueError(
                f"{name}: embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads}), and num_heads by "
                f"num_kv_heads ({num_kv_heads})"
            )
        check_choice(name, "backend", backend, BACKENDS)
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, embed_dim // num_heads
        self.backend = backend
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, num_kv_heads * self.head_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x (B, N, D)`` -> queries ``(B, H, N, E)``, keys and values ``(B, G, N, E)``."""
        check_tensor(
            "GroupedQueryAttention",
            "x",
            x,
            kind="float",
            shape=(None, None, self.q_proj.in_features),
            names=f"(B, N, {self.q_proj.in_features})",
        )
        B, N, _ = x.shape
        q = self.q_proj(x).view(B, N, self.num_heads, self.head_dim).transpose(1, 2)  # (B, N, H, E) -> (B, H, N, E)
        k = self.k_proj(x).view(B, N, self.num_kv_heads, self.head_dim).transpose(1, 2)  # (B, G, N, E)
        v = self.v_proj(x).view(B, N, self.num_kv_heads, self.head_dim).transpose(1, 2)  # (B, G, N, E)
        return q, k, v

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        q, k, v = self.project(x)
        out = grouped_query_attention(q, k, v, attn_mask, is_causal, backend=self.backend)  # (B, H, N, E)
        B, _, N, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, N, -1))  # (B, H, N, E) -> (B, N, H E)
