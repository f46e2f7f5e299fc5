"""Attribution (chapter 2): gradient saliency, leave-one-out, Kendall's tau, the uniform baseline.

Each attribution is checked against a reference computed another way, one example at a time
and without padding, so that a batch mixing the examples or a padded position counting would
show.
"""

import pytest
import torch

from attnlab.attribution import UniformScore, gradient_saliency, kendall_tau, leave_one_out, replace_score
from attnlab.data import CharVocab, make_batch
from attnlab.models import BahdanauDecoder, LuongDecoder, Seq2Seq, Seq2SeqConfig, summarize

VOCAB = CharVocab("abcdefghij")
PAIRS = [("abcdefg", "gfedcba"), ("hij", "jih"), ("aabba", "abbaa")]  # padded: lengths 7, 3, 5


def _model(decoder: str = "luong") -> Seq2Seq:
    torch.manual_seed(0)
    config = Seq2SeqConfig(len(VOCAB), len(VOCAB), embed_dim=6, hidden_dim=8, bidirectional=True)
    cls = {"luong": LuongDecoder, "bahdanau": BahdanauDecoder}[decoder]
    return Seq2Seq(config, decoder=cls(config)).double()


def _log_p_of_embeddings(model: Seq2Seq, pair: tuple[str, str], t: int):
    """log p(y_t) of one unpadded example as a function of its source embeddings (S, E)."""
    one = make_batch([pair], VOCAB, VOCAB)

    def f(embedded: torch.Tensor) -> torch.Tensor:
        handle = model.encoder.embedding.register_forward_hook(lambda m, i, o: embedded[None])
        try:
            logits, _ = model(one.src, one.src_lengths, one.tgt_in)
        finally:
            handle.remove()
        return torch.log_softmax(logits, -1)[0, t, one.tgt_out[0, t]]

    with torch.no_grad():
        embedded = model.encoder.embedding(one.src)[0]  # (S, E)
    return f, embedded


@pytest.mark.parametrize("decoder", ["luong", "bahdanau"])
def test_gradient_saliency_is_each_examples_own_gradient_norm(decoder):
    model = _model(decoder)
    batch = make_batch(PAIRS, VOCAB, VOCAB)
    saliency = gradient_saliency(model, batch)  # (B, L, S)
    assert saliency.shape == (3, batch.tgt_out.shape[1], batch.src.shape[1])
    for b, pair in enumerate(PAIRS):
        S, L = len(pair[0]), len(pair[1]) + 1  # the END step counts
        for t in range(L):
            f, embedded = _log_p_of_embeddings(model, pair, t)
            jacobian = torch.autograd.functional.jacobian(f, embedded)  # (S, E)
            torch.testing.assert_close(saliency[b, t, :S], jacobian.norm(dim=-1))
        assert torch.all(saliency[b, :, S:] == 0)  # padded source positions
        assert torch.all(saliency[b, L:] == 0)  # padded target steps


def test_gradient_saliency_agrees_with_a_finite_difference():
    model = _model()
    pair, t, s = PAIRS[0], 2, 4
    f, embedded = _log_p_of_embeddings(model, pair, t)
    saliency = gradient_saliency(model, make_batch([pair], VOCAB, VOCAB))[0, t, s]
    grad = torch.autograd.functional.jacobian(f, embedded)[s]
    direction = grad / grad.norm()  # along the gradient, the derivative is its norm
    eps = 1e-6
    step = torch.zeros_like(embedded)
    step[s] = eps * direction
    finite = (f(embedded + step) - f(embedded - step)) / (2 * eps)
    torch.testing.assert_close(finite, saliency, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("decoder", ["luong", "bahdanau"])
def test_leave_one_out_is_the_drop_when_the_token_is_deleted(decoder):
    model = _model(decoder)
    batch = make_batch(PAIRS, VOCAB, VOCAB)
    importance = leave_one_out(model, batch)  # (B, L, S)

    def log_p(source: str, target: str) -> torch.Tensor:  # (L,) for one unpadded example
        one = make_batch([(source, target)], VOCAB, VOCAB)
        with torch.no_grad():
            logits, _ = model(one.src, one.src_lengths, one.tgt_in)
        return torch.log_softmax(logits, -1)[0].gather(-1, one.tgt_out[0, :, None])[:, 0]

    for b, (source, target) in enumerate(PAIRS):
        full = log_p(source, target)
        for s in range(len(source)):
            deleted = source[:s] + source[s + 1 :]
            expected = full - log_p(deleted, target)
            torch.testing.assert_close(importance[b, : len(target) + 1, s], expected)
        assert torch.all(importance[b, :, len(source) :] == 0)
        assert torch.all(importance[b, len(target) + 1 :] == 0)


def test_attributions_leave_the_model_as_it_was():
    model = _model()
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batch = make_batch(PAIRS, VOCAB, VOCAB)
    gradient_saliency(model, batch)
    leave_one_out(model, batch)
    assert model.training
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not model.encoder.embedding._forward_hooks  # the capturing hook is gone
    with torch.no_grad():  # also works where the caller switched gradients off
        assert gradient_saliency(model, batch).abs().sum() > 0


def test_kendall_tau():
    x = torch.tensor([0.1, 0.4, 0.2, 0.9])
    assert kendall_tau(x, x) == pytest.approx(1.0)
    assert kendall_tau(x, -x) == pytest.approx(-1.0)
    # one swapped pair of six: (5 - 1) / 6
    assert kendall_tau(x, torch.tensor([0.1, 0.2, 0.4, 0.9])) == pytest.approx(4 / 6)
    # tau-b: a tied pair counts as neither, and the ties leave the pairs that can be ordered
    assert kendall_tau(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 1.0, 2.0])) == pytest.approx(2 / 6**0.5)
    tied = torch.tensor([0.0, 0.0, 0.0, 0.2, 0.8])  # weights that underflowed to 0
    assert kendall_tau(tied, tied) == pytest.approx(1.0)
    assert kendall_tau(tied, -tied) == pytest.approx(-1.0)
    gen = torch.Generator().manual_seed(0)
    a, b = torch.rand(400, generator=gen), torch.rand(400, generator=gen)
    assert abs(kendall_tau(a, b)) < 0.1  # unrelated orders: about 0


