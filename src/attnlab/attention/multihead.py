"""Multi-head attention: several attention layers on learned projections, run side by side.

Introduced in chapter 5 (self-attention). "多头": project the queries, keys and values ``H`` times
into smaller subspaces, attend in each, concatenate, project back. Implemented, as in the
Transformer, with one projection of size ``embed_dim`` that is split into ``H`` heads of size
``E = embed_dim / H`` by a view and a transpose.

Masks follow ``scaled_dot_product_attention``: a boolean ``attn_mask`` is ``True`` where a key
takes part (NOT ``nn.MultiheadAttention``'s convention, where ``True`` forbids); a float mask is
added. ``key_padding_mask`` keeps PyTorch's meaning (``True`` = padding, ignored) and is converted
at the boundary by ``from_key_padding_mask``.

Shapes: query ``(B, L, embed_dim)``, key ``(B, S, kdim)``, value ``(B, S, vdim)``, output
``(B, L, embed_dim)``, weights ``(B, H, L, S)`` (or ``(B, L, S)`` averaged over heads).
"""

from __future__ import annotations

import torch
from torch import nn

from attnlab.attention.core import BACKENDS, attention, scaled_dot_product_attention
from attnlab.attention.masking import causal_mask, from_key_padding_mask, to_float_mask
from attnlab.validation import check_choice, check_int, check_ints, check_number, check_tensor

__all__ = ["MultiHeadAttention", "copy_from_torch"]


