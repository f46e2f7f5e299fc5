"""Chapter 9's speculative decoding: the target's own tokens, fewer target passes, errors named.

Greedy: the output is the target's greedy decoding token for token, whatever the draft.
Sampling: every token is distributed as the target's softmax, checked by chi-square on toy
models whose logits are fixed tables (the statistic's threshold is one a correct sampler
exceeds with probability about 1e-6; the generators are seeded, so the tests are deterministic).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attnlab.inference import SpeculativeResult, speculative_decode, verify_draft
from attnlab.models import LMConfig, TransformerLM, generate

V = 13
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def lm(seed: int, vocab_size: int = V) -> TransformerLM:
    torch.manual_seed(seed)
    config = LMConfig(vocab_size=vocab_size, d_model=16, num_heads=2, num_layers=1, dim_feedforward=32)
    return TransformerLM(config).eval()


class Bigram(nn.Module):
    """A causal toy model: the logits at each position are ``log(table)[token]``, a fixed row per
    token (a table with equal rows gives logits that do not depend on the input at all)."""

    def __init__(self, table: list[list[float]]):
        super().__init__()
        self.register_buffer("log_table", torch.tensor(table).log())

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.log_table[tokens]  # (B, n) -> (B, n, V)


class Constant(nn.Module):
    """Logits that always pick ``token``: a draft the target never agrees with, when it never picks it."""

    def __init__(self, vocab_size: int, token: int):
        super().__init__()
        self.logits = torch.zeros(vocab_size)
        self.logits[token] = 10.0

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.logits.to(tokens.device).expand(*tokens.shape, -1)  # (B, n, V)


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = counts.sum() * probs
    return float(((counts - expected) ** 2 / expected).sum())


P = [0.1, 0.2, 0.3, 0.4]  # the target's distribution
Q = [0.4, 0.3, 0.2, 0.1]  # the draft's: beta = sum min(p, q) = 0.6
# chi-square statistics that a correct sampler exceeds with probability 1e-6 or less
CHI2_1DOF, CHI2_3DOF, CHI2_15DOF = 24.0, 30.0, 60.0


# --- the rule: verify_draft ---------------------------------------------------------------------


def test_verify_draft_at_temperature_zero_keeps_the_argmax_agreements():
    target_logits = torch.tensor([[[0.0, 1.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 3.0], [0.0, 4.0, 0.0]]])
    draft_logits = torch.zeros(1, 3, 3)
    for draft, accepted, next_token in (([1, 0, 2], 3, 1), ([1, 0, 0], 2, 2), ([2, 0, 2], 0, 1), ([1, 1, 2], 1, 0)):
        n, token = verify_draft(target_logits, draft_logits, torch.tensor([draft]))
        assert (int(n), int(token)) == (accepted, next_token)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_verify_draft_reads_no_value(temperature):
    """On the meta device (shapes, no values) a host read raises: verification needs none, so the
    accepted count that speculative_decode reads is its only one per round."""
    target_logits, draft_logits = torch.randn(2, 4, V, device="meta"), torch.randn(2, 3, V, device="meta")
    draft = torch.zeros(2, 3, dtype=torch.long, device="meta")
    accepted, next_token = verify_draft(target_logits, draft_logits, draft, temperature=temperature)
    assert accepted.shape == next_token.shape == (2,) and accepted.device.type == "meta"


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_the_rejection_rule_keeps_the_targets_distribution(temperature):
    """verify_draft on 100,000 independent rounds: the first token is distributed as p, a correction
    as norm(max(0, p - q)), and a round keeps k or more proposals with probability beta^k, where
    beta = sum min(p, q) (Leviathan et al., Equation 1)."""
    rows, K = 100_000, 3
    g = torch.Generator().manual_seed(0)
    logp, logq = torch.tensor(P).log(), torch.tensor(Q).log()
    p = torch.softmax(logp.double() / temperature, dim=-1)
    q = torch.softmax(logq.double() / temperature, dim=-1)
    draft = torch.multinomial(q, rows * K, replacement=True, generator=g).view(rows, K)
    accepted, next_token = verify_draft(
        logp.expand(rows, K + 1, -1), logq.expand(rows, K, -1), draft, temperature=temperature, generator=g
    )
    first = torch.where(accepted > 0, draft[:, 0], next_token)  # the first token the round yields
    assert chi_square(torch.bincount(first, minlength=4).double(), p) < CHI2_3DOF
    corrections = torch.bincount(next_token[accepted < K], minlength=4).double()
    residual = (p - q).clamp(min=0)  # zero for tokens 0 and 1: never a correction
    assert corrections[:2].sum() == 0
    assert chi_square(corrections[2:], residual[2:] / residual.sum()) < CHI2_1DOF
    beta = float(torch.minimum(p, q).sum())
    for k in range(1, K + 1):
        share = float((accepted >= k).double().mean())
        assert abs(share - beta**k) < 5 * math.sqrt(beta**k * (1 - beta**k) / rows)


def test_verify_draft_names_bad_arguments():
    with pytest.raises(ValueError, match=r"^verify_draft: draft_logits must have shape"):
        verify_draft(torch.zeros(1, 3, V), torch.zeros(1, 3, V), torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^verify_draft: target_logits must have shape \(B, K \+ 1, V\)"):
        verify_draft(torch.zeros(3, V), torch.zeros(1, 0, V), torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^verify_draft: temperature must be a number >= 0"):
        verify_draft(torch.zeros(1, 1, V), torch.zeros(1, 0, V), torch.zeros(1, 0, dtype=torch.long), temperature=-1)
    with pytest.raises(ValueError, match=r"^verify_draft: target_logits must have K \+ 1 >= 1 positions"):
        verify_draft(torch.zeros(1, 0, V), torch.zeros(1, 0, V), torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(TypeError, match=r"^verify_draft: draft must be a torch.long tensor"):
        verify_draft(torch.zeros(1, 3, V), torch.zeros(1, 2, V), torch.zeros(1, 2))


# --- greedy: the target's own tokens -------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("draft_length", [1, 2, 3, 5])
def test_greedy_speculative_decoding_is_the_targets_greedy_decoding(device, seed, draft_length):
    target, draft = lm(seed).to(device), lm(seed + 100).to(device)
    prompt = torch.tensor([[1, 2, 3]], device=device)
    result = speculative_decode(target, draft, prompt, 20, draft_length=draft_length)
    assert isinstance(result, SpeculativeResult)
    assert torch.equal(result.tokens, generate(target, prompt, 20, temperature=0))
    assert result.tokens.device == prompt.device
    # one target pass per round; each round yields its accepted tokens and one of the target's
    assert result.target_passes == len(result.accepted)
    assert sum(result.accepted) + len(result.accepted) == 20
    assert all(0 <= n <= draft_length for n in result.accepted)
    assert result.tokens_per_target_pass == 20 / result.target_passes


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("steps", "draft_length"), [(20, 4), (21, 4), (7, 1), (3, 5)])
def test_a_draft_equal_to_the_target_is_always_accepted(seed, steps, draft_length):
    """Every round but the last yields draft_length + 1 tokens (the bonus token included); the last
    proposes only what is still missing, less the target's own token."""
    target = lm(seed)
    prompt = torch.tensor([[4, 0]])
    result = speculative_decode(target, target, prompt, steps, draft_length=draft_length)
    assert torch.equal(result.tokens, generate(target, prompt, steps, temperature=0))
    rounds = math.ceil(steps / (draft_length + 1))
    last = steps - (rounds - 1) * (draft_length + 1) - 1
    assert result.accepted == (draft_length,) * (rounds - 1) + (last,)
    assert result.target_passes == rounds
    assert result.draft_passes == steps - rounds  # every proposal was kept
    if steps % (draft_length + 1) == 0:
        assert result.tokens_per_target_pass == draft_length + 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_draft_the_target_never_agrees_with_gives_one_token_per_target_pass(seed):
    target, prompt, steps = lm(seed), torch.tensor([[5]]), 15
    reference = generate(target, prompt, steps, temperature=0)
    never = next(t for t in range(V) if t not in reference[0, 1:].tolist())
    result = speculative_decode(target, Constant(V, never), prompt, steps, draft_length=3)
    assert torch.equal(result.tokens, reference)
    assert result.accepted == (0,) * steps and result.target_passes == steps
    assert result.tokens_per_target_pass == 1.0
    assert result.draft_passes == 3 * (steps - 3) + 2 + 1 + 0  # the last rounds propose 2, 1, 0


