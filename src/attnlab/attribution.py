"""Attribution: which source tokens an output depends on, measured without the attention weights.

Introduced in chapter 2 ("Is attention an explanation?"). Attention weights say which *encoder
states* a decoder step read. Whether they also say which *input tokens* the output depends on is
a separate question (Jain and Wallace 2019; Wiegreffe and Pinter 2019), and these functions
answer it by other means, for any ``Seq2Seq`` model:

- ``gradient_saliency``: how strongly the log-probability of each output token reacts to a small
  change of each source token's embedding (the norm of the gradient);
- ``leave_one_out``: how much that log-probability drops when one source token is deleted;
- ``kendall_tau``: the rank agreement of two importance vectors (1: same order, -1: reversed);
- ``UniformScore`` and ``replace_score``: the same trained model with its learned weights replaced
  by uniform ones over the real source positions, to see whether the weights matter at all.

Shapes: ``B`` batch, ``S`` source length, ``L`` target length (decoder steps, teacher-forced:
step ``t`` predicts ``batch.tgt_out[:, t]``). Importances are ``(B, L, S)``, like the weights.
Every function uses the model as it is: it is neither moved, nor switched to ``eval()``, nor
changed (``replace_score`` returns a copy).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch
from torch import nn

from attnlab.data.vocab import Batch, CharVocab
from attnlab.validation import check_tensor

if TYPE_CHECKING:
    from attnlab.models.seq2seq import Seq2Seq

__all__ = ["UniformScore", "gradient_saliency", "kendall_tau", "leave_one_out", "replace_score"]


def _check_model_and_batch(name: str, model: nn.Module, batch: Batch) -> None:
    if not isinstance(model, nn.Module) or not hasattr(model, "encoder") or not hasattr(model.encoder, "embedding"):
        raise TypeError(f"{name}: model must be a Seq2Seq (with encoder.embedding), got {type(model).__name__}")
    if not isinstance(batch, Batch):
        raise TypeError(f"{name}: batch must be an attnlab.data.Batch (from make_batch), got {type(batch).__name__}")


def _target_log_probs(model: nn.Module, src: torch.Tensor, lengths: torch.Tensor, batch: Batch) -> torch.Tensor:
    """log p(y_t | y_<t, source) of the right token at every target step: ``(B, L)``."""
    logits, _ = model(src, lengths, batch.tgt_in)  # (B, L, V)
    log_probs = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)  # (B, L, V)
    return log_probs.gather(-1, batch.tgt_out[..., None]).squeeze(-1)  # (B, L, V) -> (B, L)


def gradient_saliency(model: Seq2Seq, batch: Batch) -> torch.Tensor:
    """The norm of the gradient of each output token's log-probability with respect to each source
    token's embedding: ``(B, L, S)`` (chapter 2).

    Entry ``[b, t, s]`` is ``|| d log p(y_t) / d x_s ||`` for example ``b``, where ``x_s`` is the
    embedding of source token ``s`` and ``y_t = batch.tgt_out[b, t]``, with teacher forcing (the
    decoder reads the true previous tokens). It is zero on padded source positions and on padded
    target steps. One backward pass per target step; the examples of a batch are independent, so
    each gets its own gradient. The model's parameters and their ``.grad`` are not touched.
    """
    _check_model_and_batch("gradient_saliency", model, batch)
    captured: list[torch.Tensor] = []

    def capture(_module: nn.Module, _inputs: tuple, output: torch.Tensor) -> torch.Tensor:
        leaf = output.detach().requires_grad_(True)  # the embeddings, as a leaf to differentiate by
        captured.append(leaf)
        return leaf

    handle = model.encoder.embedding.register_forward_hook(capture)
    try:
        with torch.enable_grad():
            log_p = _target_log_probs(model, batch.src, batch.src_lengths, batch)  # (B, L)
            embedded = captured[0]  # (B, S, E)
            rows = []
            for t in range(log_p.shape[1]):
                (grad,) = torch.autograd.grad(log_p[:, t].sum(), embedded, retain_graph=t + 1 < log_p.shape[1])
                rows.append(grad.norm(dim=-1))  # (B, S, E) -> (B, S)
    finally:
        handle.remove()
    saliency = torch.stack(rows, dim=1)  # (B, L, S)
    src_real = batch.src != CharVocab.PAD  # (B, S)
    tgt_real = batch.tgt_out != CharVocab.PAD  # (B, L)
    return saliency * (tgt_real[:, :, None] & src_real[:, None, :])


def leave_one_out(model: Seq2Seq, batch: Batch) -> torch.Tensor:
    """How much each output token's log-probability drops when one source token is deleted:
    ``(B, L, S)`` (chapter 2).

    Entry ``[b, t, s]`` is ``log p(y_t | source) - log p(y_t | source without token s)``,
    teacher-forced, for example ``b``; positive where the token helped. The deleted token is
    removed, not blanked: the tokens after it move one place to the left and the length
    shrinks by one, which is the leave-one-out measure of Jain and Wallace (2019). One forward
    pass per source position; zero on padded positions and padded target steps.
    """
    _check_model_and_batch("leave_one_out", model, batch)
    src, lengths = batch.src, batch.src_lengths
    S = src.shape[1]
    with torch.no_grad():
        full = _target_log_probs(model, src, lengths, batch)  # (B, L)
        columns = []
        for s in range(S):
            real = lengths > s  # (B,): examples that have a token at position s
            shorter = torch.cat([src[:, :s], src[:, s + 1 :], torch.zeros_like(src[:, :1])], dim=1)  # (B, S)
            kept = torch.where(real.to(src.device)[:, None], shorter, src)  # examples without a token there stay whole
            dropped = _target_log_probs(model, kept, lengths - real.to(lengths.dtype), batch)  # (B, L)
            columns.append((full - dropped) * real.to(full.device)[:, None])
    importance = torch.stack(columns, dim=-1)  # (B, L, S)
    return importance * (batch.tgt_out != CharVocab.PAD)[:, :, None]


def kendall_tau(x: torch.Tensor, y: torch.Tensor) -> float:
    """Kendall's rank correlation of two importance vectors of the same length (chapter 2).

    Over all pairs of positions, ``(concordant - discordant) / sqrt(n_x n_y)``, where ``n_x`` and
    ``n_y`` count the pairs that are not tied in ``x`` and in ``y``: Kendall's tau-b, which
    ``scipy.stats.kendalltau`` computes too. 1 means the same order, -1 the reverse order, and
    about 0 no relation; ties (attention weights that underflow to exactly 0, say) lower neither
    the agreement of a vector with itself nor with another. Jain and Wallace (2019) compare
    attention with attributions this way.

    Raises:
        ValueError: a vector whose values are all equal (its order, and tau, are undefined).
    """
    check_tensor("kendall_tau", "x", x, kind="float", dim=1, names="(n,)")
    check_tensor("kendall_tau", "y", y, kind="float", dim=1, names="(n,)")
    if x.shape != y.shape:
        raise ValueError(f"kendall_tau: x and y must have the same length, got {x.shape[0]} and {y.shape[0]}")
    n = x.shape[0]
    if n < 2:
        raise ValueError(f"kendall_tau: needs at least 2 positions, got {n}")
    dx = torch.sign(x[:, None] - x[None, :])  # (n, n): each unordered pair twice
    dy = torch.sign(y[:, None] - y[None, :])
    untied_x, untied_y = dx.abs().sum(), dy.abs().sum()
    for arg, untied in (("x", untied_x), ("y", untied_y)):
        if untied == 0:
            raise ValueError(f"kendall_tau: {arg} has all its {n} values equal; its rank order is undefined")
    return float((dx * dy).sum() / torch.sqrt(untied_x * untied_y))


class UniformScore(nn.Module):
    """A score that is the same for every key (chapter 2): after the masked softmax, every real
    source position gets the weight ``1 / S``, and the context is the mean of the encoder's
    states, chapter 1's mean context, recomputed at every step.

    Plugged into a trained model with ``replace_score``, it is the uniform-weights baseline of
    Wiegreffe and Pinter (2019), applied at test time: if the output survives it, the learned
    weights did not matter. ``(B, L, D_q), (B, S, D_k) -> (B, L, S)`` zeros.
    """

    def forward(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        check_tensor("UniformScore", "query", query, kind="float", dim=3, names="(B, L, D_q)")
        check_tensor("UniformScore", "key", key, kind="float", dim=3, names="(B, S, D_k)")
        return query.new_zeros(query.shape[0], query.shape[1], key.shape[1])  # (B, L, S)


def replace_score(model: Seq2Seq, score: nn.Module) -> Seq2Seq:
    """A copy of an attention seq2seq model whose decoder scores with ``score`` (chapter 2).

    The original model is not changed. The copy shares nothing with it, so it can be modified
    or trained on its own.
    """
    if not isinstance(model, nn.Module) or not isinstance(
        getattr(getattr(model, "decoder", None), "score", None), nn.Module
    ):
        raise TypeError(
            f"replace_score: model must be a Seq2Seq whose decoder has a score module (an attention decoder), "
            f"got {type(model).__name__}"
        )
    if not isinstance(score, nn.Module):
        raise TypeError(f"replace_score: score must be an nn.Module (a score function), got {type(score).__name__}")
    replaced = copy.deepcopy(model)
    replaced.decoder.score = score.to(next(model.parameters()).device)
    return replaced
