"""The neighbour task, the one-layer self-attention tagger and its training loop (chapter 5)."""

from __future__ import annotations

import pytest
import torch

import attnlab
from attnlab.data import make_neighbour_task
from attnlab.models import SelfAttentionTagger, TaggerConfig
from attnlab.train import evaluate_tagger, train_tagger


def test_neighbour_labels_are_the_neighbours():
    tokens, targets = make_neighbour_task(50, 7, n_symbols=5, offsets=(-2, 1), seed=3)
    assert tokens.shape == (50, 7) and targets.shape == (50, 7, 2)
    assert tokens.dtype == targets.dtype == torch.long and tokens.max() < 5
    for b in range(50):
        for i in range(7):
            for k, o in enumerate((-2, 1)):
                want = tokens[b, i + o].item() if 0 <= i + o < 7 else 5
                assert targets[b, i, k].item() == want


def test_neighbour_task_is_seeded():
    a, b = make_neighbour_task(10, 5, seed=1), make_neighbour_task(10, 5, seed=1)
    c = make_neighbour_task(10, 5, seed=2)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])


def test_neighbour_task_errors():
    with pytest.raises(TypeError, match="length must be an int"):
        make_neighbour_task(3, 2.5)
    with pytest.raises(ValueError, match="n_symbols must be an int >= 1, got 0"):
        make_neighbour_task(3, 4, n_symbols=0)
    with pytest.raises(ValueError, match=r"offsets must be a tuple or list of ints, non-empty; got \(\)"):
        make_neighbour_task(3, 4, offsets=())
    with pytest.raises(TypeError, match=r"offsets must be a tuple or list of ints, got tuple \(\(1, 2.0\)\)"):
        make_neighbour_task(3, 4, offsets=(1, 2.0))


@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "none"])
def test_tagger_shapes_and_returned_weights(positions):
    model = SelfAttentionTagger(TaggerConfig(10, 11, num_outputs=2, num_heads=4, positions=positions))
    tokens = torch.randint(0, 10, (3, 9))
    logits, weights = model(tokens)
    assert logits.shape == (3, 9, 2, 11) and weights is None
    logits2, weights = model(tokens, need_weights=True)
    assert weights.shape == (3, 4, 9, 9)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 9))
    torch.testing.assert_close(logits, logits2)  # the fast kernel and the three stages agree


def test_without_positions_the_tagger_sees_a_bag_of_tokens():
    torch.manual_seed(0)
    tokens = torch.randint(0, 10, (2, 8))
    perm = torch.randperm(8)
    for positions, equivariant in (("none", True), ("sinusoidal", False), ("learned", False)):
        model = SelfAttentionTagger(TaggerConfig(10, 11, positions=positions))
        if positions == "learned":
            torch.nn.init.normal_(model.learned.embedding.weight)  # not the near-zero initial values
        with torch.no_grad():
            out, _ = model(tokens)
            permuted, _ = model(tokens[:, perm])
        same = torch.allclose(permuted, out[:, perm], atol=1e-5)
        assert same == equivariant, positions


def test_tagger_errors_name_the_argument():
    with pytest.raises(ValueError, match="positions must be one of"):
        TaggerConfig(10, 11, positions="rotary")
    with pytest.raises(ValueError, match="num_heads must be an int >= 1, got 0"):
        TaggerConfig(10, 11, num_heads=0)
    with pytest.raises(TypeError, match="config must be a TaggerConfig"):
        SelfAttentionTagger({"vocab_size": 10})
    model = SelfAttentionTagger(TaggerConfig(10, 11, max_len=8))
    with pytest.raises(TypeError, match=r"tokens must be a torch.long tensor, got torch.float32"):
        model(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="sequence length 9 exceeds max_len 8"):
        model(torch.zeros(2, 9, dtype=torch.long))
    with pytest.raises(ValueError, match=r"tokens must lie in \[0, 10\), got \[0, 12\]"):
        model(torch.tensor([[0, 12]]))
    with pytest.raises(ValueError, match=r"targets \(n, N, num_outputs=1\)"):
        train_tagger(model, *make_neighbour_task(4, 3), steps=1)
    with pytest.raises(TypeError, match="model must be a SelfAttentionTagger"):
        evaluate_tagger(torch.nn.Linear(2, 2), *make_neighbour_task(4, 3))


def test_train_tagger_records_its_evaluations_and_they_are_of_the_model():
    """The training loop's evaluations on a tiny case; that positions let the tagger learn the
    neighbour task and a bag of tokens cannot is asserted where chapter 5 trains them, under nbval."""
    train = make_neighbour_task(128, 8, seed=0)
    test = make_neighbour_task(40, 8, seed=1)
    attnlab.set_seed(0)
    model = SelfAttentionTagger(TaggerConfig(10, 11, num_outputs=2, positions="learned"))
    history = train_tagger(model, *train, steps=6, batch_size=32, eval_data=test, eval_every=3, progress=False)
    assert history.eval_steps == [3, 6] and len(history.loss) == 6
    with torch.no_grad():  # the history's last evaluation is the final model's accuracy
        right = (model.eval()(test[0])[0].argmax(-1) == test[1]).sum().item()
    assert history.evals[-1] == right / test[1].numel()
    assert evaluate_tagger(model, *test, batch_size=7) == history.evals[-1]  # batches add up
