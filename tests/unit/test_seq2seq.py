"""The fixed-context seq2seq models and the training loop."""

import pytest
import torch

from attnlab.data import CharVocab, make_batch, make_sequence_pairs
from attnlab.models import Seq2Seq, Seq2SeqConfig, summarize
from attnlab.train import accuracy_by_length, evaluate_seq2seq, train_seq2seq, translate

VOCAB = CharVocab("abcdef")
CONFIGS = [
    {"cell": "gru"},
    {"cell": "lstm", "bidirectional": True},
    {"context": "mean"},
    {"context": "max", "peeky": True},
    {"cell": "lstm", "peeky": True, "context": "mean", "bidirectional": True},
]


def _model(**kwargs) -> Seq2Seq:
    torch.manual_seed(0)
    return Seq2Seq(Seq2SeqConfig(len(VOCAB), len(VOCAB), embed_dim=8, hidden_dim=16, **kwargs))


@pytest.mark.parametrize("kwargs", CONFIGS)
def test_shapes(kwargs):
    model = _model(**kwargs)
    batch = make_batch([("abcde", "edc"), ("ab", "abab"), ("f", "f")], VOCAB, VOCAB)
    logits, weights = model(batch.src, batch.src_lengths, batch.tgt_in)
    assert logits.shape == (3, 5, len(VOCAB)) and weights is None
    memory = model.encoder(batch.src, batch.src_lengths)
    D = 32 if kwargs.get("bidirectional") else 16
    assert memory.hs.shape == (3, 5, D) and memory.context.shape == (3, D)
    assert memory.mask.tolist() == [[True] * 5, [True, True, False, False, False], [True] + [False] * 4]
    tokens, _ = model.greedy_decode(batch.src, batch.src_lengths, max_len=7)
    assert tokens.shape[0] == 3 and 1 <= tokens.shape[1] <= 7


@pytest.mark.parametrize("kwargs", CONFIGS)
def test_padding_does_not_change_the_result(kwargs):
    """A source padded into a longer batch gets exactly the same outputs as on its own."""
    model = _model(**kwargs).eval()
    alone = make_batch([("abc", "cba")], VOCAB, VOCAB)
    padded = make_batch([("abc", "cba"), ("abcdefabcdef", "fed")], VOCAB, VOCAB)
    with torch.no_grad():
        a, _ = model(alone.src, alone.src_lengths, alone.tgt_in)
        b, _ = model(padded.src, padded.src_lengths, padded.tgt_in[:, :4])
    torch.testing.assert_close(a[0], b[0])
    memory = model.encoder(padded.src, padded.src_lengths)
    assert torch.equal(memory.hs[0, 3:], torch.zeros_like(memory.hs[0, 3:]))  # no state on padding


def test_summaries_follow_their_definitions():
    hs = torch.tensor([[[1.0, -1.0], [3.0, 5.0], [100.0, 100.0]]])  # (1, 3, 2); position 2 is padding
    mask = torch.tensor([[True, True, False]])
    last = torch.tensor([[7.0, 7.0]])
    assert summarize(hs, last, mask, "last").tolist() == [[7.0, 7.0]]
    assert summarize(hs, last, mask, "mean").tolist() == [[2.0, 2.0]]
    assert summarize(hs, last, mask, "max").tolist() == [[3.0, 5.0]]
    with pytest.raises(ValueError, match="how must be one of"):
        summarize(hs, last, mask, "median")


@pytest.mark.parametrize("kwargs", CONFIGS[:2])
def test_greedy_decoding_is_its_steps_cut_where_every_row_has_ended(kwargs):
    """greedy_steps (no host read, used on the meta device) are the steps greedy_decode takes."""
    model = _model(**kwargs).eval()
    batch = make_batch([("abcab", "abc"), ("fed", "de")], VOCAB, VOCAB)
    for eager_to_end in (False, True):
        if eager_to_end:  # END is the most likely token from the start: decoding stops after one step
            with torch.no_grad():
                model.decoder.out.bias[CharVocab.END] = 100.0
        tokens, _ = model.greedy_decode(batch.src, batch.src_lengths, max_len=8)
        with torch.no_grad():
            steps = torch.cat([t for t, _ in model.greedy_steps(batch.src, batch.src_lengths, max_len=8)], dim=1)
        assert steps.shape == (2, 8) and torch.equal(steps[:, : tokens.shape[1]], tokens)
        assert tokens.shape[1] == (1 if eager_to_end else 8)


