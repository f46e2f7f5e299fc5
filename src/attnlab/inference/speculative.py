"""Speculative decoding: a small draft model proposes, the large target model verifies (chapter 9).

Leviathan, Kalman and Matias (2023, "Fast inference from transformers via speculative decoding")
and Chen et al. (2023, "Accelerating large language model decoding with speculative sampling").
A decoder makes one forward pass of its model per token, and for a large model that pass costs
about the same whether it scores one position or a handful: it is bound by reading the weights.
So each round

1. the draft proposes ``K`` tokens, one at a time (``K`` cheap passes);
2. the target runs **one** pass over the prefix and the ``K`` proposals; its causal mask gives
   its next-token logits after the prefix and after each proposal, ``K + 1`` of them at once;
3. ``verify_draft`` keeps the longest prefix of the proposals that the target agrees with, then
   adds one token of the target's own: the correction at the first rejection, or a bonus token
   when all ``K`` were accepted.

A round therefore yields between 1 and ``K + 1`` tokens for one target pass, where plain
decoding (``attnlab.models.generate``) makes one target pass per token: ``steps`` passes for
``steps`` tokens. ``SpeculativeResult.tokens_per_target_pass`` is the speed-up in target passes.

Agreement keeps the target's distribution exactly. At ``temperature=0`` it means the same argmax,
and the output is the target's greedy decoding token for token. At ``temperature > 0`` it is a
rejection rule: with ``p`` the target's and ``q`` the draft's ``softmax(logits / temperature)``,
a proposal ``x ~ q`` is accepted with probability ``min(1, p(x) / q(x))``, and on rejection the
replacement is drawn from ``norm(max(0, p - q))``; every token is then distributed as under ``p``
(Leviathan et al., Theorem 1). With ``beta = sum_x min(p(x), q(x))``, the chance that a proposal
is accepted, a round yields ``(1 - beta^(K+1)) / (1 - beta)`` tokens on average when the
positions are independent (their Equation 1).

No key/value cache here: every pass runs its model over the whole sequence so far, so a model is
any callable from tokens ``(B, n)`` to logits ``(B, n, V)``. With caches, the target's pass
would feed only the ``K`` proposals (and the last accepted token) to its cache, and each round
would end by rolling both caches back to the accepted length: the keys and values of rejected
proposals must be dropped, and the draft must still see the correction or bonus token.

Shapes: ``P`` prompt tokens, ``K = draft_length`` proposals per round, ``V`` the vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from attnlab.validation import check_int, check_number, check_tensor, describe

__all__ = ["SpeculativeResult", "speculative_decode", "verify_draft"]

Model = Callable[[torch.Tensor], torch.Tensor]  # tokens (B, n) -> logits (B, n, V), causal


@dataclass(frozen=True)
class SpeculativeResult:
    """What ``speculative_decode`` returns (chapter 9).

    ``tokens (1, P + steps)``: the prompt and the new tokens. ``target_passes`` and
    ``draft_passes``: the forward passes each model made. ``accepted``: the number of draft
    tokens the target accepted in each round (one round per target pass).
    """

    tokens: torch.Tensor
    target_passes: int
    draft_passes: int
    accepted: tuple[int, ...]

    @property
    def tokens_per_target_pass(self) -> float:
        """``steps / target_passes``: plain decoding makes 1; NaN when nothing was generated."""
        steps = sum(self.accepted) + len(self.accepted)  # a round adds its accepted tokens and one more
        return steps / self.target_passes if self.target_passes else float("nan")


def _check_generator(where: str, generator: object, device: torch.device) -> torch.Generator | None:
    if generator is None:
        return None
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"{where}: generator must be a torch.Generator or None, got {describe(generator)}")
    if generator.device.type != device.type:
        raise ValueError(f"{where}: generator must be on the tokens' device ({device}), got {generator.device}")
    return generator


@torch.no_grad()
def verify_draft(
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor,
    draft: torch.Tensor,
    *,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One round's verification: how many proposals to keep, and the token that follows them.

    Defined in chapter 9. Row by row, ``draft (B, K)`` holds the proposals, ``draft_logits
    (B, K, V)`` the draft's logits they were drawn from, and ``target_logits (B, K + 1, V)`` the
    target's logits before each proposal and after the last one. Returns ``accepted (B,)``, the
    length of the longest accepted prefix of each row's proposals, and ``next_token (B,)``: the
    target's correction at position ``accepted`` or, when all ``K`` were accepted, its bonus token.

    ``temperature=0``: a proposal is accepted when it is the target's argmax, and the next token
    is the target's argmax (``draft_logits`` gives only its shape). ``temperature > 0``: the
    rejection rule of Leviathan et al. (2023) and Chen et al. (2023), on ``p`` and ``q``, the
    target's and the draft's ``softmax(logits / temperature)``; the proposals must have been
    sampled from ``q``. Runs on the device of its arguments without reading any value.
    """
    where = "verify_draft"
    check_tensor(where, "target_logits", target_logits, kind="float", dim=3, names="(B, K + 1, V)")
    B, K1, V = target_logits.shape
    if K1 < 1:
        raise ValueError(f"{where}: target_logits must have K + 1 >= 1 positions, got shape {(B, K1, V)}")
    K = K1 - 1
    check_tensor(where, "draft_logits", draft_logits, kind="float", shape=(B, K, V), names=f"(B, K, V) = {(B, K, V)}")
    check_tensor(where, "draft", draft, kind="long", shape=(B, K), names=f"(B, K) = {(B, K)}")
    check_number(where, "temperature", temperature, low=0)
    generator = _check_generator(where, generator, target_logits.device)
    rows = torch.arange(B, device=draft.device)  # (B,)
    if temperature == 0:
        guess = target_logits.argmax(dim=-1)  # (B, K + 1): the target's greedy choices
        agree = guess[:, :K] == draft  # (B, K)
        accepted = agree.long().cumprod(dim=-1).sum(dim=-1)  # (B,): the leading run of agreements
        return accepted, guess[rows, accepted]
    # listing: verify
    p = torch.softmax(target_logits.float() / temperature, dim=-1)  # (B, K + 1, V)
    q = torch.softmax(draft_logits.float() / temperature, dim=-1)  # (B, K, V)
    p_x = p[:, :K].gather(-1, draft.unsqueeze(-1)).squeeze(-1)  # (B, K): p(x) of each proposal
    q_x = q.gather(-1, draft.unsqueeze(-1)).squeeze(-1)  # (B, K): q(x) > 0, since x was drawn from q
    u = torch.rand(p_x.shape, generator=generator, device=p.device)  # (B, K), uniform in [0, 1)
    keep = u * q_x < p_x  # u < p(x) / q(x): accepted with probability min(1, p(x) / q(x))
    accepted = keep.long().cumprod(dim=-1).sum(dim=-1)  # (B,): up to the first rejection
    # The residual max(0, p - q) at each position; after the last proposal q is 0, so it is p:
    # the bonus token is drawn from the target itself.
    q = torch.cat([q, q.new_zeros(B, 1, V)], dim=1)  # (B, K, V) -> (B, K + 1, V)
    residual = (p - q).clamp(min=0)[rows, accepted]  # (B, V), unnormalised
    # p == q leaves no residual, but then nothing is rejected; rounding can still empty it
    residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, p[rows, accepted])
    next_token = torch.multinomial(residual, 1, generator=generator).squeeze(-1)  # (B,)
    # end listing: verify
    return accepted, next_token


