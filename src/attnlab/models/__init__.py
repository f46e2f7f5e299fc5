"""Models built from the package's parts: ``seq2seq`` (chapter 1 on)."""

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

__all__ = [
    "AttentionDecoder",
    "BahdanauDecoder",
    "Decoder",
    "Encoder",
    "EncoderOutput",
    "LuongDecoder",
    "Seq2Seq",
    "Seq2SeqConfig",
    "summarize",
]