@pytest.mark.parametrize("kwargs", CONFIGS[:3])
def test_greedy_decoding_agrees_with_teacher_forcing(kwargs):
    """Feeding the greedy output back in as teacher-forced input gives the same argmax."""
    model = _model(**kwargs).eval()
    batch = make_batch([("abcab", "abc"), ("fed", "de")], VOCAB, VOCAB)
    tokens, _ = model.greedy_decode(batch.src, batch.src_lengths, max_len=6)
    tgt_in = torch.cat([torch.full((2, 1), CharVocab.START), tokens[:, :-1]], dim=1)
    with torch.no_grad():
        logits, _ = model(batch.src, batch.src_lengths, tgt_in)
    # greedy decoding stops a row once it produced END; compare the steps before that
    for row in range(2):
        ends = (tokens[row] == CharVocab.END).nonzero()
        stop = int(ends[0]) + 1 if len(ends) else tokens.shape[1]
        assert torch.equal(logits[row, :stop].argmax(-1), tokens[row, :stop])


def test_gradients_reach_the_encoder():
    model = _model(context="mean", peeky=True)
    batch = make_batch([("abcd", "dcba")], VOCAB, VOCAB)
    logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
    logits.sum().backward()
    assert model.encoder.embedding.weight.grad.abs().sum() > 0
    assert model.encoder.rnn.weight_ih_l0.grad.abs().sum() > 0


