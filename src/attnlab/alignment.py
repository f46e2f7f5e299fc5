"""Quantitative checks of alignments: does attention look where it should?

Introduced in chapter 2 and used again for the Transformer's cross-attention (chapter 6). A
heatmap is persuasive, but a number can be asserted: these functions measure how often the
largest attention weight of an output step falls where the task says it must.

Shapes: ``weights`` is ``(L, S)`` for one example: one row per output step (teacher-forced, so
row ``t`` belongs to target character ``t``), one column per source character.
"""

from __future__ import annotations

import datetime as dt

import torch

from attnlab.data.dates import date_spans, detect_format
from attnlab.validation import check_tensor

__all__ = ["ISO_FIELDS", "date_alignment_accuracy", "reverse_alignment_accuracy"]

# Which ISO output characters come from which field of the date: "1994-09-27".
ISO_FIELDS = {0: "year", 1: "year", 2: "year", 3: "year", 5: "month", 6: "month", 8: "day", 9: "day"}


def _check_weights(name: str, weights: torch.Tensor, rows: int, cols: int) -> None:
    check_tensor(name, "weights", weights, kind="float", dim=2, names="(L, S)", note="one example")
    if weights.shape[0] < rows or weights.shape[1] < cols:
        raise ValueError(
            f"{name}: weights of shape {tuple(weights.shape)} need at least {rows} rows and {cols} columns"
        )


def reverse_alignment_accuracy(weights: torch.Tensor, source_length: int) -> float:
    """Share of output steps ``t < S`` whose largest weight is on the mirrored source position ``S - 1 - t``.

    Defined in chapter 2. For the reversal task the ideal alignment is the anti-diagonal.
    """
    _check_weights("reverse_alignment_accuracy", weights, source_length, source_length)
    best = weights[:source_length, :source_length].argmax(-1)  # (S,)
    mirrored = torch.arange(source_length - 1, -1, -1, device=weights.device)
    return float((best == mirrored).float().mean())


def date_alignment_accuracy(weights: torch.Tensor, source: str, target: str) -> float:
    """Share of the 8 digits of the ISO date whose largest weight falls on their field in the source.

    Defined in chapter 2. The year digits of "1994-09-27" should look at the year of
    "27 Sep 1994" (wherever the format puts it), the month digits at the month, the day digits at
    the day. Separators ("-") are not counted.
    """
    _check_weights("date_alignment_accuracy", weights, len(target), len(source))
    spans = date_spans(dt.date.fromisoformat(target), detect_format(source, target))
    best = weights[:, : len(source)].argmax(-1).tolist()
    hits = [spans[field][0] <= best[t] < spans[field][1] for t, field in ISO_FIELDS.items()]
    return sum(hits) / len(hits)
