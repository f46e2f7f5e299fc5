"""Training and evaluating sequence-to-sequence models, captioners, classifiers and taggers.

Introduced in chapter 1 and used by every chapter that trains a translator; chapter 4 adds the
captioners (``train_captioner``, with REINFORCE for hard attention) and the classifiers,
chapter 5 the loop for per-token taggers (``train_tagger``). Training runs for a
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

from attnlab.attention.hard import MovingAverageBaseline, reinforce_loss
from attnlab.data.scenes import PAD, START, SceneTask
from attnlab.data.vocab import CharVocab, make_batch
from attnlab.models.captioning import CaptionOutput, Captioner, HardCaptioner, region_cells
from attnlab.models.seq2seq import Seq2Seq
from attnlab.models.structured import HierarchicalClassifier, StructuredClassifier, frobenius_penalty
from attnlab.models.tagger import SelfAttentionTagger

__all__ = [
    "CaptionEval",
    "EvalResult",
    "TrainHistory",
    "accuracy_by_length",
    "caption_loss",
    "evaluate_captioner",
    "evaluate_classifier",
    "evaluate_seq2seq",
    "evaluate_tagger",
    "gradient_noise",
    "shift_captions",
    "train_captioner",
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
    evaluate: Callable[..., Any],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    device: torch.device | str,
    seed: int,
    eval_data: tuple[Any, ...] | None,
    eval_every: int | None,
    progress: bool,
    desc: str,
) -> TrainHistory:
    """Adam over shuffled mini-batches of ``(inputs, targets)``, shared by the tagger (chapter 5),
    the classifiers and the captioners (chapter 4): ``loss_of(x, y)`` is the batch loss,
    ``evaluate(model, *eval_data, device=...)`` the result recorded every ``eval_every`` steps
    and at the end (an accuracy, or a ``CaptionEval``), with the training time so far in
    ``history.eval_seconds`` (evaluations excluded)."""
    model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    history = TrainHistory()
    order = torch.empty(0, dtype=torch.long)
    started, evaluating = time.perf_counter(), 0.0
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
            before = time.perf_counter()
            result = evaluate(model, *eval_data, device=device)
            evaluating += time.perf_counter() - before
            model.train()
            history.eval_steps.append(step)
            history.evals.append(result)
            history.eval_seconds.append(time.perf_counter() - started - evaluating)
            score = {"exact": result.exact_match} if isinstance(result, CaptionEval) else {"accuracy": result}
            bar.set_postfix(loss=f"{loss.item():.3f}", **{k: f"{v:.3f}" for k, v in score.items()})
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


# Captioning with soft and hard attention (chapter 4, part 1) ----------------------------------


@dataclass
class CaptionEval:
    """Greedy captions of a ``SceneTask``, scored.

    ``exact_match``: share of captions equal to the reference, ``<end>`` included.
    ``token_accuracy``: share of reference positions (``<end>`` included) predicted right.
    ``grounding``: share of object words (colours and shapes) generated right whose largest
    attention weight falls on the layout cell of the object they name; ``grounded_words`` how
    many such words there were. ``tokens (n, T)`` and ``weights (n, T, L)``: what was generated.
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
        raise ValueError(f"{name}: the model expects {model.config.image_size}-pixel images, the scenes have "
                         f"{task.images.shape[-1]}")
    if model.config.grid % task.grid:
        raise ValueError(f"{name}: the model's grid ({model.config.grid}) must be a multiple of the scenes' layout "
                         f"grid ({task.grid})")


def shift_captions(captions: torch.Tensor) -> torch.Tensor:
    """Decoder inputs for teacher forcing: ``<start>`` then the caption without its last token."""
    start = torch.full_like(captions[:, :1], START)  # (B, 1)
    return torch.cat([start, captions[:, :-1]], dim=1)  # (B, T)


@torch.no_grad()
def evaluate_captioner(
    model: Captioner, task: SceneTask, *, device: torch.device | str = "cpu", batch_size: int = 500
) -> CaptionEval:
    """Greedy captions of every scene in ``task``, scored (chapter 4). Hard models attend to the
    most likely location (eval mode)."""
    _check_captioner("evaluate_captioner", model, task)
    model.to(device).eval()
    T = task.captions.shape[1]
    outputs = [model.generate(task.images[i : i + batch_size].to(device), T) for i in range(0, len(task), batch_size)]
    tokens = torch.cat([o.tokens for o in outputs]).cpu()  # type: ignore[misc]  # (n, T)
    weights = torch.cat([o.weights for o in outputs]).cpu()  # (n, T, L)
    real = task.captions != PAD  # (n, T)
    right = tokens == task.captions
    exact = (right | ~real).all(dim=1).float().mean().item()
    token_accuracy = (right & real).sum().item() / real.sum().item()
    objects = (task.cells >= 0) & right  # object words generated right
    looked_at = region_cells(model.config, task.grid)[weights.argmax(-1)]  # (n, T): cell of the largest weight
    hits = (looked_at == task.cells)[objects]
    grounding = hits.float().mean().item() if len(hits) else float("nan")
    return CaptionEval(exact, token_accuracy, grounding, len(hits), tokens, weights)


