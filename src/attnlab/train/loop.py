"""The training loop every trainer shares, what it records, and where training runs.

Introduced in chapter 1 (``train_seq2seq``) and shared by the trainers of chapters 4, 5 and 8:
``train_loop`` takes a model, an iterator of batches and a function that gives the loss of a
batch, and runs Adam for a fixed number of steps (never for a fixed time), so that a seeded run
gives the same model every time on the same machine. Its docstring states what a model of your
own needs to be trained by it. ``TrainHistory`` is what it returns.

Devices: everything runs where the model is. ``device=None`` (the default of every trainer and
evaluator of ``attnlab.train``) means the device of the model's parameters (``model_device``);
data given on the CPU is moved there batch by batch. Evaluators never move a model: an explicit
``device`` must be the model's (``eval_device``); trainers move it only when given an explicit
``device`` (``train_device``). ``tensor_batches`` draws the shuffled mini-batches of the trainers
whose data is a pair of tensors.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from attnlab.validation import check_int, check_model, check_number

__all__ = [
    "Device",
    "TrainHistory",
    "eval_device",
    "model_device",
    "tensor_batches",
    "train_device",
    "train_loop",
]


@dataclass
class TrainHistory:
    """What happened during training: the loss every step, evaluations every ``eval_every`` steps.

    ``evals`` holds an ``EvalResult`` per evaluation for translators, a ``CaptionEval`` for
    captioners, an accuracy for taggers and classifiers. ``seconds`` is the whole wall time;
    ``eval_seconds[i]`` the time spent training (evaluations excluded) when ``evals[i]`` was
    taken, for "time to reach a quality".
    """

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    evals: list[Any] = field(default_factory=list)
    seconds: float = 0.0
    eval_seconds: list[float] = field(default_factory=list)


Device = torch.device | str


def model_device(model: nn.Module) -> torch.device:
    """Where ``model`` is: the device of its first parameter (or buffer); the CPU if it has none."""
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        return tensor.device
    return torch.device("cpu")


def _same_device(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def eval_device(name: str, model: nn.Module, device: Device | None) -> torch.device:
    """The device an evaluator runs on: the model's. Evaluation never moves a model, so an
    explicit ``device`` must be the model's."""
    here = model_device(model)
    if device is not None and not _same_device(torch.device(device), here):
        raise ValueError(
            f"{name}: device={str(device)!r}, but the model is on {here}; evaluation runs where the model is "
            "(leave device=None, or move the model first)"
        )
    return here


def train_device(model: nn.Module, device: Device | None) -> torch.device:
    """The device a trainer runs on: ``device`` if given (the model is moved there), else the model's."""
    if device is not None:
        model.to(device)
    return model_device(model)