def test_the_context_carries_the_source():
    """Different sources must give different decoder inputs: the decoder depends on the encoder."""
    model = _model().eval()
    a = make_batch([("abcd", "a")], VOCAB, VOCAB)
    b = make_batch([("dcba", "a")], VOCAB, VOCAB)
    with torch.no_grad():
        la, _ = model(a.src, a.src_lengths, a.tgt_in)
        lb, _ = model(b.src, b.src_lengths, b.tgt_in)
    assert not torch.allclose(la, lb)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cell": "rnn"}, "cell must be one of"),
        ({"context": "first"}, "context must be one of"),
        ({"hidden_dim": 0}, "hidden_dim must be an int >= 1, got 0"),
    ],
)
def test_bad_configs_are_explained(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Seq2SeqConfig(10, 10, **kwargs)


def test_bad_inputs_are_explained():
    model = _model()
    src = torch.tensor([[3, 4, 5]])
    with pytest.raises(TypeError, match=r"src must be a torch.long tensor \(token ids\), got torch.float32"):
        model(src.float(), torch.tensor([3]), src)
    with pytest.raises(ValueError, match=r"src must have shape \(B, S\) \(token ids\), got shape \(3,\)"):
        model(src[0], torch.tensor([3]), src)
    with pytest.raises(ValueError, match=r"src_lengths must have shape \(1,\), got \(2,\)"):
        model(src, torch.tensor([3, 3]), src)
    with pytest.raises(ValueError, match=r"src_lengths must lie in \[1, 3\]"):
        model(src, torch.tensor([4]), src)
    with pytest.raises(ValueError, match=r"tgt_in must have shape \(1, L\)"):
        model(src, torch.tensor([3]), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="max_len must be an int >= 1, got 0"):
        model.greedy_decode(src, torch.tensor([3]), max_len=0)
    with pytest.raises(TypeError, match=r"max_len must be an int, got float \(2.0\)"):
        model.greedy_decode(src, torch.tensor([3]), max_len=2.0)
    with pytest.raises(TypeError, match="config must be a Seq2SeqConfig"):
        Seq2Seq({"hidden_dim": 3})


def test_training_lowers_the_loss_and_learns_a_tiny_task():
    pairs = make_sequence_pairs("reverse", 2000, 1, 4, n_symbols=4, seed=0)
    vocab = CharVocab("abcd")
    torch.manual_seed(0)
    model = Seq2Seq(Seq2SeqConfig(len(vocab), len(vocab), embed_dim=8, hidden_dim=32))
    history = train_seq2seq(
        model,
        pairs,
        vocab,
        vocab,
        steps=400,
        batch_size=64,
        lr=1e-2,
        eval_pairs=pairs[:200],
        eval_every=200,
        progress=False,
    )
    first, last = sum(history.loss[:10]) / 10, sum(history.loss[-10:]) / 10
    assert last < first / 5, (first, last)
    assert history.eval_steps == [200, 400]
    assert history.evals[-1].exact_match > 0.9
    # training time at each evaluation: increasing, and without the evaluations themselves
    first_eval, second_eval = history.eval_seconds
    assert 0 < first_eval < second_eval <= history.seconds
    assert translate(model, "abcd", vocab, vocab) == "dcba"


def test_training_is_deterministic_under_a_seed():
    pairs = make_sequence_pairs("copy", 300, 1, 5, n_symbols=4, seed=0)
    vocab = CharVocab("abcd")
    losses = []
    for _ in range(2):
        torch.manual_seed(0)
        model = Seq2Seq(Seq2SeqConfig(len(vocab), len(vocab), embed_dim=8, hidden_dim=16))
        losses.append(train_seq2seq(model, pairs, vocab, vocab, steps=20, batch_size=32, seed=3, progress=False).loss)
    assert losses[0] == losses[1]


def test_evaluation_counts_exact_and_token_matches():
    vocab = CharVocab("ab")

    class Echo(Seq2Seq):  # always answers "ab"
        @torch.no_grad()
        def greedy_decode(self, src, src_lengths, max_len):
            row = [vocab.stoi["a"], vocab.stoi["b"], CharVocab.END][:max_len]
            return torch.tensor([row] * src.shape[0]), None

    model = Echo(Seq2SeqConfig(len(vocab), len(vocab), embed_dim=4, hidden_dim=4))
    result = evaluate_seq2seq(model, [("a", "ab"), ("b", "aa"), ("aa", "abb")], vocab, vocab)
    assert result.correct == [True, False, False]
    assert result.predictions == ["ab", "ab", "ab"]
    assert result.exact_match == pytest.approx(1 / 3)
    # targets + END: "ab|" 3/3, "aa|" 2/3 (a, _, END ok? a ok, b!=a, END ok), "abb|" 2/4 (a, b ok)
    assert result.token_accuracy == pytest.approx((3 + 2 + 2) / (3 + 3 + 4))
    assert result.token_scores == pytest.approx([1.0, 2 / 3, 2 / 4])
    by_length = accuracy_by_length([("a", "ab"), ("b", "aa"), ("aa", "abb")], result)
    assert by_length == {1: (0.5, pytest.approx((1 + 2 / 3) / 2)), 2: (0.0, 0.5)}
    with pytest.raises(ValueError, match="2 pairs but 3 results"):
        accuracy_by_length([("a", "b")] * 2, result)


def test_training_arguments_are_checked():
    vocab = CharVocab("ab")
    model = Seq2Seq(Seq2SeqConfig(len(vocab), len(vocab)))
    with pytest.raises(ValueError, match="steps must be an int >= 1, got 0"):
        train_seq2seq(model, [("a", "a")], vocab, vocab, steps=0)
    with pytest.raises(ValueError, match="lr must be a number > 0, got -1"):
        train_seq2seq(model, [("a", "a")], vocab, vocab, steps=1, lr=-1)
    with pytest.raises(ValueError, match="pairs must be a non-empty sequence"):
        train_seq2seq(model, [], vocab, vocab, steps=1)
    with pytest.raises(TypeError, match="pairs must hold"):
        evaluate_seq2seq(model, [("a", 1)], vocab, vocab)
    with pytest.raises(ValueError, match="source must be a non-empty string"):
        translate(model, "", vocab, vocab)


def test_eval_seconds_leave_out_the_evaluations(monkeypatch):
    """A clock that only moves during evaluations (100 s each): training time stays 0."""
    import types

    import attnlab.train.loop as loop_module  # the loop reads the clock
    import attnlab.train.trainers as train_module  # train_seq2seq calls the evaluator

    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(loop_module, "time", types.SimpleNamespace(perf_counter=lambda: clock.now))
    real = train_module.evaluate_seq2seq

    def slow_evaluate(*args, **kwargs):
        clock.now += 100.0
        return real(*args, **kwargs)

    monkeypatch.setattr(train_module, "evaluate_seq2seq", slow_evaluate)
    pairs = make_sequence_pairs("copy", 200, 1, 4, n_symbols=4, seed=0)
    vocab = CharVocab("abcd")
    torch.manual_seed(0)
    model = Seq2Seq(Seq2SeqConfig(len(vocab), len(vocab), embed_dim=8, hidden_dim=8))
    history = train_seq2seq(
        model, pairs, vocab, vocab, steps=6, batch_size=8, eval_pairs=pairs[:4], eval_every=2, progress=False
    )
    assert len(history.eval_seconds) == len(history.evals) == 3
    assert history.eval_seconds == [0.0, 0.0, 0.0]  # the evaluations' 300 s are not training time
    assert history.seconds == 300.0  # the total includes them
