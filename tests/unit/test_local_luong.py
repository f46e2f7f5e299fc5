"""Luong's local attention (local-m, local-p) and the local decoder (chapter 4)."""

import pytest
import torch

from attnlab.attention import attention, local_attention, make_score, window_to_dense
from attnlab.data import CharVocab, make_batch, make_sequence_pairs
from attnlab.models import LuongLocalDecoder, PositionPredictor, Seq2Seq, Seq2SeqConfig
from attnlab.train import train_seq2seq


def _inputs(B=2, T=5, S=11, D=6, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, D, generator=g, dtype=dtype)
    k = torch.randn(B, S, D, generator=g, dtype=dtype)
    v = torch.randn(B, S, 3, generator=g, dtype=dtype)
    centres = torch.rand(B, T, generator=g, dtype=dtype) * (S - 1)
    return q, k, v, centres


def _dot(q, k):
    return q @ k.transpose(-2, -1)


def test_weights_are_zero_outside_the_window():
    q, k, v, centres = _inputs()
    for gaussian in (False, True):
        _, w, pos = local_attention(_dot, q, k, v, centres, 2, gaussian=gaussian)
        dense = window_to_dense(w, pos, 11)
        s = torch.arange(11, dtype=centres.dtype)
        outside = (s[None, None, :] - centres.round()[..., None]).abs() > 2
        assert torch.equal(dense[outside], torch.zeros_like(dense[outside]))
        assert (dense[~outside] > 0).all()


def test_gaussian_factor_is_applied_with_sigma_half_the_window():
    q, k, v, centres = _inputs(seed=1)
    D = 3
    _, flat, pos = local_attention(_dot, q, k, v, centres, D, gaussian=False)
    _, gauss, _ = local_attention(_dot, q, k, v, centres, D, gaussian=True)
    factor = torch.exp(-((pos.to(centres.dtype) - centres[..., None]) ** 2) / (2 * (D / 2) ** 2))
    torch.testing.assert_close(gauss, flat * factor)
    assert not torch.allclose(gauss, flat)


def test_local_equals_global_when_the_window_covers_the_source_and_the_gaussian_is_off():
    q, k, v, centres = _inputs(S=9, seed=2)
    lengths = torch.tensor([9, 6])
    keep = torch.arange(9)[None, :] < lengths[:, None]  # (B, S)
    out, w, pos = local_attention(_dot, q, k, v, centres, 8, lengths=lengths, gaussian=False)
    expected, expected_w = attention(q, k, v, score=_dot, mask=keep[:, None, :])
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(window_to_dense(w, pos, 9), expected_w)


def test_padding_gets_no_weight_and_each_window_sums_to_one_without_gaussian():
    q, k, v, centres = _inputs(seed=3)
    lengths = torch.tensor([11, 4])
    centres[1] = centres[1].clamp(max=3)
    _, w, pos = local_attention(_dot, q, k, v, centres, 3, lengths=lengths, gaussian=False)
    assert torch.equal(w[1][pos[1] >= 4], torch.zeros_like(w[1][pos[1] >= 4]))
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 5, dtype=w.dtype))


def test_the_window_is_gathered_so_the_score_sees_2d_plus_1_keys_whatever_the_source_length():
    seen = []

    def recording(q, k):
        seen.append(tuple(k.shape))
        return _dot(q, k)

    for S in (16, 400):
        q, k, v, centres = _inputs(S=S, seed=4)
        local_attention(recording, q, k, v, centres, 2)
    assert seen == [(2 * 5, 5, 6), (2 * 5, 5, 6)]  # (B T, W, D) for both lengths


def test_gradient_reaches_the_predicted_centre_through_the_gaussian():
    q, k, v, centres = _inputs(seed=5)
    centres.requires_grad_(True)
    out, _, _ = local_attention(_dot, q, k, v, centres, 2, gaussian=True)
    out.sum().backward()
    assert centres.grad is not None and centres.grad.abs().sum() > 0
    assert torch.autograd.gradcheck(
        lambda c: local_attention(_dot, q, k, v, c, 2, gaussian=True)[0], (centres.detach().requires_grad_(),)
    )


def test_score_modules_of_chapter_3_fit():
    q, k, v, centres = _inputs(dtype=torch.float32, seed=6)
    for name in ("dot", "general", "additive"):
        score = make_score(name, 6, 6)
        out, w, _ = local_attention(score, q, k, v, centres, 2)
        assert out.shape == (2, 5, 3) and w.shape == (2, 5, 5)