def train_loop(
    model: nn.Module,
    batches: Iterator[Any],
    loss_of: Callable[[Any], torch.Tensor],
    *,
    steps: int,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    weight_decay: float = 0.0,
    clip: float | None = None,
    schedule: Callable[[int], float] | None = None,
    evaluate: Callable[[], Any] | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    desc: str = "training",
) -> TrainHistory:
    """Train ``model`` with Adam for ``steps`` steps, each on the loss of the next batch.

    Defined in chapter 1 (``train_seq2seq``): the loop every trainer of ``attnlab.train`` runs,
    with its own batches and loss (chapters 4, 5 and 8 too). A model of your own is trained by it
    when it follows this protocol:

    - ``model`` is an ``nn.Module``; Adam (``lr``, ``betas``) optimises all of
      ``model.parameters()``. The loop puts the model in training mode (``model.train()``) before
      the first step and after each evaluation, and in evaluation mode (``model.eval()``) when it
      returns.
    - ``batches`` is an iterator (a generator, say) of batches already on the model's device:
      ``next(batches)`` is called once per step, so it must yield at least ``steps`` of them. A
      batch is whatever ``loss_of`` takes: a tensor, a tuple of tensors, a ``Batch``.
    - ``loss_of(batch)`` returns the loss of that batch: a scalar (0-d) floating tensor computed
      from the model's parameters. The loop calls its ``backward()``; gradients are zeroed before
      each step and clipped to norm ``clip`` (``None``: not clipped).
    - ``evaluate()``, if given, takes no argument and runs every ``eval_every`` steps and after the
      last (it may put the model in evaluation mode: the loop puts it back). Its results go to
      ``history.evals``; the progress bar shows a number, or an object's ``exact_match``.

    With ``schedule`` the learning rate at step ``t`` (from 1) is ``lr * schedule(t)``.
    ``history.loss`` holds the loss of every step and ``history.eval_seconds`` the training time
    so far (evaluations excluded) at each evaluation. No step reads a tensor on the host: the
    losses are read in one go before each evaluation and at the end, so on a GPU the next step
    is queued while the last one runs.

    For example, a linear regression written from scratch::

        model = nn.Linear(3, 1)
        x, y = torch.randn(256, 3), torch.randn(256, 1)

        def batches():
            while True:
                index = torch.randint(0, 256, (32,))
                yield x[index], y[index]

        def loss_of(batch):
            inputs, targets = batch
            return nn.functional.mse_loss(model(inputs), targets)

        history = train_loop(model, batches(), loss_of, steps=200, lr=0.01, progress=False)
    """
    name = "train_loop"
    check_model(name, model, nn.Module, "an nn.Module")
    if not isinstance(batches, Iterator):
        raise TypeError(
            f"{name}: batches must be an iterator (a generator, say: next(batches) is called once per step), "
            f"got {type(batches).__name__}"
        )
    if not callable(loss_of) or (evaluate is not None and not callable(evaluate)):
        raise TypeError(f"{name}: loss_of (and evaluate, when given) must be functions")
    check_int(name, "steps", steps)
    check_int(name, "eval_every", eval_every, none=True)
    check_number(name, "lr", lr, low=0, low_open=True)
    check_number(name, "clip", clip, low=0, low_open=True, none=True)
    check_number(name, "weight_decay", weight_decay, low=0)
    model.train()
    optimizer: torch.optim.Optimizer
    if weight_decay > 0:
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=betas, weight_decay=weight_decay)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=betas)
    scheduler = None
    if schedule is not None:  # LambdaLR counts from 0; the schedule sees steps from 1
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: schedule(i + 1))
    history = TrainHistory()
    pending: list[torch.Tensor] = []  # losses not yet read on the host

    def read_losses() -> None:  # one synchronisation for many steps
        if pending:
            history.loss += torch.stack(pending).tolist()
            pending.clear()

    from tqdm.auto import tqdm  # here: in a notebook it imports ipywidgets, which graders never need

    started, evaluating = time.perf_counter(), 0.0
    bar = tqdm(range(1, steps + 1), desc=desc, disable=not progress, leave=True)
    for step in bar:
        # listing: step
        loss = loss_of(next(batches))
        optimizer.zero_grad()
        loss.backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        # end listing: step
        if scheduler is not None:
            scheduler.step()
        history.steps.append(step)
        pending.append(loss.detach())
        if evaluate is not None and ((eval_every and step % eval_every == 0) or step == steps):
            read_losses()  # waits for the device: the steps so far count as training time
            paused = time.perf_counter()
            history.eval_seconds.append(paused - started - evaluating)
            result = evaluate()
            history.eval_steps.append(step)
            history.evals.append(result)
            evaluating += time.perf_counter() - paused
            model.train()
            score = {"exact": result.exact_match} if hasattr(result, "exact_match") else {"accuracy": result}
            bar.set_postfix(loss=f"{history.loss[-1]:.3f}", **{k: f"{v:.3f}" for k, v in score.items()})
    read_losses()
    history.seconds = time.perf_counter() - started
    model.eval()
    return history


def tensor_batches(
    inputs: torch.Tensor, targets: torch.Tensor, batch_size: int, seed: int, device: torch.device
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Shuffled mini-batches of ``(inputs, targets)`` on ``device``, for the taggers (chapter 5),
    classifiers and captioners (chapter 4): each pass draws a permutation (from ``seed``, on the
    CPU) and the batches take its indices in order; a pass ends when fewer than ``batch_size``
    are left."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.empty(0, dtype=torch.long)
    while True:
        if len(order) < batch_size:
            order = torch.randperm(len(inputs), generator=generator)
        index, order = order[:batch_size], order[batch_size:]
        yield inputs[index].to(device), targets[index].to(device)
