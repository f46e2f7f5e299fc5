"""Copy and reverse: synthetic sequence-to-sequence tasks whose source length we control.

Introduced in chapter 1. A fixed-length context vector has to carry the whole source, so these
tasks show the bottleneck as the source grows; dates are too short to show it.
"""

from __future__ import annotations

import math
import random
import string

__all__ = ["LENGTH_DISTRIBUTIONS", "TASKS", "make_sequence_pairs"]

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
