"""Every model, attention function and inference function runs on PyTorch's ``meta`` device, forward and backward.

A meta tensor has a shape and a dtype but no data, so a case runs in a fraction of a second
without a GPU, and it finds the two mistakes that break a model on a GPU while it works on the
CPU:

- a tensor made on the wrong device in a forward pass (``torch.zeros(n)`` without ``device=``):
  mixing it into a meta computation raises "Tensor on device cpu is not on the expected device
  meta";
- a host synchronisation in a hot path (``.item()``, ``bool(t)``, ``.tolist()``, ``.cpu()``):
  a meta tensor has no value to read, so these raise too.

A few meta kernels do not check devices (an embedding looks up CPU token ids in meta weights
without complaint, where a GPU raises; indexing with a CPU index copies it over), so every case
also runs under ``OneDevice``, which refuses any operation on tensors of two devices.

Each case builds its modules and moves them with ``.to("meta")`` (as a chapter does with
``.to(device)``), feeds meta tensors, and back-propagates ``sum()`` of the outputs; every
parameter the case names must receive a gradient on meta. ``test_every_public_model_has_a_case``,
``test_every_public_attention_function_has_a_case`` and ``test_every_public_inference_name_has_a_case``
fail when a public model, attention function or function or class of ``attnlab.inference`` is added
without a case here.

Left out, each for a value that must be read on the host (listed in ``EXCLUDED`` below where it
is a public function):

- ``Seq2Seq.greedy_decode`` and ``Transformer.greedy_decode``: their early stop reads whether
  every sequence has ended. Their steps (``greedy_steps``) run here, for the full ``max_len``.
- ``Seq2Seq``'s source lengths are given on the CPU: packing a padded batch for the RNN
  (``pack_padded_sequence``) needs them on the host; the tokens are on meta.
- hard attention draws its locations without a generator here: PyTorch cannot make a
  generator on the meta device. ``test_samplers_are_made_on_the_models_device`` checks instead
  that the trainers make theirs where the model is.
- ``MovingAverageBaseline.update`` with one reward per row, ``(B,)``, returns a Python number
  (a host read, once per batch); its ``(B, L)`` form, the one the captioners use, runs here.
- ``padding_mask`` checks the values of the lengths on the host (``EXCLUDED``).
- ``speculative_decode`` reads how many draft tokens a round accepted (``EXCLUDED``); its
  acceptance rule, ``verify_draft``, runs here.
- ``paged_attention`` checks its block ids and lengths on the host, except on meta, where it
  checks only their shapes and dtypes: its case runs here, and the value checks run in the same
  case on every device with values.

The end of the file checks the device rule of ``attnlab.train`` on the CPU: evaluation runs
where the model is and never moves it; training moves it only to an explicit ``device``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import sys
import types
from collections.abc import Callable, Iterable

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import attnlab.attention
import attnlab.inference
import attnlab.kernels
import attnlab.models
from attnlab.attention import (
    BACKENDS,
    GATED_FORMS,
    GATES,
    ROPE_SCALINGS,
    SCORES,
    BlockSparseAttention,
    GatedLinearAttention,
    GroupedQueryAttention,
    LearnedPositionalEmbedding,
    MovingAverageBaseline,
    MultiHeadAttention,
    MultiHeadLatentAttention,
    RollingKVCache,
    RopeScaling,
    SinkKVCache,
    Traffic,
    alibi_bias,
    alibi_slopes,
    attended_pairs,
    attention,
    attention_entropy,
    attention_traffic,
    band_mask,
    band_to_dense,
    banded_attention,
    bigbird_mask,
    block_select_attention,
    block_selection_mask,
    blockwise_attention,
    causal_mask,
    copy_from_torch,
    elu_feature_map,
    flash_block_sizes,
    from_key_padding_mask,
    gated_attention_weights,
    gated_linear_attention,
    grouped_query_attention,
    hard_attend,
    kv_cache_bytes_per_token,
    latent_cache_bytes_per_token,
    linear_attention,
    linear_attention_recurrent,
    linear_attention_weights,
    local_attention,
    longformer_mask,
    make_score,
    masked_softmax,
    padding_mask,
    receptive_field,
    reinforce_loss,
    relative_rotation,
    repeat_kv,
    retnet_decay,
    rotary_embedding,
    rotary_frequencies,
    sample_location,
    scaled_dot_product_attention,
    sinusoidal_encoding,
    sliding_window_mask,
    sparse_recall,
    standard_attention,
    tiled_attention,
    to_float_mask,
    window_to_dense,
)
from attnlab.attention.cache import tensor_bytes
from attnlab.attention.scoring import AdditiveScore, Score
from attnlab.data import SCENE_WORDS, make_scenes
from attnlab.inference import (
    CacheMemory,
    KVBlockPool,
    PagedKVCache,
    cache_memory,
    merge_attention_partials,
    paged_attention,
    speculative_decode,
    split_kv_attention,
    verify_draft,
)
from attnlab.kernels import flash_attention, triton_available
from attnlab.models import (
    POSITIONS,
    AttentionDecoder,
    AttentionPool,
    BahdanauDecoder,
    Captioner,
    CaptionerConfig,
    ConvEncoder,
    Decoder,
    Encoder,
    EncoderOutput,
    HardCaptioner,
    HierarchicalClassifier,
    HierarchicalConfig,
    KVCache,
    LMCache,
    LMConfig,
    LuongDecoder,
    LuongLocalDecoder,
    PositionPredictor,
    QKNorm,
    RMSNorm,
    SelfAttentionTagger,
    Seq2Seq,
    Seq2SeqConfig,
    SoftCaptioner,
    StructuredClassifier,
    StructuredConfig,
    StructuredSelfAttention,
    SwiGLU,
    TaggerConfig,
    Transformer,
    TransformerConfig,
    TransformerLM,
    frobenius_penalty,
    hop_overlap,
)
from attnlab.models.lm import LMBlock
from attnlab.models.transformer import (
    DecoderLayer,
    EncoderLayer,
    FeedForward,
    TokenEmbedding,
    TransformerDecoder,
    TransformerEncoder,
)
from attnlab.train import caption_loss, gradient_noise, shift_captions, train_captioner

META = torch.device("meta")

# A case returns (outputs, leaves): the outputs (tensors, or nested tuples/lists/dataclasses of
# them) must all be on meta; the sum of those that need a gradient is back-propagated, and
# every leaf must then have a gradient on meta.
Case = Callable[[], tuple[object, list[torch.Tensor]]]
CASES: dict[str, tuple[Case, tuple[object, ...]]] = {}


def case(name: str, *covers: object) -> Callable[[Case], Case]:
    """Register a case; ``covers``: the public classes and functions it runs."""

    def register(fn: Case) -> Case:
        assert name not in CASES, name
        CASES[name] = (fn, covers)
        return fn

    return register


def on_meta(module: nn.Module) -> nn.Module:
    return module.to(META)


def params(*modules: nn.Module) -> list[torch.Tensor]:
    return [p for m in modules for p in m.parameters() if p.requires_grad]


def randn(*shape: int, grad: bool = False, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, device=META, dtype=dtype, requires_grad=grad)


def ids(*shape: int, high: int) -> torch.Tensor:
    return torch.randint(0, high, shape, device=META)


def mask(*shape: int) -> torch.Tensor:
    return torch.ones(*shape, dtype=torch.bool, device=META)


def tensors(out: object) -> Iterable[torch.Tensor]:
    """Every tensor in a (nested) output."""
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, (tuple, list)):
        for item in out:
            yield from tensors(item)
    elif hasattr(out, "__dataclass_fields__"):
        for name in out.__dataclass_fields__:
            yield from tensors(getattr(out, name))


# --- sequence to sequence (chapters 1, 2 and 4) -------------------------------------------------

B, S, T = 3, 5, 4
SRC_VOCAB, TGT_VOCAB = 12, 11


def s2s_config(**options: object) -> Seq2SeqConfig:
    return Seq2SeqConfig(SRC_VOCAB, TGT_VOCAB, embed_dim=6, hidden_dim=8, **options)


def host_lengths() -> torch.Tensor:
    return torch.tensor([5, 2, 4])  # on the CPU: packing reads them there (module docstring)


ENCODERS = {
    "gru-last": dict(cell="gru", context="last"),
    "lstm-bidirectional-mean": dict(cell="lstm", bidirectional=True, context="mean"),
    "gru-bidirectional-max": dict(cell="gru", bidirectional=True, context="max"),
}

for name, options in ENCODERS.items():

    @case(f"Encoder-{name}", Encoder)
    def _encoder(options=options):
        encoder = on_meta(Encoder(s2s_config(**options)))
        memory = encoder(ids(B, S, high=SRC_VOCAB), host_lengths())
        return (memory.hs, memory.context, memory.mask), params(encoder)


def _memory(config: Seq2SeqConfig) -> EncoderOutput:
    D = config.encoder_dim
    return EncoderOutput(hs=randn(B, S, D, grad=True), mask=mask(B, S), context=randn(B, D, grad=True))


for name, options in {
    "gru": dict(cell="gru"),
    "lstm-peeky-bidirectional": dict(cell="lstm", peeky=True, bidirectional=True),
}.items():

    @case(f"Decoder-{name}", Decoder)
    def _decoder(options=options):
        config = s2s_config(**options)
        decoder, memory = on_meta(Decoder(config)), _memory(config)
        logits, _, _ = decoder(ids(B, T, high=TGT_VOCAB), decoder.init_state(memory), memory)
        return logits, [*params(decoder), memory.context]


DECODERS = {  # name: (decoder class and options, config options)
    "plain": (None, {}),
    "bahdanau-additive": ((BahdanauDecoder, {}), dict(bidirectional=True)),
    "bahdanau-general-lstm": ((BahdanauDecoder, {"score": "general"}), dict(cell="lstm")),
    **{f"luong-{score}": ((LuongDecoder, {"score": score}), {}) for score in SCORES},
    "local-m": ((LuongLocalDecoder, {"mode": "local-m", "window": 1}), dict(bidirectional=True)),
    "local-p-lstm": ((LuongLocalDecoder, {"mode": "local-p", "window": 2}), dict(cell="lstm", bidirectional=True)),
}


def s2s_model(name: str) -> Seq2Seq:
    choice, options = DECODERS[name]
    config = s2s_config(**options)
    decoder = None if choice is None else choice[0](config, **choice[1])
    return on_meta(Seq2Seq(config, decoder))


def _decoder_classes(name: str) -> tuple[type, ...]:
    choice = DECODERS[name][0]
    extra = (PositionPredictor,) if "local-p" in name else ()
    return (Seq2Seq, Encoder, Decoder if choice is None else choice[0], *extra)


for name in DECODERS:

    @case(f"Seq2Seq-{name}", *_decoder_classes(name))
    def _seq2seq(name=name):
        model = s2s_model(name)
        logits, weights = model(ids(B, S, high=SRC_VOCAB), host_lengths(), ids(B, T, high=TGT_VOCAB))
        return (logits, weights), params(model)

    @case(f"Seq2Seq-greedy_steps-{name}", *_decoder_classes(name)[1:])  # not forward: Seq2Seq's hook is silent
    def _seq2seq_steps(name=name):
        model = s2s_model(name).eval()
        with torch.no_grad():
            steps = list(model.greedy_steps(ids(B, S, high=SRC_VOCAB), host_lengths(), max_len=4))
        assert len(steps) == 4 and steps[0][0].shape == (B, 1)
        return steps, []


@case("PositionPredictor", PositionPredictor)
def _position_predictor():
    predictor = on_meta(PositionPredictor(8, 5))
    return predictor(randn(B, T, 8, grad=True), ids(B, high=S) + 1), params(predictor)


# --- the Transformer (chapter 6) ----------------------------------------------------------------


def transformer(**options: object) -> Transformer:
    config = TransformerConfig(SRC_VOCAB, TGT_VOCAB, d_model=16, num_heads=2, dim_feedforward=24, max_len=16, **options)
    return on_meta(Transformer(config))


TRANSFORMERS = {
    "post-LN": {},
    "pre-LN-dropout": dict(norm_first=True, dropout=0.1),
    "final-norm-gelu": dict(final_norm=True, activation="gelu"),
}
STACKS = (
    Transformer,
    TransformerEncoder,
    TransformerDecoder,
    EncoderLayer,
    DecoderLayer,
    FeedForward,
    TokenEmbedding,
    MultiHeadAttention,
)

for name, options in TRANSFORMERS.items():

    @case(f"Transformer-{name}", *STACKS)
    def _transformer(options=options):
        model = transformer(**options).train()
        logits, weights = model(
            ids(B, S, high=SRC_VOCAB), ids(B, high=S) + 1, ids(B, T, high=TGT_VOCAB), need_weights=True
        )
        return (logits, weights), params(model)


for use_cache in (True, False):

    @case(f"Transformer-greedy_steps-{'kv-cache' if use_cache else 'no-cache'}", *STACKS[1:])
    def _transformer_steps(use_cache=use_cache):
        model = transformer().eval()
        with torch.no_grad():
            steps = list(model.greedy_steps(ids(B, S, high=SRC_VOCAB), ids(B, high=S) + 1, 4, use_cache=use_cache))
        assert len(steps) == 4 and steps[-1][1].shape == (B, 1, S)
        return steps, []


@case("Transformer-greedy_steps-no-decoder-layers", TokenEmbedding)
def _transformer_without_layers():
    model = transformer(num_encoder_layers=0, num_decoder_layers=0).eval()
    with torch.no_grad():
        return list(model.greedy_steps(ids(B, S, high=SRC_VOCAB), ids(B, high=S) + 1, 3)), []


# --- chapter 8's language models: every kind of position and attention, whole and with caches ---

LMS = {
    f"{positions}-{attention}-{'causal' if causal else 'encoder'}-G{groups}": dict(
        positions=positions, attention=attention, causal=causal, num_kv_heads=groups
    )
    for positions in ("none", "sinusoidal", "learned", "rope", "alibi")
    for attention in ("softmax", "linear")
    for causal in (True, False)
    for groups in (4, 1)
    if not (attention == "linear" and positions == "alibi")
}
for method in ROPE_SCALINGS:  # rotary positions stretched past a trained length of 4 (chapter 8)
    LMS[f"rope-{method}-causal-G2"] = dict(
        positions="rope", attention="softmax", causal=True, num_kv_heads=2, rope_scaling=RopeScaling(method, 4, 4)
    )


def lm(**options: object) -> TransformerLM:
    return on_meta(
        TransformerLM(LMConfig(13, d_model=16, num_heads=4, num_layers=2, dim_feedforward=8, max_len=16, **options))
    )


for name, options in LMS.items():

    @case(f"TransformerLM-{name}", TransformerLM, LMBlock, FeedForward)
    def _lm(options=options):
        model = lm(**options).train()
        return model(ids(B, 6, high=13)), params(model)

    if options["causal"]:

        @case(f"TransformerLM-cached-steps-{name}", TransformerLM, LMBlock, LMCache)
        def _lm_steps(options=options):
            model = lm(**options)
            caches = model.new_caches()
            out = [model(ids(B, 3, high=13), 0, caches)] + [model(ids(B, 1, high=13), t, caches) for t in (3, 4)]
            assert all(c.length == 5 for c in caches)
            return out, params(model)


@case("TransformerLM-sparse-and-gated", TransformerLM, LMBlock, block_select_attention)
def _lm_sparse():
    # chapter "Beyond softmax": a sparse layer (each query's top 2 blocks of 2 keys) under a gated one
    model = lm(positions="rope", attention=("sparse", "gated"), num_kv_heads=2, block_size=2, top_k=2).train()
    return model(ids(B, 6, high=13)), params(model)


@case("TransformerLM-windows-and-sinks", TransformerLM, LMBlock, SinkKVCache, sliding_window_mask)
def _lm_windows():
    model = lm(positions="rope", window=(2, None), sinks=1)
    latent = lm(positions="rope", attention="latent", latent_dim=8, rope_dim=2)
    latent_caches = latent.new_caches()
    out_latent = [latent(ids(B, 3, high=13), 0, latent_caches), latent(ids(B, 1, high=13), 3, latent_caches)]
    caches = model.new_caches()
    out = [model(ids(B, 5, high=13))]
    out += [model(ids(B, 3, high=13), 0, caches)] + [model(ids(B, 1, high=13), t, caches) for t in (3, 4, 5)]
    assert caches[0].cached_length == 1 + 2 and caches[1].cached_length == 6
    return out + out_latent, params(model) + params(latent)


# --- chapter 8's modern block: RMSNorm, SwiGLU, QK-norm, alone and in TransformerLM ---------------


@case("RMSNorm-SwiGLU-QKNorm", RMSNorm, SwiGLU, QKNorm)
def _modern_parts():
    norm, ff, qk = on_meta(RMSNorm(6)), on_meta(SwiGLU(6, 10, bias=True, dropout=0.1)), on_meta(QKNorm(4))
    x, half = randn(B, T, 6, grad=True), randn(B, T, 6, grad=True, dtype=torch.float16)
    q, k = randn(B, 4, T, 4, grad=True), randn(B, 2, S, 4, grad=True)
    out_half = norm(half)  # computed in float32, returned in float16
    assert out_half.dtype == torch.float16
    return (norm(x), out_half, ff(x), *qk(q, k)), [x, half, q, k, *params(norm, ff, qk)]


MODERN_LMS = {
    f"{positions}-{attention}-{'causal' if causal else 'encoder'}": dict(
        positions=positions, attention=attention, causal=causal, norm="rms", feedforward="swiglu", qk_norm=True
    )
    for positions in ("rope", "alibi")
    for attention in ("softmax", "linear")
    for causal in (True, False)
    if not (attention == "linear" and positions == "alibi")
}

for name, options in MODERN_LMS.items():

    @case(f"TransformerLM-modern-{name}", TransformerLM, LMBlock, RMSNorm, SwiGLU, QKNorm)
    def _modern_lm(options=options):
        model = lm(dropout=0.1, **options).train()
        return model(ids(B, 6, high=13)), params(model)

    if options["causal"]:

        @case(f"TransformerLM-modern-cached-steps-{name}", TransformerLM, LMBlock, LMCache, QKNorm)
        def _modern_lm_steps(options=options):
            model = lm(num_kv_heads=2, **options)
            caches = model.new_caches()
            out = [model(ids(B, 3, high=13), 0, caches)] + [model(ids(B, 1, high=13), t, caches) for t in (3, 4)]
            assert all(c.length == 5 for c in caches)
            return out, params(model)


@case("Transformer-KVCache-decode-with-gradients", DecoderLayer, KVCache)
def _kv_cache_decoding():
    model = transformer()
    memory, src_mask, _ = model.encode(ids(B, S, high=SRC_VOCAB), ids(B, high=S) + 1)
    caches = [KVCache() for _ in model.decoder.layers]
    logits = [model.decode(ids(B, 1, high=TGT_VOCAB), memory, src_mask, caches)[0] for _ in range(3)]
    assert caches[0].length == 3
    return logits, params(model)


# --- taggers (chapter 5), classifiers and captioners (chapter 4) -------------------------------

for positions in POSITIONS:
    for backend in BACKENDS:
        for need_weights in (False, True):

            @case(
                f"SelfAttentionTagger-{positions}-{backend}-{'weights' if need_weights else 'no-weights'}",
                SelfAttentionTagger,
                MultiHeadAttention,
            )
            def _tagger(positions=positions, backend=backend, need_weights=need_weights):
                config = TaggerConfig(
                    10, 4, num_outputs=2, embed_dim=8, max_len=6, positions=positions, backend=backend
                )
                tagger = on_meta(SelfAttentionTagger(config))
                return tagger(ids(B, 6, high=10), need_weights=need_weights), params(tagger)


@case("StructuredClassifier", StructuredClassifier, StructuredSelfAttention, frobenius_penalty, hop_overlap)
def _structured():
    model = on_meta(
        StructuredClassifier(StructuredConfig(20, 3, embed_dim=6, hidden_dim=5, attention_dim=4, hops=3, mlp_dim=7))
    )
    logits, hops = model(ids(B, 7, high=20))
    return (logits, frobenius_penalty(hops), hop_overlap(hops)), params(model)


@case("StructuredSelfAttention-AttentionPool", StructuredSelfAttention, AttentionPool)
def _pools():
    hops, pool = on_meta(StructuredSelfAttention(6, 4, 2)), on_meta(AttentionPool(6, 4))
    states = randn(B, 7, 6, grad=True)
    return (hops(states, mask(B, 7)), pool(states, mask(B, 7)), pool(states)), [*params(hops, pool), states]


@case("HierarchicalClassifier", HierarchicalClassifier, AttentionPool)
def _hierarchical():
    model = on_meta(HierarchicalClassifier(HierarchicalConfig(20, 3, embed_dim=6, hidden_dim=5, attention_dim=4)))
    return model(ids(B, 4, 5, high=20)), params(model)


CAPTIONER = CaptionerConfig(image_size=16, grid=2, channels=(4, 6), embed_dim=5, hidden_dim=7, attention_dim=4)
CAPTION_LENGTH = 4


def captioner(kind: type, **options: object) -> Captioner:
    config = (
        CAPTIONER
        if not options.pop("init_from_mean", False)
        else CaptionerConfig(**{**CAPTIONER.__dict__, "init_from_mean": True})
    )
    return on_meta(kind(config, **options))


def images() -> torch.Tensor:
    return randn(B, 3, 16, 16)


def captions() -> torch.Tensor:
    return ids(B, CAPTION_LENGTH, high=len(SCENE_WORDS))


@case("ConvEncoder", ConvEncoder)
def _conv_encoder():
    encoder = on_meta(ConvEncoder(CAPTIONER))
    return encoder(randn(B, 3, 16, 16, grad=True)), params(encoder)


CAPTIONERS = {
    "soft": (SoftCaptioner, {}),
    "soft-init-from-mean": (SoftCaptioner, {"init_from_mean": True}),
    "hard": (HardCaptioner, {}),
    "hard-expected-prob": (HardCaptioner, {"expected_prob": 0.5}),
}

for name, (kind, options) in CAPTIONERS.items():

    @case(f"{kind.__name__}-forward-{name}", kind, ConvEncoder, AdditiveScore)
    def _captioner_forward(kind=kind, options=options):
        model = captioner(kind, **dict(options)).train()  # hard attention samples its locations
        out = model(images(), shift_captions(captions()))
        assert (out.log_prob is not None) == (kind is HardCaptioner)
        # hard attention: f_att learns only through log_prob, by REINFORCE, not from the logits
        leaves = params(model) if kind is SoftCaptioner else params(model.encoder, model.lstm)
        return out, leaves

    @case(f"{kind.__name__}-generate-{name}", ConvEncoder)  # generate() is not forward: no hook sees kind
    def _captioner_generate(kind=kind, options=options):
        model = captioner(kind, **dict(options))
        outputs = []
        for mode in (False, True):  # eval: most likely location; train: sampled (hard)
            model.train(mode)
            outputs.append(model.generate(images(), CAPTION_LENGTH))
        return outputs, []


for reward in ("to_go", "sequence"):
    for baseline in ("moving-average", "fixed", "none"):

        @case(
            f"caption_loss-hard-{reward}-{baseline}",
            HardCaptioner,
            caption_loss,
            reinforce_loss,
            MovingAverageBaseline,
            attention_entropy,
        )
        def _caption_loss(reward=reward, baseline=baseline):
            model = captioner(HardCaptioner).train()
            b = {"moving-average": MovingAverageBaseline(0.9), "fixed": randn(CAPTION_LENGTH), "none": None}[baseline]
            if isinstance(b, MovingAverageBaseline):  # a second batch uses the average of the first
                caption_loss(model, images(), captions(), baseline=b, reward=reward)
            loss, _ = caption_loss(model, images(), captions(), baseline=b, reward=reward, entropy_weight=0.01)
            return loss, params(model)  # f_att included: REINFORCE reaches it


@case("caption_loss-soft", SoftCaptioner, caption_loss)
def _caption_loss_soft():
    model = captioner(SoftCaptioner)
    return caption_loss(model, images(), captions())[0], params(model)


# --- attention functions and modules (chapters 2, 3, 5, 7) ---------------------------------------

L, E = 4, 8


def qkv(batch: tuple[int, ...] = (2, 3), length: int = L, keys: int = S) -> list[torch.Tensor]:
    return [randn(*batch, length, E, grad=True), randn(*batch, keys, E, grad=True), randn(*batch, keys, E, grad=True)]


def float_mask(*shape: int) -> torch.Tensor:
    return to_float_mask(mask(*shape))


MASKS = {
    "no-mask": lambda: {},
    "bool-mask": lambda: {"attn_mask": mask(L, S)},
    "float-mask": lambda: {"attn_mask": float_mask(2, 1, L, S)},
    "causal": lambda: {"is_causal": True},
}

# The Triton kernel (backend "triton") takes no dropout and no mask but the causal one and a
# key-padding mask: its cases are its own, below.
for backend in ("naive", "fast"):
    for name, kwargs in MASKS.items():

        @case(f"scaled_dot_product_attention-{backend}-{name}", scaled_dot_product_attention)
        def _sdpa(backend=backend, kwargs=kwargs):
            q, k, v = qkv()
            return scaled_dot_product_attention(q, k, v, backend=backend, **kwargs()), [q, k, v]

    @case(f"scaled_dot_product_attention-{backend}-dropout-scale", scaled_dot_product_attention)
    def _sdpa_dropout(backend=backend):
        q, k, v = qkv()
        return scaled_dot_product_attention(q, k, v, mask(L, S), dropout_p=0.2, scale=0.5, backend=backend), [q, k, v]


for name, kwargs in {
    "no-mask": lambda: {},
    "key-padding": lambda: {"attn_mask": mask(2, 1, 1, S)},
    "causal": lambda: {"is_causal": True},
}.items():

    @case(f"scaled_dot_product_attention-triton-{name}", scaled_dot_product_attention, flash_attention)
    def _sdpa_triton(kwargs=kwargs):
        q, k, v = qkv()
        return scaled_dot_product_attention(q, k, v, backend="triton", **kwargs()), [q, k, v]


for name, kwargs in MASKS.items():

    @case(f"blockwise_attention-{name}", blockwise_attention)
    def _blockwise(kwargs=kwargs):
        q, k, v = qkv(length=6, keys=6) if kwargs().get("attn_mask") is None else qkv()
        return blockwise_attention(q, k, v, block_size=2, **kwargs()), [q, k, v]


for name, make_mask in [
    ("default-score", lambda: None),
    ("bool-mask", lambda: mask(B, L, S)),
    ("float-mask", lambda: float_mask(B, 1, S)),
]:

    @case(f"attention-{name}", attention)
    def _attention(make_mask=make_mask):
        q, k, v = qkv((B,))
        return attention(q, k, v, mask=make_mask()), [q, k, v]


for score in SCORES:

    @case(f"attention-score-{score}", attention, make_score)
    def _attention_with_score(score=score):
        fn = on_meta(make_score(score, E, E, attention_dim=5))
        q, k, v = qkv((B,))
        return attention(q, k, v, score=fn, mask=mask(B, 1, S)), [q, k, v, *params(fn)]


for name, make_mask in [("none", lambda: None), ("bool", lambda: mask(B, L, S)), ("float", lambda: float_mask(L, S))]:

    @case(f"masked_softmax-{name}", masked_softmax)
    def _masked_softmax(make_mask=make_mask):
        scores = randn(B, L, S, grad=True)
        return masked_softmax(scores, make_mask()), [scores]


@case("masks", causal_mask, to_float_mask, from_key_padding_mask, band_mask)
def _masks():
    made = [
        causal_mask(L, S, device=META),
        causal_mask(L, S, align="bottom-right", device=META),
        to_float_mask(mask(L, S)),
        from_key_padding_mask(mask(B, S)),
        band_mask(6, 2, device=META),
        band_mask(6, 1, causal=True, device=META),
    ]
    return made, []


for causal in (False, True):
    for chunk_size in (None, 3):

        @case(f"banded_attention-{'causal' if causal else 'full'}-chunk-{chunk_size}", banded_attention, band_to_dense)
        def _banded(causal=causal, chunk_size=chunk_size):
            q, k, v = qkv(length=7, keys=7)
            out, banded = banded_attention(q, k, v, 2, causal=causal, chunk_size=chunk_size)
            return (out, band_to_dense(banded, 2)), [q, k, v]


for gaussian in (False, True):
    for with_lengths in (False, True):

        @case(
            f"local_attention-{'gaussian' if gaussian else 'flat'}-{'lengths' if with_lengths else 'full'}",
            local_attention,
            window_to_dense,
        )
        def _local(gaussian=gaussian, with_lengths=with_lengths):
            score = on_meta(make_score("general", E, E))
            q, k, v = qkv((B,))
            centres = randn(B, L, grad=True)
            lengths = ids(B, high=S) + 1 if with_lengths else None
            context, weights, positions = local_attention(
                score, q, k, v, centres, 2, lengths=lengths, gaussian=gaussian
            )
            leaves = [q, k, v] + params(score) + ([centres] if gaussian else [])
            return (context, window_to_dense(weights, positions, S)), leaves


for score in SCORES:

    @case(f"score-{score}", make_score, type(make_score(score, 4, 4)))
    def _score(score=score):
        fn = on_meta(make_score(score, E, E, attention_dim=5))
        q, k = randn(B, L, E, grad=True), randn(B, S, E, grad=True)
        return fn(q, k), [q, k, *params(fn)]


@case("score-additive-different-sizes", make_score)
def _score_sizes():
    fn = on_meta(make_score("additive", 5, 7, attention_dim=3))
    q, k = randn(B, L, 5, grad=True), randn(B, S, 7, grad=True)
    return fn(q, k), [q, k, *params(fn)]


MHA_CASES = {
    "self": lambda x: dict(query=x, key=x, value=x),
    "key-padding": lambda x: dict(query=x, key=x, value=x, key_padding_mask=~mask(B, S)),
    "bool-mask-causal": lambda x: dict(query=x, key=x, value=x, attn_mask=mask(S, S), is_causal=True),
    "float-mask-key-padding": lambda x: dict(
        query=x, key=x, value=x, attn_mask=float_mask(B, 1, S, S), key_padding_mask=~mask(B, S)
    ),
}

for backend in ("naive", "fast"):
    for name, make_args in MHA_CASES.items():
        for need_weights in (False, True):

            @case(
                f"MultiHeadAttention-{backend}-{name}-{'weights' if need_weights else 'no-weights'}", MultiHeadAttention
            )
            def _mha(backend=backend, make_args=make_args, need_weights=need_weights):
                mha = on_meta(MultiHeadAttention(E, 2, dropout=0.1, backend=backend)).train()
                x = randn(B, S, E, grad=True)
                return mha(**make_args(x), need_weights=need_weights), [*params(mha), x]


@case("MultiHeadAttention-cross-kdim-vdim", MultiHeadAttention)
def _mha_cross():
    mha = on_meta(MultiHeadAttention(E, 2, kdim=5, vdim=3, bias=False))
    q, k, v = randn(B, L, E, grad=True), randn(B, S, 5, grad=True), randn(B, S, 3, grad=True)
    return mha(q, k, v, need_weights=True, average_attn_weights=False), [*params(mha), q, k, v]


@case("copy_from_torch", copy_from_torch, MultiHeadAttention)
def _copy_from_torch():
    ours = copy_from_torch(on_meta(MultiHeadAttention(E, 2)), on_meta(nn.MultiheadAttention(E, 2, batch_first=True)))
    x = randn(B, S, E, grad=True)
    return ours(x, x, x), params(ours)


@case("positional-encodings", sinusoidal_encoding, relative_rotation, LearnedPositionalEmbedding)
def _positions():
    learned = on_meta(LearnedPositionalEmbedding(10, E))
    x = randn(B, 6, E, grad=True)
    return (learned(x), sinusoidal_encoding(10, E, device=META), relative_rotation(3, E, device=META)), params(learned)


@case("hard-attention", sample_location, hard_attend, attention_entropy, reinforce_loss, MovingAverageBaseline)
def _hard():
    logits = randn(B, S, grad=True)
    weights = logits.softmax(-1)
    index, log_prob = sample_location(weights, mask(B, S))
    context, _, hard_log_prob = hard_attend(weights, randn(B, S, E))
    reward = randn(B, T)
    step_log_prob = log_prob[:, None].expand(B, T)
    baseline = MovingAverageBaseline(0.9)
    baseline.update(reward, mask(B, T))
    loss = reinforce_loss(
        step_log_prob,
        reward,
        baseline.update(reward, mask(B, T)),
        entropy=attention_entropy(weights)[:, None].expand(B, T),
        entropy_weight=0.1,
    )
    return (index, context, hard_log_prob, loss), [logits]


# --- chapter 8: the attention of today's models ------------------------------------------------


@case("rotary-and-alibi", rotary_embedding, alibi_slopes, alibi_bias)
def _rotary_alibi():
    q, k, _ = qkv()
    positions = torch.arange(3, 3 + L, device=META)
    rotated = (rotary_embedding(q, positions), rotary_embedding(k))
    bias = alibi_bias(3, L, S, device=META)
    return (rotated, bias, alibi_slopes(5, device=META)), [q, k]


@case("rotary-scalings", rotary_frequencies, rotary_embedding)
def _rotary_scalings():
    q, k, _ = qkv()
    positions = torch.arange(3, 3 + L, device=META)
    out = []
    for method in ROPE_SCALINGS:
        scaling = RopeScaling(method, 4, original_length=16)
        out += [rotary_embedding(q, positions, scaling=scaling), rotary_embedding(k, scaling=scaling)]
        out.append(rotary_frequencies(E, scaling=scaling, device=META))
    return out, [q, k]


for causal in (False, True):

    @case(
        f"grouped_query_attention-{'causal' if causal else 'full'}",
        grouped_query_attention,
        repeat_kv,
        kv_cache_bytes_per_token,
    )
    def _gqa_function(causal=causal):
        q = randn(B, 4, S, E, grad=True)
        k, v = randn(B, 2, S, E, grad=True), randn(B, 2, S, E, grad=True)
        assert kv_cache_bytes_per_token(2, 2, E) == 2 * 2 * 2 * E * 4
        return (grouped_query_attention(q, k, v, is_causal=causal), repeat_kv(k, 2)), [q, k, v]


for kv_heads in (1, 2, 4):

    @case(f"GroupedQueryAttention-{kv_heads}-kv-heads", GroupedQueryAttention)
    def _gqa_module(kv_heads=kv_heads):
        gqa = on_meta(GroupedQueryAttention(E, 4, kv_heads))
        x = randn(B, S, E, grad=True)
        return gqa(x, is_causal=True), [*params(gqa), x]


for absorb in (False, True):
    for query_latent_dim in (None, 6):

        @case(
            f"MultiHeadLatentAttention-{'absorbed' if absorb else 'plain'}-query-latent-{query_latent_dim}",
            MultiHeadLatentAttention,
            latent_cache_bytes_per_token,
        )
        def _mla(absorb=absorb, query_latent_dim=query_latent_dim):
            mla = on_meta(
                MultiHeadLatentAttention(E, 4, latent_dim=5, rope_dim=4, query_latent_dim=query_latent_dim, bias=True)
            )
            x, cache = randn(B, S, E, grad=True), LMCache()
            whole = mla(x, absorb=absorb), mla(x, causal=False, absorb=absorb)
            steps = [mla(x[:, :3], 0, cache, absorb=absorb)] + [
                mla(x[:, t : t + 1], t, cache, absorb=absorb) for t in range(3, S)
            ]
            assert cache.nbytes == B * S * latent_cache_bytes_per_token(1, 5, 4)  # sizes, read without the values
            return (whole, steps), [*params(mla), x]


@case("sliding-window-generation", RollingKVCache, receptive_field, tensor_bytes)
def _rolling():
    cache, outputs = RollingKVCache(2), []
    q, k, v = qkv(length=6, keys=6)
    for i in range(6):
        keys, values = cache.append(k[:, :, i : i + 1], v[:, :, i : i + 1])
        outputs.append(scaled_dot_product_attention(q[:, :, i : i + 1], keys, values))
    assert receptive_field(3, 2) == 6
    assert cache.cached_length == 3 and cache.cached_keys is not None and cache.cached_keys.shape == keys.shape
    assert cache.nbytes == tensor_bytes(k[:, :, :3], v[:, :, :3])  # sizes, read without the values
    return outputs, [q]


@case("linear-attention", linear_attention, linear_attention_recurrent, linear_attention_weights, elu_feature_map)
def _linear():
    q, k, v = qkv(length=5, keys=5)
    out, state = linear_attention_recurrent(q, k, v)
    return (
        linear_attention(q, k, v),
        linear_attention(q, k, v, causal=True),
        out,
        state,
        linear_attention_weights(q, k, causal=True),
        elu_feature_map(q),
    ), [q, k, v]


for gate_kind in ("scalar", "vector"):

    @case(f"gated-linear-attention-{gate_kind}", gated_linear_attention, gated_attention_weights, retnet_decay)
    def _gated(gate_kind=gate_kind):
        q, k, v = qkv(batch=(B, 3), length=5, keys=5)
        gate_logits = randn(B, 3, 5, *((E,) if gate_kind == "vector" else ()), grad=True)
        log_gate = torch.nn.functional.logsigmoid(gate_logits)
        state = randn(B, 3, E, E, grad=True)
        outputs = [gated_linear_attention(q, k, v, log_gate, form=form, chunk_size=2) for form in GATED_FORMS]
        continued = gated_linear_attention(q, k, v, log_gate, form="chunked", chunk_size=3, state=state)
        fixed = retnet_decay(3, log=True, device=META)[None, :, None].expand(B, 3, 5)
        weights = gated_attention_weights(q, k, fixed), gated_attention_weights(q, k, log_gate)
        return (outputs, continued, weights), [q, k, v, gate_logits, state]


for gate_kind in GATES:

    @case(f"GatedLinearAttention-{gate_kind}", GatedLinearAttention)
    def _gated_module(gate_kind=gate_kind):
        mixer = on_meta(GatedLinearAttention(E, 2, gate=gate_kind))
        x = randn(B, 5, E, grad=True)
        whole, state = mixer(x)
        steps = [mixer(x[:, :3], form="parallel"), mixer(x[:, 3:], state, form="recurrent")]
        return (whole, state, steps), [*params(mixer), x]


@case("GatedLinearAttention-conv", GatedLinearAttention)
def _gated_conv():
    mixer = on_meta(GatedLinearAttention(E, 2, conv_size=3))
    x = randn(B, 5, E, grad=True)
    whole, state = mixer(x)
    steps = [mixer(x[:, :3], form="parallel"), mixer(x[:, 3:], state, form="recurrent", history=x[:, :3])]
    return (whole, state, steps), [*params(mixer), x]


@case("tiled-and-standard-attention", tiled_attention, standard_attention, attention_traffic, flash_block_sizes)
def _tiled():
    q, k, v = qkv(keys=7)
    traffic = Traffic()
    outputs = (tiled_attention(q, k, v, 3, 2, traffic), standard_attention(q, k, v))
    assert traffic == attention_traffic(L, 7, E, block_q=3, block_k=2, heads=6)
    assert flash_block_sizes(4 * E * 4, E) == (4, 4)
    return outputs, [q, k, v]


# --- the chapter "Beyond softmax": sparse attention -----------------------------------------------


for causal, window in ((True, None), (True, 2), (False, 1)):

    @case(
        f"block-sparse-attention-{'causal' if causal else 'encoder'}-window-{window}",
        block_select_attention,
        block_selection_mask,
        attended_pairs,
        sparse_recall,
        BlockSparseAttention,
    )
    def _block_sparse(causal=causal, window=window):
        q = randn(B, 4, 7, E, grad=True)  # N = 7: a last block of 1 key
        k, v = randn(B, 2, 7, E, grad=True), randn(B, 2, 7, E, grad=True)
        out, selected = block_select_attention(q, k, v, block_size=3, top_k=2, causal=causal, window=window)
        mask = block_selection_mask(selected, 3, causal=causal, window=window)
        weights = torch.softmax(q @ repeat_kv(k, 2).transpose(-1, -2), dim=-1)  # (B, 4, 7, 7), dense
        module = on_meta(BlockSparseAttention(E, 2, block_size=3, top_k=1, window=window))
        x = randn(B, 7, E, grad=True)
        mixed, module_selected = module(x, causal=causal, need_selection=True)
        outputs = (out, selected, attended_pairs(mask), sparse_recall(weights, mask), mixed, module_selected)
        return outputs, [q, k, v, x, *params(module)]


@case("sparse-patterns", longformer_mask, bigbird_mask, attended_pairs)
def _sparse_patterns():
    masks = (
        longformer_mask(9, 1, [0, 4], device=META),
        longformer_mask(9, 2, (8,), causal=True, device=META),
        bigbird_mask(12, 2, device=META),
        bigbird_mask(12, 3, window_blocks=0, global_blocks=2, random_blocks=2, device=META),
    )
    assert all(m.shape == (9, 9) for m in masks[:2]) and all(m.shape == (12, 12) for m in masks[2:])
    return (masks, attended_pairs(torch.stack(masks[2:]))), []


# --- chapter 9: attention at inference ----------------------------------------------------------


@case("speculative-verification", verify_draft)
def _verify():
    target = randn(B, 4, 7, grad=True)  # (B, k + 1, V) logits
    draft = randn(B, 3, 7, grad=True)  # (B, k, V)
    accepted, token = verify_draft(target, draft, ids(B, 3, high=7))
    assert accepted.shape == token.shape == (B,)
    return (target.sum(),), [target]


@case("paged-attention", KVBlockPool, PagedKVCache, paged_attention, cache_memory)
def _paged():
    pool = KVBlockPool(6, 2, 2, E, device=META)
    cache = PagedKVCache(pool, B)
    keys, values = cache.append(randn(B, 2, 3, E), randn(B, 2, 3, E))  # a prompt of 3 positions, in lockstep
    cache.append_row(0, randn(2, 1, E), randn(2, 1, E))  # one more for row 0: lengths (4, 3, 3)
    memory = cache_memory(cache.lengths, max_length=4, block_size=2, bytes_per_token=pool.bytes_per_token)
    assert cache.nbytes == memory.paged_bytes == 6 * pool.block_nbytes and pool.num_free == 0
    q = randn(B, 4, 1, E, grad=True)
    key_pool, value_pool = randn(6, 2, 2, E, grad=True), randn(6, 2, 2, E, grad=True)
    tables, lengths = cache.block_table_tensor(), cache.length_tensor()
    outputs = (
        paged_attention(q, key_pool, value_pool, tables, lengths),  # the block ids are not checked on meta
        paged_attention(q, pool.key_pool, pool.value_pool, tables, lengths, scale=0.5),
        grouped_query_attention(q, keys, values),
        cache.cached_keys,
    )
    cache.free()
    assert pool.num_free == 6
    return outputs, [q, key_pool, value_pool]


@case("split-kv-decoding", split_kv_attention, merge_attention_partials)
def _split_kv():
    q = randn(B, 4, 2, E, grad=True)
    k, v = randn(B, 2, 7, E, grad=True), randn(B, 2, 7, E, grad=True)
    outputs, lses = randn(3, B, 4, E, grad=True), randn(3, B, 4, grad=True)
    return (
        split_kv_attention(q, k, v, num_splits=3),
        split_kv_attention(q, k, v, num_splits=2, attn_mask=causal_mask(2, 7, align="bottom-right", device=META)),
        split_kv_attention(q, k, v, num_splits=9, attn_mask=float_mask(B, 1, 2, 7), scale=0.5),
        merge_attention_partials(outputs, lses),
    ), [q, k, v, outputs, lses]


# --- the tests ------------------------------------------------------------------------------------


class OneDevice(TorchDispatchMode):
    """Refuse every operation whose tensors lie on more than one device.

    0-d tensors do not count (PyTorch takes a 0-d CPU tensor as a number on any device). The
    one exception is packing a padded batch, whose lengths PyTorch requires on the CPU.
    """

    ALLOWED = frozenset({torch.ops.aten._pack_padded_sequence.default})

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        devices = {t.device for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and t.dim() > 0}
        if len(devices) > 1 and func not in self.ALLOWED:
            raise RuntimeError(f"{func}: tensors on more than one device, {sorted(map(str, devices))}")
        return func(*args, **kwargs)


@pytest.mark.parametrize("name", sorted(CASES))
def test_runs_on_meta(name):
    _run_case(name)


# The same cases with values, on every device this machine has (the CPU here; CUDA and MPS where
# present: `make test-gpu` runs them on the GPU). A case's modules and tensors are made on
# ``META``, so pointing it at a real device runs the real kernels there.
DEVICES = (
    ["cpu"]
    + (["cuda"] if torch.cuda.is_available() else [])
    + (["mps"] if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available() else [])
)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_runs_on_each_available_device(name, device, monkeypatch):
    # torch.device("cuda") differs from the device a tensor reports, "cuda:0": take the latter
    monkeypatch.setattr(sys.modules[__name__], "META", torch.empty(0, device=device).device)
    torch.manual_seed(0)
    outputs = _run_case(name)
    for t in outputs:
        if t.is_floating_point():
            assert not torch.isnan(t).any(), f"{name}: NaN in an output on {device}"


def _run_case(name: str) -> list[torch.Tensor]:
    run, covers = CASES[name]
    seen: set[type] = set()
    hook = nn.modules.module.register_module_forward_hook(lambda module, args, out: seen.add(type(module)))
    try:
        with OneDevice():
            out, leaves = run()
    finally:
        hook.remove()
    outputs = list(tensors(out))
    assert outputs, "the case returned no tensor"
    assert all(t.device == META for t in outputs), [t.device for t in outputs]
    for cls in covers:  # the modules the case claims to run did run (a forward hook saw them)
        if inspect.isclass(cls) and issubclass(cls, nn.Module):
            assert any(issubclass(kind, cls) for kind in seen), f"{cls.__name__} never ran"
    differentiable = [t for t in outputs if t.requires_grad]
    assert bool(differentiable) == bool(leaves), "leaves must be given exactly when an output has a gradient"
    if differentiable:
        with OneDevice():
            sum(t.sum() for t in differentiable).backward()
        missing = [tuple(leaf.shape) for leaf in leaves if leaf.grad is None]
        assert not missing, f"no gradient reached leaves of shapes {missing}"
        assert all(leaf.grad.device == META for leaf in leaves)
    return outputs


def test_the_meta_device_refuses_what_a_gpu_would():
    """The premise of this file: if PyTorch stopped raising here, every case would pass vacuously."""
    x = torch.ones(3, device=META)
    with pytest.raises(RuntimeError, match="expected device meta"):
        x + torch.ones(3)  # a CPU tensor in a meta computation
    with pytest.raises(RuntimeError, match="meta"):
        x.sum().item()  # a host read
    with pytest.raises(RuntimeError, match="meta"):
        bool(x.any())
    with pytest.raises(NotImplementedError, match="meta"):
        x.tolist()
    embedding = on_meta(nn.Embedding(5, 3))
    embedding(torch.arange(3))  # CPU token ids: the meta kernel lets them through, a GPU does not
    with OneDevice(), pytest.raises(RuntimeError, match="more than one device"):
        embedding(torch.arange(3))


# Public names that have no case, and why. Every other public function or nn.Module of
# attnlab.models and attnlab.attention must be covered by a case above.
EXCLUDED = {
    padding_mask: "checks the values of the lengths (non-negative, at most max_len) on the host; the "
    "models build the same mask without those checks (Transformer.encode)",
    Captioner: "a base class: attend() is SoftCaptioner's or HardCaptioner's",
    AttentionDecoder: "a base class: forward() is BahdanauDecoder's or LuongDecoder's",
    Score: "a base class: _score() is each score's",
    speculative_decode: "reads how many draft tokens were accepted, once a round, on the host: the "
    "sequence's length depends on it; its rule, verify_draft, runs here",
    triton_available: "takes no tensor: it says whether Triton can be imported",
}


def _public_modules(package: types.ModuleType) -> list[types.ModuleType]:
    names = [info.name for info in pkgutil.iter_modules(package.__path__)]
    return [package, *(importlib.import_module(f"{package.__name__}.{name}") for name in names)]


def _covered() -> set[object]:
    return {obj for _, covers in CASES.values() for obj in covers}


def test_every_public_model_has_a_case():
    """A new nn.Module in attnlab.models (exported in its module's __all__) needs a case here."""
    covered = _covered()
    missing = []
    for module in _public_modules(attnlab.models):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) and issubclass(obj, nn.Module) and obj not in covered and obj not in EXCLUDED:
                missing.append(f"{module.__name__}.{name}")
    assert not missing, f"models without a meta case: {missing}"


