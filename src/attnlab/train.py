"""Training and evaluating sequence-to-sequence models and token taggers.

Introduced in chapter 1 and used by every chapter that trains a translator; chapter 5 adds the
loop for per-token taggers (``train_tagger``). Training runs for a
fixed number of steps (never for a fixed time), so that a seeded run gives the same model, and
the same printed accuracies, every time on the same machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from attnlab.data.vocab import CharVocab, make_batch
from attnlab.models.seq2seq import Seq2Seq
from attnlab.models.structured import HierarchicalClassifier, StructuredClassifier, frobenius_penalty
from attnlab.models.tagger import SelfAttentionTagger

__all__ = [
    "EvalResult",
    "TrainHistory",
    "accuracy_by_length",
    "evaluate_classifier",
    "evaluate_seq2seq",
    "evaluate_tagger",
    "train_classifier",
    "train_seq2seq",
    "train_tagger",
    "translate",
]

Pairs = Sequence[tuple[str, str]]


@dataclass
class EvalResult:
    """Accuracy of greedy decoding on a set of pairs.

    ``exact_match``: share of pairs whose whole output equals the target.
    ``token_accuracy``: share of target positions (END included) predicted right.
    ``correct``: one bool per pair (exact match), in the order of the pairs.
    ``token_scores``: per pair, the share of its target positions (END included) predicted right.
    ``predictions``: the decoded outputs.
    """

    exact_match: float
    token_accuracy: float
    correct: list[bool]
    token_scores: list[float]
    predictions: list[str]


@dataclass
class TrainHistory:
    """What happened during training: the loss every step, evaluations every ``eval_every`` steps.

    ``evals`` holds an ``EvalResult`` per evaluation for translators, an accuracy for taggers.
    ``seconds`` is the whole wall time; ``eval_seconds[i]`` the time spent training (evaluations
    excluded) when ``evals[i]`` was taken, for "time to reach a quality" (``train_seq2seq`` only).
    """

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    evals: list[Any] = field(default_factory=list)
    seconds: float = 0.0
    eval_seconds: list[float] = field(default_factory=list)


def _check_pairs(name: str, pairs: Pairs) -> None:
    if not isinstance(pairs, Sequence) or len(pairs) == 0:
        raise ValueError(f"{name}: pairs must be a non-empty sequence of (source, target) strings")
    first = pairs[0]
    if not (isinstance(first, tuple) and len(first) == 2 and all(isinstance(x, str) for x in first)):
        raise TypeError(f"{name}: pairs must hold (source, target) string tuples, got {first!r}")


def _check_steps(name: str, steps: int, eval_every: int | None) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"{name}: steps must be a positive int, got {steps!r}")
    if eval_every is not None and (isinstance(eval_every, bool) or not isinstance(eval_every, int) or eval_every < 1):
        raise ValueError(f"{name}: eval_every must be a positive int or None, got {eval_every!r}")


def _check_positive(name: str, **values: float) -> None:
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"{name}: {key} must be a positive number, got {value!r}")


@torch.no_grad()
def evaluate_seq2seq(
    model: Seq2Seq,
    pairs: Pairs,
    src_vocab: CharVocab,
    tgt_vocab: CharVocab,
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 512,
) -> EvalResult:
    """Greedy-decode every source and compare with its target (defined in chapter 1).

    Each output may run to the target's length plus one (for END); longer outputs are cut.
    """
    _check_pairs("evaluate_seq2seq", pairs)
    _check_positive("evaluate_seq2seq", batch_size=batch_size)
    was_training = model.training
    model.eval()
    correct, scores, predictions, right_tokens, total_tokens = [], [], [], 0, 0
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        batch = make_batch(chunk, src_vocab, tgt_vocab, device)
        T = batch.tgt_out.shape[1]
        tokens, _ = model.greedy_decode(batch.src, batch.src_lengths, max_len=T)
        padded = torch.full_like(batch.tgt_out, -1)
        padded[:, : tokens.shape[1]] = tokens  # (B, T') -> (B, T), -1 where decoding stopped early
        real = batch.tgt_out != CharVocab.PAD  # target positions, END included
        right = ((padded == batch.tgt_out) & real).sum(1)  # (B,)
        right_tokens += int(right.sum())
        total_tokens += int(real.sum())
        scores += (right / real.sum(1)).tolist()
        for row, (_, target) in zip(tokens, chunk):
            text = tgt_vocab.decode(row)
            predictions.append(text)
            correct.append(text == target)
    model.train(was_training)
    return EvalResult(
        exact_match=sum(correct) / len(correct),
        token_accuracy=right_tokens / total_tokens,
        correct=correct,
        token_scores=scores,
        predictions=predictions,
    )


def accuracy_by_length(pairs: Pairs, result: EvalResult) -> dict[int, tuple[float, float]]:
    """Exact match and token accuracy for each source length (defined in chapter 1).

    Returns:
        ``{length: (exact_match, token_accuracy)}``, sorted by length; the token accuracy of a
        length is the mean of its pairs' ``token_scores``.
    """
    if len(pairs) != len(result.correct):
        raise ValueError(f"accuracy_by_length: {len(pairs)} pairs but {len(result.correct)} results")
    groups: dict[int, list[int]] = {}
    for i, (source, _) in enumerate(pairs):
        groups.setdefault(len(source), []).append(i)
    return {
        n: (sum(result.correct[i] for i in idx) / len(idx), sum(result.token_scores[i] for i in idx) / len(idx))
        for n, idx in sorted(groups.items())
    }


def _epoch_batches(pairs: Pairs, batch_size: int, bucket: bool, generator: torch.Generator) -> list[list[int]]:
    """One epoch of batches (lists of indices), shuffled; similar source lengths together if ``bucket``."""
    order = torch.randperm(len(pairs), generator=generator).tolist()
    if bucket:
        pool = 50 * batch_size
        order = [i for start in range(0, len(order), pool)
                 for i in sorted(order[start : start + pool], key=lambda i: len(pairs[i][0]))]
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
    device: torch.device | str = "cpu",
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
    model is evaluated every ``eval_every`` steps and after the last step.

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
    _check_pairs("train_seq2seq", train_pairs)
    _check_steps("train_seq2seq", steps, eval_every)
    _check_positive("train_seq2seq", batch_size=batch_size, lr=lr, clip=clip)
    if schedule is not None and not callable(schedule):
        raise TypeError(f"train_seq2seq: schedule must be a function of the step, got {type(schedule).__name__}")
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)) or not 0 <= label_smoothing < 1:
        raise ValueError(f"train_seq2seq: label_smoothing must be in [0, 1), got {label_smoothing!r}")
    if eval_pairs is not None:
        _check_pairs("train_seq2seq (eval_pairs)", eval_pairs)

    model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=betas)
    scheduler = None
    if schedule is not None:  # LambdaLR counts from 0; the schedule sees steps from 1
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: schedule(i + 1))
    loss_fn = nn.CrossEntropyLoss(ignore_index=CharVocab.PAD, label_smoothing=float(label_smoothing))
    generator = torch.Generator().manual_seed(seed)
    history = TrainHistory()
    order: list[list[int]] = []
    started, evaluating = time.perf_counter(), 0.0
    bar = tqdm(range(1, steps + 1), desc=desc, disable=not progress, leave=True)
    for step in bar:
        if not order:
            order = _epoch_batches(train_pairs, batch_size, bucket, generator)
        index = order.pop()
        batch = make_batch([train_pairs[i] for i in index], src_vocab, tgt_vocab, device)
        logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)  # (B, T, V)
        loss = loss_fn(logits.flatten(0, 1), batch.tgt_out.flatten())  # (B * T, V) vs (B * T,)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        history.steps.append(step)
        history.loss.append(loss.item())
        if eval_pairs is not None and ((eval_every and step % eval_every == 0) or step == steps):
            paused = time.perf_counter()
            history.eval_seconds.append(paused - started - evaluating)
            result = evaluate_seq2seq(model, eval_pairs, src_vocab, tgt_vocab, device=device)
            history.eval_steps.append(step)
            history.evals.append(result)
            evaluating += time.perf_counter() - paused
            bar.set_postfix(loss=f"{loss.item():.3f}", exact=f"{result.exact_match:.3f}")
    history.seconds = time.perf_counter() - started
    model.eval()
    return history


@torch.no_grad()
def translate(
    model: Seq2Seq, source: str, src_vocab: CharVocab, tgt_vocab: CharVocab, *, max_len: int = 32,
    device: torch.device | str = "cpu",
) -> str:
    """Greedy translation of one string (defined in chapter 1; used by the chapters' widgets)."""
    if not isinstance(source, str) or not source:
        raise ValueError(f"translate: source must be a non-empty string, got {source!r}")
    model.eval()
    src = torch.tensor([src_vocab.encode(source)], device=device)
    tokens, _ = model.greedy_decode(src, torch.tensor([len(source)], device=device), max_len=max_len)
    return tgt_vocab.decode(tokens[0])


def _check_tagged(name: str, model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor) -> None:
    if not isinstance(model, SelfAttentionTagger):
        raise TypeError(f"{name}: model must be a SelfAttentionTagger, got {type(model).__name__}")
    for arg, t in (("tokens", tokens), ("targets", targets)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.long:
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name}: {arg} must be a long tensor, got {got}")
    want = (*tokens.shape, model.config.num_outputs)
    if tokens.dim() != 2 or tuple(targets.shape) != want or len(tokens) == 0:
        raise ValueError(
            f"{name}: tokens must be (n, N) and targets (n, N, num_outputs={model.config.num_outputs}); "
            f"got {tuple(tokens.shape)} and {tuple(targets.shape)}"
        )


@torch.no_grad()
def evaluate_tagger(
    model: SelfAttentionTagger,
    tokens: torch.Tensor,
    targets: torch.Tensor,
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 1024,
) -> float:
    """Share of labels (all tokens, all outputs) that ``model`` predicts right (chapter 5)."""
    _check_tagged("evaluate_tagger", model, tokens, targets)
    model.to(device).eval()
    correct = 0
    for start in range(0, len(tokens), batch_size):
        x = tokens[start : start + batch_size].to(device)
        y = targets[start : start + batch_size].to(device)
        logits, _ = model(x)  # (b, N, outputs, classes)
        correct += (logits.argmax(-1) == y).sum().item()
    return correct / targets.numel()


def train_tagger(
    model: SelfAttentionTagger,
    tokens: torch.Tensor,
    targets: torch.Tensor,
    *,
    steps: int,
    batch_size: int = 128,
    lr: float = 3e-3,
    device: torch.device | str = "cpu",
    seed: int = 0,
    eval_data: tuple[torch.Tensor, torch.Tensor] | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    desc: str = "training",
) -> TrainHistory:
    """Train a tagger with Adam on the cross-entropy of every label, for ``steps`` mini-batches.

    Defined in chapter 5. Batches are drawn from ``(tokens, targets)`` in a shuffled order that
    depends only on ``seed``. If ``eval_data = (tokens, targets)`` is given, the accuracy
    (``evaluate_tagger``) is recorded every ``eval_every`` steps and after the last step.
    """
    _check_tagged("train_tagger", model, tokens, targets)
    _check_steps("train_tagger", steps, eval_every)
    _check_positive("train_tagger", batch_size=batch_size, lr=lr)
    if eval_data is not None:
        _check_tagged("train_tagger (eval_data)", model, *eval_data)

    def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits, _ = model(x)  # (B, N, outputs, classes)
        return nn.functional.cross_entropy(logits.flatten(0, 2), y.flatten())  # (B*N*outputs, classes)

    return _train_on_tensors(model, tokens, targets, loss_of, evaluate_tagger, steps=steps, batch_size=batch_size,
                             lr=lr, device=device, seed=seed, eval_data=eval_data, eval_every=eval_every,
                             progress=progress, desc=desc)


def _train_on_tensors(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss_of: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    evaluate: Callable[..., float],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    device: torch.device | str,
    seed: int,
    eval_data: tuple[torch.Tensor, torch.Tensor] | None,
    eval_every: int | None,
    progress: bool,
    desc: str,
) -> TrainHistory:
    """Adam over shuffled mini-batches of ``(inputs, targets)``, shared by the tagger (chapter 5)
    and the classifiers (chapter 4): ``loss_of(x, y)`` is the batch loss, ``evaluate(model,
    tokens, targets, device=...)`` the accuracy recorded every ``eval_every`` steps and at the end."""
    model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    history = TrainHistory()
    order = torch.empty(0, dtype=torch.long)
    started = time.perf_counter()
    bar = tqdm(range(1, steps + 1), desc=desc, disable=not progress, leave=True)
    for step in bar:
        if len(order) < batch_size:
            order = torch.randperm(len(inputs), generator=generator)
        index, order = order[:batch_size], order[batch_size:]
        loss = loss_of(inputs[index].to(device), targets[index].to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.steps.append(step)
        history.loss.append(loss.item())
        if eval_data is not None and ((eval_every and step % eval_every == 0) or step == steps):
            accuracy = evaluate(model, *eval_data, device=device)
            model.train()
            history.eval_steps.append(step)
            history.evals.append(accuracy)
            bar.set_postfix(loss=f"{loss.item():.3f}", accuracy=f"{accuracy:.3f}")
    history.seconds = time.perf_counter() - started
    model.eval()
    return history


Classifier = StructuredClassifier | HierarchicalClassifier


def _check_classified(name: str, model: nn.Module, tokens: torch.Tensor, labels: torch.Tensor) -> None:
    if not isinstance(model, (StructuredClassifier, HierarchicalClassifier)):
        raise TypeError(f"{name}: model must be a StructuredClassifier or HierarchicalClassifier, got {type(model).__name__}")
    dims = 2 if isinstance(model, StructuredClassifier) else 3
    for arg, t in (("tokens", tokens), ("labels", labels)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.long:
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name}: {arg} must be a long tensor, got {got}")
    if tokens.dim() != dims or labels.shape != (tokens.shape[0],) or len(tokens) == 0:
        raise ValueError(f"{name}: tokens must be {dims}-D with one label each; got {tuple(tokens.shape)} and "
                         f"{tuple(labels.shape)}")


@torch.no_grad()
def evaluate_classifier(
    model: Classifier, tokens: torch.Tensor, labels: torch.Tensor, *, device: torch.device | str = "cpu",
    batch_size: int = 1024,
) -> float:
    """Share of examples whose predicted class is the label (chapter 4)."""
    _check_classified("evaluate_classifier", model, tokens, labels)
    model.to(device).eval()
    correct = 0
    for start in range(0, len(tokens), batch_size):
        logits = model(tokens[start : start + batch_size].to(device))[0]  # (b, classes)
        correct += (logits.argmax(-1) == labels[start : start + batch_size].to(device)).sum().item()
    return correct / len(labels)


def train_classifier(
    model: Classifier,
    tokens: torch.Tensor,
    labels: torch.Tensor,
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 3e-3,
    penalty: float = 0.0,
    device: torch.device | str = "cpu",
    seed: int = 0,
    eval_data: tuple[torch.Tensor, torch.Tensor] | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    desc: str = "training",
) -> TrainHistory:
    """Train a classifier with Adam on the cross-entropy, for ``steps`` mini-batches (chapter 4).

    With ``penalty > 0`` (a ``StructuredClassifier`` only), the loss adds ``penalty`` times the
    batch mean of ``frobenius_penalty`` of the hops, as in Lin et al. (2017). Evaluation as in
    ``train_tagger``: accuracy every ``eval_every`` steps and after the last.
    """
    _check_classified("train_classifier", model, tokens, labels)
    _check_steps("train_classifier", steps, eval_every)
    _check_positive("train_classifier", batch_size=batch_size, lr=lr)
    if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or penalty < 0:
        raise ValueError(f"train_classifier: penalty must be a non-negative number, got {penalty!r}")
    if penalty and not isinstance(model, StructuredClassifier):
        raise ValueError("train_classifier: penalty applies to the hops of a StructuredClassifier only")
    if eval_data is not None:
        _check_classified("train_classifier (eval_data)", model, *eval_data)

    def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits, weights, *_ = model(x)  # (B, classes), attention weights
        loss = nn.functional.cross_entropy(logits, y)
        return loss + penalty * frobenius_penalty(weights).mean() if penalty else loss

    return _train_on_tensors(model, tokens, labels, loss_of, evaluate_classifier, steps=steps, batch_size=batch_size,
                             lr=lr, device=device, seed=seed, eval_data=eval_data, eval_every=eval_every,
                             progress=progress, desc=desc)
