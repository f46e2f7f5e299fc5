"""Models return what they compute; none keeps per-call results on itself (house style).

A module that stored its last attention weights or window centres (``self.attn = ...``) would
give a plot whatever the last call computed, and make the model's output depend on call order.
Each model here runs forward (and, where it has one, greedy decoding) and must leave the plain
attributes of every submodule exactly as they were: same names, same objects.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.attention import MultiHeadAttention
from attnlab.data import CharVocab, make_batch, make_sequence_pairs
from attnlab.models import (
    BahdanauDecoder,
    HardCaptioner,
    LuongDecoder,
    LuongLocalDecoder,
    SelfAttentionTagger,
    Seq2Seq,
    Seq2SeqConfig,
    SoftCaptioner,
    StructuredClassifier,
    StructuredConfig,
    TaggerConfig,
    Transformer,
    TransformerConfig,
)


def _snapshot(model: nn.Module) -> dict[str, dict[str, int]]:
    """Every submodule's plain attributes (not parameters, buffers or children), by identity."""
    skip = {"_parameters", "_buffers", "_modules"}
    return {name: {k: id(v) for k, v in vars(m).items() if k not in skip} for name, m in model.named_modules()}


def _seq2seq(decoder):
    vocab = CharVocab("abcd")
    config = Seq2SeqConfig(len(vocab), len(vocab), embed_dim=8, hidden_dim=16, bidirectional=True)
    batch = make_batch(make_sequence_pairs("copy", 3, 3, 6, n_symbols=4, seed=0), vocab, vocab)
    model = Seq2Seq(config, decoder=decoder(config) if decoder else None).eval()

    def run():
        model(batch.src, batch.src_lengths, batch.tgt_in)
        model.greedy_decode(batch.src, batch.src_lengths, max_len=4)

    return model, run


def _cases():
    yield "seq2seq", *_seq2seq(None)
    yield "bahdanau", *_seq2seq(BahdanauDecoder)
    yield "luong", *_seq2seq(LuongDecoder)
    yield "local-m", *_seq2seq(lambda c: LuongLocalDecoder(c, mode="local-m", window=1))
    yield "local-p", *_seq2seq(lambda c: LuongLocalDecoder(c, mode="local-p", window=1))
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    yield "mha", mha, lambda: mha(x, x, x, need_weights=True)
    transformer = Transformer(
        TransformerConfig(6, 6, d_model=8, num_heads=2, dim_feedforward=16, num_encoder_layers=1, num_decoder_layers=1)
    ).eval()
    src = torch.randint(3, 6, (2, 4))

    def run_transformer():
        transformer(src, torch.tensor([4, 3]), src, need_weights=True)
        transformer.greedy_decode(src, torch.tensor([4, 3]), max_len=3)

    yield "transformer", transformer, run_transformer
    tagger = SelfAttentionTagger(TaggerConfig(10, 11))
    yield "tagger", tagger, lambda: tagger(torch.randint(0, 10, (2, 6)))
    structured = StructuredClassifier(StructuredConfig(20, 3))
    yield "structured", structured, lambda: structured(torch.randint(1, 20, (2, 7)))
    for cls in (SoftCaptioner, HardCaptioner):
        captioner = cls().train()
        images = torch.rand(2, 3, 48, 48)
        yield (
            cls.__name__,
            captioner,
            (lambda c=captioner, i=images: (c(i, torch.ones(2, 4, dtype=torch.long)), c.generate(i, max_len=3))),
        )


@pytest.mark.parametrize(("name", "model", "run"), list(_cases()), ids=lambda v: v if isinstance(v, str) else "")
def test_a_forward_pass_stores_nothing_on_the_modules(name, model, run):
    before = _snapshot(model)
    with torch.no_grad():
        run()
    assert _snapshot(model) == before, f"{name}: a call changed the attributes of a module"


def test_the_snapshot_sees_a_stored_result():
    """What the test above guards against: an attribute set during forward changes the snapshot."""
    model = MultiHeadAttention(8, 2)
    before = _snapshot(model)
    model.last_weights = torch.zeros(1)
    assert _snapshot(model) != before
