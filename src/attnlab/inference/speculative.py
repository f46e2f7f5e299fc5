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

import torch

from attnlab.validation import check_number, check_tensor, describe

__all__ = ["verify_draft"]


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