def _caption_nll(out: CaptionOutput, captions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Negative log-likelihood of each word ``(B, T)`` (0 on padding), and the mask of real words."""
    real = captions != PAD  # (B, T)
    return nn.functional.cross_entropy(out.logits.transpose(1, 2), captions, reduction="none") * real, real


def _location_reward(nll: torch.Tensor, reward: str) -> torch.Tensor:
    """Reward of the location drawn at each step ``(B, T)``: log-likelihood of the caption, or of
    its words from that step on."""
    log_likelihood = -nll.detach()  # (B, T)
    if reward == "sequence":
        return log_likelihood.sum(dim=1, keepdim=True).expand_as(log_likelihood)  # same reward at every step
    return log_likelihood.flip(1).cumsum(1).flip(1)  # (B, T): sum over steps t' >= t


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
    ``MovingAverageBaseline`` updated here, a fixed ``(T,)`` tensor, or none); plus the entropy
    bonus.
    """
    _check_captioner("caption_loss", model, None)
    if reward not in ("to_go", "sequence"):
        raise ValueError(f"caption_loss: reward must be 'to_go' or 'sequence', got {reward!r}")
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
    return loss + reinforce_loss(out.log_prob, gain, b, entropy=out.entropy(), entropy_weight=entropy_weight,
                                 mask=real), out


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
    device: torch.device | str = "cpu",
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
    """
    _check_captioner("train_captioner", model, task)
    _check_steps("train_captioner", steps, eval_every)
    _check_positive("train_captioner", batch_size=batch_size, lr=lr)
    if baseline_decay is not None and (isinstance(baseline_decay, bool) or not isinstance(baseline_decay, (int, float))):
        raise ValueError(f"train_captioner: baseline_decay must be a number in [0, 1) or None, got {baseline_decay!r}")
    if isinstance(entropy_weight, bool) or not isinstance(entropy_weight, (int, float)) or entropy_weight < 0:
        raise ValueError(f"train_captioner: entropy_weight must be a non-negative number, got {entropy_weight!r}")
    if eval_data is not None:
        _check_captioner("train_captioner (eval_data)", model, eval_data)
    baseline = None if baseline_decay is None else MovingAverageBaseline(baseline_decay)
    sampler = torch.Generator(device=device).manual_seed(seed)  # hard attention's locations

    def loss_of(images: torch.Tensor, captions: torch.Tensor) -> torch.Tensor:
        return caption_loss(model, images, captions, baseline=baseline, reward=reward,
                            entropy_weight=entropy_weight, generator=sampler)[0]

    def evaluate(model: Captioner, task: SceneTask, device: torch.device | str) -> CaptionEval:
        return evaluate_captioner(model, task, device=device)

    return _train_on_tensors(model, task.images, task.captions, loss_of, evaluate, steps=steps,
                             batch_size=batch_size, lr=lr, device=device, seed=seed,
                             eval_data=None if eval_data is None else (eval_data,), eval_every=eval_every,
                             progress=progress, desc=desc)


def gradient_noise(
    model: Captioner,
    task: SceneTask,
    *,
    batches: int = 20,
    batch_size: int = 64,
    reward: str = "to_go",
    baseline: bool = True,
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> float:
    """Noise of the gradient that reaches the attention MLP ``f_att`` (chapter 4).

    Draws ``batches`` mini-batches, computes the gradient of ``caption_loss`` (no entropy bonus)
    with respect to ``f_att``'s parameters on each, and returns the relative variance
    ``E||g - mean g||^2 / ||mean g||^2``: 0 for a gradient that never changes; above 1 when the
    noise is larger than the signal. A hard model samples its locations (training mode); its
    ``baseline``, when used, is the mean reward per step over the same batches, computed first.
    """
    _check_captioner("gradient_noise", model, task)
    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 2:
        raise ValueError(f"gradient_noise: batches must be an int >= 2, got {batches!r}")
    model.to(device).train()
    g = torch.Generator().manual_seed(seed)
    picks = [torch.randint(0, len(task), (batch_size,), generator=g) for _ in range(batches)]
    sampler = torch.Generator(device=device).manual_seed(seed)
    fixed: torch.Tensor | None = None
    if baseline and isinstance(model, HardCaptioner):
        state = sampler.get_state()
        total, count = torch.zeros(()), torch.zeros(())
        with torch.no_grad():
            for index in picks:
                captions = task.captions[index].to(device)
                out = model(task.images[index].to(device), shift_captions(captions), generator=sampler)
                nll, real = _caption_nll(out, captions)
                total = total + (_location_reward(nll, reward) * real).sum(0).cpu()  # (T,)
                count = count + real.sum(0).cpu()
        fixed = (total / count.clamp_min(1)).to(device)  # mean reward per step
        sampler.set_state(state)  # the measured batches draw the same locations
    params = list(model.f_att.parameters())
    grads = []
    for index in picks:
        loss, _ = caption_loss(model, task.images[index].to(device), task.captions[index].to(device),
                               baseline=fixed, reward=reward, generator=sampler)
        grads.append(torch.cat([p.flatten() for p in torch.autograd.grad(loss, params)]))
    model.eval()
    stacked = torch.stack(grads)  # (batches, P)
    mean = stacked.mean(0)
    return ((stacked - mean).pow(2).sum(1).mean() / mean.pow(2).sum()).item()
