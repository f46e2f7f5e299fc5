"""Attention that pools a sequence into vectors for classification (chapter 4).

- ``StructuredSelfAttention`` and ``StructuredClassifier``: the structured self-attentive
  sentence embedding of Lin et al. (2017). ``r`` attention *hops* read a BiLSTM's states,
  :math:`A = \\mathrm{softmax}(W_{s2} \\tanh(W_{s1} hs^\\top))` (``r x n``), :math:`M = A \\, hs`; the
  penalty :math:`\\lVert A A^\\top - I \\rVert_F^2` pushes the hops to read different places.
- ``AttentionPool`` and ``HierarchicalClassifier``: hierarchical attention (Yang et al. 2016):
  words into sentence vectors, sentences into a document vector, each by attention with a
  learned context vector.

Shapes: tokens ``(B, n)`` (structured) or ``(B, S, W)`` (hierarchical; S sentences of W
words); token 0 is padding and gets no attention.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import nn

from attnlab.attention.masking import masked_softmax
from attnlab.validation import check_int, check_tensor

__all__ = [
    "AttentionPool",
    "HierarchicalClassifier",
    "HierarchicalConfig",
    "StructuredClassifier",
    "StructuredConfig",
    "StructuredSelfAttention",
    "frobenius_penalty",
    "hop_overlap",
]


def _check_hops(name: str, weights: torch.Tensor) -> None:
    check_tensor(name, "weights", weights, kind="float", dim=3, names="(B, r, n)", note="r hops")


def frobenius_penalty(weights: torch.Tensor) -> torch.Tensor:
    """:math:`\\lVert A A^\\top - I \\rVert_F^2` per example: ``(B, r, n) -> (B,)``.

    Zero exactly when the hops are orthonormal: each hop a one-hot vector (a row of a softmax
    has unit norm only when it is one-hot) and no two on the same position.
    """
    _check_hops("frobenius_penalty", weights)
    gram = weights @ weights.transpose(1, 2)  # (B, r, r)
    eye = torch.eye(weights.shape[1], dtype=weights.dtype, device=weights.device)
    return ((gram - eye) ** 2).sum(dim=(1, 2))


def hop_overlap(weights: torch.Tensor) -> torch.Tensor:
    """Mean over pairs of hops of :math:`\\sum_s \\min(a_{is}, a_{js})`: ``(B, r, n) -> (B,)``.

    1 when two hops are the same distribution, 0 when they read disjoint positions.
    """
    _check_hops("hop_overlap", weights)
    r = weights.shape[1]
    if r < 2:
        raise ValueError(f"hop_overlap: needs at least 2 hops, got {r}")
    pairs = torch.minimum(weights[:, :, None, :], weights[:, None, :, :]).sum(-1)  # (B, r, r)
    # the off-diagonal entries, by index (a boolean mask as index would read it on the host)
    off = torch.tensor([i * r + j for i in range(r) for j in range(r) if i != j], device=weights.device)
    return pairs.flatten(1)[:, off].mean(dim=-1)  # (B, r * r) -> (B, r (r - 1)) -> (B,)


def _check_sizes(config: StructuredConfig | HierarchicalConfig) -> None:
    """Every field of a size dataclass must be a positive int."""
    for field in fields(config):
        check_int(type(config).__name__, field.name, getattr(config, field.name))


class StructuredSelfAttention(nn.Module):
    """``r`` hops over a sequence of states: ``A = softmax(W_s2 tanh(W_s1 hs^T))``, ``M = A hs``."""

    def __init__(self, input_dim: int, attention_dim: int, hops: int):
        super().__init__()
        self.W_s1 = nn.Linear(input_dim, attention_dim, bias=False)
        self.W_s2 = nn.Linear(attention_dim, hops, bias=False)

    def forward(self, states: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``states (B, n, D)``, ``mask (B, n)`` (True = real) -> ``M (B, r, D)``, ``A (B, r, n)``."""
        scores = self.W_s2(torch.tanh(self.W_s1(states))).transpose(1, 2)  # (B, n, r) -> (B, r, n)
        weights = masked_softmax(scores, None if mask is None else mask[:, None, :])  # (B, r, n)
        return weights @ states, weights  # (B, r, n) @ (B, n, D) -> (B, r, D)


@dataclass(frozen=True)
class StructuredConfig:
    """Sizes of ``StructuredClassifier`` (``hidden_dim`` is ``u``: the BiLSTM gives ``2u``)."""

    vocab_size: int
    num_classes: int
    embed_dim: int = 32
    hidden_dim: int = 32
    attention_dim: int = 32
    hops: int = 4
    mlp_dim: int = 64

    def __post_init__(self) -> None:
        _check_sizes(self)


