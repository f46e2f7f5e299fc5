"""Models built from the package's parts: ``seq2seq`` (chapter 1 on), ``structured``
(chapter 4), ``tagger`` (chapter 5), ``transformer`` (chapter 6)."""

from attnlab.models.seq2seq import (
    AttentionDecoder,
    BahdanauDecoder,
    Decoder,
    Encoder,
    EncoderOutput,
    LuongDecoder,
    LuongLocalDecoder,
    PositionPredictor,
    Seq2Seq,
    Seq2SeqConfig,
    summarize,
)
from attnlab.models.structured import (
    AttentionPool,
    HierarchicalClassifier,
    HierarchicalConfig,
    StructuredClassifier,
    StructuredConfig,
    StructuredSelfAttention,
    frobenius_penalty,
    hop_overlap,
)
from attnlab.models.tagger import POSITIONS, SelfAttentionTagger, TaggerConfig
from attnlab.models.transformer import (
    KVCache,
    Transformer,
    TransformerConfig,
    copy_from_torch_transformer,
    warmup_schedule,
)

__all__ = [
    "POSITIONS",
    "AttentionDecoder",
    "AttentionPool",
    "BahdanauDecoder",
    "Decoder",
    "Encoder",
    "EncoderOutput",
    "HierarchicalClassifier",
    "HierarchicalConfig",
    "KVCache",
    "LuongDecoder",
    "LuongLocalDecoder",
    "PositionPredictor",
    "Seq2Seq",
    "Seq2SeqConfig",
    "SelfAttentionTagger",
    "StructuredClassifier",
    "StructuredConfig",
    "StructuredSelfAttention",
    "TaggerConfig",
    "Transformer",
    "TransformerConfig",
    "copy_from_torch_transformer",
    "frobenius_penalty",
    "hop_overlap",
    "summarize",
    "warmup_schedule",
]
