"""Decoding one input: greedy translation of a string.

Introduced in chapter 1, for the chapters' widgets: ``translate`` turns one source string into
the model's greedy output. (Batched decoding is the models' own: ``greedy_decode`` and
``greedy_steps`` of ``Seq2Seq`` and ``Transformer``, ``generate`` of ``TransformerLM``.)
"""

from __future__ import annotations

import torch

from attnlab.data.vocab import CharVocab
from attnlab.models.seq2seq import Seq2Seq
from attnlab.train.loop import Device, eval_device

__all__ = ["translate"]


@torch.no_grad()
def translate(
    model: Seq2Seq,
    source: str,
    src_vocab: CharVocab,
    tgt_vocab: CharVocab,
    *,
    max_len: int = 32,
    device: Device | None = None,
) -> str:
    """Greedy translation of one string (defined in chapter 1; used by the chapters' widgets).

    Runs where the model is (``device``, if given, must be the model's device)."""
    if not isinstance(source, str):
        raise TypeError(f"translate: source must be a str, got {type(source).__name__}")
    if not source:
        raise ValueError("translate: source must be a non-empty string, got ''")
    device = eval_device("translate", model, device)
    model.eval()
    src = torch.tensor([src_vocab.encode(source)], device=device)
    tokens, _ = model.greedy_decode(src, torch.tensor([len(source)], device=device), max_len=max_len)
    return tgt_vocab.decode(tokens[0])