class StructuredClassifier(nn.Module):
    """Embedding, BiLSTM, ``r`` attention hops, and an MLP on the flattened ``r x 2u`` matrix M."""

    def __init__(self, config: StructuredConfig):
        super().__init__()
        if not isinstance(config, StructuredConfig):
            raise TypeError(f"StructuredClassifier: config must be a StructuredConfig, got {type(config).__name__}")
        self.config = config
        c = config
        self.embedding = nn.Embedding(c.vocab_size, c.embed_dim, padding_idx=0)
        self.rnn = nn.LSTM(c.embed_dim, c.hidden_dim, batch_first=True, bidirectional=True)
        self.attention = StructuredSelfAttention(2 * c.hidden_dim, c.attention_dim, c.hops)
        self.mlp = nn.Sequential(
            nn.Linear(c.hops * 2 * c.hidden_dim, c.mlp_dim), nn.ReLU(), nn.Linear(c.mlp_dim, c.num_classes)
        )

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``tokens (B, n)`` -> ``logits (B, classes)``, hops ``A (B, r, n)``."""
        check_tensor("StructuredClassifier", "tokens", tokens, kind="long", dim=2, names="(B, n)")
        states, _ = self.rnn(self.embedding(tokens))  # (B, n, 2u)
        M, A = self.attention(states, tokens != 0)  # (B, r, 2u), (B, r, n)
        return self.mlp(M.flatten(1)), A


class AttentionPool(nn.Module):
    """``u_i = tanh(W h_i + b)``, ``alpha = softmax(u_i . u_c)``, pooled ``sum_i alpha_i h_i``."""

    def __init__(self, input_dim: int, attention_dim: int):
        super().__init__()
        self.proj = nn.Linear(input_dim, attention_dim)
        self.context = nn.Parameter(torch.randn(attention_dim) / attention_dim**0.5)  # u_w or u_s

    def forward(self, states: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``states (B, n, D)``, ``mask (B, n)`` -> ``pooled (B, D)``, ``weights (B, n)``."""
        scores = torch.tanh(self.proj(states)) @ self.context  # (B, n, A) @ (A,) -> (B, n)
        weights = masked_softmax(scores, mask)  # (B, n)
        return (weights[:, :, None] * states).sum(dim=1), weights


@dataclass(frozen=True)
class HierarchicalConfig:
    """Sizes of ``HierarchicalClassifier`` (bidirectional GRUs of ``hidden_dim`` per direction)."""

    vocab_size: int
    num_classes: int
    embed_dim: int = 32
    hidden_dim: int = 32
    attention_dim: int = 32

    def __post_init__(self) -> None:
        _check_sizes(self)


class HierarchicalClassifier(nn.Module):
    """Hierarchical attention network: word encoder + attention per sentence, then sentence
    encoder + attention over the document, then a linear classifier."""

    def __init__(self, config: HierarchicalConfig):
        super().__init__()
        if not isinstance(config, HierarchicalConfig):
            raise TypeError(f"HierarchicalClassifier: config must be a HierarchicalConfig, got {type(config).__name__}")
        self.config = config
        c = config
        self.embedding = nn.Embedding(c.vocab_size, c.embed_dim, padding_idx=0)
        self.word_rnn = nn.GRU(c.embed_dim, c.hidden_dim, batch_first=True, bidirectional=True)
        self.word_pool = AttentionPool(2 * c.hidden_dim, c.attention_dim)
        self.sentence_rnn = nn.GRU(2 * c.hidden_dim, c.hidden_dim, batch_first=True, bidirectional=True)
        self.sentence_pool = AttentionPool(2 * c.hidden_dim, c.attention_dim)
        self.out = nn.Linear(2 * c.hidden_dim, c.num_classes)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``tokens (B, S, W)`` -> ``logits (B, classes)``, word weights ``(B, S, W)``, sentence
        weights ``(B, S)``."""
        check_tensor("HierarchicalClassifier", "tokens", tokens, kind="long", dim=3, names="(B, S, W)")
        B, S, W = tokens.shape
        words = tokens.reshape(B * S, W)  # every sentence on its own
        states, _ = self.word_rnn(self.embedding(words))  # (B S, W, 2h)
        sentences, word_weights = self.word_pool(states, words != 0)  # (B S, 2h), (B S, W)
        real = (tokens != 0).any(dim=-1)  # (B, S): sentences with at least one word
        doc_states, _ = self.sentence_rnn(sentences.reshape(B, S, -1))  # (B, S, 2h)
        document, sentence_weights = self.sentence_pool(doc_states, real)  # (B, 2h), (B, S)
        return self.out(document), word_weights.reshape(B, S, W), sentence_weights