def test_local_attention_errors_name_the_argument():
    q, k, v, centres = _inputs()
    with pytest.raises(ValueError, match="window must be an int >= 1, got 0"):
        local_attention(_dot, q, k, v, centres, 0)
    with pytest.raises(TypeError, match=r"centres must be a floating-point tensor, got torch\.int64"):
        local_attention(_dot, q, k, v, centres.long(), 2)
    with pytest.raises(ValueError, match=r"centres \(B, L\)"):
        local_attention(_dot, q, k, v, centres[:, :3], 2)
    with pytest.raises(ValueError, match=r"lengths must have shape \(2,\)"):
        local_attention(_dot, q, k, v, centres, 2, lengths=torch.tensor([3]))
    with pytest.raises(ValueError, match="source_length must be an int >= 1, got 0"):
        window_to_dense(torch.zeros(1, 1, 3), torch.zeros(1, 1, 3, dtype=torch.long), 0)


def test_position_predictor_stays_inside_each_source():
    torch.manual_seed(0)
    p = PositionPredictor(8)
    centres = p(10 * torch.randn(3, 7, 8), torch.tensor([5, 1, 9]))
    assert centres.shape == (3, 7)
    assert (centres >= 0).all() and (centres[0] <= 4).all() and (centres[1] == 0).all() and (centres[2] <= 8).all()


@pytest.mark.parametrize("mode", LuongLocalDecoder.MODES)
def test_local_decoder_step_by_step_equals_teacher_forcing(mode):
    vocab = CharVocab("abcd")
    pairs = make_sequence_pairs("copy", 4, 6, 12, n_symbols=4, seed=0)
    config = Seq2SeqConfig(len(vocab), len(vocab), embed_dim=8, hidden_dim=16, bidirectional=True)
    torch.manual_seed(0)
    model = Seq2Seq(config, decoder=LuongLocalDecoder(config, mode=mode, window=2)).eval()
    batch = make_batch(pairs, vocab, vocab)
    with torch.no_grad():
        logits, weights = model(batch.src, batch.src_lengths, batch.tgt_in)
        memory = model.encoder(batch.src, batch.src_lengths)
        _, whole, _ = model.decoder(batch.tgt_in, model.decoder.init_state(memory), memory)
        state = model.decoder.init_state(memory)
        assert state.centres is None
        steps, centres = [], []
        for t in range(batch.tgt_in.shape[1]):
            step_logits, state, w = model.decoder(batch.tgt_in[:, t : t + 1], state, memory)
            steps.append((step_logits, w))
            centres.append(state.centres)
    # the state returned by each call holds the centres of that call's steps
    assert whole.centres.shape == batch.tgt_in.shape
    torch.testing.assert_close(torch.cat(centres, 1), whole.centres)
    torch.testing.assert_close(torch.cat([s[0] for s in steps], 1), logits)
    torch.testing.assert_close(torch.cat([s[1] for s in steps], 1), weights)
    assert weights.shape == (4, batch.tgt_in.shape[1], batch.src.shape[1])
    # no weight on padding, at most 2D + 1 positions per step
    pad = torch.arange(batch.src.shape[1])[None, None, :] >= batch.src_lengths[:, None, None]
    assert torch.equal(weights[pad.expand_as(weights)], torch.zeros_like(weights[pad.expand_as(weights)]))
    assert int((weights > 0).sum(-1).max()) <= 5
    if mode == "local-m":  # the window of step t is centred on source position t (inside the source)
        expected = torch.minimum(torch.arange(batch.tgt_in.shape[1])[None, :], batch.src_lengths[:, None] - 1)
        torch.testing.assert_close(whole.centres, expected.to(torch.float32))


def test_local_m_trains_with_the_seq2seq_loop():
    """local-m through the book's seq2seq loop on a tiny copy task; that it learns to copy (its
    monotonic alignment holds there) is asserted where chapter 4.2 trains it, under nbval."""
    vocab = CharVocab("abcd")
    pairs = make_sequence_pairs("copy", 256, 4, 8, n_symbols=4, seed=0)
    config = Seq2SeqConfig(len(vocab), len(vocab), embed_dim=8, hidden_dim=16, bidirectional=True)
    torch.manual_seed(0)
    model = Seq2Seq(config, decoder=LuongLocalDecoder(config, mode="local-m", window=1))
    history = train_seq2seq(
        model, pairs, vocab, vocab, steps=30, batch_size=32, lr=1e-2, eval_pairs=pairs[:20], progress=False
    )
    assert len(history.loss) == 30 and sum(history.loss[-5:]) < 0.8 * sum(history.loss[:5]), history.loss
    assert history.eval_steps == [30] and len(history.evals[-1].predictions) == 20


def test_local_decoder_errors():
    config = Seq2SeqConfig(5, 5, hidden_dim=8)
    with pytest.raises(ValueError, match="mode must be one of"):
        LuongLocalDecoder(config, mode="local")
    with pytest.raises(ValueError, match="window must be an int >= 1, got 0"):
        LuongLocalDecoder(config, window=0)
