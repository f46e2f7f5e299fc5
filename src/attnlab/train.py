"""Training and evaluating sequence-to-sequence models, captioners, classifiers and taggers.

Introduced in chapter 1 and used by every chapter that trains a translator; chapter 4 adds the
captioners (``train_captioner``, with REINFORCE for hard attention) and the classifiers,
chapter 5 the loop for per-token taggers (``train_tagger``). Training runs for a
fixed number of steps (never for a fixed time), so that a seeded run gives the same model, and
the same printed accuracies, every time on the same machine.

Devices: everything runs where the model is. ``device=None`` (the default of every function
here) means the device of the model's parameters; data given on the CPU is moved there batch
by batch. Evaluators never move a model (an explicit ``device`` must be the model's); trainers
move it only when given an explicit ``device``. Every trainer runs the same loop,
``_train_loop``, with its own batches and loss.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import nn

from attnlab.attention.hard import MovingAverageBaseline, reinforce_loss
from attnlab.data.scenes import PAD, START, SceneTask
from attnlab.data.vocab import Batch, CharVocab, make_batch
from attnlab.models.captioning import Captioner, CaptionOutput, HardCaptioner, region_cells
from attnlab.models.lm import TransformerLM
from attnlab.models.seq2seq import Seq2Seq
from attnlab.models.structured import HierarchicalClassifier, StructuredClassifier, frobenius_penalty
from attnlab.models.tagger import SelfAttentionTagger
from attnlab.validation import check_choice, check_int, check_number, check_tensor

__all__ = [
    "CaptionEval",
    "EvalResult",
    "TrainHistory",
    "accuracy_by_length",
    "caption_loss",
    "evaluate_captioner",
    "evaluate_classifier",
    "evaluate_lm",
    "evaluate_seq2seq",
    "evaluate_tagger",
    "gradient_noise",
    "lm_loss_by_position",
    "mask_tokens",
    "seq2seq_loss_by_position",
    "shift_captions",
    "train_captioner",
    "train_classifier",
    "train_lm",
    "train_seq2seq",
    "train_tagger",
    "translate",
    "warmup_cosine",
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


def _model_device(model: nn.Module) -> torch.device:
    """Where ``model`` is: the device of its first parameter (or buffer); the CPU if it has none."""
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        return tensor.device
    return torch.device("cpu")


def _same_device(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def _eval_device(name: str, model: nn.Module, device: Device | None) -> torch.device:
    """The device an evaluator runs on: the model's. Evaluation never moves a model, so an
    explicit ``device`` must be the model's."""
    here = _model_device(model)
    if device is not None and not _same_device(torch.device(device), here):
        raise ValueError(
            f"{name}: device={str(device)!r}, but the model is on {here}; evaluation runs where the model is "
            "(leave device=None, or move the model first)"
        )
    return here


def _train_device(model: nn.Module, device: Device | None) -> torch.device:
    """The device a trainer runs on: ``device`` if given (the model is moved there), else the model's."""
    if device is not None:
        model.to(device)
    return _model_device(model)


def _check_pairs(name: str, pairs: Pairs) -> None:
    if not isinstance(pairs, Sequence) or isinstance(pairs, str):
        raise TypeError(f"{name}: pairs must be a sequence of (source, target) strings, got {type(pairs).__name__}")
    if len(pairs) == 0:
        raise ValueError(f"{name}: pairs must be a non-empty sequence of (source, target) strings, got an empty one")
    first = pairs[0]
    if not (isinstance(first, tuple) and len(first) == 2 and all(isinstance(x, str) for x in first)):
        raise TypeError(f"{name}: pairs must hold (source, target) string tuples, got {first!r}")


def _check_schedule(name: str, steps: int, eval_every: int | None, batch_size: int, **rates: float) -> None:
    """The arguments every trainer shares: counts are ints >= 1, rates (``lr``, ``clip``) numbers > 0."""
    check_int(name, "steps", steps)
    check_int(name, "eval_every", eval_every, none=True)
    check_int(name, "batch_size", batch_size)
    for arg, value in rates.items():
        check_number(name, arg, value, low=0, low_open=True)