class MultiHeadAttention(nn.Module):
    """Multi-head attention with returned (never stored) weights (defined in chapter 5).

    Args:
        embed_dim: model size; must be divisible by ``num_heads``.
        num_heads: number of heads ``H``; each has size ``E = embed_dim // num_heads``.
        dropout: dropout on the attention weights during training.
        bias: biases in the four projections.
        kdim, vdim: sizes of keys and values (``embed_dim`` when ``None``), for cross-attention.
        batch_first: must be True (tensors are ``(B, L, D)`` throughout the book).
        backend: ``"fast"`` (PyTorch's fused kernel) or ``"naive"`` (the formula); weights are
            computed with the three-stage ``attention`` whenever they are asked for.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = True,
        backend: str = "fast",
    ):
        super().__init__()
        check_ints("MultiHeadAttention", embed_dim=embed_dim, num_heads=num_heads)
        check_int("MultiHeadAttention", "kdim", kdim, none=True)
        check_int("MultiHeadAttention", "vdim", vdim, none=True)
        if embed_dim % num_heads:
            raise ValueError(
                f"MultiHeadAttention: embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})"
            )
        if batch_first is not True:
            raise ValueError("MultiHeadAttention: only batch_first=True is supported; pass tensors as (B, L, D)")
        check_choice("MultiHeadAttention", "backend", backend, BACKENDS)
        check_number("MultiHeadAttention", "dropout", dropout, low=0, high=1, high_open=True)
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self.dropout, self.backend = dropout, backend
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(self.kdim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(self.vdim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        B, N, _ = x.shape
        # (B, N, H*E) -> (B, N, H, E) -> (B, H, N, E)
        return x.view(B, N, self.num_heads, self.head_dim).transpose(1, 2)

    def _check(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        for name, t, size in (("query", query, self.embed_dim), ("key", key, self.kdim), ("value", value, self.vdim)):
            check_tensor("MultiHeadAttention", name, t, kind="float", shape=(None, None, size), names=f"(B, N, {size})")
        if not (query.shape[0] == key.shape[0] == value.shape[0]) or key.shape[1] != value.shape[1]:
            raise ValueError(
                "MultiHeadAttention: query, key and value must share B, and key and value must share S; got "
                f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
            )

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        need_weights: bool = False,
        attn_mask: torch.Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``query`` to ``key``/``value``; returns ``(output, weights or None)``.

        ``attn_mask``: boolean (True = takes part) or float, broadcastable to ``(B, H, L, S)``
        (an ``(L, S)`` mask applies to every example and head). ``key_padding_mask``: ``(B, S)``,
        True = padding. ``is_causal``: add the causal mask (top-left aligned when L != S).
        """
        self._check(query, key, value)
        L, S = query.shape[1], key.shape[1]
        mask = attn_mask
        if is_causal:
            causal = causal_mask(L, S, device=query.device)
            mask = causal if mask is None else _combine(mask, causal)
        if key_padding_mask is not None:
            check_tensor(
                "MultiHeadAttention",
                "key_padding_mask",
                key_padding_mask,
                kind="bool",
                shape=(key.shape[0], S),
                note="True = padding",
            )
            padding = from_key_padding_mask(key_padding_mask)  # (B, S), True = ignore -> (B, 1, 1, S)
            mask = padding if mask is None else _combine(mask, padding)
        # listing: project
        q = self.project_q(query)  # (B, L, D) -> (B, H, L, E)
        k, v = self.project_kv(key, value)  # (B, H, S, E) each
        return self.attend(q, k, v, mask, need_weights=need_weights, average_attn_weights=average_attn_weights)
        # end listing: project

    def project_q(self, query: torch.Tensor) -> torch.Tensor:
        """Queries projected and split into heads: ``(B, L, D) -> (B, H, L, E)``.

        With ``project_kv`` and ``attend``, the three steps of ``forward``, public so that a decoder
        layer can put a cache between them (chapter 6).
        """
        # listing: project-q
        return self._split(self.q_proj(query))  # (B, L, D) -> (B, H, L, E)
        # end listing: project-q

    def project_kv(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values projected and split into heads: ``(B, S, kdim/vdim) -> (B, H, S, E)``.

        Separate from ``forward`` so that a decoder can cache them (chapter 6): the keys and
        values of earlier positions do not change when a new token arrives.
        """
        # listing: project-kv
        k = self._split(self.k_proj(key))  # (B, S, D) -> (B, H, S, E)
        v = self._split(self.v_proj(value))  # (B, S, D) -> (B, H, S, E)
        return k, v
        # end listing: project-kv

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
        average_attn_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention over projected heads ``q (B, H, L, E)``, ``k, v (B, H, S, E)``, merged and projected.

        ``mask`` follows ``scaled_dot_product_attention`` (True = takes part). Returns
        ``(output (B, L, D), weights or None)``.
        """
        B, _, L, _ = q.shape
        dropout = self.dropout if self.training else 0.0
        weights = None
        if need_weights:  # the three stages, keeping the weights (returned before dropout)
            out, weights = attention(q, k, v, mask=mask)  # (B, H, L, E), (B, H, L, S)
            if dropout:
                out = torch.dropout(weights, dropout, train=True) @ v
            if average_attn_weights:
                weights = weights.mean(dim=1)  # (B, H, L, S) -> (B, L, S)
        else:
            out = scaled_dot_product_attention(q, k, v, mask, dropout, backend=self.backend)  # (B, H, L, E)
        # listing: merge
        out = out.transpose(1, 2).reshape(B, L, self.embed_dim)  # (B, H, L, E) -> (B, L, H, E) -> (B, L, D)
        return self.out_proj(out), weights
        # end listing: merge


def _combine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Both masks must allow a key: boolean AND, or the sum of the additive forms."""
    if a.dtype == torch.bool and b.dtype == torch.bool:
        return a & b
    dtype = a.dtype if a.dtype != torch.bool else b.dtype

    def additive(m: torch.Tensor) -> torch.Tensor:
        return to_float_mask(m, dtype) if m.dtype == torch.bool else m

    return additive(a) + additive(b)


@torch.no_grad()
def copy_from_torch(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> MultiHeadAttention:
    """Copy the weights of a ``torch.nn.MultiheadAttention`` into ``ours`` (defined in chapter 5).

    PyTorch keeps the three input projections in one ``in_proj_weight`` of shape
    ``(3 * D, D)`` (or separate ``q/k/v_proj_weight`` when ``kdim``/``vdim`` differ); this splits
    them into ``q_proj``, ``k_proj`` and ``v_proj``. After the copy the two modules compute the same
    function (with the boolean ``attn_mask`` inverted: PyTorch's True forbids, ours allows).

    Raises:
        TypeError: the arguments are not the two module types.
        ValueError: sizes, heads or the presence of biases differ.
    """
    if not isinstance(ours, MultiHeadAttention) or not isinstance(theirs, nn.MultiheadAttention):
        raise TypeError("copy_from_torch: expected (attnlab MultiHeadAttention, torch.nn.MultiheadAttention)")
    mine = (ours.embed_dim, ours.num_heads, ours.kdim, ours.vdim, ours.q_proj.bias is not None)
    other = (theirs.embed_dim, theirs.num_heads, theirs.kdim, theirs.vdim, theirs.in_proj_bias is not None)
    if mine != other:
        raise ValueError(f"copy_from_torch: (embed_dim, num_heads, kdim, vdim, bias) differ: {mine} vs {other}")
    D = theirs.embed_dim
    if theirs.in_proj_weight is not None:
        w_q, w_k, w_v = theirs.in_proj_weight.split(D)  # (3D, D) -> 3 x (D, D)
    else:
        w_q, w_k, w_v = theirs.q_proj_weight, theirs.k_proj_weight, theirs.v_proj_weight
    for linear, w in ((ours.q_proj, w_q), (ours.k_proj, w_k), (ours.v_proj, w_v)):
        linear.weight.copy_(w)
    if theirs.in_proj_bias is not None:
        for linear, b in zip((ours.q_proj, ours.k_proj, ours.v_proj), theirs.in_proj_bias.split(D), strict=True):
            linear.bias.copy_(b)
        ours.out_proj.bias.copy_(theirs.out_proj.bias)
    ours.out_proj.weight.copy_(theirs.out_proj.weight)
    return ours
