"""Multi-query associative recall (chapter "Beyond softmax"): training a model on it, and its accuracy.

``train_recall`` trains a decoder-only ``TransformerLM`` on fresh batches of ``mqar_batch``
(Arora et al. 2023, "Zoology"): the loss is the cross-entropy at the query positions only,
where the target is the value the key was paired with. ``recall_accuracy`` is the fraction of
queries whose most likely token is that value, on batches the training never saw.

The recipe follows the authors' MQAR runs in spirit (AdamW with weight decay 0.1, a short
warm-up, then a constant learning rate): with a cosine decay to zero, a softmax model at the
book's budget of a few hundred steps can stop before it has found the lookup.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from attnlab.data.recall import mqar_batch
from attnlab.models.lm import TransformerLM
from attnlab.train.loop import Device, TrainHistory, eval_device, train_device, train_loop
from attnlab.validation import check_int, check_model, check_number, check_training

__all__ = ["recall_accuracy", "train_recall"]


def _check_recall_model(name: str, model: object, num_pairs: int, num_queries: int) -> TransformerLM:
    check_model(name, model, TransformerLM)
    assert isinstance(model, TransformerLM)
    if not model.config.causal:
        raise ValueError(f"{name}: model must be causal (LMConfig(causal=True)): a query may not see what follows")
    check_int(name, "num_pairs", num_pairs)
    check_int(name, "num_queries", num_queries, high=num_pairs, note="num_pairs: each query asks for another key")
    length = 2 * num_pairs + 2 * num_queries
    c = model.config
    if c.positions in ("sinusoidal", "learned") and length > c.max_len:
        raise ValueError(f"{name}: sequences of {length} positions exceed the model's max_len {c.max_len}")
    return model


def train_recall(
    model: TransformerLM,
    *,
    steps: int,
    num_pairs: int,
    num_queries: int,
    batch_size: int = 32,
    lr: float = 3e-3,
    warmup: int = 40,
    weight_decay: float = 0.1,
    clip: float = 1.0,
    device: Device | None = None,
    seed: int = 0,
    progress: bool = True,
    desc: str = "recall",
) -> TrainHistory:
    """Train a causal ``TransformerLM`` on multi-query associative recall (chapter "Beyond softmax").

    Each step draws a new batch of ``mqar_batch(batch_size, num_pairs=D, num_queries=Q,
    vocab_size=model.config.vocab_size)`` from a generator seeded with ``seed`` (sequences of
    ``N = 2 D + 2 Q`` tokens), and takes a step of ``train_loop`` on the cross-entropy at the
    ``Q`` query positions of each sequence. AdamW with betas (0.9, 0.98) and ``weight_decay``,
    the gradient clipped to norm ``clip``; the learning rate rises linearly over ``warmup``
    steps and then stays at ``lr``.

    Raises:
        TypeError: ``model`` is not a ``TransformerLM``, or a count is not an int.
        ValueError: the model is not causal, ``num_queries`` is not in ``[1, num_pairs]``, the
            vocabulary is too small for ``num_pairs`` (``mqar_batch``'s rule), or a rate is out
            of range.
    """
    name = "train_recall"
    _check_recall_model(name, model, num_pairs, num_queries)
    check_training(name, steps, None, batch_size, lr=lr, clip=clip)
    check_int(name, "warmup", warmup, low=0, high=steps)
    check_number(name, "weight_decay", weight_decay, low=0)
    check_int(name, "seed", seed, low=None)
    vocab_size = model.config.vocab_size
    mqar_batch(1, num_pairs=num_pairs, num_queries=num_queries, vocab_size=vocab_size)  # the vocabulary's check
    device = train_device(model, device)
    generator = torch.Generator().manual_seed(seed)

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            tokens, targets = mqar_batch(
                batch_size, num_pairs=num_pairs, num_queries=num_queries, vocab_size=vocab_size, generator=generator
            )
            yield tokens.to(device), targets.to(device)

    def loss_of(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        tokens, targets = batch
        logits = model(tokens)  # (B, N, V)
        return nn.functional.cross_entropy(logits.transpose(1, 2), targets)  # -100 elsewhere: ignored

    return train_loop(
        model,
        batches(),
        loss_of,
        steps=steps,
        lr=lr,
        betas=(0.9, 0.98),
        weight_decay=weight_decay,
        clip=clip,
        schedule=lambda t: min(1.0, t / max(warmup, 1)),
        progress=progress,
        desc=desc,
    )


@torch.no_grad()
def recall_accuracy(
    model: TransformerLM,
    *,
    num_pairs: int,
    num_queries: int,
    num_sequences: int = 512,
    seed: int = 10_000,
    device: Device | None = None,
) -> float:
    """The fraction of queries a model answers with the right value, on fresh MQAR sequences.

    Defined in the chapter "Beyond softmax". ``num_sequences`` sequences of
    ``mqar_batch(..., seed=seed)`` (a seed that ``train_recall``'s batches, drawn from one
    generator of their own, do not reuse), each with ``num_queries`` queries; a query counts as
    recalled when the model's most likely token at its position is the paired value. Chance is
    about ``1 / (vocab_size / 2)``: the values come from half the vocabulary. Runs where the model is.
    """
    name = "recall_accuracy"
    _check_recall_model(name, model, num_pairs, num_queries)
    check_int(name, "num_sequences", num_sequences)
    check_int(name, "seed", seed, low=None)
    device = eval_device(name, model, device)
    model.eval()
    tokens, targets = mqar_batch(
        num_sequences, num_pairs=num_pairs, num_queries=num_queries, vocab_size=model.config.vocab_size, seed=seed
    )
    tokens, targets = tokens.to(device), targets.to(device)
    asked = targets != -100  # (B, N): the query positions
    right = 0
    for start in range(0, num_sequences, 128):
        rows = slice(start, start + 128)
        predicted = model(tokens[rows]).argmax(-1)  # (b, N)
        right += int(((predicted == targets[rows]) & asked[rows]).sum())
    return right / int(asked.sum())