def test_every_public_attention_function_has_a_case():
    """Every function and nn.Module of attnlab.attention and attnlab.kernels needs a case here, or a
    reason in EXCLUDED."""
    covered = _covered()
    missing = []
    for module in [*_public_modules(attnlab.attention), attnlab.kernels]:
        for name in module.__all__:
            obj = getattr(module, name)
            computes = inspect.isfunction(obj) or (inspect.isclass(obj) and issubclass(obj, nn.Module))
            if obj is MovingAverageBaseline:
                computes = True  # a class, but it computes on tensors
            if computes and obj not in covered and obj not in EXCLUDED:
                missing.append(f"{module.__name__}.{name}")
    assert not missing, f"attention functions without a meta case: {missing}"


def test_every_public_inference_name_has_a_case():
    """Every function and class of attnlab.inference needs a case here, or a reason in EXCLUDED; a frozen
    dataclass of results (CacheMemory) computes nothing."""
    covered = _covered()
    missing = []
    for module in _public_modules(attnlab.inference):
        for name in module.__all__:
            obj = getattr(module, name)
            computes = inspect.isfunction(obj) or (inspect.isclass(obj) and not dataclasses.is_dataclass(obj))
            if computes and obj not in covered and obj not in EXCLUDED:
                missing.append(f"{module.__name__}.{name}")
    assert not missing, f"inference functions without a meta case: {missing}"
    assert dataclasses.is_dataclass(CacheMemory)


