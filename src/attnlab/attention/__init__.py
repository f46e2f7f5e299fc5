"""Attention mechanisms: one module per concept the book teaches.

- ``masking``: the mask convention (True = takes part), causal and padding masks, and the
  masked softmax (the normalisation stage).
- ``scoring``: score functions (the first stage): dot, scaled dot, cosine, general, additive, concat.
- ``core``: the three stages as one function, and scaled dot-product attention with PyTorch's
  signature (naive and fast backends).
- ``efficient``: exact attention in blocks with an online softmax, memory O(n).
- ``hard``: hard (stochastic) attention: sampling a location, REINFORCE with a baseline.
- ``local``: restricted (banded) self-attention with a window, in O(n r d), and Luong's local
  attention (local-m, local-p) over a gathered window of the source.
- ``multihead``: multi-head attention, and copying the weights of ``torch.nn.MultiheadAttention``.
- ``positional``: sinusoidal and learned positional encodings, and the relative rotation M_k.
"""

from attnlab.attention.core import BACKENDS, attention, scaled_dot_product_attention
from attnlab.attention.efficient import blockwise_attention
from attnlab.attention.hard import (
    MovingAverageBaseline,
    attention_entropy,
    hard_attend,
    reinforce_loss,
    sample_location,
)
from attnlab.attention.local import band_mask, band_to_dense, banded_attention, local_attention, window_to_dense
from attnlab.attention.multihead import MultiHeadAttention, copy_from_torch
from attnlab.attention.positional import LearnedPositionalEmbedding, relative_rotation, sinusoidal_encoding
from attnlab.attention.masking import causal_mask, from_key_padding_mask, masked_softmax, padding_mask, to_float_mask
from attnlab.attention.scoring import (
    SCORES,
    AdditiveScore,
    ConcatScore,
    CosineScore,
    DotScore,
    GeneralScore,
    ScaledDotScore,
    Score,
    make_score,
)

__all__ = [
    "BACKENDS",
    "SCORES",
    "AdditiveScore",
    "ConcatScore",
    "CosineScore",
    "DotScore",
    "GeneralScore",
    "LearnedPositionalEmbedding",
    "MovingAverageBaseline",
    "MultiHeadAttention",
    "ScaledDotScore",
    "Score",
    "attention",
    "attention_entropy",
    "band_mask",
    "band_to_dense",
    "banded_attention",
    "blockwise_attention",
    "causal_mask",
    "copy_from_torch",
    "from_key_padding_mask",
    "hard_attend",
    "local_attention",
    "make_score",
    "masked_softmax",
    "padding_mask",
    "reinforce_loss",
    "relative_rotation",
    "sample_location",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
    "to_float_mask",
    "window_to_dense",
]
