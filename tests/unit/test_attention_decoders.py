"""Score functions and the attention decoders of chapter 2."""

import pytest
import torch

from attnlab.attention import AdditiveScore, ConcatScore, DotScore, GeneralScore, make_score
from attnlab.data import CharVocab, make_batch
from attnlab.models import BahdanauDecoder, LuongDecoder, Seq2Seq, Seq2SeqConfig

VOCAB = CharVocab("abcdef")


def _model(decoder_cls, score, **kwargs) -> Seq2Seq:
    torch.manual_seed(0)
    config = Seq2SeqConfig(len(VOCAB), len(VOCAB), embed_dim=8, hidden_dim=16, **kwargs)
    return Seq2Seq(config, decoder=decoder_cls(config, score=score, attention_dim=12))


DECODERS = [
    (BahdanauDecoder, "additive", {}),
    (BahdanauDecoder, "general", {"bidirectional": True}),
    (LuongDecoder, "general", {}),
    (LuongDecoder, "dot", {"cell": "lstm"}),
    (LuongDecoder, "concat", {"bidirectional": True}),
]
IDS = [f"{d.__name__}-{s}-{'-'.join(k) or 'gru'}" for d, s, k in DECODERS]


def test_scores_have_one_interface():
    torch.manual_seed(0)
    q, k = torch.randn(2, 3, 5), torch.randn(2, 4, 7)
    for score in (GeneralScore(5, 7), AdditiveScore(5, 7, 6), ConcatScore(5, 7, 6), DotScore(7)):
        query = q if not isinstance(score, DotScore) else torch.randn(2, 3, 7)
        assert score(query, k).shape == (2, 3, 4)


def test_dot_and_general_follow_their_formulas():
    torch.manual_seed(0)
    q, k = torch.randn(2, 3, 5), torch.randn(2, 4, 5)
    expected = torch.einsum("ble,bse->bls", q, k)
    torch.testing.assert_close(DotScore(5)(q, k), expected)
    general = GeneralScore(5, 5)
    with torch.no_grad():
        general.W.weight.copy_(torch.eye(5))
    torch.testing.assert_close(general(q, k), expected)


def test_concat_is_the_additive_score_with_one_matrix():
    torch.manual_seed(0)
    concat, additive = ConcatScore(5, 7, 6), AdditiveScore(5, 7, 6)
    with torch.no_grad():
        additive.W_q.weight.copy_(concat.W.weight[:, :5])
        additive.W_k.weight.copy_(concat.W.weight[:, 5:])
        additive.W_k.bias.copy_(concat.W.bias)
        additive.v.weight.copy_(concat.v.weight)
    q, k = torch.randn(2, 3, 5), torch.randn(2, 4, 7)
    torch.testing.assert_close(concat(q, k), additive(q, k))


def test_score_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"query must have shape \(B, L, 5\), got \(2, 3, 4\)"):
        GeneralScore(5, 7)(torch.zeros(2, 3, 4), torch.zeros(2, 4, 7))
    with pytest.raises(ValueError, match=r"keys must have shape \(B, S, 7\), got \(2, 4\)"):
        AdditiveScore(5, 7)(torch.zeros(2, 3, 5), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="same batch size, got 2 and 3"):
        DotScore(5)(torch.zeros(2, 3, 5), torch.zeros(3, 4, 5))
    with pytest.raises(ValueError, match="query_dim and key_dim must be equal"):
        DotScore(5, 6)
    with pytest.raises(ValueError, match="name must be one of"):
        make_score("cosine-ish", 4, 4)


@pytest.mark.parametrize(("decoder_cls", "score", "kwargs"), DECODERS, ids=IDS)
def test_weights_are_distributions_over_real_source_tokens(decoder_cls, score, kwargs):
    model = _model(decoder_cls, score, **kwargs)
    batch = make_batch([("abcdef", "fedcba"), ("ab", "ba"), ("cde", "edc")], VOCAB, VOCAB)
    logits, weights = model(batch.src, batch.src_lengths, batch.tgt_in)
    assert logits.shape == (3, 7, len(VOCAB)) and weights.shape == (3, 7, 6)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 7))
    assert torch.equal(weights[1, :, 2:], torch.zeros(7, 4))  # exactly zero on padding
    assert torch.equal(weights[2, :, 3:], torch.zeros(7, 3))
    tokens, greedy_weights = model.greedy_decode(batch.src, batch.src_lengths, max_len=5)
    assert greedy_weights.shape == (3, tokens.shape[1], 6)