def test_excluded_bases_are_run_through_their_subclasses():
    covered = _covered()
    for base in (Captioner, AttentionDecoder, Score):
        assert any(inspect.isclass(c) and issubclass(c, base) and c is not base for c in covered), base


class _Stop(Exception):
    """Raised at the first draw of a location: what we wanted to see has been seen."""


def test_samplers_are_made_on_the_models_device(monkeypatch):
    """train_captioner and gradient_noise make hard attention's generator where the model is.

    A generator on another device than the tensors it samples fails on a GPU; on meta it would
    not (and meta cannot make a generator at all). So the generator is recorded when it is made,
    a CPU generator is handed out instead, and the first draw compares the recorded device with
    the device of the weights drawn from.
    """
    import attnlab.train.captioning as train_module  # where the captioners' generators are made

    made: dict[int, torch.device] = {}

    class Recording(types.ModuleType):
        def __getattr__(self, name: str) -> object:
            return getattr(torch, name)

        @staticmethod
        def Generator(device: torch.device | str | None = None) -> torch.Generator:
            generator = torch.Generator()
            made[id(generator)] = torch.device("cpu" if device is None else device)
            return generator

    draws: list[tuple[torch.device, torch.device]] = []

    class Checked(HardCaptioner):
        def attend(self, weights, annotations, generator):
            if self.training:
                draws.append((made[id(generator)], weights.device))
                raise _Stop
            return super().attend(weights, annotations, generator)

    monkeypatch.setattr(train_module, "torch", Recording("torch"))
    task = make_scenes(8, image_size=16, grid=2, seed=0)
    for run in (
        lambda m: train_captioner(m, task, steps=1, batch_size=4, progress=False),
        lambda m: gradient_noise(m, task, batches=2, batch_size=4),
    ):
        with pytest.raises(_Stop):
            run(on_meta(Checked(CAPTIONER)))
    assert draws == [(META, META), (META, META)]


