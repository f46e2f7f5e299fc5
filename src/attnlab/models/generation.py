"""Generating text with a decoder-only ``TransformerLM``: sampling a token, and the loop that
feeds it back with the model's caches (chapter 8).

Shapes: logits ``(B, V)``; a prompt ``(B, P)`` of token ids; the output ``(B, P + steps)``.
"""

from __future__ import annotations

import torch

from attnlab.models.lm import TransformerLM
from attnlab.validation import check_int, check_number, check_tensor

__all__ = ["generate", "sample_next"]


def sample_next(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token per row from ``logits (B, V)``: ``softmax(logits / temperature)`` over the
    ``top_k`` most likely tokens (all when ``None``); ``temperature=0`` is greedy (the argmax).

    Defined in chapter 8. Returns ``(B, 1)`` token ids. A temperature below 1 sharpens the
    distribution, above 1 flattens it; ``top_k`` removes the long tail of unlikely tokens.
    """
    check_tensor("sample_next", "logits", logits, kind="float", dim=2, names="(B, V)")
    check_number("sample_next", "temperature", temperature, low=0)
    if top_k is not None:
        check_int("sample_next", "top_k", top_k, high=logits.shape[-1], note=f"at most V = {logits.shape[-1]}")
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)  # (B, 1)
    # listing: sample
    logits = logits / temperature
    if top_k is not None:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1): the k-th largest
        logits = logits.masked_fill(logits < kth, float("-inf"))  # only the top k remain
    probs = torch.softmax(logits, dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator)  # (B, 1)
    # end listing: sample


@torch.no_grad()
def generate(
    model: TransformerLM,
    prompt: torch.Tensor,
    steps: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> torch.Tensor:
    """``steps`` tokens after ``prompt (B, P)``, each sampled by ``sample_next`` (chapter 8).

    With ``use_cache`` the prompt runs once and each later step feeds only the newest token to
    the blocks, which keep their keys and values (or, for linear attention, their state) in
    ``LMCache``s; without it every step runs the model on the whole sequence so far. Both
    give the same tokens. Returns ``(B, P + steps)``; runs where the model is (``prompt`` and
    ``generator`` must be on the model's device).
    """
    if not isinstance(model, TransformerLM) or not model.config.causal:
        raise TypeError("generate: model must be a causal TransformerLM (LMConfig(causal=True))")
    check_tensor("generate", "prompt", prompt, kind="long", dim=2, names="(B, P)", note="token ids")
    check_int("generate", "steps", steps, low=0)
    model.eval()
    tokens = prompt
    caches = model.new_caches() if use_cache else None
    # listing: generate
    logits = model(prompt, 0, caches)[:, -1]  # (B, V): the prompt in one pass
    for _ in range(steps):
        token = sample_next(logits, temperature=temperature, top_k=top_k, generator=generator)  # (B, 1)
        tokens = torch.cat([tokens, token], dim=1)  # (B, t + 1)
        if use_cache:  # the new token only, at position t
            logits = model(token, tokens.shape[1] - 1, caches)[:, -1]
        else:  # the whole sequence again
            logits = model(tokens)[:, -1]
    # end listing: generate
    return tokens
