"""Language models on a text corpus (chapter 8): the objectives, training, the loss by position.

``train_lm`` trains a ``TransformerLM`` on windows of a corpus with GPT's objective (the next
token) or BERT's (``mask_tokens``); ``lm_loss_by_position`` and ``evaluate_lm`` measure the loss
of consecutive windows, with the same objectives; ``lm_token_losses`` keeps every token's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from attnlab.models.lm import TransformerLM
from attnlab.train.loop import Device, TrainHistory, eval_device, train_device, train_loop
from attnlab.train.schedules import warmup_cosine
from attnlab.validation import check_choice, check_int, check_number, check_tensor, check_training

__all__ = ["LM_OBJECTIVES", "evaluate_lm", "lm_loss_by_position", "lm_token_losses", "mask_tokens", "train_lm"]


LM_OBJECTIVES = ("causal", "masked")


def mask_tokens(
    tokens: torch.Tensor,
    vocab_size: int,
    *,
    rate: float = 0.15,
    mask_id: int = 0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masked-token objective (Devlin et al. 2019, section 3.1), defined in chapter 8.

    Chooses each position of ``tokens (B, N)`` with probability ``rate``; of the chosen, 80 %
    become ``mask_id``, 10 % a random token and 10 % stay. Returns ``(inputs (B, N), targets
    (B, N))``, the targets ``-100`` (ignored by the cross-entropy) where not chosen.
    """
    check_tensor("mask_tokens", "tokens", tokens, kind="long", dim=2, names="(B, N)")
    check_int("mask_tokens", "vocab_size", vocab_size, low=2)
    check_number("mask_tokens", "rate", rate, low=0, high=1, low_open=True)
    device = tokens.device
    # listing: mask
    u = torch.rand(tokens.shape, generator=generator, device=device)  # one draw decides all three
    chosen = u < rate
    targets = tokens.masked_fill(~chosen, -100)  # predict only the chosen positions
    random = torch.randint(1, vocab_size, tokens.shape, generator=generator, device=device)
    inputs = torch.where(u < 0.8 * rate, mask_id, tokens)  # 80 % of the chosen: the blank
    inputs = torch.where((u >= 0.8 * rate) & (u < 0.9 * rate), random, inputs)  # 10 %: a random token
    # end listing: mask
    return inputs, targets


def _check_lm(name: str, model: nn.Module, ids: torch.Tensor, context: int, objective: str) -> None:
    if not isinstance(model, TransformerLM):
        raise TypeError(f"{name}: model must be a TransformerLM, got {type(model).__name__}")
    check_tensor(name, "ids", ids, kind="long", dim=1, names="(N,)", note="a corpus as one sequence of ids")
    check_int(name, "context", context)
    check_choice(name, "objective", objective, LM_OBJECTIVES)
    if (objective == "causal") != model.config.causal:
        raise ValueError(f"{name}: the {objective!r} objective needs LMConfig(causal={objective == 'causal'})")
    if len(ids) < context + 1:
        raise ValueError(f"{name}: ids must hold more than context = {context} tokens, got {len(ids)}")


