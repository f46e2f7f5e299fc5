"""Beyond softmax: multi-query associative recall (MQAR, Arora et al. 2023)."""

from __future__ import annotations

import pytest
import torch

from attnlab.data import mqar_batch
from attnlab.models import LMConfig, TransformerLM
from attnlab.train import recall_accuracy, train_recall


def test_the_layout_is_zoologys():
    tokens, targets = mqar_batch(64, num_pairs=8, num_queries=5, vocab_size=40, seed=0)
    assert tokens.shape == targets.shape == (64, 2 * 8 + 2 * 5)
    assert tokens.dtype == targets.dtype == torch.long
    keys, values = tokens[:, 0:16:2], tokens[:, 1:16:2]
    assert bool(((keys >= 1) & (keys < 20)).all()) and bool(((values >= 20) & (values < 40)).all())
    for row in range(64):  # distinct keys, distinct values
        assert len(set(keys[row].tolist())) == 8 and len(set(values[row].tolist())) == 8
    assert bool((targets[:, :16] == -100).all()) and bool((targets[:, 17::2] == -100).all())  # nothing but queries
    assert bool((targets[:, 16::2] != -100).all())
    assert bool(((tokens >= 0) & (tokens < 40)).all())
    assert len(set(tokens[:, 17::2].flatten().tolist())) > 20  # the fillers are drawn from the whole vocabulary


def test_every_target_is_the_value_its_key_came_with():
    tokens, targets = mqar_batch(32, num_pairs=6, num_queries=6, vocab_size=16, seed=3)
    for row in range(32):
        pairs = dict(zip(tokens[row, 0:12:2].tolist(), tokens[row, 1:12:2].tolist(), strict=True))
        asked = []
        for t in (targets[row] != -100).nonzero().flatten().tolist():
            key = int(tokens[row, t])
            assert t >= 12 and key in pairs, (row, t)
            assert int(targets[row, t]) == pairs[key]
            asked.append(key)
        assert sorted(asked) == sorted(pairs)  # num_queries = num_pairs: every key asked once


def test_seeds_and_generators_reproduce():
    first = mqar_batch(4, num_pairs=3, num_queries=2, vocab_size=12, seed=7)
    again = mqar_batch(4, num_pairs=3, num_queries=2, vocab_size=12, seed=7)
    other = mqar_batch(4, num_pairs=3, num_queries=2, vocab_size=12, seed=8)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], other[0])
    generator = torch.Generator().manual_seed(7)
    same = mqar_batch(4, num_pairs=3, num_queries=2, vocab_size=12, generator=generator)
    following = mqar_batch(4, num_pairs=3, num_queries=2, vocab_size=12, generator=generator)
    assert all(torch.equal(a, b) for a, b in zip(first, same, strict=True))
    assert not torch.equal(same[0], following[0])  # the generator moves on
    assert torch.equal(mqar_batch(2, num_pairs=3, num_queries=1, vocab_size=8)[0],
                       mqar_batch(2, num_pairs=3, num_queries=1, vocab_size=8, seed=0)[0])  # fmt: skip


def test_the_smallest_vocabulary_fits_the_pairs_exactly():
    tokens, _ = mqar_batch(16, num_pairs=4, num_queries=4, vocab_size=10, seed=1)  # keys 1..4, values 5..9
    assert {int(k) for k in tokens[:, 0:8:2].flatten()} == {1, 2, 3, 4}