@torch.no_grad()
def evaluate_seq2seq(
    model: Seq2Seq,
    pairs: Pairs,
    src_vocab: CharVocab,
    tgt_vocab: CharVocab,
    *,
    device: Device | None = None,
    batch_size: int = 512,
) -> EvalResult:
    """Greedy-decode every source and compare with its target (defined in chapter 1).

    Each output may run to the target's length plus one (for END); longer outputs are cut.
    Runs where the model is (``device``, if given, must be the model's device).
    """
    _check_pairs("evaluate_seq2seq", pairs)
    check_int("evaluate_seq2seq", "batch_size", batch_size)
    device = _eval_device("evaluate_seq2seq", model, device)
    was_training = model.training
    model.eval()
    correct, scores, predictions, right_tokens, total_tokens = [], [], [], 0, 0
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        batch = make_batch(chunk, src_vocab, tgt_vocab, device)
        L = batch.tgt_out.shape[1]
        tokens, _ = model.greedy_decode(batch.src, batch.src_lengths, max_len=L)
        padded = torch.full_like(batch.tgt_out, -1)
        padded[:, : tokens.shape[1]] = tokens  # (B, L') -> (B, L), -1 where decoding stopped early
        real = batch.tgt_out != CharVocab.PAD  # target positions, END included
        right = ((padded == batch.tgt_out) & real).sum(1)  # (B,)
        right_tokens += int(right.sum())
        total_tokens += int(real.sum())
        scores += (right / real.sum(1)).tolist()
        for row, (_, target) in zip(tokens, chunk, strict=True):
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


@torch.no_grad()
def seq2seq_loss_by_position(
    model: Seq2Seq,
    pairs: Pairs,
    src_vocab: CharVocab,
    tgt_vocab: CharVocab,
    *,
    device: Device | None = None,
    batch_size: int = 256,
) -> torch.Tensor:
    """Teacher-forced cross-entropy (nats) at each target position, ``(L,)`` for targets of up
    to ``L`` characters (END not counted), averaged over the pairs that reach it.

    Defined in chapter 6, to see whether a model uses the source (its loss with each target given
    another pair's source, against the right one); chapter 8 compares an encoder-decoder with a
    decoder-only model on the same characters with it. Runs where the model is.
    """
    _check_pairs("seq2seq_loss_by_position", pairs)
    check_int("seq2seq_loss_by_position", "batch_size", batch_size)
    device = _eval_device("seq2seq_loss_by_position", model, device)
    was_training = model.training
    model.eval()
    longest = max(len(t) for _, t in pairs)
    total = torch.zeros(longest, device=device)
    count = torch.zeros(longest, device=device)
    for start in range(0, len(pairs), batch_size):
        batch = make_batch(pairs[start : start + batch_size], src_vocab, tgt_vocab, device)
        logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)  # (B, L + 1, V)
        loss = nn.functional.cross_entropy(logits.transpose(1, 2), batch.tgt_out, reduction="none")  # (B, L + 1)
        real = (batch.tgt_out != CharVocab.PAD) & (batch.tgt_out != CharVocab.END)  # the characters only
        n = min(longest, loss.shape[1])
        total[:n] += (loss * real)[:, :n].sum(0)
        count[:n] += real[:, :n].sum(0)
    model.train(was_training)
    return (total / count.clamp(min=1)).cpu()


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
        order = [
            i
            for start in range(0, len(order), pool)
            for i in sorted(order[start : start + pool], key=lambda i: len(pairs[i][0]))
        ]
    batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    shuffled = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in shuffled]