def _lm_batch(
    window: torch.Tensor, objective: str, vocab_size: int, rate: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets ``(B, N)`` of ``window (B, N + 1)``: the next token for "causal"
    (inputs ``[:, :-1]``), the chosen tokens of ``window[:, :-1]`` for "masked" (-100 elsewhere)."""
    if objective == "causal":
        return window[:, :-1], window[:, 1:]  # predict token t + 1 from tokens <= t
    return mask_tokens(window[:, :-1], vocab_size, rate=rate, generator=generator)


def train_lm(
    model: TransformerLM,
    ids: torch.Tensor,
    *,
    steps: int,
    context: int = 64,
    objective: str = "causal",
    batch_size: int = 32,
    lr: float = 3e-3,
    clip: float = 1.0,
    mask_rate: float = 0.15,
    warmup: int = 0,
    device: Device | None = None,
    seed: int = 0,
    progress: bool = True,
    desc: str = "training",
) -> TrainHistory:
    """Train a ``TransformerLM`` on windows of ``context`` tokens of ``ids (N,)`` (chapter 8).

    Each step draws ``batch_size`` windows at random starts (an order that depends only on
    ``seed``) and takes a step of the shared training loop on the ``objective``: ``"causal"``
    (GPT's: every position predicts the next token; the model must be causal) or ``"masked"``
    (BERT's: ``mask_tokens`` with ``mask_rate``; the model must not be causal). The learning
    rate rises linearly over ``warmup`` steps, then decays as a cosine to 0.
    """
    _check_lm("train_lm", model, ids, context, objective)
    check_training("train_lm", steps, None, batch_size, lr=lr, clip=clip)
    check_int("train_lm", "warmup", warmup, low=0, high=steps)
    check_number("train_lm", "mask_rate", mask_rate, low=0, high=1, low_open=True)
    device = train_device(model, device)
    generator = torch.Generator().manual_seed(seed)  # windows and masks, drawn on the CPU

    def batches() -> Iterator[torch.Tensor]:
        while True:
            starts = torch.randint(0, len(ids) - context, (batch_size,), generator=generator)  # (B,)
            yield ids[starts[:, None] + torch.arange(context + 1)]  # (B, context + 1)

    def loss_of(window: torch.Tensor) -> torch.Tensor:
        inputs, targets = _lm_batch(window, objective, model.config.vocab_size, mask_rate, generator)
        logits = model(inputs.to(device))  # (B, N, V)
        return nn.functional.cross_entropy(logits.transpose(1, 2), targets.to(device))  # (B, V, N) vs (B, N)

    return train_loop(
        model,
        batches(),
        loss_of,
        steps=steps,
        lr=lr,
        clip=clip,
        schedule=warmup_cosine(steps, warmup),
        progress=progress,
        desc=desc,
    )


def _windows(ids: torch.Tensor, context: int) -> torch.Tensor:
    """Consecutive windows of ``context + 1`` tokens (inputs and their next tokens), ``(n, context + 1)``;
    the few tokens left at the end are dropped."""
    n = (len(ids) - 1) // context
    return torch.stack([ids[i * context : i * context + context + 1] for i in range(n)])


@torch.no_grad()
def lm_loss_by_position(
    model: TransformerLM,
    ids: torch.Tensor,
    *,
    context: int,
    objective: str = "causal",
    mask_rate: float = 0.15,
    batch_size: int = 16,
    seed: int = 0,
    device: Device | None = None,
) -> torch.Tensor:
    """The mean loss (nats per token) at each position of windows of ``context`` tokens, ``(context,)``.

    Defined in chapter 8. ``ids`` is cut into consecutive windows (every token in one, the few
    left at the end dropped); "causal": position ``t`` predicts window token ``t + 1`` from
    tokens ``0..t`` of its window; "masked": the positions ``mask_tokens`` chose (drawn from
    ``seed``), averaged where chosen. Runs where the model is.
    """
    _check_lm("lm_loss_by_position", model, ids, context, objective)
    device = eval_device("lm_loss_by_position", model, device)
    model.eval()
    windows = _windows(ids, context)  # (n, context + 1)
    generator = torch.Generator().manual_seed(seed)  # the masks, drawn on the CPU
    total = torch.zeros(context, device=device)
    count = torch.zeros(context, device=device)
    for start in range(0, len(windows), batch_size):
        inputs, targets = _lm_batch(
            windows[start : start + batch_size], objective, model.config.vocab_size, mask_rate, generator
        )
        inputs, targets = inputs.to(device), targets.to(device)
        logits = model(inputs)  # (b, context, V)
        loss = nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (b, context)
        total += loss.sum(0)  # ignored targets add 0
        count += (targets != -100).sum(0)
    return (total / count.clamp(min=1)).cpu()


def evaluate_lm(
    model: TransformerLM, ids: torch.Tensor, *, context: int, objective: str = "causal", **kwargs: Any
) -> float:
    """The mean of ``lm_loss_by_position`` over positions weighted equally: nats per token (chapter 8)."""
    return float(lm_loss_by_position(model, ids, context=context, objective=objective, **kwargs).mean())


def lm_token_losses(
    model: TransformerLM, ids: torch.Tensor, *, context: int, batch_size: int = 16, device: Device | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The next-token loss (nats) of every token of consecutive windows (chapter 8).

    ``ids`` is cut into windows as ``lm_loss_by_position`` cuts it; returns ``(windows (n,
    context), losses (n, context))``, on the CPU: ``losses[i, t]`` is the loss of predicting
    token ``t + 1`` of window ``i`` from its tokens ``0..t`` (``windows[i, :t + 1]``), so that
    a loss can be related to what came before it in the window. ``losses.mean(0)`` is
    ``lm_loss_by_position``'s causal result.
    """
    _check_lm("lm_token_losses", model, ids, context, "causal")
    check_int("lm_token_losses", "batch_size", batch_size)
    device = eval_device("lm_token_losses", model, device)
    model.eval()
    windows = _windows(ids, context)  # (n, context + 1)
    losses = []
    with torch.no_grad():
        for start in range(0, len(windows), batch_size):
            batch = windows[start : start + batch_size].to(device)
            logits = model(batch[:, :-1])  # (b, context, V)
            losses.append(nn.functional.cross_entropy(logits.transpose(1, 2), batch[:, 1:], reduction="none").cpu())
    return windows[:, :-1], torch.cat(losses)
