"""The public training loop: a model written here, not one of the package's, trained by it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attnlab.train
from attnlab import listing
from attnlab.train import TrainHistory, train_loop


class TinyRegressor(nn.Module):
    """A student's own model: two linear layers, nothing of attnlab."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(2, 8)
        self.out = nn.Linear(8, 1)
        self.modes: list[bool] = []  # self.training at every forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.modes.append(self.training)
        return self.out(torch.tanh(self.hidden(x)))  # (B, 2) -> (B, 1)


def _data(n: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 2, generator=g)
    return x, (x[:, :1] * x[:, 1:]).sin()  # a target no linear model fits


def _setup(seed: int = 0):
    torch.manual_seed(seed)
    model = TinyRegressor()
    x, y = _data()
    g = torch.Generator().manual_seed(seed)

    def batches():
        while True:
            index = torch.randint(0, len(x), (32,), generator=g)
            yield x[index], y[index]

    def loss_of(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        inputs, targets = batch
        return nn.functional.mse_loss(model(inputs), targets)  # a scalar

    return model, batches(), loss_of


def test_a_model_of_ones_own_trains_and_its_loss_falls():
    model, batches, loss_of = _setup()
    before = [p.detach().clone() for p in model.parameters()]
    history = train_loop(model, batches, loss_of, steps=300, lr=0.01, progress=False)
    assert isinstance(history, TrainHistory)
    assert history.steps == list(range(1, 301)) and len(history.loss) == 300
    first, last = sum(history.loss[:20]) / 20, sum(history.loss[-20:]) / 20
    assert last < 0.5 * first, (first, last)
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))  # Adam moved them all


def test_weight_decay_is_adamws_decoupled_decay_and_zero_is_adam():
    """With weight_decay = 0 the loop takes Adam's steps; with a decay, AdamW's: each weight is also
    shrunk by lr * weight_decay times itself, apart from the gradient (Loshchilov and Hutter 2019)."""
    runs = {}
    for decay in (0.0, 0.5):
        torch.manual_seed(0)
        model, batches, loss_of = _setup()
        train_loop(model, batches, loss_of, steps=3, lr=0.01, weight_decay=decay, progress=False)
        runs[decay] = [p.detach().clone() for p in model.parameters()]
    torch.manual_seed(0)
    model, batches, loss_of = _setup()
    adam = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(3):
        adam.zero_grad()
        loss_of(next(batches)).backward()
        adam.step()
    assert all(torch.equal(a, b) for a, b in zip(runs[0.0], model.parameters(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(runs[0.5], runs[0.0], strict=True))
    torch.manual_seed(0)
    model, batches, loss_of = _setup()
    adamw = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.5)
    for _ in range(3):
        adamw.zero_grad()
        loss_of(next(batches)).backward()
        adamw.step()
    assert all(torch.equal(a, b) for a, b in zip(runs[0.5], model.parameters(), strict=True))


def test_the_loop_keeps_its_protocol_of_modes_and_evaluations():
    model, batches, loss_of = _setup()
    seen = []

    def evaluate() -> float:
        model.eval()  # an evaluator may switch modes: the loop switches back
        seen.append(len(model.modes))
        return 0.5

    history = train_loop(
        model, batches, loss_of, steps=10, lr=0.01, clip=1.0, evaluate=evaluate, eval_every=4, progress=False
    )
    assert all(model.modes)  # every step ran in training mode, after the evaluations too
    assert not model.training  # and the loop leaves the model in evaluation mode
    assert history.eval_steps == [4, 8, 10] and history.evals == [0.5, 0.5, 0.5]
    assert seen == [4, 8, 10]  # one forward per step, so the evaluations came after steps 4, 8, 10


def test_with_a_schedule_the_rate_is_lr_times_the_schedule():
    model, batches, loss_of = _setup()
    rates = []

    def schedule(step: int) -> float:
        rates.append(step)
        return 0.0  # no step moves a parameter

    before = [p.detach().clone() for p in model.parameters()]
    train_loop(model, batches, loss_of, steps=3, lr=0.1, schedule=schedule, progress=False)
    assert rates[:3] == [1, 2, 3]  # steps count from 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_chapter_1_lists_the_same_function_by_its_old_name():
    assert attnlab.train._train_loop is train_loop
    assert listing("attnlab.train._train_loop", "step") == listing(train_loop, "step")


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"model": "not a model"}, TypeError, r"train_loop: model must be an nn.Module, got str"),
        ({"batches": [1, 2]}, TypeError, r"train_loop: batches must be an iterator .*, got list"),
        ({"loss_of": 3}, TypeError, r"train_loop: loss_of \(and evaluate, when given\) must be functions"),
        ({"steps": 0}, ValueError, r"train_loop: steps must be an int >= 1, got 0"),
        ({"lr": 0.0}, ValueError, r"train_loop: lr must be a number > 0, got 0.0"),
        ({"clip": -1.0}, ValueError, r"train_loop: clip must be a number > 0, got -1.0"),
        ({"weight_decay": -0.1}, ValueError, r"train_loop: weight_decay must be a number >= 0, got -0.1"),
    ],
)
def test_bad_arguments_are_named(change, error, message):
    model, batches, loss_of = _setup()
    arguments = {"model": model, "batches": batches, "loss_of": loss_of, "steps": 2, "lr": 0.01, **change}
    with pytest.raises(error, match=message):
        train_loop(
            arguments.pop("model"), arguments.pop("batches"), arguments.pop("loss_of"), progress=False, **arguments
        )