# --- the device rule of attnlab.train: run where the model is ------------------------------------


def _never_moved(model: nn.Module) -> nn.Module:
    def refuse(*args, **kwargs):
        raise AssertionError(f"{type(model).__name__} was moved with .to{args}")

    model.to = refuse  # type: ignore[method-assign]
    return model


def _evaluations():
    from attnlab.data import CharVocab, make_evidence_task, make_neighbour_task
    from attnlab.train import (
        evaluate_captioner,
        evaluate_classifier,
        evaluate_seq2seq,
        evaluate_tagger,
        recall_accuracy,
        translate,
    )

    vocab = CharVocab("ab")
    pairs = [("ab", "ba"), ("a", "a")]
    tags = make_neighbour_task(6, 4, seed=0)
    evidence = make_evidence_task(6, 5, seed=0)
    scenes = make_scenes(4, image_size=16, grid=2, seed=0)
    return {
        "evaluate_seq2seq": (
            lambda: Seq2Seq(Seq2SeqConfig(len(vocab), len(vocab), hidden_dim=4)),
            lambda m, **kw: evaluate_seq2seq(m, pairs, vocab, vocab, **kw),
        ),
        "translate": (
            lambda: Seq2Seq(Seq2SeqConfig(len(vocab), len(vocab), hidden_dim=4)),
            lambda m, **kw: translate(m, "ab", vocab, vocab, max_len=3, **kw),
        ),
        "evaluate_tagger": (
            lambda: SelfAttentionTagger(TaggerConfig(10, 11, num_outputs=2, embed_dim=4)),
            lambda m, **kw: evaluate_tagger(m, *tags, **kw),
        ),
        "evaluate_classifier": (
            lambda: StructuredClassifier(StructuredConfig(evidence.vocab_size, evidence.num_classes, hops=2)),
            lambda m, **kw: evaluate_classifier(m, evidence.tokens, evidence.labels, **kw),
        ),
        "evaluate_captioner": (lambda: SoftCaptioner(CAPTIONER), lambda m, **kw: evaluate_captioner(m, scenes, **kw)),
        "recall_accuracy": (
            lambda: TransformerLM(LMConfig(16, d_model=8, num_heads=2, num_layers=1, dim_feedforward=8)),
            lambda m, **kw: recall_accuracy(m, num_pairs=2, num_queries=1, num_sequences=4, **kw),
        ),
        "gradient_noise": (
            lambda: HardCaptioner(CAPTIONER),
            lambda m, **kw: gradient_noise(m, scenes, batches=2, batch_size=2, **kw),
        ),
    }


