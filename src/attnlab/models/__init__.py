"""Models built from the package's parts: ``seq2seq`` (chapter 1 on), ``tagger`` (chapter 5),
``transformer`` (chapter 6)."""

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
    "BahdanauDecoder",
    "Decoder",
    "Encoder",
    "EncoderOutput",
    "KVCache",
    "LuongDecoder",
    "LuongLocalDecoder",
    "PositionPredictor",
    "Seq2Seq",
    "Seq2SeqConfig",
    "SelfAttentionTagger",
    "TaggerConfig",
    "Transformer",
    "TransformerConfig",
    "copy_from_torch_transformer",
    "summarize",
    "warmup_schedule",
]
