"""Multi-head latent attention (MLA): every head's keys and values drawn from one small latent.

Introduced in chapter 9, after DeepSeek-AI (2024), "DeepSeek-V2", arXiv:2405.04434, Sections
2.1.2 (low-rank key-value joint compression) and 2.1.3 (decoupled rotary position embedding).

While a decoder generates, it caches per token and layer ``2 H E`` numbers with multi-head
attention (a key and a value for each of ``H`` heads of size ``E``) and ``2 G E`` with
grouped-query attention (``attnlab.attention.grouped``). MLA caches ``C + R``:

- a latent ``c = W_DKV h`` of ``C`` numbers, from which each head decompresses its content key
  ``k_C = W_UK c`` and its value ``v = W_UV c``;
- a rotary key ``k_R = RoPE(W_KR h)`` of ``R`` numbers, computed from ``h`` and shared by every
  head.

Each head's query is a content part ``q_C`` of ``E`` numbers and a rotary part
``q_R = RoPE(W_QR h)`` of ``R``; the score is ``(q_C . k_C + q_R . k_R) / sqrt(E + R)``. Queries
may come from a latent of their own, ``c_Q = W_DQ h`` (it saves parameters and activations, not
cache). DeepSeek-V2 has ``H = 128``, ``E = 128``, ``C = 4 E = 512`` and ``R = E / 2 = 64``: 576
numbers per token and layer where multi-head attention would cache 32,768, as much as
grouped-query attention with 2.25 groups.

Why the rotary key is separate. The content score is ``q_C . (W_UK c) = (W_UK^T q_C) . c``:
``W_UK`` can be applied to the query instead of to every cached latent (weight absorption), and
``W_UV`` likewise after the weighted sum of the latents, so that decoding never decompresses a
key or a value. Rotary embeddings put a rotation that depends on the key's position between
``q_C`` and ``W_UK``; the absorbed matrix would then differ from key to key, and every cached
key would have to be decompressed at every step. So the latent carries no position, and
positions come from the ``R`` extra features, which are rotated and cached as they are.

Absorbed, MLA is multi-query attention with one key head ``[c; k_R]`` (``C + R`` features), one
value head ``c`` and ``H`` query heads ``[W_UK^T q_C; q_R]``, scaled by ``1 / sqrt(E + R)``
(the scale of the heads before absorption). Each score then costs ``C + R`` products instead of
``E + R``, but no key or value is formed: it pays when the keys far outnumber the queries, as
when decoding one token.

DeepSeek's released code also normalises the two latents (RMSNorm); Section 2.1 does not, and
neither does this module.

Shapes: ``x (B, N, D)``; latent ``c (B, 1, S, C)`` and rotary key ``k_R (B, 1, S, R)``, one
head for all; queries ``q_C (B, H, N, E)``, ``q_R (B, H, N, R)``; content keys and values
``(B, H, S, E)``; output ``(B, N, D)``. ``S`` is ``N`` plus the positions already cached.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnlab.attention.cache import KeyValueCache
from attnlab.attention.core import scaled_dot_product_attention
from attnlab.attention.masking import causal_mask, masked_softmax
from attnlab.attention.positional import rotary_embedding
from attnlab.validation import check_bool, check_dtype, check_int, check_ints, check_tensor

__all__ = ["MultiHeadLatentAttention", "latent_cache_bytes_per_token"]


def latent_cache_bytes_per_token(
    num_layers: int, latent_dim: int, rope_dim: int, dtype: torch.dtype = torch.float32
) -> int:
    """Bytes multi-head latent attention caches per generated token: ``layers * (C + R) * size``.

    Defined in chapter 9, beside ``kv_cache_bytes_per_token`` (``2 * layers * G * E * size``):
    the latent ``c`` (``latent_dim = C``) and the rotary key ``k_R`` (``rope_dim = R``) of every
    layer, whatever the number of heads.
    """
    name = "latent_cache_bytes_per_token"
    check_ints(name, num_layers=num_layers, latent_dim=latent_dim, rope_dim=rope_dim)
    check_dtype(name, "dtype", dtype)
    return num_layers * (latent_dim + rope_dim) * torch.empty((), dtype=dtype).element_size()


class MultiHeadLatentAttention(nn.Module):
    """Self-attention whose keys and values are decompressed from a cached latent (chapter 9).

    DeepSeek-V2's attention (see the module's docstring for the equations and the notation).

    Args:
        embed_dim: ``D``, the size of ``x``'s vectors and of the output's.
        num_heads: ``H``.
        latent_dim: ``C``, the size of the key-value latent ``c``.
        rope_dim: ``R``, the size of the rotary parts ``q_R`` and ``k_R`` (even).
        head_dim: ``E``, the size of each head's content query, key and value; ``D / H`` when
            ``None``.
        query_latent_dim: the size of the query latent ``c_Q``; ``None`` projects the queries
            from ``x`` directly.
        bias: biases on every projection but ``W_UK`` and ``W_UV``, which never have one, so
            that absorbing them stays exact.

    Parameters, named after the paper's matrices: ``kv_down`` (``W_DKV``), ``key_up``
    (``W_UK``), ``value_up`` (``W_UV``), ``key_rope`` (``W_KR``), ``query_down`` (``W_DQ``,
    ``None`` without a query latent), ``query_up`` (``W_UQ``, or ``W_Q``), ``query_rope``
    (``W_QR``) and ``out_proj`` (``W_O``).

    Shapes: ``forward(x (B, N, D)) -> (B, N, D)``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        latent_dim: int,
        rope_dim: int,
        head_dim: int | None = None,
        query_latent_dim: int | None = None,
        bias: bool = False,
    ):
        super().__init__()
        name = "MultiHeadLatentAttention"
        check_ints(name, embed_dim=embed_dim, num_heads=num_heads, latent_dim=latent_dim, rope_dim=rope_dim)
        check_int(name, "head_dim", head_dim, none=True)
        check_int(name, "query_latent_dim", query_latent_dim, none=True)
        check_bool(name, "bias", bias)
        if rope_dim % 2:
            raise ValueError(
                f"{name}: rope_dim must be even (rotary embeddings turn pairs of features), got {rope_dim}"
            )
        if head_dim is None:
            if embed_dim % num_heads:
                raise ValueError(
                    f"{name}: embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads}) "
                    "when head_dim is None"
                )
            head_dim = embed_dim // num_heads
        H, E, C, R = num_heads, head_dim, latent_dim, rope_dim
        self.embed_dim, self.num_heads, self.head_dim, self.latent_dim, self.rope_dim = embed_dim, H, E, C, R
        self.scale = 1 / math.sqrt(E + R)  # the score's, absorbed or not: a head's query is E + R wide
        self.kv_down = nn.Linear(embed_dim, C, bias=bias)  # W_DKV: h -> c
        self.key_up = nn.Linear(C, H * E, bias=False)  # W_UK: c -> k_C of every head
        self.value_up = nn.Linear(C, H * E, bias=False)  # W_UV: c -> v of every head
        self.key_rope = nn.Linear(embed_dim, R, bias=bias)  # W_KR: h -> k_R, one for all heads
        self.query_down = None if query_latent_dim is None else nn.Linear(embed_dim, query_latent_dim, bias=bias)
        query_in = embed_dim if query_latent_dim is None else query_latent_dim
        self.query_up = nn.Linear(query_in, H * E, bias=bias)  # W_UQ (W_Q without a query latent)
        self.query_rope = nn.Linear(query_in, H * R, bias=bias)  # W_QR
        self.out_proj = nn.Linear(H * E, embed_dim, bias=bias)  # W_O

    def queries(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x (B, N, D)`` at ``positions (N,)`` -> ``q_C (B, H, N, E)`` and rotated ``q_R (B, H, N, R)``."""
        B, N, _ = x.shape
        h = x if self.query_down is None else self.query_down(x)  # (B, N, D) or the query latent (B, N, C_Q)
        q_content = self.query_up(h).view(B, N, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, N, E)
        q_rope = self.query_rope(h).view(B, N, self.num_heads, self.rope_dim).transpose(1, 2)  # (B, H, N, R)
        return q_content, rotary_embedding(q_rope, positions)

    def forward(
        self,
        x: torch.Tensor,
        start: int = 0,
        cache: KeyValueCache | None = None,
        *,
        causal: bool = True,
        absorb: bool = False,
    ) -> torch.Tensor:
        """Attend from ``x (B, N, D)``, at positions ``start, ..., start + N - 1``; returns ``(B, N, D)``.

        Args:
            x: the inputs ``h`` of ``N`` new positions.
            start: the position of ``x``'s first row (with a cache, usually the number of
                positions it holds).
            cache: any ``KeyValueCache`` (e.g. ``attnlab.models.LMCache``), or ``None``. It is
                given one key and value head: ``append(key=k_R (B, 1, N, R), value=c (B, 1, N, C))``,
                and the queries attend to every ``(k_R, c)`` it returns. So it holds only what MLA
                caches, and its ``nbytes`` is MLA's cache.
            causal: each query sees only the keys not after it (the causal mask aligned at the
                bottom right, when the cache holds earlier positions).
            absorb: fold ``W_UK`` into the queries and ``W_UV`` into the output, and attend over
                the latents: no key or value is decompressed. Equal to ``absorb=False``.
        """
        name = "MultiHeadLatentAttention"
        D = self.embed_dim
        check_tensor(name, "x", x, kind="float", shape=(None, None, D), names=f"(B, N, {D})")
        if x.shape[1] == 0:
            raise ValueError(f"{name}: x must hold at least one position, got shape {tuple(x.shape)}")
        check_int(name, "start", start, low=0)
        if cache is not None and not isinstance(cache, KeyValueCache):
            raise TypeError(
                f"{name}: cache must be a KeyValueCache (e.g. attnlab.models.LMCache) or None, "
                f"got {type(cache).__name__}"
            )
        check_bool(name, "causal", causal)
        check_bool(name, "absorb", absorb)
        B, N, _ = x.shape
        H, E, C = self.num_heads, self.head_dim, self.latent_dim
        positions = torch.arange(start, start + N, device=x.device)  # (N,)
        # listing: mla
        latent = self.kv_down(x)[:, None]  # c: (B, N, C) -> (B, 1, N, C)
        k_rope = rotary_embedding(self.key_rope(x)[:, None], positions)  # k_R: (B, 1, N, R), one head for all
        if cache is not None:  # the cache holds (k_R, c) of each earlier position, nothing else
            k_rope, latent = cache.append(key=k_rope, value=latent)  # (B, 1, S, R), (B, 1, S, C)
        S = latent.shape[2]
        q_content, q_rope = self.queries(x, positions)  # (B, H, N, E), (B, H, N, R)
        mask = causal_mask(N, S, align="bottom-right", device=x.device) if causal else None  # (N, S)
        # end listing: mla
        if absorb:
            # listing: absorb
            w_uk = self.key_up.weight.view(H, E, C)  # head h's W_UK: (E, C)
            w_uv = self.value_up.weight.view(H, E, C)  # head h's W_UV: (E, C)
            q_latent = torch.einsum("bhne,hec->bhnc", q_content, w_uk)  # W_UK^T q_C: (B, H, N, C)
            scores = q_latent @ latent.transpose(-2, -1) + q_rope @ k_rope.transpose(-2, -1)  # (B, H, N, S)
            wide = torch.promote_types(scores.dtype, torch.float32)  # the softmax in float32 at least
            weights = masked_softmax(scores.to(wide) * self.scale, mask).to(x.dtype)  # (B, H, N, S)
            out = torch.einsum("bhnc,hec->bhne", weights @ latent, w_uv)  # W_UV (sum_j w_j c_j): (B, H, N, E)
            # end listing: absorb
        else:
            # listing: decompress
            k_content = self.key_up(latent[:, 0]).view(B, S, H, E).transpose(1, 2)  # (B, S, H E) -> (B, H, S, E)
            value = self.value_up(latent[:, 0]).view(B, S, H, E).transpose(1, 2)  # (B, H, S, E)
            query = torch.cat([q_content, q_rope], dim=-1)  # (B, H, N, E + R)
            key = torch.cat([k_content, k_rope.expand(B, H, S, -1)], dim=-1)  # (B, H, S, E + R)
            out = scaled_dot_product_attention(query, key, value, mask, scale=self.scale, backend="fast")
            # end listing: decompress
        return self.out_proj(out.transpose(1, 2).reshape(B, N, H * E))  # (B, H, N, E) -> (B, N, H E) -> (B, N, D)
