"""A one-layer self-attention tagger: the smallest model in which heads and positions matter.

Introduced in chapter 5. Tokens are embedded, a positional encoding is added (sinusoidal,
learned, or none), one ``MultiHeadAttention`` layer attends from every token to every token,
and a linear read-out predicts ``num_outputs`` labels per token. There is deliberately no
residual connection: everything the read-out knows about the sequence went through the
attention weights, so the weights are the whole explanation of a prediction.

Shapes: tokens ``(B, N)`` (long), logits ``(B, N, num_outputs, num_classes)``, weights
``(B, H, N, N)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attnlab.attention.core import BACKENDS
from attnlab.attention.multihead import MultiHeadAttention
from attnlab.attention.positional import LearnedPositionalEmbedding, sinusoidal_encoding
from attnlab.validation import check_choice, check_int, check_tensor

__all__ = ["POSITIONS", "SelfAttentionTagger", "TaggerConfig"]

POSITIONS = ("sinusoidal", "learned", "none")


@dataclass(frozen=True)
class TaggerConfig:
    """Sizes of a ``SelfAttentionTagger`` (defined in chapter 5).

    ``vocab_size``: input symbols; ``num_classes``: label classes; ``num_outputs``: labels per
    token; ``positions``: one of ``POSITIONS``; ``backend``: the attention kernel when no weights
    are asked for.
    """

    vocab_size: int
    num_classes: int
    num_outputs: int = 1
    embed_dim: int = 32
    num_heads: int = 2
    max_len: int = 64
    positions: str = "sinusoidal"
    backend: str = "fast"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "num_classes", "num_outputs", "embed_dim", "num_heads", "max_len"):
            check_int("TaggerConfig", name, getattr(self, name))
        check_choice("TaggerConfig", "positions", self.positions, POSITIONS)
        check_choice("TaggerConfig", "backend", self.backend, BACKENDS)


class SelfAttentionTagger(nn.Module):
    """Embedding + positions -> one multi-head self-attention layer -> per-token labels (chapter 5)."""

    pe: torch.Tensor  # (max_len, embed_dim), a buffer

    def __init__(self, config: TaggerConfig):
        super().__init__()
        if not isinstance(config, TaggerConfig):
            raise TypeError(f"SelfAttentionTagger: config must be a TaggerConfig, got {type(config).__name__}")
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.embed_dim)
        self.learned: LearnedPositionalEmbedding | None = None
        if config.positions == "learned":
            self.learned = LearnedPositionalEmbedding(config.max_len, config.embed_dim)
        self.register_buffer("pe", sinusoidal_encoding(config.max_len, config.embed_dim), persistent=False)
        self.attention = MultiHeadAttention(config.embed_dim, config.num_heads, backend=config.backend)
        self.readout = nn.Linear(config.embed_dim, config.num_outputs * config.num_classes)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token embeddings plus positions: ``(B, N)`` -> ``(B, N, embed_dim)``."""
        c = self.config
        check_tensor("SelfAttentionTagger", "tokens", tokens, kind="long", dim=2, names="(B, N)")
        if tokens.shape[1] > c.max_len:
            raise ValueError(f"SelfAttentionTagger: sequence length {tokens.shape[1]} exceeds max_len {c.max_len}")
        # The values are checked only on the CPU, where reading them costs no synchronisation; on
        # an accelerator ``train_tagger`` and ``evaluate_tagger`` check their data once per call.
        if tokens.device.type == "cpu" and tokens.numel() and (tokens.min() < 0 or tokens.max() >= c.vocab_size):
            raise ValueError(
                f"SelfAttentionTagger: tokens must lie in [0, {c.vocab_size}), got [{tokens.min()}, {tokens.max()}]"
            )
        x = self.embedding(tokens)  # (B, N) -> (B, N, D)
        if c.positions == "sinusoidal":
            x = x + self.pe[: tokens.shape[1]]  # (B, N, D) + (N, D)
        elif self.learned is not None:  # c.positions == "learned"
            x = self.learned(x)
        return x

    def forward(self, tokens: torch.Tensor, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns ``(logits (B, N, num_outputs, num_classes), weights (B, H, N, N) or None)``."""
        c = self.config
        x = self.embed(tokens)  # (B, N, D)
        out, weights = self.attention(x, x, x, need_weights=need_weights, average_attn_weights=False)
        logits = self.readout(out)  # (B, N, D) -> (B, N, num_outputs * num_classes)
        return logits.view(*tokens.shape, c.num_outputs, c.num_classes), weights
