"""Attention mechanisms: one module per concept the book teaches.

- ``masking``: the mask convention (True = takes part), causal and padding masks, and the
  masked softmax (the normalisation stage).
"""

from attnlab.attention.masking import causal_mask, from_key_padding_mask, masked_softmax, padding_mask

__all__ = ["causal_mask", "from_key_padding_mask", "masked_softmax", "padding_mask"]
