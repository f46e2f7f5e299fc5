"""Synthetic sequence tasks: copy and reverse, and labelling each token with its neighbours.

Introduced in chapter 1. A fixed-length context vector has to carry the whole source, so copy
and reverse show the bottleneck as the source grows; dates are too short to show it. Chapter 5
adds ``make_neighbour_task``, which self-attention can only solve if it knows positions.
"""

from __future__ import annotations

import math
import random
import string

import torch

__all__ = ["LENGTH_DISTRIBUTIONS", "TASKS", "make_neighbour_task", "make_sequence_pairs"]

TASKS = ("copy", "reverse")
LENGTH_DISTRIBUTIONS = ("uniform", "log-uniform")


def make_sequence_pairs(
    task: str,
    n: int,
    min_len: int,
    max_len: int,
    *,
    n_symbols: int = 10,
    lengths: str = "uniform",
    seed: int = 0,
) -> list[tuple[str, str]]:
    """``n`` random ``(source, target)`` pairs for the ``copy`` or ``reverse`` task.

    Defined in chapter 1. Sources are strings of ``n_symbols`` distinct letters
    (``"abcdefghij"`` by default), with lengths drawn uniformly from ``[min_len, max_len]``; the
    target is the source itself (copy) or the source reversed (reverse).

    Raises:
        TypeError / ValueError: an unknown task, a length below 1, ``min_len > max_len``, or
        ``n_symbols`` outside [2, 26].
    """
    if task not in TASKS:
        raise ValueError(f"make_sequence_pairs: task must be one of {TASKS}, got {task!r}")
    for name, value in (("n", n), ("min_len", min_len), ("max_len", max_len), ("n_symbols", n_symbols)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"make_sequence_pairs: {name} must be an int, got {type(value).__name__}")
    if n < 0:
        raise ValueError(f"make_sequence_pairs: n must be non-negative, got {n}")
    if not 1 <= min_len <= max_len:
        raise ValueError(f"make_sequence_pairs: need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    if not 2 <= n_symbols <= 26:
        raise ValueError(f"make_sequence_pairs: n_symbols must be in [2, 26], got {n_symbols}")
    if lengths not in LENGTH_DISTRIBUTIONS:
        raise ValueError(f"make_sequence_pairs: lengths must be one of {LENGTH_DISTRIBUTIONS}, got {lengths!r}")
    symbols = string.ascii_lowercase[:n_symbols]
    rng = random.Random(seed)
    choices = range(min_len, max_len + 1)
    weights = [1.0] * len(choices) if lengths == "uniform" else [1.0 / k for k in choices]
    pairs = []
    for _ in range(n):
        length = rng.choices(choices, weights)[0]
        source = "".join(rng.choice(symbols) for _ in range(length))
        pairs.append((source, source if task == "copy" else source[::-1]))
    return pairs


def make_neighbour_task(
    n: int,
    length: int,
    *,
    n_symbols: int = 10,
    offsets: tuple[int, ...] = (-1, 1),
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences labelled with their neighbours: a task that needs positions.

    Defined in chapter 5. Each of the ``n`` sequences holds ``length`` random symbols
    ``0 .. n_symbols - 1``. For position ``i`` and each offset ``o``, the label is the symbol at
    ``i + o``, or the boundary class ``n_symbols`` when ``i + o`` falls outside the sequence.
    Self-attention without positional information sees its input as a bag of symbols and cannot
    tell the left neighbour from any other.

    Returns:
        ``(tokens, targets)``: long tensors of shapes ``(n, length)`` and
        ``(n, length, len(offsets))``.

    Raises:
        TypeError / ValueError: a count is not a positive int, ``offsets`` is empty or holds a
        non-int.
    """
    for name, value in (("n", n), ("length", length), ("n_symbols", n_symbols), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"make_neighbour_task: {name} must be an int, got {type(value).__name__}")
    for name, value in (("n", n), ("length", length), ("n_symbols", n_symbols)):
        if value < 1:
            raise ValueError(f"make_neighbour_task: {name} must be positive, got {value}")
    if not isinstance(offsets, (tuple, list)) or not offsets or not all(
        isinstance(o, int) and not isinstance(o, bool) for o in offsets
    ):
        raise ValueError(f"make_neighbour_task: offsets must be a non-empty tuple of ints, got {offsets!r}")
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, n_symbols, (n, length), generator=generator)  # (n, length)
    positions = torch.arange(length)
    columns = []
    for o in offsets:
        source = positions + o  # (length,): where each label comes from
        inside = (source >= 0) & (source < length)
        label = tokens[:, source.clamp(0, length - 1)]  # (n, length)
        columns.append(torch.where(inside, label, torch.full_like(label, n_symbols)))
    return tokens, torch.stack(columns, dim=-1)  # (n, length, len(offsets))
