"""Chapter 4's classification tasks, structured self-attention with its penalty, and
hierarchical attention."""

import pytest
import torch

from attnlab.data import make_document_task, make_evidence_task
from attnlab.models import (
    HierarchicalClassifier,
    HierarchicalConfig,
    StructuredClassifier,
    StructuredConfig,
    frobenius_penalty,
    hop_overlap,
)
from attnlab.train import evaluate_classifier, train_classifier


def test_evidence_task_places_one_token_per_type_and_the_label_needs_all_of_them():
    task = make_evidence_task(500, 12, n_types=2, n_values=3, n_noise=20, seed=0)
    assert task.tokens.shape == (500, 12) and task.labels.shape == (500,) and task.evidence.shape == (500, 2)
    assert task.vocab_size == 1 + 20 + 6 and task.num_classes == 9
    ids = task.tokens.gather(1, task.evidence)  # (n, types)
    values = ids - 21 - torch.tensor([0, 3])
    assert ((values >= 0) & (values < 3)).all()
    torch.testing.assert_close(task.labels, 3 * values[:, 0] + values[:, 1])
    others = torch.ones_like(task.tokens, dtype=torch.bool).scatter(1, task.evidence, False)
    assert ((task.tokens[others] >= 1) & (task.tokens[others] <= 20)).all()
    assert torch.equal(make_evidence_task(500, 12, seed=0).tokens, task.tokens)
    assert not torch.equal(make_evidence_task(500, 12, seed=1).tokens, task.tokens)
    # each type alone leaves the label open: every value of type 0 occurs with several labels
    for v in range(3):
        assert len(set(task.labels[values[:, 0] == v].tolist())) == 3


def test_document_task_marks_the_key_sentence_and_decoys_carry_other_labels():
    task = make_document_task(300, 5, 6, num_classes=4, n_noise=30, seed=0)
    assert task.tokens.shape == (300, 5, 6) and task.vocab_size == 32 + 4
    marker, label_word = 31, 32
    has_marker = (task.tokens == marker).any(-1)  # (n, S)
    assert torch.equal(has_marker, torch.nn.functional.one_hot(task.key_sentence, 5).bool())
    key = task.tokens[torch.arange(300), task.key_sentence]  # (n, W)
    at = (key == marker).int().argmax(-1)
    torch.testing.assert_close(key[torch.arange(300), at + 1], label_word + task.labels)
    # decoy label words elsewhere: counting label words does not give the label
    decoys = task.tokens[~has_marker].reshape(300, 4, 6)
    assert ((decoys >= label_word).sum(-1) == 1).all()
    with pytest.raises(ValueError, match="words must be at least 2"):
        make_document_task(3, 2, 1)
    with pytest.raises(TypeError, match="n must be an int"):
        make_evidence_task(2.0, 5)


def test_penalty_is_zero_for_orthonormal_hops_and_positive_otherwise():
    one_hot = torch.eye(6)[[1, 4, 0]][None]  # three hops on three different positions
    assert float(frobenius_penalty(one_hot)) == 0.0
    same = torch.eye(6)[[2, 2, 0]][None]  # two hops on the same position
    assert float(frobenius_penalty(same)) == pytest.approx(2.0)
    uniform = torch.full((1, 3, 6), 1 / 6)
    assert float(frobenius_penalty(uniform)) > 0
    a = torch.softmax(torch.randn(4, 3, 6, dtype=torch.float64), -1)
    manual = torch.stack([((x @ x.T - torch.eye(3, dtype=x.dtype)) ** 2).sum() for x in a])
    torch.testing.assert_close(frobenius_penalty(a), manual)
    with pytest.raises(ValueError, match=r"\(B, r, n\)"):
        frobenius_penalty(torch.zeros(3, 6))


def test_hop_overlap_is_one_for_identical_hops_and_zero_for_disjoint_ones():
    assert float(hop_overlap(torch.eye(5)[[1, 1]][None])) == pytest.approx(1.0)
    assert float(hop_overlap(torch.eye(5)[[1, 3, 4]][None])) == 0.0
    with pytest.raises(ValueError, match="at least 2 hops"):
        hop_overlap(torch.ones(1, 1, 4))


def test_structured_classifier_shapes_and_padding():
    torch.manual_seed(0)
    model = StructuredClassifier(StructuredConfig(30, 9, hops=3))
    tokens = torch.randint(1, 30, (4, 7))
    tokens[1, 5:] = 0
    logits, A = model(tokens)
    assert logits.shape == (4, 9) and A.shape == (4, 3, 7)
    torch.testing.assert_close(A.sum(-1), torch.ones(4, 3))
    assert torch.equal(A[1, :, 5:], torch.zeros(3, 2))
    with pytest.raises(TypeError, match=r"tokens must be a torch.long tensor, got torch.float32"):
        model(tokens.float())
    with pytest.raises(ValueError, match=r"tokens must have shape \(B, n\), got shape \(7,\)"):
        model(tokens[0])
    with pytest.raises(ValueError, match="hops must be an int >= 1, got 0"):
        StructuredConfig(30, 9, hops=0)


