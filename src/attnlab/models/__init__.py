"""Models built from the package's parts: ``seq2seq`` (chapter 1 on), ``tagger`` (chapter 5)."""

from attnlab.models.seq2seq import (
    AttentionDecoder,
    BahdanauDecoder,
    Decoder,
    Encoder,
    EncoderOutput,
    LuongDecoder,
    Seq2Seq,
    Seq2SeqConfig,
    summarize,
)
from attnlab.models.tagger import POSITIONS, SelfAttentionTagger, TaggerConfig

__all__ = [
    "POSITIONS",
    "AttentionDecoder",
    "BahdanauDecoder",
    "Decoder",
    "Encoder",
    "EncoderOutput",
    "LuongDecoder",
    "Seq2Seq",
    "Seq2SeqConfig",
    "SelfAttentionTagger",
    "TaggerConfig",
    "summarize",
]