def test_no_steps_returns_the_prompt_without_a_pass():
    target, prompt = lm(0), torch.tensor([[1, 2]])
    result = speculative_decode(target, lm(1), prompt, 0)
    assert torch.equal(result.tokens, prompt)
    assert (result.target_passes, result.draft_passes, result.accepted) == (0, 0, ())
    assert math.isnan(result.tokens_per_target_pass)
    one = speculative_decode(target, lm(1), prompt, 1, draft_length=4)  # no room for a proposal
    assert torch.equal(one.tokens, generate(target, prompt, 1, temperature=0))
    assert (one.target_passes, one.draft_passes, one.accepted) == (1, 0, (0,))


def test_the_result_is_frozen():
    result = speculative_decode(lm(0), lm(1), torch.tensor([[1]]), 2)
    with pytest.raises(AttributeError):
        result.target_passes = 0  # type: ignore[misc]


# --- sampling: the target's distribution ---------------------------------------------------------


def test_sampled_tokens_follow_the_target_token_after_token():
    """Bigram toy models: the pair of the first two tokens is distributed as P[0, a] P[a, b], whether
    the first is a kept proposal (the second then a bonus token) or the target's correction. At a
    temperature other than 1, so that the q the rule divides by must be the one the draft sampled."""
    temperature = 2.0
    target_table = [P, [0.25, 0.25, 0.25, 0.25], [0.5, 0.2, 0.2, 0.1], [0.1, 0.1, 0.4, 0.4]]
    draft_table = [[0.7, 0.1, 0.1, 0.1], [0.4, 0.1, 0.1, 0.4], [0.25, 0.25, 0.25, 0.25], Q]
    target, draft = Bigram(target_table), Bigram(draft_table)
    g, runs, counts = torch.Generator().manual_seed(0), 1_500, torch.zeros(4, 4, dtype=torch.float64)
    for _ in range(runs):
        result = speculative_decode(
            target, draft, torch.tensor([[0]]), 2, draft_length=1, temperature=temperature, generator=g
        )
        counts[result.tokens[0, 1], result.tokens[0, 2]] += 1
    p = torch.softmax(torch.tensor(target_table, dtype=torch.float64).log() / temperature, dim=-1)
    assert chi_square(counts.sum(1), p[0]) < CHI2_3DOF
    assert chi_square(counts.flatten(), (p[0, :, None] * p).flatten()) < CHI2_15DOF


