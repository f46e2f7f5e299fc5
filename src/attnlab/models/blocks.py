"""The modern block's parts: RMSNorm, the SwiGLU feed-forward network, and QK-norm.

Introduced in chapter 8. The pre-LN block of chapter 6 (``x + Attention(Norm(x))``, then
``x + FeedForward(Norm(x))``) is still the block of today's open-weight models; three of its
parts have changed, smallest first:

- ``RMSNorm`` (Zhang and Sennrich 2019) in place of LayerNorm: divide by the root mean square of
  the features, with no mean subtracted and no bias;
- ``SwiGLU`` (Shazeer 2020, "GLU Variants Improve Transformer") in place of the two-layer
  feed-forward network: a SiLU-gated product of two projections, then a third;
- ``QKNorm`` (Henry et al. 2020; Dehghani et al. 2023): an RMSNorm on every head's queries and
  keys before their dot product, which bounds the attention logits (OLMo 2, Gemma 3, Qwen3).

``attnlab.models.lm`` assembles them (``LMConfig(norm="rms", feedforward="swiglu",
qk_norm=True)``) and counts a block's parameters and FLOPs by formula.

Shapes: features ``(..., D)``, ``D = d_model``; feed-forward size ``F``; queries ``(B, H, L, E)``,
keys ``(B, G, S, E)`` with ``E`` the head size.
"""

from __future__ import annotations

import torch
from torch import nn

from attnlab.validation import check_bool, check_int, check_number, check_tensor

__all__ = ["QKNorm", "RMSNorm", "SwiGLU"]


class RMSNorm(nn.Module):
    """Root-mean-square normalisation ``x / sqrt(mean(x^2) + eps) * weight`` over the last dimension.

    Defined in chapter 8, after Zhang and Sennrich 2019 ("Root Mean Square Layer Normalization"):
    LayerNorm without the mean subtracted and without the bias, so one statistic and ``dim``
    parameters instead of two and ``2 dim``. Scaling a row by ``c > 0`` leaves its output
    unchanged (up to ``eps``). It computes in float32 at least (float64 stays float64), because
    the mean of squares of half-precision numbers overflows or loses its digits, and returns the
    input's dtype.

    Shapes: ``(..., dim) -> (..., dim)``; ``weight (dim,)``, initialised to ones.
    """

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.dim = check_int("RMSNorm", "dim", dim)
        self.eps = check_number("RMSNorm", "eps", eps, low=0, low_open=True)
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor("RMSNorm", "x", x, kind="float")
        if x.dim() == 0 or x.shape[-1] != self.dim:
            raise ValueError(f"RMSNorm: x must have shape (..., {self.dim}), got {tuple(x.shape)}")
        dtype = torch.promote_types(x.dtype, torch.float32)
        # listing: rmsnorm
        h = x.to(dtype)
        h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., D) / (..., 1)
        return (h * self.weight.to(dtype)).to(x.dtype)  # * (D,)
        # end listing: rmsnorm

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


class SwiGLU(nn.Module):
    """The SwiGLU feed-forward network ``W_2 (SiLU(W_1 x) * W_3 x)`` (Shazeer 2020).

    Defined in chapter 8. Where chapter 6's network applies one activation to one projection, a
    gated linear unit multiplies two projections of ``x``, one of them through an activation
    (SiLU, ``z sigmoid(z)``, is Swish with beta = 1). ``w1`` is the gate, ``w3`` the value,
    ``w2`` projects back (Llama's names). Without biases by default, as in the paper and in
    Llama, Gemma, Qwen and OLMo.

    It has three ``D x F`` matrices where the two-layer network has two: to keep the parameters
    and FLOPs of a ``4 D`` network, the paper and Llama take ``F = 2/3 * 4 D`` (Llama then rounds
    it up to a multiple of 256). ``hidden`` is used as given.

    Shapes: ``(..., d_model) -> (..., d_model)``; ``w1, w3: D -> F``, ``w2: F -> D``.
    """

    def __init__(self, d_model: int, hidden: int, bias: bool = False, *, dropout: float = 0.0):
        super().__init__()
        check_int("SwiGLU", "d_model", d_model)
        check_int("SwiGLU", "hidden", hidden)
        check_bool("SwiGLU", "bias", bias)
        check_number("SwiGLU", "dropout", dropout, low=0, high=1, high_open=True)
        self.w1 = nn.Linear(d_model, hidden, bias=bias)  # the gate
        self.w3 = nn.Linear(d_model, hidden, bias=bias)  # the value
        self.w2 = nn.Linear(hidden, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor("SwiGLU", "x", x, kind="float")
        if x.dim() == 0 or x.shape[-1] != self.w1.in_features:
            raise ValueError(f"SwiGLU: x must have shape (..., {self.w1.in_features}), got {tuple(x.shape)}")
        # listing: swiglu
        gated = nn.functional.silu(self.w1(x)) * self.w3(x)  # (..., D) -> (..., F)
        return self.w2(self.dropout(gated))  # (..., F) -> (..., D)
        # end listing: swiglu


class QKNorm(nn.Module):
    """RMSNorm on each head's queries and keys, before the rotary positions (QK-norm).

    Defined in chapter 8. Henry et al. 2020 normalise queries and keys so that a score is a
    scaled cosine. Dehghani et al. 2023 (ViT-22B) add it because the attention logits of their
    large model grew until the weights were almost one-hot and training diverged; Wortsman et
    al. 2023 (arXiv:2309.14322) find the same in small models trained at high learning rates.
    After it, every head's query has norm ``sqrt(E)`` before its weight, and so has every key:
    ``|q . k| <= E * max|w_q| * max|w_k|``, whatever the projections, and scaling the query or key
    projection (weight and bias) by ``c > 0`` changes nothing (up to ``eps``).

    Followed here: Gemma 3 and Qwen3, one RMSNorm of size ``E`` for the queries and one for the
    keys, shared by all heads, applied after the split into heads and before the rotary
    embedding (Hugging Face transformers' ``Gemma3Attention`` and ``Qwen3Attention``). OLMo 2
    normalises the whole projection instead, all heads together (``RMSNorm(H E)`` on
    ``q_proj(x)``, ``Olmo2Attention``), also before the rotation.

    Shapes: ``forward(q (B, H, L, E), k (B, G, S, E)) -> (q, k)`` of the same shapes;
    ``q_norm.weight, k_norm.weight (E,)``.
    """

    def __init__(self, head_dim: int, eps: float = 1e-6):
        super().__init__()
        self.q_norm = RMSNorm(check_int("QKNorm", "head_dim", head_dim), eps)
        self.k_norm = RMSNorm(head_dim, eps)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        E = self.q_norm.dim
        check_tensor("QKNorm", "q", q, kind="float", shape=(None, None, None, E), names=f"(B, H, L, {E})")
        check_tensor("QKNorm", "k", k, kind="float", shape=(None, None, None, E), names=f"(B, G, S, {E})")
        # listing: qknorm
        return self.q_norm(q), self.k_norm(k)  # each head's E features, one weight for all heads
        # end listing: qknorm
