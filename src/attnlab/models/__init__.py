"""Models built from the package's parts: ``seq2seq`` (chapter 1 on; its parts in ``recurrent``,
chapter 1, and ``attention_decoders``, chapters 2 and 4), ``captioning`` and ``structured``
(chapter 4), ``tagger`` (chapter 5), ``transformer`` (chapter 6; its position-wise parts in
``position_wise``), ``lm`` (chapter 8), ``blocks`` (chapter 8's modern parts: RMSNorm, SwiGLU
and QK-norm)."""

from attnlab.models.blocks import QKNorm, RMSNorm, SwiGLU
from attnlab.models.captioning import (
    Captioner,
    CaptionerConfig,
    CaptionOutput,
    ConvEncoder,
    HardCaptioner,
    SoftCaptioner,
    region_cells,
)
from attnlab.models.generation import generate, sample_next
from attnlab.models.lm import (
    LMCache,
    LMConfig,
    TransformerLM,
    block_flops,
    block_parameters,
)
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
    "CaptionOutput",
    "Captioner",
    "CaptionerConfig",
    "ConvEncoder",
    "Decoder",
    "Encoder",
    "EncoderOutput",
    "HardCaptioner",
    "HierarchicalClassifier",
    "HierarchicalConfig",
    "KVCache",
    "LMCache",
    "LMConfig",
    "LuongDecoder",
    "LuongLocalDecoder",
    "PositionPredictor",
    "QKNorm",
    "RMSNorm",
    "SelfAttentionTagger",
    "Seq2Seq",
    "Seq2SeqConfig",
    "SoftCaptioner",
    "StructuredClassifier",
    "StructuredConfig",
    "StructuredSelfAttention",
    "SwiGLU",
    "TaggerConfig",
    "Transformer",
    "TransformerConfig",
    "TransformerLM",
    "block_flops",
    "block_parameters",
    "copy_from_torch_transformer",
    "frobenius_penalty",
    "generate",
    "hop_overlap",
    "region_cells",
    "sample_next",
    "summarize",
    "warmup_schedule",
]
