"""Attention mechanisms: one module per concept the book teaches.

- ``masking``: the mask convention (True = takes part), causal and padding masks, and the
  masked softmax (the normalisation stage).
- ``scoring``: score functions (the first stage): dot, general, additive, concat.
"""

from attnlab.attention.masking import causal_mask, from_key_padding_mask, masked_softmax, padding_mask
from attnlab.attention.scoring import SCORES, AdditiveScore, ConcatScore, DotScore, GeneralScore, Score, make_score

__all__ = [
    "SCORES",
    "AdditiveScore",
    "ConcatScore",
    "DotScore",
    "GeneralScore",
    "Score",
    "causal_mask",
    "from_key_padding_mask",
    "make_score",
    "masked_softmax",
    "padding_mask",
]
