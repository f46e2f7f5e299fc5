"""Models built from the package's parts: ``seq2seq`` (chapter 1 on)."""

from attnlab.models.seq2seq import Decoder, Encoder, EncoderOutput, Seq2Seq, Seq2SeqConfig, summarize

__all__ = ["Decoder", "Encoder", "EncoderOutput", "Seq2Seq", "Seq2SeqConfig", "summarize"]