def _logits(where: str, name: str, model: Model, tokens: torch.Tensor, vocab: int | None) -> torch.Tensor:
    """``model(tokens)``, checked: logits ``(1, n, V)`` for tokens ``(1, n)``, ``V = vocab`` when given."""
    logits = model(tokens)
    n = tokens.shape[1]
    wanted = f"(1, n, V) = (1, {n}, {'V' if vocab is None else vocab})"
    check_tensor(where, f"{name}'s logits", logits, kind="float", dim=3, names="(B, n, V)", note=f"for tokens (1, {n})")
    if logits.shape[:2] != (1, n):
        raise ValueError(f"{where}: {name}'s logits must have shape {wanted}, got {tuple(logits.shape)}")
    if vocab is not None and logits.shape[2] != vocab:
        raise ValueError(
            f"{where}: target and draft must share one vocabulary, got V = {logits.shape[2]} from {name} "
            f"and {vocab} from the {'draft' if name == 'target' else 'target'}"
        )
    return logits


@torch.no_grad()
def speculative_decode(
    target: Model,
    draft: Model,
    prompt: torch.Tensor,
    steps: int,
    *,
    draft_length: int = 4,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> SpeculativeResult:
    """``steps`` tokens after ``prompt (1, P)`` from ``target``, sped up by ``draft`` (chapter 9).

    ``target`` and ``draft`` map tokens ``(B, n)`` to logits ``(B, n, V)`` with a causal mask and
    one vocabulary (a causal ``TransformerLM`` is one; an ``nn.Module`` is put in eval mode, as
    ``generate`` does). Each round the draft proposes ``draft_length`` tokens, the target scores
    them all in one pass, and ``verify_draft`` keeps what the target agrees with, plus one token
    of the target's. The last round proposes fewer, so that exactly ``steps`` tokens come out.

    ``temperature=0`` returns the target's greedy decoding, token for token
    (``attnlab.models.generate(target, prompt, steps, temperature=0)``, which makes ``steps``
    target passes); ``temperature > 0`` samples every token from the target's
    ``softmax(logits / temperature)``, drawing with ``generator``. The batch has one row, since
    each row would accept a different number of tokens. Runs where the models are (``prompt``
    and ``generator`` on their device); the one host read per round is the accepted count.
    """
    where = "speculative_decode"
    for name, model in (("target", target), ("draft", draft)):
        if not callable(model):
            raise TypeError(
                f"{where}: {name} must be a model (tokens (B, n) -> logits (B, n, V)), got {describe(model)}"
            )
    check_tensor(where, "prompt", prompt, kind="long", dim=2, names="(1, P)", note="token ids")
    if prompt.shape[0] != 1:
        raise ValueError(
            f"{where}: prompt must have batch size 1, shape (1, P), got {tuple(prompt.shape)}: each row would "
            "accept a different number of draft tokens (decode rows one at a time)"
        )
    if prompt.shape[1] < 1:
        raise ValueError(f"{where}: prompt must hold at least one token, shape (1, P >= 1), got {tuple(prompt.shape)}")
    check_int(where, "steps", steps, low=0)
    check_int(where, "draft_length", draft_length)
    check_number(where, "temperature", temperature, low=0)
    generator = _check_generator(where, generator, prompt.device)
    for model in (target, draft):
        if isinstance(model, nn.Module):
            model.eval()

    tokens = prompt  # (1, t): the accepted sequence so far
    vocab: int | None = None  # checked on each model's first pass
    target_checked = draft_checked = False
    target_passes = draft_passes = 0
    accepted: list[int] = []
    while tokens.shape[1] - prompt.shape[1] < steps:
        t = tokens.shape[1]
        k = min(draft_length, steps - (t - prompt.shape[1]) - 1)  # a round yields at most k + 1 tokens
        # listing: round
        sequence, proposals = tokens, []
        for _ in range(k):  # the draft proposes k tokens, one pass each
            logits = draft(sequence) if draft_checked else _logits(where, "draft", draft, sequence, vocab)
            draft_checked, vocab = True, logits.shape[2]
            logits = logits[:, -1]  # (1, V): the draft's next-token logits
            if temperature == 0:
                x = logits.argmax(dim=-1, keepdim=True)  # (1, 1)
            else:
                probs = torch.softmax(logits.float() / temperature, dim=-1)  # (1, V)
                x = torch.multinomial(probs, 1, generator=generator)  # (1, 1)
            proposals.append(logits)
            sequence = torch.cat([sequence, x], dim=1)  # (1, t + i + 1)
        # one target pass over prefix + proposals: its logits after positions t - 1, ..., t + k - 1
        logits = target(sequence) if target_checked else _logits(where, "target", target, sequence, vocab)
        target_checked, vocab = True, logits.shape[2]
        target_logits = logits[:, t - 1 :]  # (1, k + 1, V)
        draft_logits = torch.stack(proposals, dim=1) if k else target_logits[:, :0]  # (1, k, V)
        n, next_token = verify_draft(
            target_logits, draft_logits, sequence[:, t:], temperature=temperature, generator=generator
        )
        n_accepted = int(n.item())  # the round's one host read: how long the sequence is now
        tokens = torch.cat([sequence[:, : t + n_accepted], next_token.view(1, 1)], dim=1)
        # end listing: round
        target_passes, draft_passes = target_passes + 1, draft_passes + k
        accepted.append(n_accepted)
    return SpeculativeResult(tokens, target_passes, draft_passes, tuple(accepted))
