"""Beyond softmax: multi-query associative recall (MQAR, Arora et al. 2023)."""

from __future__ import annotations

import pytest
import torch

from attnlab.data import mqar_batch


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
