"""Evaluating translators, taggers and classifiers.

Introduced in chapter 1 (``evaluate_seq2seq``, ``accuracy_by_length``); chapter 4 adds the
classifiers' accuracy, chapter 5 the taggers', chapter 6 the loss at each target position. The
evaluators run where the model is (an explicit ``device`` must be the model's) and put a model
that was training back into training mode. The captioners and the language models are evaluated
in ``attnlab.train.captioning`` and ``attnlab.train.language_models``, next to their losses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from attnlab.data.vocab import CharVocab, make_batch
from attnlab.models.seq2seq import Seq2Seq
from attnlab.models.structured import HierarchicalClassifier, StructuredClassifier
from attnlab.models.tagger import SelfAttentionTagger
from attnlab.train.loop import Device, eval_device
from attnlab.validation import check_int, check_labelled, check_model, check_pairs, check_tagged

__all__ = [
    "Classifier",
    "EvalResult",
    "Pairs",
    "accuracy_by_length",
    "evaluate_classifier",
    "evaluate_seq2seq",
    "evaluate_tagger",
    "seq2seq_loss_by_position",
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
    check_pairs("evaluate_seq2seq", pairs)
    check_int("evaluate_seq2seq", "batch_size", batch_size)
    device = eval_device("evaluate_seq2seq", model, device)
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
    check_pairs("seq2seq_loss_by_position", pairs)
    check_int("seq2seq_loss_by_position", "batch_size", batch_size)
    device = eval_device("seq2seq_loss_by_position", model, device)
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
    check_model("evaluate_tagger", model, SelfAttentionTagger)
    c = model.config
    check_tagged("evaluate_tagger", tokens, targets, num_outputs=c.num_outputs, vocab_size=c.vocab_size)
    return _accuracy(model, tokens, targets, eval_device("evaluate_tagger", model, device), batch_size)


Classifier = StructuredClassifier | HierarchicalClassifier


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
    check_model("evaluate_classifier", model, (StructuredClassifier, HierarchicalClassifier))
    check_labelled("evaluate_classifier", tokens, labels, dims=2 if isinstance(model, StructuredClassifier) else 3)
    return _accuracy(model, tokens, labels, eval_device("evaluate_classifier", model, device), batch_size)


def _accuracy(
    model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor, device: torch.device, batch_size: int
) -> float:
    """Share of ``targets`` that the argmax of the model's logits (its first output) predicts, in
    batches of ``batch_size`` examples: a tagger's logits ``(b, N, outputs, classes)`` against its
    targets ``(b, N, outputs)``, a classifier's ``(b, classes)`` against its labels ``(b,)``. One
    read on the host, at the end."""
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device=device)
    for start in range(0, len(tokens), batch_size):
        logits = model(tokens[start : start + batch_size].to(device))[0]  # (b, ..., classes)
        correct += (logits.argmax(-1) == targets[start : start + batch_size].to(device)).sum()
    return correct.item() / targets.numel()