def _decode_with(model, memory, batch):
    state = model.decoder.init_state(memory)
    logits, _, weights = model.decoder(batch.tgt_in, state, memory)
    return logits, weights


@pytest.mark.parametrize(("decoder_cls", "score", "kwargs"), DECODERS, ids=IDS)
def test_attention_depends_on_the_keys(decoder_cls, score, kwargs):
    """Altering one encoder state must change the weights and the outputs (attention that never
    looked at the encoder has shipped in a well-known tutorial)."""
    model = _model(decoder_cls, score, **kwargs).eval()
    batch = make_batch([("abcdef", "fed")], VOCAB, VOCAB)
    memory = model.encoder(batch.src, batch.src_lengths)
    logits, weights = _decode_with(model, memory, batch)
    hs = memory.hs.clone()
    hs[:, 2] = torch.randn_like(hs[:, 2])  # one source position says something else
    altered = type(memory)(hs=hs, mask=memory.mask, context=memory.context)  # same initial state
    logits2, weights2 = _decode_with(model, altered, batch)
    assert not torch.allclose(weights, weights2)
    assert not torch.allclose(logits, logits2)


@pytest.mark.parametrize(("decoder_cls", "score", "kwargs"), DECODERS, ids=IDS)
def test_attention_reads_the_states_as_a_set(decoder_cls, score, kwargs):
    """Permuting the encoder states permutes the weights the same way and leaves the weighted
    sum, hence every output, unchanged: order reaches attention only through the states."""
    model = _model(decoder_cls, score, **kwargs).eval()
    batch = make_batch([("abcdef", "fed")], VOCAB, VOCAB)
    memory = model.encoder(batch.src, batch.src_lengths)
    logits, weights = _decode_with(model, memory, batch)
    order = torch.tensor([5, 3, 1, 0, 2, 4])
    permuted = type(memory)(hs=memory.hs[:, order], mask=memory.mask[:, order], context=memory.context)
    logits2, weights2 = _decode_with(model, permuted, batch)
    torch.testing.assert_close(weights2, weights[:, :, order])
    torch.testing.assert_close(logits2, logits)


@pytest.mark.parametrize(("decoder_cls", "score", "kwargs"), DECODERS, ids=IDS)
def test_gradients_flow_to_the_encoder_through_attention(decoder_cls, score, kwargs):
    model = _model(decoder_cls, score, **kwargs)
    batch = make_batch([("abcd", "dcba")], VOCAB, VOCAB)
    logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
    logits.sum().backward()
    assert model.encoder.rnn.weight_hh_l0.grad.abs().sum() > 0
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.decoder.score.parameters())


@pytest.mark.parametrize(("decoder_cls", "score", "kwargs"), DECODERS, ids=IDS)
def test_greedy_decoding_agrees_with_teacher_forcing(decoder_cls, score, kwargs):
    model = _model(decoder_cls, score, **kwargs).eval()
    batch = make_batch([("abcab", "bac"), ("fed", "de")], VOCAB, VOCAB)
    tokens, greedy_weights = model.greedy_decode(batch.src, batch.src_lengths, max_len=6)
    tgt_in = torch.cat([torch.full((2, 1), CharVocab.START), tokens[:, :-1]], dim=1)
    with torch.no_grad():
        logits, weights = model(batch.src, batch.src_lengths, tgt_in)
    torch.testing.assert_close(weights, greedy_weights)
    assert torch.equal(logits.argmax(-1)[:, 0], tokens[:, 0])


def test_attention_decoders_refuse_peeky():
    config = Seq2SeqConfig(10, 10, peeky=True)
    for cls in (BahdanauDecoder, LuongDecoder):
        with pytest.raises(ValueError, match="peeky must be False"):
            cls(config)