def test_kendall_tau_b_by_counting_pairs():
    """Against the textbook definition, pair by pair, on vectors with many ties."""
    gen = torch.Generator().manual_seed(1)
    for _ in range(20):
        x = torch.randint(0, 4, (9,), generator=gen).float()
        y = torch.randint(0, 4, (9,), generator=gen).float()
        if len(set(x.tolist())) < 2 or len(set(y.tolist())) < 2:
            continue
        pairs = [(i, j) for i in range(9) for j in range(i + 1, 9)]
        c = sum((x[i] - x[j]) * (y[i] - y[j]) > 0 for i, j in pairs)
        d = sum((x[i] - x[j]) * (y[i] - y[j]) < 0 for i, j in pairs)
        n_x = sum(x[i] != x[j] for i, j in pairs)
        n_y = sum(y[i] != y[j] for i, j in pairs)
        assert kendall_tau(x, y) == pytest.approx(float(c - d) / float(n_x * n_y) ** 0.5)


def test_uniform_score_turns_attention_into_the_mean_of_the_states():
    model = _model()
    batch = make_batch(PAIRS, VOCAB, VOCAB)
    uniform = replace_score(model, UniformScore())
    with torch.no_grad():
        _, weights = uniform(batch.src, batch.src_lengths, batch.tgt_in)  # (B, L, S)
        _, learned = model(batch.src, batch.src_lengths, batch.tgt_in)
        memory = model.encoder(batch.src, batch.src_lengths)
    lengths = batch.src_lengths.double()
    real = memory.mask[:, None, :].expand_as(weights)
    torch.testing.assert_close(weights[real], (1 / lengths)[:, None, None].expand_as(weights)[real])
    assert torch.all(weights[~real] == 0)
    mean = summarize(memory.hs, memory.context, memory.mask, "mean")  # chapter 1's mean context
    torch.testing.assert_close((weights @ memory.hs)[:, 0], mean)  # every step reads the mean
    assert not torch.allclose(learned, weights)  # the original kept its own score
    assert isinstance(uniform.decoder.score, UniformScore)
    assert not isinstance(model.decoder.score, UniformScore)
    assert next(uniform.parameters()).data_ptr() != next(model.parameters()).data_ptr()  # a copy


def test_attribution_errors_name_the_argument():
    model, batch = _model(), make_batch(PAIRS, VOCAB, VOCAB)
    with pytest.raises(TypeError, match=r"gradient_saliency: model must be a Seq2Seq .*got Linear"):
        gradient_saliency(torch.nn.Linear(2, 2), batch)
    with pytest.raises(TypeError, match=r"leave_one_out: batch must be an attnlab.data.Batch .*got list"):
        leave_one_out(model, PAIRS)
    with pytest.raises(TypeError, match=r"kendall_tau: x must be a floating-point tensor, got list"):
        kendall_tau([1.0, 2.0], torch.ones(2))
    with pytest.raises(ValueError, match="kendall_tau: x and y must have the same length, got 3 and 2"):
        kendall_tau(torch.ones(3), torch.ones(2))
    with pytest.raises(ValueError, match="kendall_tau: needs at least 2 positions, got 1"):
        kendall_tau(torch.ones(1), torch.ones(1))
    with pytest.raises(ValueError, match="kendall_tau: y has all its 3 values equal; its rank order is undefined"):
        kendall_tau(torch.arange(3.0), torch.ones(3))
    plain = Seq2Seq(Seq2SeqConfig(len(VOCAB), len(VOCAB), embed_dim=4, hidden_dim=4))
    with pytest.raises(TypeError, match="replace_score: model must be a Seq2Seq whose decoder has a score module"):
        replace_score(plain, UniformScore())
    with pytest.raises(TypeError, match=r"replace_score: score must be an nn\.Module .*got str"):
        replace_score(model, "uniform")
    with pytest.raises(ValueError, match=r"UniformScore: key must have shape \(B, S, D_k\)"):
        UniformScore()(torch.ones(1, 2, 3), torch.ones(2, 3))
