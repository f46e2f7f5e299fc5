"""Hard (stochastic) attention: sample one location, and train it with REINFORCE (chapter 4).

Xu et al. (2015) treat the attended location ``s_t`` as a multinoulli variable with
probabilities ``alpha_t`` (the soft attention weights) and take the annotation vector there as
the context. Sampling is not differentiable, so the gradient of the expected reward is estimated
by REINFORCE: ``E[(R - b) * grad log p(s)]``, with a moving-average baseline ``b`` that lowers
the variance without adding bias, and an entropy bonus that keeps the distribution from
collapsing too early.

Shapes: weights ``(B, L)`` over ``L`` locations; values ``(B, L, D)``.
"""

from __future__ import annotations

import torch

from attnlab.validation import check_number, check_tensor

__all__ = ["MovingAverageBaseline", "attention_entropy", "hard_attend", "reinforce_loss", "sample_location"]


def _check_weights(name: str, weights: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Check shapes (always) and values (on the CPU only); return the probabilities, masked and renormalised.

    Reading values on the host costs nothing on the CPU but a synchronisation on an accelerator,
    at every decoding step of a hard-attention model: there ``torch.multinomial`` checks them.
    """
    check_tensor(name, "weights", weights, kind="float", dim=2, names="(B, L)", note="probabilities")
    on_host = weights.device.type == "cpu"
    if on_host and (bool((weights < 0).any()) or not bool(torch.isfinite(weights).all())):
        raise ValueError(f"{name}: weights must be finite and non-negative")
    if mask is not None:
        check_tensor(name, "mask", mask, kind="bool", shape=tuple(weights.shape), note="True = may be drawn")
        weights = weights * mask  # masked locations can never be drawn
    empty = weights.sum(-1) <= 0
    if on_host and bool(empty.any()):
        raise ValueError(f"{name}: rows {empty.nonzero().flatten().tolist()} have no location left to sample (mask)")
    return weights / weights.sum(-1, keepdim=True)


def sample_location(
    weights: torch.Tensor, mask: torch.Tensor | None = None, *, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one location per row from ``weights`` (True in ``mask`` = may be drawn).

    Returns ``(index (B,), log_prob (B,))``; ``log_prob`` is differentiable in ``weights``, which
    is what REINFORCE needs. ``generator``, if given, must be on the device of ``weights``.
    Negative or non-finite weights, and rows with nothing left to draw, raise a ``ValueError``
    on the CPU; elsewhere ``torch.multinomial``'s own check applies (no host read per draw).
    """
    probs = _check_weights("sample_location", weights, mask)
    index = torch.multinomial(probs.detach(), 1, generator=generator).squeeze(-1)  # (B,)
    log_prob = probs.gather(-1, index[:, None]).squeeze(-1).log()  # (B,)
    return index, log_prob


def hard_attend(
    weights: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hard attention: the value at one sampled location, ``(context (B, D), index, log_prob)``."""
    check_tensor("hard_attend", "weights", weights, kind="float", dim=2, names="(B, L)")
    check_tensor(
        "hard_attend",
        "values",
        values,
        shape=(*weights.shape, None),
        names=f"(B, L, D) with (B, L) = {tuple(weights.shape)}",
    )
    index, log_prob = sample_location(weights, mask, generator=generator)
    context = values[torch.arange(len(index), device=values.device), index]  # (B, D)
    return context, index, log_prob


def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy of each row, ``-sum p log p`` with ``0 log 0 = 0``: ``(..., L) -> (...)``."""
    return -(weights * weights.clamp_min(torch.finfo(weights.dtype).tiny).log()).sum(-1)


class MovingAverageBaseline:
    """``b <- decay * b + (1 - decay) * mean(reward)``, as in Xu et al. (decay 0.9).

    ``reward (B,)`` gives one number; ``reward (B, L)`` one per step ``t`` (a reward counted from
    step ``t`` on), averaged over the rows where ``mask (B, L)`` is True.
    """

    def __init__(self, decay: float = 0.9):
        check_number("MovingAverageBaseline", "decay", decay, low=0, high=1, high_open=True)
        self.decay = float(decay)
        self.value: float | torch.Tensor | None = None

    def update(self, reward: torch.Tensor, mask: torch.Tensor | None = None) -> float | torch.Tensor:
        """Return the baseline to use for this batch (before seeing it), then update it."""
        check_tensor("MovingAverageBaseline.update", "reward", reward, kind="float", dim=(1, 2), names="(B,) or (B, L)")
        if len(reward) == 0:
            raise ValueError("MovingAverageBaseline.update: reward must hold at least one row, got an empty batch")
        reward = reward.detach()
        current: float | torch.Tensor
        if reward.dim() == 1:
            current = float(reward.mean())
        else:
            if mask is None:
                mask = torch.ones_like(reward, dtype=torch.bool)
            check_tensor("MovingAverageBaseline.update", "mask", mask, kind="bool", shape=tuple(reward.shape))
            current = (reward * mask).sum(0) / mask.sum(0).clamp_min(1)  # (L,)
            if self.value is not None and getattr(self.value, "shape", ()) != current.shape:  # a float has no shape
                raise ValueError("MovingAverageBaseline.update: reward changed shape since the last batch")
        used = current if self.value is None else self.value
        self.value = current if self.value is None else self.decay * self.value + (1 - self.decay) * current
        return used


def reinforce_loss(
    log_prob: torch.Tensor,
    reward: torch.Tensor,
    baseline: float | torch.Tensor = 0.0,
    *,
    entropy: torch.Tensor | None = None,
    entropy_weight: float = 0.0,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Surrogate loss whose gradient is minus the REINFORCE estimate (plus the entropy bonus).

    ``-mean((reward - baseline) * log_prob) - entropy_weight * mean(entropy)``; the reward is
    treated as a constant. Minimising it follows the estimated gradient of the expected reward.
    Shapes: ``(B,)`` (one decision per row), or ``(B, L)`` (one per step, with the reward counted
    from that step on); ``mask`` (same shape, boolean) drops padded steps from both means.
    """
    check_tensor("reinforce_loss", "log_prob", log_prob, kind="float", dim=(1, 2), names="(B,) or (B, L)")
    check_tensor(
        "reinforce_loss",
        "reward",
        reward,
        kind="float",
        shape=tuple(log_prob.shape),
        names=f"{tuple(log_prob.shape)} (that of log_prob)",
    )
    if mask is None:
        mask = torch.ones_like(log_prob, dtype=torch.bool)
    check_tensor("reinforce_loss", "mask", mask, kind="bool", shape=tuple(log_prob.shape))
    count = mask.sum().clamp_min(1)
    loss = -((reward.detach() - baseline) * log_prob * mask).sum() / count
    if entropy_weight:
        if entropy is None or entropy.shape != mask.shape:
            raise ValueError(
                f"reinforce_loss: entropy_weight needs the entropy of the attention weights, shape {tuple(mask.shape)}"
            )
        loss = loss - entropy_weight * (entropy * mask).sum() / count
    return loss
