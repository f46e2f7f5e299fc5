"""Attention mechanisms: one module per concept the book teaches.

- ``masking``: the mask convention (True = takes part), causal and padding masks, and the
  masked softmax (the normalisation stage).
- ``scoring``: score functions (the first stage): dot, scaled dot, cosine, general, additive, concat.
- ``core``: the three stages as one function, and scaled dot-product attention with PyTorch's
  signature (naive and fast backends).
- ``blockwise``: exact attention in blocks with an online softmax, memory O(n).
- ``hard``: hard (stochastic) attention: sampling a location, REINFORCE with a baseline.
- ``local``: restricted (banded) self-attention with a window, in O(n r d), and Luong's local
  attention (local-m, local-p) over a gathered window of the source.
- ``multihead``: multi-head attention, and copying the weights of ``torch.nn.MultiheadAttention``.
- ``positional``: sinusoidal and learned positional encodings, the relative rotation M_k, and
  the positions of today's models: rotary embeddings (RoPE) and ALiBi's biases, and rotary
  frequencies stretched past the trained length (linear, NTK-aware, YaRN, Llama 3.1; chapter 8).
- ``grouped``: multi-query and grouped-query attention, keys and values shared across heads.
- ``latent``: multi-head latent attention (DeepSeek-V2, chapter 9): keys and values decompressed
  from one cached latent per token, a decoupled rotary key, and weight absorption.
- ``linear``: linear attention, a feature map in place of the softmax; parallel and recurrent forms.
- ``gated``: decayed and gated linear attention (RetNet, Mamba-2, GLA): a state that forgets, in
  parallel, recurrent and chunked forms computed in log space, and a token mixer of it.
- ``sparse``: sparse attention: fixed patterns as masks (Longformer, Big Bird) and blocks of keys
  chosen by each query (MoBA, NSA's selection branch), with counts of the pairs they attend.
- ``traffic``: why FlashAttention is fast: attention over tiles of queries and keys, and the
  memory traffic of the standard and the tiled kernel, counted and as formulas.

``local`` also holds chapter 8's sliding windows while generating (``RollingKVCache``,
``receptive_field``). ``cache`` holds the protocol every key/value cache follows
(``KeyValueCache``: ``append``, ``cached_keys``, ``cached_values``, ``cached_length``, ``nbytes``),
the rolling buffer and the decoders' caches of ``attnlab.models`` alike.
"""

from attnlab.attention.blockwise import blockwise_attention
from attnlab.attention.cache import KeyValueCache
from attnlab.attention.core import BACKENDS, attention, scaled_dot_product_attention
from attnlab.attention.gated import (
    GATED_FORMS,
    GATES,
    GatedLinearAttention,
    gated_attention_weights,
    gated_linear_attention,
    retnet_decay,
)
from attnlab.attention.grouped import (
    GroupedQueryAttention,
    grouped_query_attention,
    kv_cache_bytes_per_token,
    repeat_kv,
)
from attnlab.attention.hard import (
    MovingAverageBaseline,
    attention_entropy,
    hard_attend,
    reinforce_loss,
    sample_location,
)
from attnlab.attention.latent import MultiHeadLatentAttention, latent_cache_bytes_per_token
from attnlab.attention.linear import (
    elu_feature_map,
    linear_attention,
    linear_attention_recurrent,
    linear_attention_weights,
)
from attnlab.attention.local import (
    RollingKVCache,
    SinkKVCache,
    band_mask,
    band_to_dense,
    banded_attention,
    local_attention,
    receptive_field,
    sliding_window_mask,
    window_to_dense,
)
from attnlab.attention.masking import causal_mask, from_key_padding_mask, masked_softmax, padding_mask, to_float_mask
from attnlab.attention.multihead import MultiHeadAttention, copy_from_torch
from attnlab.attention.positional import (
    ROPE_SCALINGS,
    LearnedPositionalEmbedding,
    RopeScaling,
    alibi_bias,
    alibi_slopes,
    relative_rotation,
    rotary_embedding,
    rotary_frequencies,
    sinusoidal_encoding,
)
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
from attnlab.attention.sparse import (
    BlockSparseAttention,
    attended_pairs,
    bigbird_mask,
    block_select_attention,
    block_selection_mask,
    longformer_mask,
    sparse_recall,
)
from attnlab.attention.traffic import Traffic, attention_traffic, flash_block_sizes, standard_attention, tiled_attention

__all__ = [
    "BACKENDS",
    "GATED_FORMS",
    "GATES",
    "ROPE_SCALINGS",
    "SCORES",
    "AdditiveScore",
    "BlockSparseAttention",
    "ConcatScore",
    "CosineScore",
    "DotScore",
    "GatedLinearAttention",
    "GeneralScore",
    "GroupedQueryAttention",
    "KeyValueCache",
    "LearnedPositionalEmbedding",
    "MovingAverageBaseline",
    "MultiHeadAttention",
    "MultiHeadLatentAttention",
    "RollingKVCache",
    "RopeScaling",
    "ScaledDotScore",
    "Score",
    "SinkKVCache",
    "Traffic",
    "alibi_bias",
    "alibi_slopes",
    "attended_pairs",
    "attention",
    "attention_entropy",
    "attention_traffic",
    "band_mask",
    "band_to_dense",
    "banded_attention",
    "bigbird_mask",
    "block_select_attention",
    "block_selection_mask",
    "blockwise_attention",
    "causal_mask",
    "copy_from_torch",
    "elu_feature_map",
    "flash_block_sizes",
    "from_key_padding_mask",
    "gated_attention_weights",
    "gated_linear_attention",
    "grouped_query_attention",
    "hard_attend",
    "kv_cache_bytes_per_token",
    "latent_cache_bytes_per_token",
    "linear_attention",
    "linear_attention_recurrent",
    "linear_attention_weights",
    "local_attention",
    "longformer_mask",
    "make_score",
    "masked_softmax",
    "padding_mask",
    "receptive_field",
    "reinforce_loss",
    "relative_rotation",
    "repeat_kv",
    "retnet_decay",
    "rotary_embedding",
    "rotary_frequencies",
    "sample_location",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
    "sliding_window_mask",
    "sparse_recall",
    "standard_attention",
    "tiled_attention",
    "to_float_mask",
    "window_to_dense",
]
