"""Learning-rate schedules: the factor of the learning rate at each step.

``warmup_cosine`` (chapter 8) rises linearly, then decays as a cosine to 0; ``train_lm`` uses it,
and ``train_seq2seq`` takes it as ``schedule``. The Transformer paper's own schedule,
``warmup_schedule`` (chapter 6), is defined with the model, in ``attnlab.models.transformer``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from attnlab.validation import check_int

__all__ = ["warmup_cosine"]


def warmup_cosine(steps: int, warmup: int = 0) -> Callable[[int], float]:
    """The factor of the learning rate at step ``t`` (1-based): ``t / warmup`` for the first ``warmup``
    steps, then a cosine from 1 down to 0 at step ``steps`` (chapter 8; ``train_lm`` uses it, and
    ``train_seq2seq`` takes it as ``schedule``)."""
    check_int("warmup_cosine", "steps", steps)
    check_int("warmup_cosine", "warmup", warmup, low=0, high=steps)

    def schedule(step: int) -> float:
        if step <= warmup:
            return step / max(warmup, 1)
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(steps - warmup, 1)))

    return schedule
