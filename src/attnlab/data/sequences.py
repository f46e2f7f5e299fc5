"""Synthetic sequence tasks: copy and reverse, and labelling each token with its neighbours.

Introduced in chapter 1. A fixed-length context vector has to carry the whole source, so copy
and reverse show the bottleneck as the source grows; dates are too short to show it. Chapter 5
adds ``make_neighbour_task``, which self-attention can only solve if it knows positions.
"""

from __future__ import annotations

import random
import string

import torch

from attnlab.validation import check_choice, check_int, check_int_sequence, check_ints

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
        TypeError: a count or length is not an int.
        ValueError: an unknown task, a length below 1, ``min_len > max_len``, or ``n_symbols``
        outside [2, 26].
    """
    name = "make_sequence_pairs"
    check_choice(name, "task", task, TASKS)
    check_int(name, "n", n, low=0)
    check_int(name, "min_len", min_len)
    check_int(name, "max_len", max_len, low=min_len, note="min_len")
    check_int(name, "n_symbols", n_symbols, low=2, high=26)
    check_choice(name, "lengths", lengths, LENGTH_DISTRIBUTIONS)
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
        TypeError: a count is not an int, or ``offsets`` is not a tuple or list of ints.
        ValueError: a count is below 1, or ``offsets`` is empty.
    """
    check_ints("make_neighbour_task", n=n, length=length, n_symbols=n_symbols)
    check_int("make_neighbour_task", "seed", seed, low=None)
    check_int_sequence("make_neighbour_task", "offsets", offsets, low=None, types=(tuple, list))
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