@pytest.mark.parametrize("name", sorted(_evaluations()))
def test_evaluation_runs_where_the_model_is_and_never_moves_it(name):
    make, evaluate = _evaluations()[name]
    evaluate(_never_moved(make()))  # device=None: the model's device (the CPU here)
    evaluate(_never_moved(make()), device="cpu")  # the model's device, said explicitly
    with pytest.raises(ValueError, match=r"device='meta', but the model is on cpu"):
        evaluate(make(), device="meta")


def test_training_runs_where_the_model_is_unless_told_otherwise():
    from attnlab.data import make_neighbour_task
    from attnlab.train import train_tagger

    data = make_neighbour_task(8, 4, seed=0)
    model = _never_moved(SelfAttentionTagger(TaggerConfig(10, 11, num_outputs=2, embed_dim=4)))
    assert len(train_tagger(model, *data, steps=2, batch_size=4, progress=False).loss) == 2
    moved = []
    model = SelfAttentionTagger(TaggerConfig(10, 11, num_outputs=2, embed_dim=4))
    model.to = lambda *args, **kwargs: moved.append(args) or nn.Module.to(model, *args, **kwargs)
    train_tagger(model, *data, steps=1, batch_size=4, device="cpu", progress=False)
    assert moved == [("cpu",)]