def test_hierarchical_classifier_shapes_and_padding():
    torch.manual_seed(0)
    model = HierarchicalClassifier(HierarchicalConfig(40, 4))
    tokens = torch.randint(1, 40, (3, 4, 5))
    tokens[0, 3] = 0  # an empty sentence
    tokens[2, :, 4] = 0  # padded words
    with torch.no_grad():
        logits, words, sentences = model(tokens)
    assert logits.shape == (3, 4) and words.shape == (3, 4, 5) and sentences.shape == (3, 4)
    assert float(sentences[0, 3]) == 0.0
    assert torch.equal(words[2, :, 4], torch.zeros(4))
    torch.testing.assert_close(sentences.sum(-1), torch.ones(3))
    with pytest.raises(ValueError, match=r"tokens must have shape \(B, S, W\), got shape \(4, 5\)"):
        model(tokens[0])


# How well the two models learn (the structured one with and without the penalty, the
# hierarchical one finding the key sentence) is asserted where chapter 4.2 trains them, under
# nbval; the tests here check the training code on tiny cases.
def _trained_from_one_start(task, penalties, **train):
    """{penalty: the StructuredClassifier (3 hops) trained with it, and its history}: each from the
    same initial weights, so that the penalty is the only difference."""
    torch.manual_seed(0)
    start = StructuredClassifier(StructuredConfig(task.vocab_size, task.num_classes, hops=3)).state_dict()
    runs = {}
    for penalty in penalties:
        model = StructuredClassifier(StructuredConfig(task.vocab_size, task.num_classes, hops=3))
        model.load_state_dict(start)
        runs[penalty] = (
            model,
            train_classifier(model, task.tokens, task.labels, penalty=penalty, progress=False, **train),
        )
    return start, runs


def test_train_classifier_adds_the_penalty_times_the_hops_mean_frobenius_penalty_to_the_loss():
    task = make_evidence_task(48, 8, seed=0)
    # one batch of all 48: the first loss is of the start weights
    start, runs = _trained_from_one_start(task, (0.0, 2.5), steps=1, batch_size=48)
    model = runs[0.0][0]
    model.load_state_dict(start)
    with torch.no_grad():
        _, A = model(task.tokens)
    added = runs[2.5][1].loss[0] - runs[0.0][1].loss[0]
    assert added == pytest.approx(2.5 * float(frobenius_penalty(A).mean()), rel=1e-4)


def test_the_penalty_pulls_the_hops_apart():
    task = make_evidence_task(256, 8, seed=0)
    _, runs = _trained_from_one_start(task, (0.0, 1.0), steps=30, lr=1e-2)
    after = {}
    for penalty, (model, _) in runs.items():
        with torch.no_grad():
            _, A = model(task.tokens)
        after[penalty] = (float(frobenius_penalty(A).mean()), float(hop_overlap(A).mean()))
    assert after[1.0][0] < after[0.0][0] / 2 and after[1.0][1] < after[0.0][1], after


def test_train_classifier_trains_the_hierarchical_model_and_evaluates_it_exactly():
    task = make_document_task(96, 3, 4, seed=0)
    torch.manual_seed(0)
    model = HierarchicalClassifier(HierarchicalConfig(task.vocab_size, task.num_classes))
    history = train_classifier(
        model,
        task.tokens,
        task.labels,
        steps=12,
        batch_size=32,
        lr=1e-2,
        eval_data=(task.tokens, task.labels),
        eval_every=6,
        progress=False,
    )
    assert len(history.loss) == 12 and history.eval_steps == [6, 12]
    assert sum(history.loss[-3:]) < sum(history.loss[:3]), history.loss
    with torch.no_grad():
        right = int((model.eval()(task.tokens)[0].argmax(-1) == task.labels).sum())
    assert history.evals[-1] == evaluate_classifier(model, task.tokens, task.labels, batch_size=7) == right / 96


def test_train_classifier_errors():
    task = make_evidence_task(10, 5)
    model = HierarchicalClassifier(HierarchicalConfig(40, 4))
    with pytest.raises(ValueError, match="penalty applies to the hops of a StructuredClassifier"):
        train_classifier(model, task.tokens[:, None, :], task.labels, steps=1, penalty=1.0)
    with pytest.raises(ValueError, match="tokens must be 3-D"):
        train_classifier(model, task.tokens, task.labels, steps=1)
    with pytest.raises(TypeError, match="model must be a StructuredClassifier or HierarchicalClassifier"):
        evaluate_classifier(torch.nn.Linear(2, 2), task.tokens, task.labels)
