"""Checking tensor shapes in the open, as the chapters do after every step.

Introduced in the chapter "Preliminaries".
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attnlab.validation import check_int, check_tensor

__all__ = ["check_shape"]


def check_shape(tensor: torch.Tensor, expected: Sequence[int | None], name: str = "tensor") -> torch.Size:
    """Check that ``tensor`` has the ``expected`` shape and return its shape.

    Defined in the chapter "Preliminaries". ``None`` in ``expected`` matches any size, so
    ``check_shape(weights, (B, H, L, None))`` leaves the number of keys open.

    Raises:
        TypeError: ``tensor`` is not a tensor, or ``expected`` is not a sequence of ints/None.
        ValueError: the number of dimensions or a size differs; the message gives both shapes.
    """
    check_tensor("check_shape", name, tensor)
    if isinstance(expected, (str, bytes)) or not isinstance(expected, Sequence):
        raise TypeError(f"check_shape: expected must be a sequence of ints or None, got {expected!r}")
    for size in expected:
        if size is not None:
            check_int("check_shape", "each size in expected", size, low=0)
    shown = "(" + ", ".join("*" if s is None else str(s) for s in expected) + ")"
    actual = tuple(tensor.shape)
    if len(actual) != len(expected) or any(e is not None and e != a for e, a in zip(expected, actual, strict=True)):
        raise ValueError(f"check_shape: the shape of {name} is {actual}, but should be {shown}")
    return tensor.shape