def test_bad_input_is_named():
    def batch(**changes):
        args = dict(batch_size=2, num_pairs=4, num_queries=2, vocab_size=16) | changes
        return mqar_batch(args.pop("batch_size"), **args)

    with pytest.raises(ValueError, match=r"^mqar_batch: vocab_size must be at least 10 for 4 pairs .* got 9$"):
        batch(vocab_size=9)
    with pytest.raises(ValueError, match=r"^mqar_batch: num_queries must be an int in \[1, 4\] \(num_pairs"):
        batch(num_queries=5)
    with pytest.raises(ValueError, match=r"^mqar_batch: num_queries must be an int in \[1, 4\].*got 0$"):
        batch(num_queries=0)
    with pytest.raises(ValueError, match=r"^mqar_batch: batch_size must be an int >= 1, got 0$"):
        batch(batch_size=0)
    with pytest.raises(TypeError, match=r"^mqar_batch: vocab_size must be an int, got float \(16\.0\)$"):
        batch(vocab_size=16.0)
    with pytest.raises(TypeError, match=r"^mqar_batch: seed must be an int or None, got str"):
        batch(seed="0")
    with pytest.raises(TypeError, match=r"^mqar_batch: generator must be a torch\.Generator or None, got int \(0\)$"):
        batch(generator=0)
    with pytest.raises(ValueError, match=r"^mqar_batch: pass seed or generator, not both$"):
        batch(seed=0, generator=torch.Generator())


# --- training on it ------------------------------------------------------------------------------


def _recall_model(**options) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(LMConfig(16, d_model=32, num_heads=2, num_layers=2, dim_feedforward=64, **options))


def test_the_accuracy_counts_the_queries_answered_with_their_value():
    model = _recall_model()
    _, targets = mqar_batch(64, num_pairs=3, num_queries=2, vocab_size=16, seed=10_000)

    class Oracle(TransformerLM):  # logits that put the target first at a chosen share of the queries
        def forward(self, x, start=0, caches=None):
            logits = torch.zeros(*x.shape, 16)
            right = targets.clamp(min=0)
            right[:, 2 * 3 + 2 :] = 0  # the second query of every sequence: answered wrong (0 is no value)
            return logits.scatter(-1, right[..., None], 1.0)

    oracle = Oracle(model.config)
    assert recall_accuracy(oracle, num_pairs=3, num_queries=2, num_sequences=64) == 0.5
    assert 0 <= recall_accuracy(model, num_pairs=3, num_queries=2, num_sequences=64) <= 1


def test_training_learns_to_recall_a_few_pairs():
    model = _recall_model()
    before = recall_accuracy(model, num_pairs=2, num_queries=2, num_sequences=256)
    history = train_recall(model, steps=150, num_pairs=2, num_queries=2, batch_size=32, lr=1e-2, warmup=10,
                           progress=False)  # fmt: skip
    assert len(history.loss) == 150 and history.loss[-1] < 0.5 * history.loss[0]
    after = recall_accuracy(model, num_pairs=2, num_queries=2, num_sequences=256)
    assert before < 0.3 < 0.9 < after, (before, after)  # chance is 1 / 8


def test_the_recall_trainer_and_accuracy_name_bad_arguments():
    model = _recall_model()
    with pytest.raises(TypeError, match="train_recall: model must be a TransformerLM, got Linear"):
        train_recall(torch.nn.Linear(2, 2), steps=1, num_pairs=2, num_queries=1)
    with pytest.raises(ValueError, match=r"model must be causal \(LMConfig\(causal=True\)\)"):
        recall_accuracy(_recall_model(causal=False), num_pairs=2, num_queries=1)
    with pytest.raises(ValueError, match="num_queries must be an int in"):
        train_recall(model, steps=1, num_pairs=2, num_queries=3)
    with pytest.raises(ValueError, match="vocab_size must be at least 18 for 8 pairs"):
        train_recall(model, steps=50, num_pairs=8, num_queries=1)
    with pytest.raises(ValueError, match="weight_decay must be a number >= 0"):
        train_recall(model, steps=50, num_pairs=2, num_queries=1, weight_decay=-1.0)
    with pytest.raises(ValueError, match="warmup must be an int"):
        train_recall(model, steps=5, num_pairs=2, num_queries=1, warmup=6)
    with pytest.raises(ValueError, match="sequences of 40 positions exceed the model's max_len 32"):
        recall_accuracy(_recall_model(positions="learned", max_len=32), num_pairs=10, num_queries=10)
    with pytest.raises(ValueError, match="num_sequences must be an int >= 1, got 0"):
        recall_accuracy(model, num_pairs=2, num_queries=1, num_sequences=0)
