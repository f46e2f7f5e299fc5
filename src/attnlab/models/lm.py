"""One Transformer block, three models: encoder-only, decoder-only, and (chapter 6) encoder-decoder.

Introduced in chapter 8. BERT (Devlin et al. 2019) is a stack of encoder blocks trained to fill
in masked tokens, seeing both sides; GPT (Radford et al. 2018) is a stack of the same blocks
with a causal mask, trained to predict the next token. ``TransformerLM`` is both: ``causal``
chooses the mask, and the trainers in ``attnlab.train`` choose the objective.

Its block is the pre-LN block of chapter 6 (``x + Attention(LayerNorm(x))``, then
``x + FeedForward(LayerNorm(x))``) with the attention of today's models, each choice a field
of ``LMConfig``:

- ``positions``: ``"sinusoidal"`` or ``"learned"`` vectors added to the tokens (chapter 5),
  ``"rope"`` rotating queries and keys, ``"alibi"`` biasing the scores (chapter 8), or
  ``"none"``; ``rope_scaling``, a ``RopeScaling`` that stretches the rotary frequencies to run
  past the trained length (chapter 8);
- ``num_kv_heads``: grouped-query attention (``num_heads``: multi-head; 1: multi-query);
- ``attention``: ``"softmax"``, ``"linear"`` (Katharopoulos et al. 2020), ``"latent"``
  (multi-head latent attention, DeepSeek-V2: ``latent_dim`` and ``rope_dim``, chapter 9),
  ``"gated"`` (``GatedLinearAttention`` with ``gate``, chapter "Beyond softmax") or
  ``"sparse"`` (``block_select_attention``: each query's ``top_k`` blocks of ``block_size``
  keys, MoBA's way, chapter "Beyond softmax"), in every layer or one per layer (a hybrid: a few
  softmax layers among gated ones);
- ``window``: sliding-window attention in every layer (an int) or in some (one entry per layer,
  ``None`` for a global one: Gemma 2 and 3 interleave local and global layers), and ``sinks``,
  the first positions a window always keeps (chapter 9);
- the modern block's parts (``attnlab.models.blocks``): ``norm="rms"`` (RMSNorm in place of
  LayerNorm), ``feedforward="swiglu"`` (SwiGLU in place of the GELU network) and ``qk_norm``
  (RMSNorm on each head's queries and keys).

``block_parameters`` and ``block_flops`` count a block's parameters and FLOPs by formula.

A decoder-only model generates (``attnlab.models.generation``) with a cache per block
(``new_caches``): ``LMCache`` holds the keys and values of every earlier position for softmax
attention, the constant-size state ``(S, z)`` for linear attention, ``(S,)`` for gated; a windowed
layer's ``SinkKVCache`` holds its window and sinks only. Any ``KeyValueCache`` can take a softmax
layer's place (chapter 9 passes paged ones).

Shapes: tokens ``(B, N)``; logits ``(B, N, V)``; ``D = d_model``, ``H`` query heads, ``G`` key and
value heads of size ``E = D / H``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from attnlab.attention.cache import KeyValueCache
from attnlab.attention.gated import GATES, GatedLinearAttention
from attnlab.attention.grouped import GroupedQueryAttention, grouped_query_attention, repeat_kv
from attnlab.attention.latent import MultiHeadLatentAttention
from attnlab.attention.linear import linear_attention, linear_attention_recurrent
from attnlab.attention.local import SinkKVCache, sliding_window_mask
from attnlab.attention.positional import RopeScaling, alibi_slopes, rotary_embedding, sinusoidal_encoding
from attnlab.attention.sparse import block_select_attention
from attnlab.models.blocks import QKNorm, RMSNorm, SwiGLU
from attnlab.models.caches import LMCache
from attnlab.models.position_wise import FeedForward
from attnlab.validation import check_bool, check_choice, check_instance, check_int, check_number, check_tensor, describe

__all__ = [
    "ATTENTION_KINDS",
    "FEEDFORWARD_KINDS",
    "NORM_KINDS",
    "POSITION_KINDS",
    "LMBlock",
    "LMCache",
    "LMConfig",
    "TransformerLM",
    "block_flops",
    "block_parameters",
]

POSITION_KINDS = ("none", "sinusoidal", "learned", "rope", "alibi")
ATTENTION_KINDS = ("softmax", "linear", "latent", "gated", "sparse")
RECURRENT_KINDS = ("linear", "gated")  # a state of fixed size, no keys to cache
NORM_KINDS = ("layer", "rms")
FEEDFORWARD_KINDS = ("gelu", "swiglu")


@dataclass(frozen=True)
class LMConfig:
    """Sizes and choices of a ``TransformerLM`` (defined in chapter 8).

    ``max_len`` bounds the positions of the ``"sinusoidal"`` and ``"learned"`` tables (a
    learned vector exists for each of them, but only those of the positions seen in training
    are ever trained); rotary and ALiBi positions have no table and no bound.
    ``num_kv_heads=None`` means ``num_heads`` (multi-head attention). ``window``: ``None`` (every
    layer global), an int (every layer sees its ``window`` previous positions and its own), or a
    tuple with an int or ``None`` per layer; ``sinks``: the first positions every windowed layer
    also sees (chapter 9). ``latent_dim`` and ``rope_dim``: the sizes of the latent and of the
    decoupled rotary key of ``attention="latent"`` (``MultiHeadLatentAttention``), which brings
    its own rotary positions: it needs ``positions="rope"``.

    ``attention``: a kind for every layer, or a tuple with a kind per layer. Rotary positions
    rotate the queries and keys of softmax layers only: linear and gated layers take no
    rotation (rotated before linear attention's feature map, a score would depend on more than
    the offset; a gated layer's decay already tells near from far). ``gate``: the gate of the
    ``"gated"`` layers (``GatedLinearAttention``: ``"scalar"``, Mamba-2's; ``"vector"``, GLA's;
    ``"fixed"``, RetNet's), which ignore ``num_kv_heads`` and ``qk_norm`` (they normalise their
    outputs instead) and keep no bias. ``conv_size``: the short convolution of the gated layers
    (``GatedLinearAttention``'s; 0, the default: none).

    The modern block (``attnlab.models.blocks``): ``norm`` is ``"layer"`` (LayerNorm) or
    ``"rms"`` (RMSNorm), in both sub-layers and after the last block. ``feedforward`` is
    ``"gelu"`` (``FeedForward``, two biased layers) or ``"swiglu"`` (``SwiGLU``, three layers
    without biases); SwiGLU's hidden size is ``dim_feedforward`` as given, so at equal
    ``dim_feedforward`` it has 1.5 times the network's weights (Shazeer 2020 and Llama take
    2/3 of ``4 d_model`` to keep them equal). ``qk_norm`` puts an RMSNorm on each head's queries
    and keys before the rotary positions (``QKNorm``); with linear attention it normalises what
    the feature map receives; latent attention has no per-head key before its up-projection to
    normalise here, and refuses it. ``block_size`` and ``top_k``: the blocks of keys and how many
    of them each query of a ``"sparse"`` layer keeps (its own block among them); a sparse layer
    takes rotary positions and QK-norm as a softmax layer does, and has no cache (it selects
    among all keys at once: it trains and scores, and does not generate). The defaults build the
    models of the earlier chapters, parameter for parameter.

    ``rope_scaling``: ``None`` (plain rotary positions), or a ``RopeScaling`` for a model with
    ``positions="rope"`` and softmax attention, to run it on longer sequences than it was
    trained on: ``dataclasses.replace(config, rope_scaling=RopeScaling("yarn", 4,
    original_length=n))`` and the trained weights (``load_state_dict``: the scaling adds no
    parameter). Its frequencies rotate the queries and keys; YaRN's temperature multiplies the
    softmax's scale by ``attention_factor ** 2``.
    """

    vocab_size: int
    d_model: int = 64
    num_heads: int = 4
    num_kv_heads: int | None = None
    num_layers: int = 2
    dim_feedforward: int = 256
    positions: str = "rope"
    attention: str | tuple[str, ...] = "softmax"
    causal: bool = True
    max_len: int = 1024
    dropout: float = 0.0
    window: int | tuple[int | None, ...] | None = None
    sinks: int = 0
    latent_dim: int = 32
    rope_dim: int = 8
    norm: str = "layer"
    feedforward: str = "gelu"
    qk_norm: bool = False
    rope_scaling: RopeScaling | None = None
    gate: str = "scalar"
    conv_size: int = 0
    block_size: int = 4
    top_k: int = 2

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "num_heads", "num_layers", "dim_feedforward", "max_len"):
            check_int("LMConfig", name, getattr(self, name))
        if self.num_kv_heads is not None:
            check_int("LMConfig", "num_kv_heads", self.num_kv_heads)
        if self.d_model % self.num_heads or (self.d_model // self.num_heads) % 2:
            raise ValueError(
                f"LMConfig: d_model ({self.d_model}) must be num_heads ({self.num_heads}) times an even head size"
            )
        if self.num_heads % self.kv_heads:
            raise ValueError(
                f"LMConfig: num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
            )
        check_choice("LMConfig", "positions", self.positions, POSITION_KINDS)
        if isinstance(self.attention, tuple):
            if len(self.attention) != self.num_layers:
                raise ValueError(
                    f"LMConfig: attention must have one entry per layer ({self.num_layers}), got {len(self.attention)}"
                )
            for a in self.attention:
                check_choice("LMConfig", "attention", a, ATTENTION_KINDS)
        else:
            check_choice("LMConfig", "attention", self.attention, ATTENTION_KINDS)
        kinds = set(self.layer_attention)
        check_choice("LMConfig", "gate", self.gate, GATES)
        if not isinstance(self.causal, bool):
            raise TypeError(f"LMConfig: causal must be a bool, got {type(self.causal).__name__}")
        if kinds & {*RECURRENT_KINDS, "sparse"} and self.positions == "alibi":
            raise ValueError(
                "LMConfig: ALiBi biases the softmax's scores; linear, gated and sparse attention have none to bias"
            )
        check_int("LMConfig", "block_size", self.block_size)
        check_int("LMConfig", "top_k", self.top_k)
        check_int("LMConfig", "conv_size", self.conv_size, low=0)
        if self.conv_size and "gated" not in kinds:
            raise ValueError("LMConfig: conv_size is the short convolution of gated layers, and this model has none")
        if "gated" in kinds and not self.causal:
            raise ValueError("LMConfig: gated attention forgets what came before; it needs causal=True")
        check_number("LMConfig", "dropout", self.dropout, low=0, high=1, high_open=True)
        if isinstance(self.window, tuple):
            if len(self.window) != self.num_layers:
                raise ValueError(
                    f"LMConfig: window must have one entry per layer ({self.num_layers}), got {len(self.window)}"
                )
            for w in self.window:
                check_int("LMConfig", "window", w, low=0, none=True, note="an int, None, or a tuple of them")
        else:
            check_int("LMConfig", "window", self.window, low=0, none=True, note="an int, None, or a tuple of them")
        check_int("LMConfig", "sinks", self.sinks, low=0)
        check_int("LMConfig", "latent_dim", self.latent_dim)
        check_int("LMConfig", "rope_dim", self.rope_dim)
        if "latent" in kinds and (self.positions != "rope" or self.num_kv_heads is not None):
            raise ValueError(
                "LMConfig: latent attention brings its own rotary key (positions='rope') and has no "
                f"key/value heads to group (num_kv_heads=None); got positions={self.positions!r}, "
                f"num_kv_heads={self.num_kv_heads!r}"
            )
        check_instance("LMConfig", "rope_scaling", self.rope_scaling, RopeScaling, none=True)
        if self.rope_scaling is not None and (self.positions != "rope" or kinds != {"softmax"}):
            raise ValueError(
                "LMConfig: rope_scaling stretches the rotary positions of softmax attention (positions='rope', "
                f"attention='softmax'); got positions={self.positions!r}, attention={self.attention!r}"
            )
        windowed = [a for a, w in zip(self.layer_attention, self.layer_windows, strict=True) if w is not None]
        if any(a != "softmax" for a in windowed) or (windowed and not self.causal):
            raise ValueError("LMConfig: a window needs causal softmax attention in its layer")
        if self.sinks and all(w is None for w in self.layer_windows):
            raise ValueError(f"LMConfig: sinks ({self.sinks}) need a window to be kept beside")
        check_choice("LMConfig", "norm", self.norm, NORM_KINDS)
        check_choice("LMConfig", "feedforward", self.feedforward, FEEDFORWARD_KINDS)
        check_bool("LMConfig", "qk_norm", self.qk_norm)
        if self.qk_norm and "latent" in kinds:
            raise ValueError(
                "LMConfig: qk_norm normalises each head's queries and keys, which latent attention "
                "builds from its latent inside MultiHeadLatentAttention; use attention='softmax' or 'linear'"
            )

    @property
    def kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def layer_attention(self) -> tuple[str, ...]:
        """Each layer's attention."""
        return self.attention if isinstance(self.attention, tuple) else (self.attention,) * self.num_layers

    @property
    def layer_windows(self) -> tuple[int | None, ...]:
        """Each layer's window (``None``: global)."""
        return self.window if isinstance(self.window, tuple) else (self.window,) * self.num_layers


def _norm(config: LMConfig) -> nn.Module:
    """The block's and the model's normalisation layer, LayerNorm or RMSNorm (``config.norm``)."""
    return nn.LayerNorm(config.d_model) if config.norm == "layer" else RMSNorm(config.d_model)


class LMBlock(nn.Module):
    """A pre-norm Transformer block with rotary/ALiBi positions, grouped keys and values, softmax,
    linear or latent attention, and the modern block's parts: RMSNorm, SwiGLU, QK-norm (chapter
    8). ``x (B, N, D)`` at positions ``start, ..., start + N - 1``."""

    def __init__(self, config: LMConfig, window: int | None = None, attention: str | None = None):
        super().__init__()
        c = self.config = config
        self.window = window
        self.kind = c.layer_attention[0] if attention is None else attention
        check_choice("LMBlock", "attention", self.kind, ATTENTION_KINDS)
        # RMSNorm and QK-norm draw no random numbers, and SwiGLU draws only in FeedForward's place: with
        # the default options the parameters come in the order and from the draws of the earlier chapters
        self.norm1, self.norm2 = _norm(c), _norm(c)
        self.attn: nn.Module
        if self.kind == "gated":
            self.attn = GatedLinearAttention(c.d_model, c.num_heads, gate=c.gate, conv_size=c.conv_size)
        elif self.kind == "latent":
            self.attn = MultiHeadLatentAttention(
                c.d_model, c.num_heads, latent_dim=c.latent_dim, rope_dim=c.rope_dim, bias=True
            )
        else:
            self.attn = GroupedQueryAttention(c.d_model, c.num_heads, c.kv_heads)
        self.qk_norm = QKNorm(c.d_model // c.num_heads) if c.qk_norm and self.kind != "gated" else None
        self.ff: nn.Module
        if c.feedforward == "swiglu":
            self.ff = SwiGLU(c.d_model, c.dim_feedforward, dropout=c.dropout)
        else:
            self.ff = FeedForward(c.d_model, c.dim_feedforward, c.dropout, "gelu")
        self.dropout = nn.Dropout(c.dropout)

    def attend(self, h: torch.Tensor, start: int = 0, cache: KeyValueCache | None = None) -> torch.Tensor:
        """The attention sub-layer's output ``(B, N, D)`` for ``h (B, N, D)``; updates ``cache``."""
        c = self.config
        if isinstance(self.attn, MultiHeadLatentAttention):  # caches its latent and rotary key
            out = self.attn(h, start, cache, causal=c.causal)
            if isinstance(cache, LMCache):
                cache.length += h.shape[1]
            return out
        if isinstance(self.attn, GatedLinearAttention):  # chunked to train, recurrent to generate
            if cache is None:
                return self.attn(h)[0]
            if not isinstance(cache, LMCache):
                raise TypeError(f"LMBlock: gated attention keeps its state in an LMCache, got {describe(cache)}")
            kept = cache.state or ()  # (S,) or (S, the inputs the short convolution reads next)
            history = kept[1] if len(kept) > 1 else None
            out, state = self.attn(h, kept[0] if kept else None, form="recurrent", history=history)
            cache.state, cache.length = (state,), cache.length + h.shape[1]
            if c.conv_size > 1:  # keep the last K - 1 inputs
                seen = h if history is None else torch.cat([history, h], dim=1)
                cache.state += (seen[:, 1 - c.conv_size :],)
            return out
        assert isinstance(self.attn, GroupedQueryAttention)
        q, k, v = self.attn.project(h)  # (B, H, N, E), (B, G, N, E), (B, G, N, E)
        B, H, N, E = q.shape
        # listing: block
        if self.qk_norm is not None:  # each head's queries and keys, before the rotation
            q, k = self.qk_norm(q, k)
        if c.positions == "rope" and self.kind in ("softmax", "sparse"):  # linear attention takes no rotation
            positions = torch.arange(start, start + N, device=h.device)  # (N,)
            q, k = (
                rotary_embedding(q, positions, scaling=c.rope_scaling),
                rotary_embedding(k, positions, scaling=c.rope_scaling),
            )
        if self.kind == "linear":
            k, v = repeat_kv(k, H // c.kv_heads), repeat_kv(v, H // c.kv_heads)  # (B, H, N, E)
            if cache is None:
                out = linear_attention(q, k, v, causal=c.causal)
            else:  # the recurrent form: a state of fixed size
                if not isinstance(cache, LMCache):
                    raise TypeError(f"LMBlock: linear attention keeps its state in an LMCache, got {describe(cache)}")
                S_z = None if cache.state is None else (cache.state[0], cache.state[1])
                out, cache.state = linear_attention_recurrent(q, k, v, S_z)
        elif self.kind == "sparse":
            if cache is not None:
                raise ValueError("LMBlock: sparse attention selects among all keys at once and keeps no cache")
            out = block_select_attention(q, k, v, block_size=c.block_size, top_k=c.top_k, causal=c.causal)[0]
        else:
            if cache is not None:  # the keys and values of earlier positions, then these
                k, v = cache.append(k, v)  # (B, G, t + N, E)
            S = k.shape[2]
            queries = torch.arange(start, start + N, device=h.device)  # (N,) positions
            keys = getattr(cache, "key_positions", None)  # a cache that evicts knows its keys' positions
            if keys is None:
                keys = torch.arange(start + N - S, start + N, device=h.device)  # (S,)
            mask = sliding_window_mask(queries, keys, self.window, sinks=c.sinks) if c.causal else None  # (N, S)
            if c.positions == "alibi":  # -m_h |i - j|, and -inf where the mask is False
                distance = (queries[:, None] - keys[None, :]).abs().to(q.dtype)  # (N, S)
                bias = -alibi_slopes(H, device=h.device).to(q.dtype)[:, None, None] * distance  # (H, N, S)
                mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
            # YaRN's temperature: q and k each times attention_factor, so the scores times its square
            scale = None if c.rope_scaling is None else c.rope_scaling.attention_factor**2 / math.sqrt(E)
            out = grouped_query_attention(q, k, v, mask, scale=scale, backend=self.attn.backend)  # (B, H, N, E)
        # end listing: block
        if isinstance(cache, LMCache):  # the positions seen (other caches count their own)
            cache.length += N
        return self.attn.out_proj(out.transpose(1, 2).reshape(B, N, H * E))  # (B, H, N, E) -> (B, N, D)

    def forward(self, x: torch.Tensor, start: int = 0, cache: KeyValueCache | None = None) -> torch.Tensor:
        x = x + self.dropout(self.attend(self.norm1(x), start, cache))
        return x + self.dropout(self.ff(self.norm2(x)))


def block_parameters(config: LMConfig, layer: int = 0) -> int:
    """The parameters of block ``layer`` of a ``TransformerLM`` of ``config``, by formula (chapter 8).

    With ``D = d_model``, ``H`` query heads and ``G`` key and value heads of size
    ``E = D / H``, ``F = dim_feedforward``:

    - attention, softmax or linear: ``W_Q, W_O (D x D)``, ``W_K, W_V (D x G E)``, each with its
      bias: ``2 (D^2 + D) + 2 (D G E + G E)``; latent (``C = latent_dim``, ``R = rope_dim``):
      ``W_DKV (D C + C)``, ``W_UK, W_UV (C H E)``, ``W_KR (D R + R)``, ``W_UQ (D H E + H E)``,
      ``W_QR (D H R + H R)``, ``W_O (H E D + D)``; gated: ``W_Q, W_K, W_V, W_O (D x D)`` without
      biases, and the gate's: ``D H + 2 H`` for ``"scalar"`` (``w_h``, ``A_log``, ``dt_bias``),
      ``16 D + 16 D + D`` for ``"vector"`` (a rank-16 projection), none for ``"fixed"``; with a
      short convolution of ``K`` taps, ``3 D K + 3 D`` more;
    - two norms: ``2 * 2 D`` for LayerNorm (a gain and a bias), ``2 * D`` for RMSNorm (a gain);
    - the feed-forward network: ``2 D F + F + D`` for GELU (biased), ``3 D F`` for SwiGLU;
    - QK-norm: ``2 E``, one gain for the queries and one for the keys, shared by the heads (not
      in a gated layer).

    ``tests/unit/test_blocks.py`` checks it against ``sum(p.numel() for p in block.parameters())``.
    """
    if not isinstance(config, LMConfig):
        raise TypeError(f"block_parameters: config must be an LMConfig, got {type(config).__name__}")
    c = config
    check_int("block_parameters", "layer", layer, low=0, high=c.num_layers - 1)
    kind = c.layer_attention[layer]
    D, H, G, E, F = c.d_model, c.num_heads, c.kv_heads, c.d_model // c.num_heads, c.dim_feedforward
    if kind == "gated":
        attention = 4 * D * D + {"scalar": D * H + 2 * H, "vector": 33 * D, "fixed": 0}[c.gate]
        attention += 3 * D * (c.conv_size + 1) if c.conv_size else 0
    elif kind == "latent":
        C, R = c.latent_dim, c.rope_dim
        attention = (D * C + C) + 2 * C * H * E + (D * R + R) + (D * H * E + H * E) + (D * H * R + H * R)
        attention += H * E * D + D
    else:
        attention = 2 * (D * D + D) + 2 * (D * G * E + G * E)
    norms = 2 * (2 * D if c.norm == "layer" else D)
    feedforward = 3 * D * F if c.feedforward == "swiglu" else 2 * D * F + F + D
    return attention + norms + feedforward + (2 * E if c.qk_norm and kind != "gated" else 0)


def block_flops(config: LMConfig, length: int) -> int:
    """FLOPs of one ``LMBlock``'s forward pass over one sequence of ``length`` positions (chapter 8).

    Counted as ``torch.utils.flop_counter.FlopCounterMode`` counts (``attnlab.complexity.
    count_flops``): the matrix products, two FLOPs per multiply-add. Per position that is
    ``2 P + 4 H E n`` for ``n = length``: twice ``P``, the entries of the block's weight matrices
    (``2 D^2 + 2 D G E`` for attention, ``2 D F`` for the GELU network, ``3 D F`` for SwiGLU),
    plus the scores ``q k^T`` and the weighted sum of values, ``2 H E`` each per key. Every
    query meets all ``n`` keys, as a dense kernel computes them: a causal mask or a window
    hides scores without saving their FLOPs. Norms, activations, the softmax and the gate's
    product are ``O(n D)`` and not counted.

    Softmax attention only (``attention="softmax"``): linear and latent attention multiply other
    matrices. ``tests/unit/test_blocks.py`` checks it against ``count_flops`` of a block.
    """
    if not isinstance(config, LMConfig):
        raise TypeError(f"block_flops: config must be an LMConfig, got {type(config).__name__}")
    check_int("block_flops", "length", length)
    if set(config.layer_attention) != {"softmax"}:
        raise ValueError(f"block_flops: config.attention must be 'softmax', got {config.attention!r}")
    c = config
    D, G, E, F = c.d_model, c.kv_heads, c.d_model // c.num_heads, c.dim_feedforward
    weights = 2 * D * D + 2 * D * G * E + (3 if c.feedforward == "swiglu" else 2) * D * F  # P
    return length * (2 * weights + 4 * c.num_heads * E * length)


class TransformerLM(nn.Module):
    """Token embedding, ``num_layers`` ``LMBlock``s, a final norm and a linear layer to the
    vocabulary (defined in chapter 8): an encoder-only model with ``causal=False`` (BERT's
    shape), a decoder-only one with ``causal=True`` (GPT's).

    ``forward(tokens (B, N), start=0, caches=None) -> logits (B, N, V)``: ``start`` is the
    position of the first token (a generator passes the cache's length); with ``caches`` (one
    ``LMCache`` per block, from ``new_caches``) the blocks append to them.
    """

    def __init__(self, config: LMConfig):
        super().__init__()
        if not isinstance(config, LMConfig):
            raise TypeError(f"TransformerLM: config must be an LMConfig, got {type(config).__name__}")
        c = self.config = config
        self.embedding = nn.Embedding(c.vocab_size, c.d_model)
        nn.init.normal_(self.embedding.weight, std=c.d_model**-0.5)  # unit variance after the sqrt(D) scale
        if c.positions == "sinusoidal":
            self.register_buffer("pe", sinusoidal_encoding(c.max_len, c.d_model), persistent=False)
        elif c.positions == "learned":
            self.pe = nn.Parameter(torch.randn(c.max_len, c.d_model) * 0.02)
        self.blocks = nn.ModuleList(LMBlock(c, w, a) for w, a in zip(c.layer_windows, c.layer_attention, strict=True))
        self.norm = _norm(c)
        self.head = nn.Linear(c.d_model, c.vocab_size)

    def new_caches(self) -> list[KeyValueCache]:
        """One empty cache per block: an ``LMCache``, or a ``SinkKVCache`` for a windowed layer."""
        c = self.config
        return [LMCache() if w is None else SinkKVCache(w, c.sinks) for w in c.layer_windows]

    def forward(self, tokens: torch.Tensor, start: int = 0, caches: list[KeyValueCache] | None = None) -> torch.Tensor:
        c = self.config
        check_tensor("TransformerLM", "tokens", tokens, kind="long", dim=2, names="(B, N)", note="token ids")
        check_int("TransformerLM", "start", start, low=0)
        if caches is not None:
            if not self.config.causal:
                raise ValueError("TransformerLM: caches need a causal model (an encoder sees every position at once)")
            if not isinstance(caches, list) or not all(isinstance(x, KeyValueCache) for x in caches):
                raise TypeError(
                    f"TransformerLM: caches must be a list of KeyValueCache (new_caches()), got {describe(caches)}"
                )
            recurrent = [x for a, x in zip(c.layer_attention, caches, strict=False) if a in RECURRENT_KINDS]
            if not all(isinstance(x, LMCache) for x in recurrent):
                raise TypeError("TransformerLM: linear and gated attention keep their state in LMCache (new_caches())")
            if len(caches) != len(self.blocks):
                raise ValueError(
                    f"TransformerLM: caches must be a list of {len(self.blocks)} KeyValueCache (new_caches()), "
                    f"got {len(caches)}"
                )
        end = start + tokens.shape[1]
        if c.positions in ("sinusoidal", "learned") and end > c.max_len:
            raise ValueError(
                f"TransformerLM: positions up to {end} exceed max_len {c.max_len} of the {c.positions} table"
            )
        x = self.embedding(tokens) * math.sqrt(c.d_model)  # (B, N) -> (B, N, D)
        if c.positions in ("sinusoidal", "learned"):
            x = x + self.pe[start:end]  # + (N, D)
        for i, block in enumerate(self.blocks):
            x = block(x, start, None if caches is None else caches[i])
        return self.head(self.norm(x))  # (B, N, D) -> (B, N, V)
