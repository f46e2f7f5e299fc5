"""Score functions: the first of the three stages of attention, score(query, key).

Introduced in chapter 2 (alignment). Every score function here is a module with the same
interface: ``score(query, keys)`` takes queries ``(B, L, Dq)`` and keys ``(B, S, Dk)`` and returns
one score per query and key, ``(B, L, S)``. The normalisation (a masked softmax) and the
weighted sum are separate stages.

- ``DotScore``: :math:`q^\\top k` (Luong "dot"); needs ``Dq == Dk``.
- ``ScaledDotScore``: :math:`q^\\top k / \\sqrt{d}` (Vaswani et al. 2017); needs ``Dq == Dk``.
- ``CosineScore``: :math:`\\cos(q, k)` times a scale; needs ``Dq == Dk``.
- ``GeneralScore``: :math:`q^\\top W k` (Luong "general", bilinear).
- ``AdditiveScore``: :math:`v^\\top \\tanh(W_q q + W_k k)` (Bahdanau; also called MLP attention).
- ``ConcatScore``: :math:`v^\\top \\tanh(W [q; k])` (Luong "concat"): the additive score written with
  one matrix over the concatenation, computed literally.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnlab.validation import check_ints, check_number, check_tensor

__all__ = [
    "SCORES",
    "AdditiveScore",
    "ConcatScore",
    "CosineScore",
    "DotScore",
    "GeneralScore",
    "ScaledDotScore",
    "Score",
    "make_score",
]


class Score(nn.Module):
    """Base class: checks the shapes, then calls ``_score`` (defined in chapter 2).

    Shapes:
        query: ``(B, L, Dq)``; keys: ``(B, S, Dk)``; returns ``(B, L, S)``.
    """

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__()
        check_ints(type(self).__name__, query_dim=query_dim, key_dim=key_dim)
        self.query_dim, self.key_dim = query_dim, key_dim

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        name = type(self).__name__
        check_tensor(name, "query", query, shape=(None, None, self.query_dim), names=f"(B, L, {self.query_dim})")
        check_tensor(name, "keys", keys, shape=(None, None, self.key_dim), names=f"(B, S, {self.key_dim})")
        if query.shape[0] != keys.shape[0]:
            raise ValueError(
                f"{name}: query and keys must have the same batch size, got {query.shape[0]} and {keys.shape[0]}"
            )
        return self._score(query, keys)

    def _score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class DotScore(Score):
    """:math:`\\mathrm{score}(q, k) = q^\\top k` (Luong et al. 2015, "dot"); no parameters."""

    def __init__(self, query_dim: int, key_dim: int | None = None):
        key_dim = query_dim if key_dim is None else key_dim
        super().__init__(query_dim, key_dim)
        if query_dim != key_dim:
            raise ValueError(f"DotScore: query_dim and key_dim must be equal, got {query_dim} and {key_dim}")

    def _score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return query @ keys.transpose(1, 2)  # (B, L, D) @ (B, D, S) -> (B, L, S)


class ScaledDotScore(DotScore):
    """:math:`\\mathrm{score}(q, k) = q^\\top k / \\sqrt{d}` (Vaswani et al. 2017); no parameters.

    Dividing by :math:`\\sqrt{d}` keeps the variance of the scores near one when the entries of
    ``q`` and ``k`` have unit variance, so the softmax does not saturate as ``d`` grows (chapter 3).
    """

    def _score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return super()._score(query, keys) / math.sqrt(self.query_dim)  # (B, L, S)


class CosineScore(DotScore):
    """:math:`\\mathrm{score}(q, k) = s \\cdot q^\\top k / (\\lVert q \\rVert \\lVert k \\rVert)`.

    Similarity of direction only: cosine scores lie in ``[-s, s]``; with ``scale=1`` the softmax
    over them can never be peaked, so a scale (a fixed inverse temperature, 10 by default) is part
    of the score.
    """

    def __init__(self, query_dim: int, key_dim: int | None = None, scale: float = 10.0):
        super().__init__(query_dim, key_dim)
        check_number("CosineScore", "scale", scale, low=0, low_open=True)
        self.scale = float(scale)

    def _score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        q = torch.nn.functional.normalize(query, dim=-1)  # (B, L, D), unit length
        k = torch.nn.functional.normalize(keys, dim=-1)  # (B, S, D), unit length
        return self.scale * (q @ k.transpose(1, 2))  # (B, L, S)


class GeneralScore(Score):
    """:math:`\\mathrm{score}(q, k) = q^\\top W k` (Luong et al. 2015, "general"): a learned bilinear form."""

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__(query_dim, key_dim)
        self.W = nn.Linear(key_dim, query_dim, bias=False)

    def _score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return query @ self.W(keys).transpose(1, 2)  # (B, L, Dq) @ (B, Dq, S) -> (B, L, S)


class AdditiveScore(Score):
    """:math:`\\mathrm{score}(q, k) = v^\\top \\tanh(W_q q + W_k k)` (Bahdanau et al. 2015).

    A one-hidden-layer network of ``attention_dim`` units compares query and key. The key
    projections do not depend on the query, so one call projects the keys once for all of its
    queries; a decoder that calls it once per step (``BahdanauDecoder``) projects them again
    at every step.
    """

    def __init__(self, query_dim: int, key_dim: int, attention_dim: int = 64):
        super().__init__(query_dim, key_dim)
        self.W_q = nn.Linear(query_dim, attention_dim, bias=False)
        self.W_k = nn.Linear(key_dim, attention_dim, bias=True)
        self.v = nn.Linear(attention_dim, 1, bias=False)

    def _score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        q = self.W_q(query)[:, :, None, :]  # (B, L, A) -> (B, L, 1, A)
        k = self.W_k(keys)[:, None, :, :]  # (B, S, A) -> (B, 1, S, A)
        return self.v(torch.tanh(q + k)).squeeze(-1)  # (B, L, S, A) -> (B, L, S)


class ConcatScore(Score):
    """:math:`\\mathrm{score}(q, k) = v^\\top \\tanh(W [q; k])` (Luong et al. 2015, "concat").

    Computed literally: every (query, key) pair is concatenated, shape ``(B, L, S, Dq + Dk)``.
    Splitting ``W = [W_q, W_k]`` shows it is the additive score; ``AdditiveScore`` computes the
    same thing without building the ``(B, L, S, Dq + Dk)`` tensor.
    """

    def __init__(self, query_dim: int, key_dim: int, attention_dim: int = 64):
        super().__init__(query_dim, key_dim)
        self.W = nn.Linear(query_dim + key_dim, attention_dim, bias=True)
        self.v = nn.Linear(attention_dim, 1, bias=False)

    def _score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        B, L, S = query.shape[0], query.shape[1], keys.shape[1]
        q = query[:, :, None, :].expand(B, L, S, -1)  # (B, L, Dq) -> (B, L, S, Dq)
        k = keys[:, None, :, :].expand(B, L, S, -1)  # (B, S, Dk) -> (B, L, S, Dk)
        pairs = torch.cat([q, k], dim=-1)  # (B, L, S, Dq + Dk)
        return self.v(torch.tanh(self.W(pairs))).squeeze(-1)  # (B, L, S)


SCORES = ("dot", "scaled_dot", "cosine", "general", "additive", "concat")


def make_score(name: str, query_dim: int, key_dim: int, attention_dim: int = 64) -> Score:
    """The score module called ``name`` (one of ``SCORES``), for the given sizes (chapter 2)."""
    if name == "dot":
        return DotScore(query_dim, key_dim)
    if name == "scaled_dot":
        return ScaledDotScore(query_dim, key_dim)
    if name == "cosine":
        return CosineScore(query_dim, key_dim)
    if name == "general":
        return GeneralScore(query_dim, key_dim)
    if name == "additive":
        return AdditiveScore(query_dim, key_dim, attention_dim)
    if name == "concat":
        return ConcatScore(query_dim, key_dim, attention_dim)
    raise ValueError(f"make_score: name must be one of {SCORES}, got {name!r}")
