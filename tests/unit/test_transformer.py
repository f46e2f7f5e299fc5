"""The Transformer of chapter 6: parity with torch.nn.Transformer, cached decoding, causality."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attnlab
from attnlab.attention import padding_mask
from attnlab.data import CharVocab, make_sequence_pairs
from attnlab.models import KVCache, Transformer, TransformerConfig, copy_from_torch_transformer, warmup_schedule
from attnlab.train import evaluate_seq2seq, train_seq2seq


def _pair(norm_first: bool, dtype=torch.float32, activation="relu"):
    torch.manual_seed(0)
    theirs = nn.Transformer(
        d_model=32,
        nhead=4,
        num_encoder_layers=2,
        num_decoder_layers=3,
        dim_feedforward=48,
        dropout=0.0,
        activation=activation,
        batch_first=True,
        norm_first=norm_first,
    )
    config = TransformerConfig(
        10,
        12,
        d_model=32,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=3,
        dim_feedforward=48,
        norm_first=norm_first,
        final_norm=True,
        activation=activation,
    )
    ours = copy_from_torch_transformer(Transformer(config), theirs)
    return ours.to(dtype).eval(), theirs.to(dtype).eval()


LENGTHS = torch.tensor([7, 4, 6])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_decoder_and_model_equal_torch(norm_first, dtype):
    ours, theirs = _pair(norm_first, dtype)
    torch.manual_seed(1)
    src, tgt = torch.randn(3, 7, 32, dtype=dtype), torch.randn(3, 5, 32, dtype=dtype)
    keep = padding_mask(LENGTHS, 7)  # (B, 1, 1, S), True = real
    pad = ~keep[:, 0, 0]  # (B, S), PyTorch's convention: True = padding
    real = keep[:, 0, 0, :, None]  # (B, S, 1)
    with torch.no_grad():
        memory, _ = ours.encoder(src, keep)
        expected = theirs.encoder(src, src_key_padding_mask=pad)
        torch.testing.assert_close(memory * real, expected * real)  # PyTorch may zero padded rows
        causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=dtype)
        y, _ = ours.decoder(tgt, memory, keep)
        expected = theirs.decoder(tgt, memory, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=pad)
        torch.testing.assert_close(y, expected)
        whole = theirs(src, tgt, tgt_mask=causal, src_key_padding_mask=pad, memory_key_padding_mask=pad)
        torch.testing.assert_close(ours.decoder(tgt, ours.encoder(src, keep)[0], keep)[0], whole)


def test_gelu_layers_equal_torch():
    ours, theirs = _pair(False, activation="gelu")
    src, tgt = torch.randn(2, 6, 32), torch.randn(2, 4, 32)
    causal = nn.Transformer.generate_square_subsequent_mask(4)
    with torch.no_grad():
        torch.testing.assert_close(ours.decoder(tgt, ours.encoder(src)[0])[0], theirs(src, tgt, tgt_mask=causal))


def _model(norm_first=False, layers=2):
    attnlab.set_seed(0)
    config = TransformerConfig(
        9,
        13,
        d_model=32,
        num_heads=4,
        num_encoder_layers=layers,
        num_decoder_layers=layers,
        dim_feedforward=64,
        norm_first=norm_first,
    )
    return Transformer(config).eval()


def _source():
    torch.manual_seed(3)
    src = torch.randint(3, 9, (4, 8))
    lengths = torch.tensor([8, 5, 3, 7])
    src[torch.arange(8)[None] >= lengths[:, None]] = CharVocab.PAD
    return src, lengths


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decoding_equals_full_recomputation(norm_first):
    model = _model(norm_first)
    src, lengths = _source()
    tgt = torch.randint(3, 13, (4, 6))
    with torch.no_grad():
        memory, mask, _ = model.encode(src, lengths)
        full, full_w = model.decode(tgt, memory, mask, need_weights=True)  # (B, L, V)
        caches = [KVCache() for _ in model.decoder.layers]
        steps = []
        for t in range(6):  # one token at a time
            logits, w = model.decode(tgt[:, t : t + 1], memory, mask, caches, need_weights=True)
            steps.append(logits)
            torch.testing.assert_close(w[-1][1][:, :, 0], full_w[-1][1][:, :, t])  # cross weights
        assert caches[0].length == 6 and caches[0].cross_k.shape == (4, 4, 8, 8)
        torch.testing.assert_close(torch.cat(steps, 1), full)
        caches = [KVCache() for _ in model.decoder.layers]  # two chunks: 4 tokens, then 2
        first, _ = model.decode(tgt[:, :4], memory, mask, caches)
        second, _ = model.decode(tgt[:, 4:], memory, mask, caches)
        torch.testing.assert_close(torch.cat([first, second], 1), full)
    tokens, weights = model.greedy_decode(src, lengths, max_len=9)
    tokens_nc, weights_nc = model.greedy_decode(src, lengths, max_len=9, use_cache=False)
    assert torch.equal(tokens, tokens_nc)
    torch.testing.assert_close(weights, weights_nc)
    with torch.no_grad():  # the steps without the early stop (they run on the meta device) begin the same
        steps = list(model.greedy_steps(src, lengths, max_len=9))
    assert len(steps) == 9 and torch.equal(torch.cat([t for t, _ in steps], 1)[:, : tokens.shape[1]], tokens)
    torch.testing.assert_close(torch.cat([w for _, w in steps], 1)[:, : tokens.shape[1]], weights)
    assert weights.shape == (4, tokens.shape[1], 8)
    assert torch.all(weights[1, :, 5:] == 0)  # padding of source 1 gets no attention


def test_decoder_position_i_ignores_later_targets():
    model = _model()
    src, lengths = _source()
    tgt = torch.randint(3, 13, (4, 7))
    changed = tgt.clone()
    changed[:, 4:] = torch.randint(3, 13, (4, 3))
    with torch.no_grad():
        a, _ = model(src, lengths, tgt)
        b, _ = model(src, lengths, changed)
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert (a[:, 4:] - b[:, 4:]).abs().max() > 1e-3


def test_padding_does_not_change_the_result():
    model = _model()
    src, lengths = _source()
    tgt = torch.randint(3, 13, (4, 5))
    with torch.no_grad():
        batch, _ = model(src, lengths, tgt)
        alone, _ = model(src[2:3, :3], lengths[2:3], tgt[2:3])
    torch.testing.assert_close(batch[2:3], alone)


def test_weights_of_every_layer_are_returned():
    model = _model(layers=3)
    src, lengths = _source()
    _, w = model(src, lengths, torch.randint(3, 13, (4, 5)), need_weights=True)
    assert len(w.encoder) == len(w.decoder_self) == len(w.cross) == 3
    assert w.encoder[0].shape == (4, 4, 8, 8) and w.decoder_self[0].shape == (4, 4, 5, 5)
    assert w.cross[2].shape == (4, 4, 5, 8)
    assert torch.all(w.decoder_self[1].triu(1) == 0)  # causal
    torch.testing.assert_close(w.cross[0].sum(-1), torch.ones(4, 4, 5))


def test_embeddings_do_not_drown_the_positions():
    model = _model()
    tokens = torch.arange(9)[None]
    scaled = model.src_embed.embedding(tokens) * 32**0.5
    ratio = scaled.std() / model.src_embed.pe[:9].std()
    assert 0.5 < ratio < 2.5


def test_warmup_schedule_rises_then_decays():
    rate = warmup_schedule(64, 100, factor=2.0)
    values = [rate(t) for t in range(1, 1001)]
    assert max(values) == pytest.approx(2.0 * (64 * 100) ** -0.5)
    assert values.index(max(values)) == 99  # step 100
    assert values[49] == pytest.approx(values[99] / 2)  # linear rise
    assert values[399] == pytest.approx(values[99] / 2)  # 1/sqrt(t) decay: t = 400 is half of t = 100
    cool = warmup_schedule(64, 100, factor=2.0, total_steps=300)
    assert cool(100) == pytest.approx(max(values)) and cool(50) == pytest.approx(values[49])
    assert cool(200) == pytest.approx(max(values) / 2) and cool(300) == 0.0 and cool(400) == 0.0
    with pytest.raises(ValueError, match=r"total_steps must be an int >= 101 \(above warmup_steps\), got 50"):
        warmup_schedule(64, 100, total_steps=50)


def test_transformer_trains_with_the_seq2seq_loop():
    """The Transformer goes through the book's seq2seq loop with the paper's options (warm-up
    schedule, label smoothing, Adam's betas); how well it learns is asserted where chapter 6
    trains it, under nbval."""
    pairs = make_sequence_pairs("reverse", 256, 3, 5, seed=0)
    vocab = CharVocab("abcdefghij")
    attnlab.set_seed(0)
    config = TransformerConfig(
        len(vocab),
        len(vocab),
        d_model=16,
        num_heads=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        dim_feedforward=32,
        norm_first=True,
    )
    model = Transformer(config)
    history = train_seq2seq(
        model,
        pairs,
        vocab,
        vocab,
        steps=60,
        batch_size=32,
        lr=1.0,
        schedule=warmup_schedule(16, 10, factor=1.0),
        label_smoothing=0.1,
        betas=(0.9, 0.98),
        progress=False,
    )
    assert len(history.loss) == 60 and sum(history.loss[-5:]) < 0.85 * sum(history.loss[:5]), history.loss
    result = evaluate_seq2seq(model, pairs[:20], vocab, vocab)
    assert len(result.predictions) == 20 and 0 <= result.token_accuracy <= 1


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"d_model \(30\) must be divisible by num_heads \(4\)"):
        TransformerConfig(5, 5, d_model=30, num_heads=4)
    with pytest.raises(ValueError, match="activation must be one of"):
        TransformerConfig(5, 5, activation="tanh")
    with pytest.raises(TypeError, match="config must be a TransformerConfig"):
        Transformer({"d_model": 4})
    model = _model()
    with pytest.raises(TypeError, match=r"src must be a torch.long tensor \(token ids\), got torch.float32"):
        model(torch.zeros(2, 3), torch.tensor([3, 3]), torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"src_lengths must have shape \(2,\)"):
        model(torch.zeros(2, 3, dtype=torch.long), torch.tensor([3]), torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="positions up to 200 exceed max_len 128"):
        model.tgt_embed(torch.zeros(1, 200, dtype=torch.long))
    with pytest.raises(ValueError, match="build ours with final_norm=True"):
        copy_from_torch_transformer(model, nn.Transformer(32, 4, 2, 2, 64, batch_first=True))
    with pytest.raises(ValueError, match="differ"):
        copy_from_torch_transformer(model, nn.Transformer(32, 4, 1, 2, 64, batch_first=True))
    with pytest.raises(ValueError, match="warmup_steps must be an int >= 1, got 0"):
        warmup_schedule(64, 0)
    with pytest.raises(ValueError, match=r"label_smoothing must be a number in \[0, 1\), got 1.5"):
        train_seq2seq(model, [("ab", "ba")], CharVocab("ab"), CharVocab("ab"), steps=1, label_smoothing=1.5)
