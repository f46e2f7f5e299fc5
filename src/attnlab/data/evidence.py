"""Classification tasks whose label is decided by a few tokens among distractors (chapter 4).

- ``make_evidence_task``: sequences of noise tokens with one *evidence* token of each of
  ``n_types`` types at random positions; the label combines the values of all of them, so a
  model must look at several places at once (structured self-attention, Lin et al. 2017).
- ``make_document_task``: documents of several sentences of noise words, one of which carries
  the label (hierarchical attention, Yang et al. 2016): a model should find that sentence.

Token ids: ``0`` is padding; noise tokens are ``1 .. n_noise``; evidence tokens follow.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.validation import check_int, check_ints

__all__ = ["DocumentTask", "EvidenceTask", "make_document_task", "make_evidence_task"]


@dataclass(frozen=True)
class EvidenceTask:
    """``tokens (n, L)``, ``labels (n,)``, ``evidence (n, n_types)`` (the position of each type's
    token), ``vocab_size`` and ``num_classes``."""

    tokens: torch.Tensor
    labels: torch.Tensor
    evidence: torch.Tensor
    vocab_size: int
    num_classes: int


def make_evidence_task(
    n: int, length: int, *, n_types: int = 2, n_values: int = 3, n_noise: int = 20, seed: int = 0
) -> EvidenceTask:
    """Noise sequences with one evidence token per type; the label needs all of them.

    Defined in chapter 4. Type ``t`` with value ``v`` is token ``1 + n_noise + t * n_values + v``.
    The label is the number whose digits, in base ``n_values``, are the values of types
    ``0 .. n_types - 1``: ``num_classes = n_values ** n_types``, and no type alone decides it.
    """
    check_ints("make_evidence_task", n=n, length=length, n_types=n_types, n_values=n_values, n_noise=n_noise)
    check_int("make_evidence_task", "seed", seed, low=None)
    if length < n_types:
        raise ValueError(f"make_evidence_task: length must be at least n_types = {n_types}, got {length}")
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, n_noise + 1, (n, length), generator=g)  # (n, L) noise
    evidence = torch.rand(n, length, generator=g).argsort(dim=1)[:, :n_types]  # (n, types) distinct positions
    values = torch.randint(0, n_values, (n, n_types), generator=g)  # (n, types)
    ids = 1 + n_noise + torch.arange(n_types) * n_values + values  # (n, types)
    tokens.scatter_(1, evidence, ids)
    labels = (values * n_values ** torch.arange(n_types - 1, -1, -1)).sum(dim=1)  # base-n_values number
    return EvidenceTask(tokens, labels, evidence, 1 + n_noise + n_types * n_values, n_values**n_types)


@dataclass(frozen=True)
class DocumentTask:
    """``tokens (n, sentences, words)``, ``labels (n,)``, ``key_sentence (n,)`` (the sentence that
    decides the label), ``vocab_size`` and ``num_classes``."""

    tokens: torch.Tensor
    labels: torch.Tensor
    key_sentence: torch.Tensor
    vocab_size: int
    num_classes: int


def make_document_task(
    n: int,
    sentences: int,
    words: int,
    *,
    num_classes: int = 4,
    n_noise: int = 30,
    decoys: bool = True,
    seed: int = 0,
) -> DocumentTask:
    """Documents of noise sentences; one *key sentence* holds a label word next to a marker.

    Defined in chapter 4. Each document has ``sentences`` sentences of ``words`` noise words. In
    the key sentence, a marker word (token ``1 + n_noise``) is followed by the label word
    (token ``2 + n_noise + label``). With ``decoys=True`` every other sentence also holds a
    label word, of a random class, but no marker: a model that counts label words is wrong, one
    that finds the marked sentence is right.
    """
    check_ints("make_document_task", n=n, sentences=sentences, words=words, num_classes=num_classes, n_noise=n_noise)
    check_int("make_document_task", "seed", seed, low=None)
    if words < 2:
        raise ValueError(f"make_document_task: words must be at least 2 (marker and label), got {words}")
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, n_noise + 1, (n, sentences, words), generator=g)  # (n, S, W)
    labels = torch.randint(0, num_classes, (n,), generator=g)
    key = torch.randint(0, sentences, (n,), generator=g)
    label_word = 2 + n_noise
    if decoys:
        where = torch.randint(0, words, (n, sentences), generator=g)
        decoy = label_word + torch.randint(0, num_classes, (n, sentences), generator=g)
        tokens.scatter_(2, where[..., None], decoy[..., None])
    rows = torch.arange(n)
    at = torch.randint(0, words - 1, (n,), generator=g)  # the marker's position in the key sentence
    sentence = torch.randint(1, n_noise + 1, (n, words), generator=g)  # a fresh key sentence
    sentence[rows, at] = 1 + n_noise
    sentence[rows, at + 1] = label_word + labels
    tokens[rows, key] = sentence
    return DocumentTask(tokens, labels, key, label_word + num_classes, num_classes)