def test_a_sampling_draft_equal_to_the_target_is_always_accepted():
    target, g = Bigram([P, Q, P, Q]), torch.Generator().manual_seed(0)
    result = speculative_decode(target, target, torch.tensor([[0]]), 25, draft_length=4, temperature=1.0, generator=g)
    assert result.accepted == (4,) * 5 and result.tokens_per_target_pass == 5


def test_sampling_is_reproducible_with_a_seeded_generator():
    target, draft, prompt = lm(0), lm(1), torch.tensor([[1, 2]])
    runs = [
        speculative_decode(target, draft, prompt, 12, temperature=1.0, generator=torch.Generator().manual_seed(3))
        for _ in range(2)
    ]
    assert torch.equal(runs[0].tokens, runs[1].tokens) and runs[0].accepted == runs[1].accepted
    assert runs[0].tokens.shape == (1, 14)


# --- bad input -----------------------------------------------------------------------------------


def bad_calls():
    prompt = torch.tensor([[1, 2]])
    return [
        (TypeError, "target", dict(target="model")),
        (TypeError, "draft", dict(draft=None)),
        (TypeError, "prompt", dict(prompt=prompt.float())),
        (TypeError, "prompt", dict(prompt=[[1, 2]])),
        (ValueError, "prompt", dict(prompt=torch.tensor([1, 2]))),
        (ValueError, r"prompt must have batch size 1.*each row would accept", dict(prompt=prompt.expand(2, 2))),
        (ValueError, "prompt must hold at least one token", dict(prompt=prompt[:, :0])),
        (ValueError, "steps", dict(steps=-1)),
        (TypeError, "steps", dict(steps=2.0)),
        (TypeError, "steps", dict(steps=True)),
        (ValueError, "draft_length", dict(draft_length=0)),
        (TypeError, "draft_length", dict(draft_length=None)),
        (ValueError, "temperature", dict(temperature=-0.5)),
        (TypeError, "temperature", dict(temperature="hot")),
        (TypeError, "generator", dict(generator=0)),
    ]


@pytest.mark.parametrize(("error", "match", "change"), bad_calls())
def test_bad_arguments_are_named(error, match, change):
    arguments = dict(target=lm(0), draft=lm(1), prompt=torch.tensor([[1, 2]]), steps=3) | change
    with pytest.raises(error, match=rf"^speculative_decode: .*{match}"):
        speculative_decode(**arguments)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a second device")
def test_a_generator_on_another_device_is_named():
    with pytest.raises(ValueError, match=r"^speculative_decode: generator must be on the tokens' device"):
        speculative_decode(lm(0), lm(1), torch.tensor([[1]]), 2, generator=torch.Generator(device="cuda"))


def test_models_with_the_wrong_logits_are_named():
    prompt, target, draft = torch.tensor([[1, 2]]), lm(0), lm(1)

    def last_only(tokens):
        return torch.zeros(1, V)  # (B, V): the last position's logits only

    with pytest.raises(ValueError, match=r"^speculative_decode: draft's logits must have shape \(B, n, V\)"):
        speculative_decode(target, last_only, prompt, 3)
    with pytest.raises(ValueError, match=r"^speculative_decode: target's logits must have shape \(B, n, V\)"):
        speculative_decode(last_only, draft, prompt, 3)
    with pytest.raises(
        ValueError,
        match=r"^speculative_decode: target's logits must have shape \(1, n, V\) = \(1, 4, 13\), got \(1, 3, 13\)",
    ):
        speculative_decode(lambda tokens: target(tokens)[:, 1:], draft, prompt, 3)
    with pytest.raises(TypeError, match=r"^speculative_decode: draft's logits must be a floating-point tensor"):
        speculative_decode(target, lambda tokens: tokens, prompt, 3)
    with pytest.raises(ValueError, match=r"target and draft must share one vocabulary, got V = 13 from target and 11"):
        speculative_decode(target, lm(1, vocab_size=11), prompt, 3)
