"""The Transformer of Vaswani et al. (2017), built from the package's parts.

Introduced in chapter 6. Smallest piece first: the position-wise feed-forward network, the
token embedding (scaled by sqrt(d_model), plus sinusoidal positions; both in
``attnlab.models.position_wise``, and exported here too), the encoder layer, the decoder layer,
the two stacks, and the sequence-to-sequence model with greedy decoding. Each
sub-layer is wrapped in a residual connection and layer normalisation, either as in the paper
(post-LN: ``LayerNorm(x + Sublayer(x))``) or with the normalisation first (pre-LN:
``x + Sublayer(LayerNorm(x))``), chosen by ``TransformerConfig.norm_first``.

The decoder can run incrementally with a key/value cache (``KVCache``): at step t it projects
only the new token, appends its keys and values to those of earlier steps, and reuses the keys
and values of the encoder output computed once. ``copy_from_torch_transformer`` copies the
weights of a ``torch.nn.Transformer`` into the encoder and decoder stacks, so that the two can be
compared. ``warmup_schedule`` is the paper's learning-rate schedule.

Shapes: source tokens ``(B, S)``, target tokens ``(B, L)``, model size ``D = d_model``, heads
``H``; encoder output (memory) ``(B, S, D)``; logits ``(B, L, V)``; self-attention weights
``(B, H, S, S)`` / ``(B, H, L, L)``, cross-attention weights ``(B, H, L, S)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import cast

import torch
from torch import nn

from attnlab.attention.masking import causal_mask
from attnlab.attention.multihead import MultiHeadAttention, copy_from_torch
from attnlab.data.vocab import CharVocab
from attnlab.models.caches import KVCache
from attnlab.models.position_wise import ACTIVATIONS, FeedForward, TokenEmbedding
from attnlab.validation import check_choice, check_int, check_number, check_tensor

__all__ = [
    "DecoderLayer",
    "EncoderLayer",
    "FeedForward",
    "KVCache",
    "TokenEmbedding",
    "Transformer",
    "TransformerConfig",
    "TransformerDecoder",
    "TransformerEncoder",
    "TransformerWeights",
    "copy_from_torch_transformer",
    "warmup_schedule",
]


@dataclass(frozen=True)
class TransformerConfig:
    """Sizes and choices of a ``Transformer`` (defined in chapter 6).

    The paper's base model is ``d_model=512, num_heads=8, dim_feedforward=2048`` with 6 + 6
    layers, post-LN and dropout 0.1; the defaults here are a small model for 2 CPU cores.
    ``final_norm`` adds a LayerNorm after each stack (``None``: only for pre-LN, where the last
    residual sum is otherwise never normalised; ``torch.nn.Transformer`` always has one).
    """

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 64
    num_heads: int = 4
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    dim_feedforward: int = 256
    dropout: float = 0.0
    activation: str = "relu"
    norm_first: bool = False
    final_norm: bool | None = None
    max_len: int = 128
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "num_heads", "dim_feedforward", "max_len"):
            check_int("TransformerConfig", name, getattr(self, name))
        for name in ("num_encoder_layers", "num_decoder_layers"):
            check_int("TransformerConfig", name, getattr(self, name), low=0)
        if self.d_model % self.num_heads:
            raise ValueError(
                f"TransformerConfig: d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})"
            )
        if self.d_model % 2:
            raise ValueError(f"TransformerConfig: d_model must be even (sinusoidal positions), got {self.d_model}")
        check_number("TransformerConfig", "dropout", self.dropout, low=0, high=1, high_open=True)
        check_number("TransformerConfig", "layer_norm_eps", self.layer_norm_eps, low=0, low_open=True)
        check_choice("TransformerConfig", "activation", self.activation, sorted(ACTIVATIONS))

    @property
    def use_final_norm(self) -> bool:
        return self.norm_first if self.final_norm is None else self.final_norm


def _sublayer(norm_first: bool, norm: nn.LayerNorm, x: torch.Tensor, f: Callable, drop: nn.Dropout):
    """Residual connection and layer normalisation around ``f``, post-LN or pre-LN."""
    if norm_first:
        out, weights = f(norm(x))
        return x + drop(out), weights  # x + Sublayer(LayerNorm(x))
    out, weights = f(x)
    return norm(x + drop(out)), weights  # LayerNorm(x + Sublayer(x))


class EncoderLayer(nn.Module):
    """Self-attention, then the feed-forward network, each with residual + LayerNorm (chapter 6)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        c = config
        self.norm_first = c.norm_first
        self.self_attn = MultiHeadAttention(c.d_model, c.num_heads, dropout=c.dropout)
        self.ff = FeedForward(c.d_model, c.dim_feedforward, c.dropout, c.activation)
        self.norm1 = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.norm2 = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.dropout1, self.dropout2 = nn.Dropout(c.dropout), nn.Dropout(c.dropout)

    def forward(
        self, x: torch.Tensor, src_mask: torch.Tensor | None = None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x (B, S, D)``, ``src_mask`` boolean ``(B, 1, 1, S)`` (True = real token).

        Returns ``(x (B, S, D), self-attention weights (B, H, S, S) or None)``.
        """

        # listing: sublayers
        def attend(h: torch.Tensor):
            return self.self_attn(h, h, h, attn_mask=src_mask, need_weights=need_weights, average_attn_weights=False)

        x, weights = _sublayer(self.norm_first, self.norm1, x, attend, self.dropout1)
        x, _ = _sublayer(self.norm_first, self.norm2, x, lambda h: (self.ff(h), None), self.dropout2)
        return x, weights
        # end listing: sublayers


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention to the encoder, feed-forward network (chapter 6).

    In the cross-attention the queries come from the decoder and the keys and values from the
    encoder output ("memory"): the third use of attention in the Transformer.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        c = config
        self.norm_first = c.norm_first
        self.self_attn = MultiHeadAttention(c.d_model, c.num_heads, dropout=c.dropout)
        self.cross_attn = MultiHeadAttention(c.d_model, c.num_heads, dropout=c.dropout)
        self.ff = FeedForward(c.d_model, c.dim_feedforward, c.dropout, c.activation)
        self.norm1 = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.norm2 = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.norm3 = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.dropout1, self.dropout2, self.dropout3 = (nn.Dropout(c.dropout) for _ in range(3))

    def forward(
        self,
        y: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor | None, torch.Tensor | None]]:
        """``y (B, L, D)``: new target positions; ``memory (B, S, D)``; ``memory_mask (B, 1, 1, S)``.

        Without a cache, ``y`` holds the whole target and the self-attention is causal. With a
        cache, ``y`` holds the ``L`` positions after the ``cache.length`` already decoded; their
        keys and values are appended to the cache (which is updated in place), and the causal
        mask is aligned bottom-right so that the new positions see every earlier one.

        Returns ``(y (B, L, D), (self weights (B, H, L, t + L), cross weights (B, H, L, S)))``.
        """

        def self_attend(h: torch.Tensor):
            q = self.self_attn.project_q(h)  # (B, L, D) -> (B, H, L, E)
            k, v = self.self_attn.project_kv(h, h)  # (B, H, L, E) each
            if cache is not None:
                k, v = cache.append(k, v)  # (B, H, t, E) + (B, H, L, E) -> (B, H, t + L, E)
            mask = causal_mask(q.shape[2], k.shape[2], align="bottom-right", device=h.device)  # (L, t + L)
            return self.self_attn.attend(q, k, v, mask, need_weights=need_weights, average_attn_weights=False)

        def cross_attend(h: torch.Tensor):
            q = self.cross_attn.project_q(h)  # (B, L, D) -> (B, H, L, E)
            if cache is not None and cache.cross_k is not None and cache.cross_v is not None:
                k, v = cache.cross_k, cache.cross_v  # the memory does not change while decoding
            else:
                k, v = self.cross_attn.project_kv(memory, memory)  # (B, H, S, E) each
                if cache is not None:
                    cache.cross_k, cache.cross_v = k, v
            return self.cross_attn.attend(q, k, v, memory_mask, need_weights=need_weights, average_attn_weights=False)

        y, self_weights = _sublayer(self.norm_first, self.norm1, y, self_attend, self.dropout1)
        y, cross_weights = _sublayer(self.norm_first, self.norm2, y, cross_attend, self.dropout2)
        y, _ = _sublayer(self.norm_first, self.norm3, y, lambda h: (self.ff(h), None), self.dropout3)
        return y, (self_weights, cross_weights)


class TransformerEncoder(nn.Module):
    """A stack of ``EncoderLayer``s, with a final LayerNorm when configured (chapter 6)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_encoder_layers))
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.use_final_norm else None

    def forward(
        self, x: torch.Tensor, src_mask: torch.Tensor | None = None, need_weights: bool = False
    ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """``x (B, S, D)`` -> ``(memory (B, S, D), [weights (B, H, S, S) per layer])``."""
        weights = []
        for layer in self.layers:
            x, w = layer(x, src_mask, need_weights)
            weights.append(w)
        return (self.norm(x) if self.norm is not None else x), weights


class TransformerDecoder(nn.Module):
    """A stack of ``DecoderLayer``s, with a final LayerNorm when configured (chapter 6)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_decoder_layers))
        self.norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.use_final_norm else None

    def forward(
        self,
        y: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | None = None,
        caches: list[KVCache] | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor | None, torch.Tensor | None]]]:
        """``y (B, L, D)`` -> ``(y (B, L, D), [(self, cross) weights per layer])``."""
        if caches is not None and len(caches) != len(self.layers):
            raise ValueError(f"TransformerDecoder: expected {len(self.layers)} caches, got {len(caches)}")
        weights = []
        for i, layer in enumerate(self.layers):
            y, w = layer(y, memory, memory_mask, None if caches is None else caches[i], need_weights)
            weights.append(w)
        return (self.norm(y) if self.norm is not None else y), weights


@dataclass
class TransformerWeights:
    """Attention weights of every layer: lists of ``(B, H, ., .)`` tensors, one per layer."""

    encoder: list[torch.Tensor | None] = field(default_factory=list)
    decoder_self: list[torch.Tensor | None] = field(default_factory=list)
    cross: list[torch.Tensor | None] = field(default_factory=list)


class Transformer(nn.Module):
    """Encoder-decoder Transformer for character sequences (defined in chapter 6).

    Same interface as ``Seq2Seq``, so ``train_seq2seq`` and ``evaluate_seq2seq`` train and
    evaluate it: ``forward(src, src_lengths, tgt_in) -> (logits, weights)`` and
    ``greedy_decode(src, src_lengths, max_len) -> (tokens, weights)``.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"Transformer: config must be a TransformerConfig, got {type(config).__name__}")
        c = self.config = config
        self.src_embed = TokenEmbedding(c.src_vocab_size, c.d_model, c.max_len, c.dropout)
        self.tgt_embed = TokenEmbedding(c.tgt_vocab_size, c.d_model, c.max_len, c.dropout)
        self.encoder = TransformerEncoder(c)
        self.decoder = TransformerDecoder(c)
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size)

    def _check_source(self, src: torch.Tensor, src_lengths: torch.Tensor) -> None:
        check_tensor("Transformer", "src", src, kind="long", dim=2, names="(B, S)", note="token ids")
        check_tensor("Transformer", "src_lengths", src_lengths, kind="integer", shape=(src.shape[0],))

    def encode(
        self, src: torch.Tensor, src_lengths: torch.Tensor, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor | None]]:
        """``src (B, S)`` -> ``(memory (B, S, D), src_mask (B, 1, 1, S), encoder weights per layer)``.

        The mask is ``padding_mask(src_lengths, S)``, built here without its checks of the
        lengths' values, which would read them on the host at every step."""
        self._check_source(src, src_lengths)
        positions = torch.arange(src.shape[1], device=src.device)  # (S,)
        real = positions[None, :] < src_lengths.to(src.device)[:, None]  # (B, 1) vs (1, S) -> (B, S)
        src_mask = real[:, None, None, :]  # (B, S) -> (B, 1, 1, S), True = real
        memory, weights = self.encoder(self.src_embed(src), src_mask, need_weights)
        return memory, src_mask, weights

    def decode(
        self,
        tgt_in: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        caches: list[KVCache] | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor | None, torch.Tensor | None]]]:
        """``tgt_in (B, L)`` (the positions after those in ``caches``) -> ``(logits (B, L, V), weights)``."""
        start = 0 if caches is None else caches[0].length if caches else 0
        y, weights = self.decoder(self.tgt_embed(tgt_in, start), memory, src_mask, caches, need_weights)
        return self.generator(y), weights

    def forward(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor, need_weights: bool = False
    ) -> tuple[torch.Tensor, TransformerWeights | None]:
        """Teacher-forced logits ``(B, L, V)``, and every layer's weights if ``need_weights``."""
        memory, src_mask, enc_w = self.encode(src, src_lengths, need_weights)
        logits, dec_w = self.decode(tgt_in, memory, src_mask, need_weights=need_weights)
        if not need_weights:
            return logits, None
        return logits, TransformerWeights(enc_w, [w[0] for w in dec_w], [w[1] for w in dec_w])

    @torch.no_grad()
    def greedy_decode(
        self, src: torch.Tensor, src_lengths: torch.Tensor, max_len: int, use_cache: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy decoding for at most ``max_len`` steps.

        With ``use_cache`` each step feeds only the newest token and reuses the cached keys and
        values; without it each step re-runs the decoder on the whole prefix (the same result,
        O(t) times the work at step t). Decoding stops early once every sequence has produced
        END: that test reads a flag on the host after each step (the one synchronisation of a
        step, and the reason this method cannot run on the meta device; its steps,
        ``greedy_steps``, can).

        Returns:
            tokens ``(B, L')`` (END included where produced) and the last decoder layer's
            cross-attention weights averaged over heads, ``(B, L', S)``.
        """
        check_int("Transformer.greedy_decode", "max_len", max_len)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        tokens, weights = [], []
        for token, w in self.greedy_steps(src, src_lengths, max_len, use_cache):
            tokens.append(token)
            weights.append(w)
            done |= token[:, 0] == CharVocab.END
            if bool(done.all()):  # the host read: stop once every sequence has ended
                break
        return torch.cat(tokens, dim=1), torch.cat(weights, dim=1)

    def greedy_steps(
        self, src: torch.Tensor, src_lengths: torch.Tensor, max_len: int, use_cache: bool = True
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The steps of ``greedy_decode``, without its early stop (chapter 6): for each of
        ``max_len`` steps, the most likely token ``(B, 1)`` and the last layer's cross-attention
        weights averaged over heads, ``(B, 1, S)``.

        Nothing here reads a value on the host, so the steps run on any device, meta included.
        Run it under ``torch.no_grad()`` unless gradients are wanted.
        """
        memory, src_mask, _ = self.encode(src, src_lengths)
        B = src.shape[0]
        prefix = torch.full((B, 1), CharVocab.START, dtype=torch.long, device=src.device)  # (B, 1)
        caches = [KVCache() for _ in self.decoder.layers] if use_cache else None
        for _ in range(max_len):
            new = prefix[:, -1:] if use_cache else prefix  # (B, 1) or (B, t)
            logits, dec_w = self.decode(new, memory, src_mask, caches, need_weights=True)
            token = logits[:, -1:].argmax(-1)  # (B, 1)
            prefix = torch.cat([prefix, token], dim=1)
            cross = dec_w[-1][1] if dec_w else None  # the last layer's (need_weights=True: never None)
            yield token, (cross[:, :, -1:].mean(1) if cross is not None else memory.new_zeros(B, 1, src.shape[1]))


def warmup_schedule(
    d_model: int, warmup_steps: int, factor: float = 1.0, *, total_steps: int | None = None
) -> Callable[[int], float]:
    """The paper's learning rate: ``factor * d_model^-0.5 * min(t^-0.5, t * warmup^-1.5)`` (chapter 6).

    It rises linearly for ``warmup_steps`` steps, peaks at ``factor * (d_model * warmup)^-0.5``
    and then decays like ``1 / sqrt(t)``. With ``total_steps``, the decay after the peak is
    linear instead, reaching zero at ``total_steps`` (a "cool-down", for short training runs
    that stop long before the 1 / sqrt(t) decay has lowered the rate). Returns a function of the
    step ``t >= 1``.
    """
    check_int("warmup_schedule", "d_model", d_model)
    check_int("warmup_schedule", "warmup_steps", warmup_steps)
    check_number("warmup_schedule", "factor", factor, low=0, low_open=True)
    check_int("warmup_schedule", "total_steps", total_steps, low=warmup_steps + 1, none=True, note="above warmup_steps")
    peak = factor * (d_model * warmup_steps) ** -0.5

    def rate(step: int) -> float:
        step = max(step, 1)
        if total_steps is not None:
            return peak * min(step / warmup_steps, max(0.0, (total_steps - step) / (total_steps - warmup_steps)))
        return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)

    return rate


def _copy_layer_norm(ours: nn.LayerNorm, theirs: nn.LayerNorm) -> None:
    ours.weight.copy_(theirs.weight)
    ours.bias.copy_(theirs.bias)


def _copy_ff(ours: FeedForward, theirs: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer) -> None:
    for mine, other in ((ours.linear1, theirs.linear1), (ours.linear2, theirs.linear2)):
        mine.weight.copy_(other.weight)
        mine.bias.copy_(other.bias)


@torch.no_grad()
def copy_from_torch_transformer(ours: Transformer, theirs: nn.Transformer) -> Transformer:
    """Copy the weights of a ``torch.nn.Transformer`` into ``ours`` (defined in chapter 6).

    ``torch.nn.Transformer`` has no embeddings and no output layer, so only the two stacks are
    copied: every attention (``copy_from_torch``), feed-forward layer and LayerNorm, and the final
    norms (PyTorch always has them, so ``ours`` needs ``final_norm=True``).

    Raises:
        TypeError: the arguments are not the two model types.
        ValueError: layer counts, sizes, or the final norms do not match.
    """
    if not isinstance(ours, Transformer) or not isinstance(theirs, nn.Transformer):
        raise TypeError("copy_from_torch_transformer: expected (attnlab Transformer, torch.nn.Transformer)")
    # A ModuleList's items are typed nn.Module: these are the layer classes the four stacks hold.
    enc = cast("Sequence[nn.TransformerEncoderLayer]", theirs.encoder.layers)
    dec = cast("Sequence[nn.TransformerDecoderLayer]", theirs.decoder.layers)
    our_enc = cast("Sequence[EncoderLayer]", ours.encoder.layers)
    our_dec = cast("Sequence[DecoderLayer]", ours.decoder.layers)
    mine = (len(ours.encoder.layers), len(ours.decoder.layers), ours.config.d_model, ours.config.norm_first)
    other = (len(enc), len(dec), theirs.d_model, enc[0].norm_first if len(enc) else dec[0].norm_first)
    if mine != other:
        raise ValueError(
            "copy_from_torch_transformer: (encoder layers, decoder layers, d_model, norm_first) differ: "
            f"{mine} vs {other}"
        )
    if ours.encoder.norm is None or ours.decoder.norm is None:
        raise ValueError(
            "copy_from_torch_transformer: torch.nn.Transformer has final norms; build ours with final_norm=True"
        )
    for a, b in zip(our_enc, enc, strict=True):
        copy_from_torch(a.self_attn, b.self_attn)
        _copy_ff(a.ff, b)
        _copy_layer_norm(a.norm1, b.norm1)
        _copy_layer_norm(a.norm2, b.norm2)
    for c, d in zip(our_dec, dec, strict=True):
        copy_from_torch(c.self_attn, d.self_attn)
        copy_from_torch(c.cross_attn, d.multihead_attn)
        _copy_ff(c.ff, d)
        for mine_norm, their_norm in ((c.norm1, d.norm1), (c.norm2, d.norm2), (c.norm3, d.norm3)):
            _copy_layer_norm(mine_norm, their_norm)
    _copy_layer_norm(ours.encoder.norm, theirs.encoder.norm)
    _copy_layer_norm(ours.decoder.norm, theirs.decoder.norm)
    return ours
