"""Hard attention: sampling a location, and the REINFORCE estimator (chapter 4)."""

import math

import pytest
import torch

from attnlab.attention import MovingAverageBaseline, attention_entropy, hard_attend, reinforce_loss, sample_location


def _reinforce_samples(theta, reward, baseline, n, seed):
    """Per-sample REINFORCE gradients (n, K) and their mean, through reinforce_loss and autograd."""
    theta = theta.clone().requires_grad_(True)
    weights = torch.softmax(theta, -1).expand(n, -1)
    index, log_prob = sample_location(weights, generator=torch.Generator().manual_seed(seed))
    loss = reinforce_loss(log_prob, reward[index], baseline)
    loss.backward()
    p = torch.softmax(theta.detach(), -1)
    per_sample = (reward[index] - baseline)[:, None] * (torch.nn.functional.one_hot(index, len(p)) - p)
    return -theta.grad, per_sample


@pytest.mark.parametrize("baseline", [0.0, 2.5])
def test_reinforce_is_unbiased_on_a_toy_problem_with_a_known_gradient(baseline):
    theta = torch.tensor([0.5, -1.0, 0.0, 1.5, -0.3], dtype=torch.float64)
    reward = torch.tensor([1.0, 4.0, -2.0, 3.0, 0.5], dtype=torch.float64)
    p = torch.softmax(theta, -1)
    exact = p * (reward - (p * reward).sum())  # d E[R] / d theta for R = reward[s], s ~ softmax(theta)
    estimate, per_sample = _reinforce_samples(theta, reward, baseline, 200_000, seed=0)
    torch.testing.assert_close(estimate, per_sample.mean(0))  # the loss's gradient is the estimator
    standard_error = per_sample.std(0) / math.sqrt(len(per_sample))
    assert ((estimate - exact).abs() < 4 * standard_error).all(), (estimate, exact, standard_error)


def test_a_baseline_lowers_the_variance():
    theta = torch.tensor([0.5, -1.0, 0.0, 1.5, -0.3], dtype=torch.float64)
    reward = torch.tensor([11.0, 14.0, 8.0, 13.0, 10.5], dtype=torch.float64)  # large common offset
    _, without = _reinforce_samples(theta, reward, 0.0, 20_000, seed=1)
    _, with_mean = _reinforce_samples(theta, reward, 12.0, 20_000, seed=1)
    assert (with_mean.var(0) < without.var(0) / 5).all()


def test_sampling_respects_masks_and_the_probabilities():
    weights = torch.tensor([[0.1, 0.2, 0.3, 0.4]]).expand(40_000, -1)
    mask = torch.tensor([[True, False, True, True]]).expand(40_000, -1)
    index, log_prob = sample_location(weights, mask, generator=torch.Generator().manual_seed(0))
    assert not bool((index == 1).any())
    freq = torch.bincount(index, minlength=4).double() / len(index)
    torch.testing.assert_close(freq, torch.tensor([0.125, 0.0, 0.375, 0.5], dtype=torch.float64), atol=0.01, rtol=0)
    torch.testing.assert_close(log_prob.exp(), torch.tensor([0.125, 0.0, 0.375, 0.5])[index])  # renormalised
    with pytest.raises(ValueError, match=r"rows \[1\] have no location left"):
        sample_location(torch.ones(2, 3), torch.tensor([[True, False, False], [False, False, False]]))


def test_hard_attend_returns_the_value_at_the_sampled_location():
    torch.manual_seed(0)
    values = torch.randn(6, 5, 3)
    weights = torch.softmax(torch.randn(6, 5), -1)
    context, index, _ = hard_attend(weights, values, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(context, values[torch.arange(6), index])
    with pytest.raises(ValueError, match=r"values must have shape \(B, L, D\)"):
        hard_attend(weights, values[:, :4])


def test_entropy_bonus_and_baseline():
    assert float(attention_entropy(torch.full((4,), 0.25))) == pytest.approx(math.log(4))
    assert float(attention_entropy(torch.tensor([0.0, 1.0, 0.0]))) == 0.0
    b = MovingAverageBaseline(0.9)
    assert b.update(torch.tensor([2.0, 4.0])) == 3.0  # first batch: its own mean
    assert b.update(torch.tensor([13.0])) == 3.0  # then the average so far
    assert b.value == pytest.approx(0.9 * 3.0 + 0.1 * 13.0)
    # the entropy bonus: with no reward signal (log_prob constant) the gradient is exactly
    # -0.1 times the gradient of the mean entropy, so a step of gradient descent spreads the weights
    logits = torch.randn(3, 4, generator=torch.Generator().manual_seed(0)).requires_grad_()
    loss = reinforce_loss(
        torch.zeros(3), torch.ones(3), 0.0, entropy=attention_entropy(torch.softmax(logits, -1)), entropy_weight=0.1
    )
    (grad,) = torch.autograd.grad(loss, logits)
    (expected,) = torch.autograd.grad(-0.1 * attention_entropy(torch.softmax(logits, -1)).mean(), logits)
    torch.testing.assert_close(grad, expected)
    assert grad.abs().sum() > 0
    stepped = torch.softmax(logits - 10.0 * grad, -1)
    assert (attention_entropy(stepped) > attention_entropy(torch.softmax(logits, -1))).all()
    with pytest.raises(ValueError, match="entropy_weight needs the entropy"):
        reinforce_loss(torch.zeros(3), torch.ones(3), entropy_weight=0.1)
    with pytest.raises(ValueError, match=r"decay must be a number in \[0, 1\), got 1.0"):
        MovingAverageBaseline(1.0)
    with pytest.raises(ValueError, match=r"weights must have shape \(B, L\) \(probabilities\), got shape \(3,\)"):
        sample_location(torch.ones(3))
    with pytest.raises(TypeError, match=r"weights must be a floating-point tensor \(probabilities\), got torch.int64"):
        sample_location(torch.ones(2, 3, dtype=torch.long))