def _train_loop(
    model: nn.Module,
    batches: Iterator[Any],
    loss_of: Callable[[Any], torch.Tensor],
    *,
    steps: int,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    clip: float | None = None,
    schedule: Callable[[int], float] | None = None,
    evaluate: Callable[[], Any] | None = None,
    eval_every: int | None = None,
    progress: bool = True,
    desc: str = "training",
) -> TrainHistory:
    """The training loop of every trainer here: Adam on ``loss_of(next(batches))`` for ``steps`` steps.

    Defined in chapter 1 (``train_seq2seq``) and shared by the trainers of chapters 4 and 5.
    ``batches`` yields batches already on the model's device; ``loss_of(batch)`` is the loss
    of one. Gradients are clipped to norm ``clip`` (``None``: not clipped); with ``schedule``
    the learning rate at step ``t`` is ``lr * schedule(t)``. ``evaluate()`` runs every
    ``eval_every`` steps and after the last; ``history.eval_seconds`` records the training
    time so far (evaluations excluded) at each. No step reads a tensor on the host: the losses
    are read in one go before each evaluation and at the end, so on a GPU the next step is
    queued while the last one runs.
    """
    model.train()
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
    _check_pairs("train_seq2seq", train_pairs)
    _check_schedule("train_seq2seq", steps, eval_every, batch_size, lr=lr, clip=clip)
    if schedule is not None and not callable(schedule):
        raise TypeError(f"train_seq2seq: schedule must be a function of the step, got {type(schedule).__name__}")
    check_number("train_seq2seq", "label_smoothing", label_smoothing, low=0, high=1, high_open=True)
    if eval_pairs is not None:
        _check_pairs("train_seq2seq (eval_pairs)", eval_pairs)
    device = _train_device(model, device)
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

    return _train_loop(
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


@torch.no_grad()
def translate(
    model: Seq2Seq,
    source: str,
    src_vocab: CharVocab,
    tgt_vocab: CharVocab,
    *,
    max_len: int = 32,
    device: Device | None = None,
) -> str:
    """Greedy translation of one string (defined in chapter 1; used by the chapters' widgets).

    Runs where the model is (``device``, if given, must be the model's device)."""
    if not isinstance(source, str):
        raise TypeError(f"translate: source must be a str, got {type(source).__name__}")
    if not source:
        raise ValueError("translate: source must be a non-empty string, got ''")
    device = _eval_device("translate", model, device)
    model.eval()
    src = torch.tensor([src_vocab.encode(source)], device=device)
    tokens, _ = model.greedy_decode(src, torch.tensor([len(source)], device=device), max_len=max_len)
    return tgt_vocab.decode(tokens[0])


def _check_tagged(name: str, model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor) -> None:
    if not isinstance(model, SelfAttentionTagger):
        raise TypeError(f"{name}: model must be a SelfAttentionTagger, got {type(model).__name__}")
    for arg, t in (("tokens", tokens), ("targets", targets)):
        check_tensor(name, arg, t, kind="long")
    want = (*tokens.shape, model.config.num_outputs)
    if tokens.dim() != 2 or tuple(targets.shape) != want or len(tokens) == 0:
        raise ValueError(
            f"{name}: tokens must be (n, N) and targets (n, N, num_outputs={model.config.num_outputs}); "
            f"got {tuple(tokens.shape)} and {tuple(targets.shape)}"
        )
    low, high = (int(tokens.min()), int(tokens.max())) if tokens.numel() else (0, 0)  # once per call
    if low < 0 or high >= model.config.vocab_size:
        raise ValueError(f"{name}: tokens must lie in [0, {model.config.vocab_size}), got [{low}, {high}]")


@torch.no_grad()
def evaluate_tagger(
    model: SelfAttentionTagger,
    tokens: torch.Tensor,
    targets: torch.Tensor,
    *,
    device: Device | None = None,
    batch_size: int = 1024,
) -> float:
    """Share of labels (all tokens, all outputs) that ``model`` predicts right (chapter 5).

    Runs where the model is (``device``, if given, must be the model's device)."""
    _check_tagged("evaluate_tagger", model, tokens, targets)
    device = _eval_device("evaluate_tagger", model, device)
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device=device)
    for start in range(0, len(tokens), batch_size):
        x = tokens[start : start + batch_size].to(device)
        y = targets[start : start + batch_size].to(device)
        logits, _ = model(x)  # (b, N, outputs, classes)
        correct += (logits.argmax(-1) == y).sum()
    return correct.item() / targets.numel()


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
    _check_tagged("train_tagger", model, tokens, targets)
    _check_schedule("train_tagger", steps, eval_every, batch_size, lr=lr)
    if eval_data is not None:
        _check_tagged("train_tagger (eval_data)", model, *eval_data)
    device = _train_device(model, device)

    def loss_of(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        logits, _ = model(x)  # (B, N, outputs, classes)
        return nn.functional.cross_entropy(logits.flatten(0, 2), y.flatten())  # (B*N*outputs, classes)

    return _train_loop(
        model,
        _tensor_batches(tokens, targets, batch_size, seed, device),
        loss_of,
        steps=steps,
        lr=lr,
        evaluate=None if eval_data is None else partial(evaluate_tagger, model, *eval_data),
        eval_every=eval_every,
        progress=progress,
        desc=desc,
    )


def _tensor_batches(
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


Classifier = StructuredClassifier | HierarchicalClassifier


def _check_classified(name: str, model: nn.Module, tokens: torch.Tensor, labels: torch.Tensor) -> None:
    if not isinstance(model, (StructuredClassifier, HierarchicalClassifier)):
        raise TypeError(
            f"{name}: model must be a StructuredClassifier or HierarchicalClassifier, got {type(model).__name__}"
        )
    dims = 2 if isinstance(model, StructuredClassifier) else 3
    for arg, t in (("tokens", tokens), ("labels", labels)):
        check_tensor(name, arg, t, kind="long")
    if tokens.dim() != dims or labels.shape != (tokens.shape[0],) or len(tokens) == 0:
        raise ValueError(
            f"{name}: tokens must be {dims}-D with one label each; got {tuple(tokens.shape)} and {tuple(labels.shape)}"
        )


@torch.no_grad()
def evaluate_classifier(
    model: Classifier,
    tokens: torch.Tensor,
    labels: torch.Tensor,
    *,
    device: Device | None = None,
    batch_size: int = 1024,
) -> float:
    """Share of examples whose predicted class is the label (chapter 4).

    Runs where the model is (``device``, if given, must be the model's device)."""
    _check_classified("evaluate_classifier", model, tokens, labels)
    device = _eval_device("evaluate_classifier", model, device)
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device=device)
    for start in range(0, len(tokens), batch_size):
        logits = model(tokens[start : start + batch_size].to(device))[0]  # (b, classes)
        correct += (logits.argmax(-1) == labels[start : start + batch_size].to(device)).sum()
    return correct.item() / len(labels)


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
    _check_classified("train_classifier", model, tokens, labels)
    _check_schedule("train_classifier", steps, eval_every, batch_size, lr=lr)
    check_number("train_classifier", "penalty", penalty, low=0)
    if penalty and not isinstance(model, StructuredClassifier):
        raise ValueError("train_classifier: penalty applies to the hops of a StructuredClassifier only")
    if eval_data is not None:
        _check_classified("train_classifier (eval_data)", model, *eval_data)

    device = _train_device(model, device)

    def loss_of(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        logits, weights, *_ = model(x)  # (B, classes), attention weights
        loss = nn.functional.cross_entropy(logits, y)
        return loss + penalty * frobenius_penalty(weights).mean() if penalty else loss

    return _train_loop(
        model,
        _tensor_batches(tokens, labels, batch_size, seed, device),
        loss_of,
        steps=steps,
        lr=lr,
        evaluate=None if eval_data is None else partial(evaluate_classifier, model, *eval_data),
        eval_every=eval_every,
        progress=progress,
        desc=desc,
    )


# Captioning with soft and hard attention (chapter 4, part 1) ----------------------------------


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
    device = _eval_device("evaluate_captioner", model, device)
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
    _check_schedule("train_captioner", steps, eval_every, batch_size, lr=lr)
    check_number("train_captioner", "baseline_decay", baseline_decay, low=0, high=1, high_open=True, none=True)
    check_number("train_captioner", "entropy_weight", entropy_weight, low=0)
    if eval_data is not None:
        _check_captioner("train_captioner (eval_data)", model, eval_data)
    device = _train_device(model, device)
    baseline = None if baseline_decay is None else MovingAverageBaseline(baseline_decay)
    sampler = torch.Generator(device=device).manual_seed(seed)  # hard attention's locations, where they are drawn

    def loss_of(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        images, captions = batch
        return caption_loss(
            model, images, captions, baseline=baseline, reward=reward, entropy_weight=entropy_weight, generator=sampler
        )[0]

    return _train_loop(
        model,
        _tensor_batches(task.images, task.captions, batch_size, seed, device),
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
    device = _eval_device("gradient_noise", model, device)
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


# --- Chapter 8: language models on a text corpus ---------------------------------------------------

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


def warmup_cosine(steps: int, warmup: int = 0) -> Callable[[int], float]:
    """The factor of the learning rate at step ``t`` (1-based): ``t / warmup`` for the first ``warmup``
    steps, then a cosine from 1 down to 0 at step ``steps`` (chapter 8; ``train_lm`` uses it, and
    ``train_seq2seq`` takes it as ``schedule``)."""
    check_int("warmup_cosine", "steps", steps)
    check_int("warmup_cosine", "warmup", warmup, low=0, high=steps)

    def schedule(step: int) -> float:
        if step <= warmup:
            return step / max(warmup, 1)
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(steps - warmup, 1)))

    return schedule


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
    _check_schedule("train_lm", steps, None, batch_size, lr=lr, clip=clip)
    check_int("train_lm", "warmup", warmup, low=0, high=steps)
    check_number("train_lm", "mask_rate", mask_rate, low=0, high=1, low_open=True)
    device = _train_device(model, device)
    generator = torch.Generator().manual_seed(seed)  # windows and masks, drawn on the CPU

    def batches() -> Iterator[torch.Tensor]:
        while True:
            starts = torch.randint(0, len(ids) - context, (batch_size,), generator=generator)  # (B,)
            yield ids[starts[:, None] + torch.arange(context + 1)]  # (B, context + 1)

    def loss_of(window: torch.Tensor) -> torch.Tensor:
        inputs, targets = _lm_batch(window, objective, model.config.vocab_size, mask_rate, generator)
        logits = model(inputs.to(device))  # (B, N, V)
        return nn.functional.cross_entropy(logits.transpose(1, 2), targets.to(device))  # (B, V, N) vs (B, N)

    return _train_loop(
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
    device = _eval_device("lm_loss_by_position", model, device)
    model.eval()
    n = (len(ids) - 1) // context
    windows = torch.stack([ids[i * context : i * context + context + 1] for i in range(n)])  # (n, context + 1)
    generator = torch.Generator().manual_seed(seed)  # the masks, drawn on the CPU
    total = torch.zeros(context, device=device)
    count = torch.zeros(context, device=device)
    for start in range(0, n, batch_size):
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
