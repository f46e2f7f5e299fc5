"""The trainers of translators, taggers and classifiers: each is the shared loop with its batches and loss.

Introduced in chapter 1 (``train_seq2seq``); chapter 4 adds the classifiers (``train_classifier``),
chapter 5 the taggers (``train_tagger``). Each trainer checks its arguments, draws its batches in
an order that depends only on ``seed``, and runs ``attnlab.train.loop.train_loop`` with its loss;
its evaluator (``attnlab.train.evaluation``) runs every ``eval_every`` steps. The captioners and
the language models have theirs in ``attnlab.train.captioning`` and
``attnlab.train.language_models``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial

import torch
from torch import nn

from attnlab.data.vocab import Batch, CharVocab, make_batch
from attnlab.models.seq2seq import Seq2Seq
from attnlab.models.structured import HierarchicalClassifier, StructuredClassifier, frobenius_penalty
from attnlab.models.tagger import SelfAttentionTagger
from attnlab.train.evaluation import Classifier, Pairs, evaluate_classifier, evaluate_seq2seq, evaluate_tagger
from attnlab.train.loop import Device, TrainHistory, tensor_batches, train_device, train_loop
from attnlab.validation import check_labelled, check_model, check_number, check_pairs, check_tagged, check_training

__all__ = ["train_classifier", "train_seq2seq", "train_tagger"]


def _epoch_batches(pairs: Pairs, batch_size: int, bucket: bool, generator: torch.Generator) -> list[list[int]]:
    """One epoch of batches (lists of indices), shuffled; similar source lengths together if ``bucket``."""
    order = torch.randperm(len(pairs), generator=generator).tolist()
    if bucket:
        pool = 50 * batch_size
        order = [
            i
            for start in range(0, len(order), pool)
            for i in sorted(order[start : start + pool], key=lambda i: len(pairs[i][0]))
        ]
    batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    shuffled = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in shuffled]


def train_seq2seq(
    model: Seq2Seq,
    train_pairs: Pairs,
    src_vocab: CharVocab,
    tgt_vocab: CharVocab,
    *,
    steps: int,
    batch_size: int = 128,
    lr: float = 3e-3,
    clip: float = 1.0,
    device: Device | None = None,
    seed: int = 0,
    eval_pairs: Pairs | None = None,
    eval_every: int | None = None,
    bucket: bool = True,
    progress: bool = True,
    desc: str = "training",
    schedule: Callable[[int], float] | None = None,
    label_smoothing: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
) -> TrainHistory:
    """Train ``model`` with Adam and teacher forcing for ``steps`` mini-batches.

    Defined in chapter 1. Batches are drawn from ``train_pairs`` in a shuffled order that
    depends only on ``seed``; the loss is the cross-entropy over the real target tokens
    (padding ignored); gradients are clipped to norm ``clip``. If ``eval_pairs`` is given, the
    model is evaluated every ``eval_every`` steps and after the last step. The model trains
    where it is, or on ``device`` if one is given (it is moved there).

    With ``bucket=True`` each batch holds sources of similar length (pools of 50 batches are
    sorted by source length, cut into batches, and the batches shuffled): a batch is padded to
    its longest source, so mixing lengths 5 and 100 would make every step cost 100 steps of
    the recurrent layers.

    Chapter 6 adds, for the Transformer: ``schedule`` (the learning rate at step ``t`` is
    ``lr * schedule(t)``, e.g. ``warmup_schedule`` with ``lr=1``), ``label_smoothing`` (the
    target distribution puts ``1 - eps`` on the right token and spreads ``eps``) and Adam's
    ``betas`` (the paper uses ``(0.9, 0.98)``). Any model with ``Seq2Seq``'s interface works.

    Returns:
        A ``TrainHistory``; its ``seconds`` field is the wall time spent (for reporting only).
    """
    check_pairs("train_seq2seq", train_pairs)
    check_training("train_seq2seq", steps, eval_every, batch_size, lr=lr, clip=clip)
    if schedule is not None and not callable(schedule):
        raise TypeError(f"train_seq2seq: schedule must be a function of the step, got {type(schedule).__name__}")
    check_number("train_seq2seq", "label_smoothing", label_smoothing, low=0, high=1, high_open=True)
    if eval_pairs is not None:
        check_pairs("train_seq2seq (eval_pairs)", eval_pairs)
    device = train_device(model, device)
    loss_fn = nn.CrossEntropyLoss(ignore_index=CharVocab.PAD, label_smoothing=float(label_smoothing))
    generator = torch.Generator().manual_seed(seed)  # the order of the batches, on the CPU

    # listing: batches
    def batches() -> Iterator[Batch]:
        order: list[list[int]] = []
        while True:
            if not order:
                order = _epoch_batches(train_pairs, batch_size, bucket, generator)
            index = order.pop()
            yield make_batch([train_pairs[i] for i in index], src_vocab, tgt_vocab, device)

    def loss_of(batch: Batch) -> torch.Tensor:
        logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)  # (B, L, V)
        return loss_fn(logits.flatten(0, 1), batch.tgt_out.flatten())  # (B * L, V) vs (B * L,)

    # end listing: batches

    return train_loop(
        model,
        batches(),
        loss_of,
        steps=steps,
        lr=lr,
        betas=betas,
        clip=clip,
        schedule=schedule,
        evaluate=None if eval_pairs is None else partial(evaluate_seq2seq, model, eval_pairs, src_vocab, tgt_vocab),
        eval_every=eval_every,
        progress=progress,
        desc=desc,
    )


def train_tagger(
    model: SelfAttentionTagger,
    tokens: torch.Tensor,
    targets: torch.Tensor,
    *,
    steps: int,
    batch_size: int = 128,
    lr: float = 3e-3,
    device: Device | None = None,
    seed: int = 0,
    eval_data: tuple[torch.Tensor, torch.Tensor] | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    desc: str = "training",
) -> TrainHistory:
    """Train a tagger with Adam on the cross-entropy of every label, for ``steps`` mini-batches.

    Defined in chapter 5. Batches are drawn from ``(tokens, targets)`` in a shuffled order that
    depends only on ``seed``. If ``eval_data = (tokens, targets)`` is given, the accuracy
    (``evaluate_tagger``) is recorded every ``eval_every`` steps and after the last step. The
    model trains where it is, or on ``device`` if one is given.
    """
    check_model("train_tagger", model, SelfAttentionTagger)
    c = model.config
    check_tagged("train_tagger", tokens, targets, num_outputs=c.num_outputs, vocab_size=c.vocab_size)
    check_training("train_tagger", steps, eval_every, batch_size, lr=lr)
    if eval_data is not None:
        check_tagged("train_tagger (eval_data)", *eval_data, num_outputs=c.num_outputs, vocab_size=c.vocab_size)
    device = train_device(model, device)

    def loss_of(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        logits, _ = model(x)  # (B, N, outputs, classes)
        return nn.functional.cross_entropy(logits.flatten(0, 2), y.flatten())  # (B*N*outputs, classes)

    return train_loop(
        model,
        tensor_batches(tokens, targets, batch_size, seed, device),
        loss_of,
        steps=steps,
        lr=lr,
        evaluate=None if eval_data is None else partial(evaluate_tagger, model, *eval_data),
        eval_every=eval_every,
        progress=progress,
        desc=desc,
    )


def train_classifier(
    model: Classifier,
    tokens: torch.Tensor,
    labels: torch.Tensor,
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 3e-3,
    penalty: float = 0.0,
    device: Device | None = None,
    seed: int = 0,
    eval_data: tuple[torch.Tensor, torch.Tensor] | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    desc: str = "training",
) -> TrainHistory:
    """Train a classifier with Adam on the cross-entropy, for ``steps`` mini-batches (chapter 4).

    With ``penalty > 0`` (a ``StructuredClassifier`` only), the loss adds ``penalty`` times the
    batch mean of ``frobenius_penalty`` of the hops, as in Lin et al. (2017). Evaluation and
    device as in ``train_tagger``: accuracy every ``eval_every`` steps and after the last.
    """
    check_model("train_classifier", model, (StructuredClassifier, HierarchicalClassifier))
    dims = 2 if isinstance(model, StructuredClassifier) else 3  # a document: words, or sentences of words
    check_labelled("train_classifier", tokens, labels, dims=dims)
    check_training("train_classifier", steps, eval_every, batch_size, lr=lr)
    check_number("train_classifier", "penalty", penalty, low=0)
    if penalty and not isinstance(model, StructuredClassifier):
        raise ValueError("train_classifier: penalty applies to the hops of a StructuredClassifier only")
    if eval_data is not None:
        check_labelled("train_classifier (eval_data)", *eval_data, dims=dims)

    device = train_device(model, device)

    def loss_of(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        logits, weights, *_ = model(x)  # (B, classes), attention weights
        loss = nn.functional.cross_entropy(logits, y)
        return loss + penalty * frobenius_penalty(weights).mean() if penalty else loss

    return train_loop(
        model,
        tensor_batches(tokens, labels, batch_size, seed, device),
        loss_of,
        steps=steps,
        lr=lr,
        evaluate=None if eval_data is None else partial(evaluate_classifier, model, *eval_data),
        eval_every=eval_every,
        progress=progress,
        desc=desc,
    )
