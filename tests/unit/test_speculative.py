"""Chapter 9's speculative decoding: the rule that keeps the target's distribution.

The statistics are chi-square tests whose thresholds a correct sampler exceeds with
probability about 1e-6; the generators are seeded, so the tests are deterministic.
"""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.inference import verify_draft

V = 13


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
