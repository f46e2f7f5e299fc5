"""Captioning with soft and hard attention (chapter 4, part 1): the loss, training, evaluation.

``caption_loss`` is the cross-entropy of a caption, plus, for hard attention, the REINFORCE term
of Xu et al. (2015); ``train_captioner`` runs the shared loop on it, ``evaluate_captioner`` scores
greedy captions (and whether their object words look at their objects), and ``gradient_noise``
measures how noisy the gradient that reaches the attention is.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from attnlab.attention.hard import MovingAverageBaseline, reinforce_loss
from attnlab.data.scenes import PAD, START, SceneTask
from attnlab.models.captioning import Captioner, CaptionOutput, HardCaptioner, region_cells
from attnlab.train.loop import Device, TrainHistory, eval_device, tensor_batches, train_device, train_loop
from attnlab.validation import check_int, check_number, check_training

__all__ = [
    "CaptionEval",
    "caption_loss",
    "evaluate_captioner",
    "gradient_noise",
    "shift_captions",
    "train_captioner",
]


@dataclass
class CaptionEval:
    """Greedy captions of a ``SceneTask``, scored.

    ``exact_match``: share of captions equal to the reference, ``<end>`` included.
    ``token_accuracy``: share of reference positions (``<end>`` included) predicted right.
    ``grounding``: share of object words (colours and shapes) generated right whose largest
    attention weight falls on the layout cell of the object they name; ``grounded_words`` how
    many such words there were. ``tokens (n, L)`` and ``weights (n, L, S)``: what was generated.
    """

    exact_match: float
    token_accuracy: float
    grounding: float
    grounded_words: int
    tokens: torch.Tensor
    weights: torch.Tensor


def _check_captioner(name: str, model: nn.Module, task: SceneTask | None) -> None:
    if not isinstance(model, Captioner):
        raise TypeError(f"{name}: model must be a SoftCaptioner or HardCaptioner, got {type(model).__name__}")
    if task is None:
        return
    if not isinstance(task, SceneTask):
        raise TypeError(f"{name}: the data must be a SceneTask (make_scenes), got {type(task).__name__}")
    if task.images.shape[-1] != model.config.image_size:
        raise ValueError(
            f"{name}: the model expects {model.config.image_size}-pixel images, the scenes have {task.images.shape[-1]}"
        )
    if model.config.grid % task.grid:
        raise ValueError(
            f"{name}: the model's grid ({model.config.grid}) must be a multiple of the scenes' layout "
            f"grid ({task.grid})"
        )


def shift_captions(captions: torch.Tensor) -> torch.Tensor:
    """Decoder inputs for teacher forcing: ``<start>`` then the caption without its last token."""
    start = torch.full_like(captions[:, :1], START)  # (B, 1)
    return torch.cat([start, captions[:, :-1]], dim=1)  # (B, L)


@torch.no_grad()
def evaluate_captioner(
    model: Captioner, task: SceneTask, *, device: Device | None = None, batch_size: int = 500
) -> CaptionEval:
    """Greedy captions of every scene in ``task``, scored (chapter 4). Hard models attend to the
    most likely location (eval mode). Runs where the model is (``device``, if given, must be the
    model's device); the ``tokens`` and ``weights`` of the result are on the CPU."""
    _check_captioner("evaluate_captioner", model, task)
    device = eval_device("evaluate_captioner", model, device)
    model.eval()
    L = task.captions.shape[1]
    outputs = [model.generate(task.images[i : i + batch_size].to(device), L) for i in range(0, len(task), batch_size)]
    tokens = torch.cat([o.tokens for o in outputs]).cpu()  # type: ignore[misc]  # (n, L)
    weights = torch.cat([o.weights for o in outputs]).cpu()  # (n, L, S)
    captions, cells = task.captions.cpu(), task.cells.cpu()
    real = captions != PAD  # (n, L)
    right = tokens == captions
    exact = (right | ~real).all(dim=1).float().mean().item()
    token_accuracy = (right & real).sum().item() / real.sum().item()
    objects = (cells >= 0) & right  # object words generated right
    looked_at = region_cells(model.config, task.grid)[weights.argmax(-1)]  # (n, L): cell of the largest weight
    hits = (looked_at == cells)[objects]
    grounding = hits.float().mean().item() if len(hits) else float("nan")
    return CaptionEval(exact, token_accuracy, grounding, len(hits), tokens, weights)


def _caption_nll(out: CaptionOutput, captions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Negative log-likelihood of each word ``(B, L)`` (0 on padding), and the mask of real words."""
    real = captions != PAD  # (B, L)
    return nn.functional.cross_entropy(out.logits.transpose(1, 2), captions, reduction="none") * real, real


def _location_reward(nll: torch.Tensor, reward: str) -> torch.Tensor:
    """Reward of the location drawn at each step ``(B, L)``: log-likelihood of the caption, or of
    its words from that step on."""
    log_likelihood = -nll.detach()  # (B, L)
    if reward == "sequence":
        return log_likelihood.sum(dim=1, keepdim=True).expand_as(log_likelihood)  # same reward at every step
    return log_likelihood.flip(1).cumsum(1).flip(1)  # (B, L): sum over steps t' >= t


def caption_loss(
    model: Captioner,
    images: torch.Tensor,
    captions: torch.Tensor,
    *,
    baseline: MovingAverageBaseline | torch.Tensor | None = None,
    reward: str = "to_go",
    entropy_weight: float = 0.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, CaptionOutput]:
    """The training loss of a captioner on one batch (chapter 4).

    The cross-entropy of the caption, averaged over its words. For a hard model in training mode
    (sampled locations) it adds the REINFORCE term of Xu et al. (eq. 12): the reward of the
    location drawn at step ``t`` is the log-likelihood of the caption, ``reward="sequence"`` (as
    in the paper), or of its words from ``t`` on, ``reward="to_go"`` (the words before ``t`` do
    not depend on it: same expectation, less noise); minus ``baseline`` (a
    ``MovingAverageBaseline`` updated here, a fixed ``(L,)`` tensor, or none); plus the entropy
    bonus.
    """
    _check_captioner("caption_loss", model, None)
    if reward not in ("to_go", "sequence"):
        raise ValueError(f"caption_loss: reward must be 'to_go' or 'sequence', got {reward!r}")
    # listing: loss
    out = model(images, shift_captions(captions), generator=generator)
    nll, real = _caption_nll(out, captions)
    loss = nll.sum() / real.sum()
    if out.log_prob is None:
        return loss, out
    gain = _location_reward(nll, reward)
    b: float | torch.Tensor = 0.0
    if isinstance(baseline, MovingAverageBaseline):
        b = baseline.update(gain, real)
    elif baseline is not None:
        b = baseline
    return loss + reinforce_loss(
        out.log_prob, gain, b, entropy=out.entropy(), entropy_weight=entropy_weight, mask=real
    ), out
    # end listing: loss


def train_captioner(
    model: Captioner,
    task: SceneTask,
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 3e-3,
    reward: str = "to_go",
    baseline_decay: float | None = 0.9,
    entropy_weight: float = 0.01,
    device: Device | None = None,
    seed: int = 0,
    eval_data: SceneTask | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    desc: str = "training",
) -> TrainHistory:
    """Train a soft or hard captioner with Adam for ``steps`` mini-batches (chapter 4).

    The loss is ``caption_loss``; for a hard model, with a ``MovingAverageBaseline`` of decay
    ``baseline_decay`` (``None``: no baseline) and the entropy bonus ``entropy_weight``.
    ``history.evals`` holds a ``CaptionEval`` of ``eval_data`` every ``eval_every`` steps and
    after the last; ``history.eval_seconds`` the training time (evaluations excluded) at each.
    The model trains where it is, or on ``device`` if one is given; hard attention draws its
    locations with a generator seeded by ``seed`` on that device.
    """
    _check_captioner("train_captioner", model, task)
    check_training("train_captioner", steps, eval_every, batch_size, lr=lr)
    check_number("train_captioner", "baseline_decay", baseline_decay, low=0, high=1, high_open=True, none=True)
    check_number("train_captioner", "entropy_weight", entropy_weight, low=0)
    if eval_data is not None:
        _check_captioner("train_captioner (eval_data)", model, eval_data)
    device = train_device(model, device)
    baseline = None if baseline_decay is None else MovingAverageBaseline(baseline_decay)
    sampler = torch.Generator(device=device).manual_seed(seed)  # hard attention's locations, where they are drawn

    def loss_of(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        images, captions = batch
        return caption_loss(
            model, images, captions, baseline=baseline, reward=reward, entropy_weight=entropy_weight, generator=sampler
        )[0]

    return train_loop(
        model,
        tensor_batches(task.images, task.captions, batch_size, seed, device),
        loss_of,
        steps=steps,
        lr=lr,
        evaluate=None if eval_data is None else partial(evaluate_captioner, model, eval_data),
        eval_every=eval_every,
        progress=progress,
        desc=desc,
    )


def gradient_noise(
    model: Captioner,
    task: SceneTask,
    *,
    batches: int = 20,
    batch_size: int = 64,
    reward: str = "to_go",
    baseline: bool = True,
    device: Device | None = None,
    seed: int = 0,
) -> float:
    """Noise of the gradient that reaches the attention MLP ``f_att`` (chapter 4).

    Draws ``batches`` mini-batches, computes the gradient of ``caption_loss`` (no entropy bonus)
    with respect to ``f_att``'s parameters on each, and returns the relative variance
    ``E||g - mean g||^2 / ||mean g||^2``: 0 for a gradient that never changes; above 1 when the
    noise is larger than the signal. A hard model samples its locations (training mode); its
    ``baseline``, when used, is the mean reward per step over the same batches, computed first.
    Runs where the model is (``device``, if given, must be the model's device), with the
    locations drawn by a generator on that device.
    """
    _check_captioner("gradient_noise", model, task)
    check_int("gradient_noise", "batches", batches, low=2)
    device = eval_device("gradient_noise", model, device)
    model.train()
    g = torch.Generator().manual_seed(seed)  # which scenes: on the CPU, where the data is indexed
    picks = [torch.randint(0, len(task), (batch_size,), generator=g) for _ in range(batches)]
    sampler = torch.Generator(device=device).manual_seed(seed)
    fixed: torch.Tensor | None = None
    if baseline and isinstance(model, HardCaptioner):
        state = sampler.get_state()
        total = count = torch.zeros((), device=device)
        with torch.no_grad():
            for index in picks:
                captions = task.captions[index].to(device)
                out = model(task.images[index].to(device), shift_captions(captions), generator=sampler)
                nll, real = _caption_nll(out, captions)
                total = total + (_location_reward(nll, reward) * real).sum(0)  # (L,)
                count = count + real.sum(0)
        fixed = total / count.clamp_min(1)  # mean reward per step
        sampler.set_state(state)  # the measured batches draw the same locations
    params = list(model.f_att.parameters())
    grads = []
    for index in picks:
        loss, _ = caption_loss(
            model,
            task.images[index].to(device),
            task.captions[index].to(device),
            baseline=fixed,
            reward=reward,
            generator=sampler,
        )
        grads.append(torch.cat([p.flatten() for p in torch.autograd.grad(loss, params)]))
    model.eval()
    stacked = torch.stack(grads)  # (batches, P)
    mean = stacked.mean(0)
    return ((stacked - mean).pow(2).sum(1).mean() / mean.pow(2).sum()).item()
