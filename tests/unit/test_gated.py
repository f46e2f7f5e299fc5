"""Beyond softmax: decayed and gated linear attention, its three forms, and the token mixer."""

from __future__ import annotations

import pytest
import torch

from attnlab.attention import (
    GATED_FORMS,
    GATES,
    GatedLinearAttention,
    elu_feature_map,
    gated_attention_weights,
    gated_linear_attention,
    linear_attention,
    linear_attention_recurrent,
    retnet_decay,
)

B, H, E, EV = 2, 3, 4, 5
F64 = torch.float64


def qkv(n: int, *, dtype: torch.dtype = F64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, H, n, E, generator=g, dtype=dtype),
        torch.randn(B, H, n, E, generator=g, dtype=dtype),
        torch.randn(B, H, n, EV, generator=g, dtype=dtype),
    )


def log_gate(kind: str, n: int, *, dtype: torch.dtype = F64, seed: int = 1) -> torch.Tensor:
    """A log-gate of each kind: RetNet's fixed decay, Mamba-2's per head and step, GLA's per feature."""
    g = torch.Generator().manual_seed(seed)
    if kind == "fixed":
        return retnet_decay(H, log=True, dtype=dtype)[None, :, None].expand(B, H, n)
    if kind == "scalar":
        return -torch.nn.functional.softplus(torch.randn(B, H, n, generator=g, dtype=dtype))
    return torch.nn.functional.logsigmoid(torch.randn(B, H, n, E, generator=g, dtype=dtype) + 1)


def by_the_formula(q, k, v, a, state=None):
    """o_t = sum_{s<=t} (prod_{r=s+1..t} a_r) (q_t . k_s) v_s + (prod_{r=1..t} a_r) q_t S_0, term by term,
    with the gates multiplied as they are (no logs): a reference for short sequences."""
    n = q.shape[-2]
    a = a if a.dim() == q.dim() else a[..., None].expand(*a.shape, E)  # (B, H, N, E): a gate per feature
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for t in range(n):
        for s in range(t + 1):
            decay = a[..., s + 1 : t + 1, :].prod(dim=-2)  # (B, H, E): prod_{r=s+1..t}, 1 when s = t
            out[..., t, :] += (q[..., t, :] * decay * k[..., s, :]).sum(-1, keepdim=True) * v[..., s, :]
        if state is not None:
            kept = a[..., : t + 1, :].prod(dim=-2)  # (B, H, E)
            out[..., t, :] += ((q[..., t, :] * kept)[..., None, :] @ state).squeeze(-2)
    return out


@pytest.mark.parametrize("kind", GATES)
def test_the_parallel_form_is_the_formula(kind):
    q, k, v = qkv(6)
    g = log_gate(kind, 6)
    state = torch.randn(B, H, E, EV, dtype=F64)
    for s in (None, state):
        out, _ = gated_linear_attention(q, k, v, g, state=s)
        torch.testing.assert_close(out, by_the_formula(q, k, v, g.exp(), s))
    torch.testing.assert_close(gated_attention_weights(q, k, g) @ v, gated_linear_attention(q, k, v, g)[0])


@pytest.mark.parametrize("kind", GATES)
@pytest.mark.parametrize("n", [1, 7, 13])
def test_the_three_forms_agree_whatever_the_chunk(kind, n):
    q, k, v = qkv(n)
    g = log_gate(kind, n)
    start = torch.randn(B, H, E, EV, dtype=F64)
    for state in (None, start):
        recurrent, last = gated_linear_attention(q, k, v, g, form="recurrent", state=state)
        parallel, parallel_last = gated_linear_attention(q, k, v, g, form="parallel", state=state)
        torch.testing.assert_close(parallel, recurrent)
        torch.testing.assert_close(parallel_last, last)
        for chunk in (1, 2, 4, 5, n, n + 3, 64):  # 4 and 5 divide none of the lengths; n + 3 and 64 exceed them
            chunked, chunked_last = gated_linear_attention(q, k, v, g, form="chunked", chunk_size=chunk, state=state)
            torch.testing.assert_close(chunked, recurrent, msg=f"chunk_size={chunk}")
            torch.testing.assert_close(chunked_last, last, msg=f"chunk_size={chunk}")


@pytest.mark.parametrize("kind", GATES)
@pytest.mark.parametrize("form", GATED_FORMS)
def test_a_returned_state_continues_the_sequence(kind, form):
    q, k, v = qkv(11)
    g = log_gate(kind, 11)
    whole, last = gated_linear_attention(q, k, v, g, form="recurrent")
    first, state = gated_linear_attention(q[..., :4, :], k[..., :4, :], v[..., :4, :], g[:, :, :4], form=form)
    rest, state = gated_linear_attention(
        q[..., 4:, :], k[..., 4:, :], v[..., 4:, :], g[:, :, 4:], form=form, chunk_size=3, state=state
    )
    torch.testing.assert_close(torch.cat([first, rest], dim=-2), whole)
    torch.testing.assert_close(state, last)
    steps, state = [], None  # one token at a time, as a decoder runs it
    for t in range(11):
        out, state = gated_linear_attention(q[..., t : t + 1, :], k[..., t : t + 1, :], v[..., t : t + 1, :],
                                            g[:, :, t : t + 1], form=form, state=state)  # fmt: skip
        assert state.shape == (B, H, E, EV)
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps, dim=-2), whole)
    empty, kept = gated_linear_attention(
        q[..., :0, :], k[..., :0, :], v[..., :0, :], g[:, :, :0], form=form, state=last
    )
    assert empty.shape == (B, H, 0, EV) and torch.equal(kept, last)  # no position: the state as it was


def test_gates_of_one_give_causal_linear_attention_without_its_normaliser():
    """log_gate = 0: o_t = sum_{s<=t} (q_t . k_s) v_s. attnlab's linear_attention divides that by
    phi(q_t) . sum_{s<=t} phi(k_s) (+ eps): with phi applied to q and k, its output is this output
    divided by the same computation with a value of ones, and its state's S is this state."""
    q, k, v = qkv(9)
    zero = torch.zeros(B, H, 9, dtype=F64)
    for form in GATED_FORMS:
        out, _ = gated_linear_attention(q, k, v, zero, form=form, chunk_size=4)
        torch.testing.assert_close(out, (q @ k.transpose(-2, -1)).tril() @ v)
        fq, fk = elu_feature_map(q), elu_feature_map(k)
        numerator, s = gated_linear_attention(fq, fk, v, zero, form=form, chunk_size=4)
        denominator, z = gated_linear_attention(fq, fk, torch.ones(B, H, 9, 1, dtype=F64), zero, form=form)
        eps = 1e-6
        torch.testing.assert_close(numerator / (denominator + eps), linear_attention(q, k, v, causal=True, eps=eps))
        _, (s_linear, z_linear) = linear_attention_recurrent(q, k, v, eps=eps)
        torch.testing.assert_close(s, s_linear)
        torch.testing.assert_close(z.squeeze(-1), z_linear)
        assert not torch.allclose(out, linear_attention(q, k, v, causal=True, feature_map=lambda x: x))


def test_retnets_decay_gives_weights_gamma_to_the_distance():
    q, k, _ = qkv(8)
    gamma = retnet_decay(H, dtype=F64)
    torch.testing.assert_close(gamma, torch.tensor([1 - 2.0**-5, 1 - 2.0**-6, 1 - 2.0**-7], dtype=F64))
    torch.testing.assert_close(retnet_decay(H, log=True, dtype=F64), gamma.log())
    t, s = torch.arange(8)[:, None], torch.arange(8)[None, :]
    decay = torch.where(t >= s, gamma[:, None, None] ** (t - s).clamp(min=0), 0.0)  # (H, N, N): D_ts = gamma^(t-s)
    weights = gated_attention_weights(q, k, gamma.log()[None, :, None].expand(B, H, 8))
    torch.testing.assert_close(weights, (q @ k.transpose(-2, -1)) * decay)
    assert retnet_decay(21)[19] < 1 and retnet_decay(21)[20] == 1  # float32 rounds gamma_20 to 1
    assert retnet_decay(21, log=True)[20] < 0  # log1p keeps it apart


@pytest.mark.parametrize("kind", ["scalar", "vector"])
def test_long_sequences_with_strong_decay_stay_finite(kind):
    """After a few hundred gates of e^-30 the product of the gates is 0 in float64 (and in float32
    much sooner): a form that divides cumulative products gets 0/0. In log space every weight is
    exp of a sum, at most 1, and the output is the last term, (q_t . k_t) v_t."""
    n = 1200 if kind == "scalar" else 300
    q, k, v = (t[:1, :1] for t in qkv(n, dtype=torch.float32))
    shape = (1, 1, n) if kind == "scalar" else (1, 1, n, E)
    g = torch.full(shape, -30.0)
    own = (q * k).sum(-1, keepdim=True) * v  # (1, 1, n, Ev): the decay of one step is 1e-13
    for form in GATED_FORMS:
        out, state = gated_linear_attention(q, k, v, g, form=form, chunk_size=64)
        assert torch.isfinite(out).all() and torch.isfinite(state).all(), form
        torch.testing.assert_close(out, own, msg=form)


def test_float32_keeps_its_digits_over_long_sequences():
    """The segment sums are summed, not differenced: b_t = sum_{r<=t} log a_r reaches about -2000
    here, where float32's numbers are 1.2e-4 apart, so b_t - b_s would lose about four digits of
    each decay. Compared with the float64 recurrence."""
    n = 1024
    q, k, v = (t[:1] for t in qkv(n, dtype=F64))
    g = -4 * torch.rand(1, H, n, generator=torch.Generator().manual_seed(3), dtype=F64)
    reference, _ = gated_linear_attention(q, k, v, g, form="recurrent")
    q32, k32, v32, g32 = (t.float() for t in (q, k, v, g))
    for form in ("parallel", "chunked"):
        out, _ = gated_linear_attention(q32, k32, v32, g32, form=form, chunk_size=256)
        torch.testing.assert_close(out, reference.float(), msg=form)


@pytest.mark.parametrize("kind", ["scalar", "vector"])
@pytest.mark.parametrize("form", GATED_FORMS)
def test_gradients_are_exact(kind, form):
    g = torch.Generator().manual_seed(4)
    q, k = torch.randn(1, 2, 5, 3, generator=g, dtype=F64), torch.randn(1, 2, 5, 3, generator=g, dtype=F64)
    v, state = torch.randn(1, 2, 5, 2, generator=g, dtype=F64), torch.randn(1, 2, 3, 2, generator=g, dtype=F64)
    gate = -torch.rand(*((1, 2, 5) if kind == "scalar" else (1, 2, 5, 3)), generator=g, dtype=F64)
    inputs = tuple(t.requires_grad_() for t in (q, k, v, gate, state))

    def run(q, k, v, gate, state):
        return gated_linear_attention(q, k, v, gate, form=form, chunk_size=2, state=state)

    assert torch.autograd.gradcheck(run, inputs)


@pytest.mark.parametrize("gate", GATES)
def test_the_mixer_runs_every_form_and_decodes_token_by_token(gate):
    torch.manual_seed(5)
    mixer = GatedLinearAttention(12, 3, gate=gate).double()
    x = torch.randn(2, 10, 12, dtype=F64, requires_grad=True)
    out, state = mixer(x)
    assert out.shape == x.shape and state.shape == (2, 3, 4, 4)
    for form in ("parallel", "recurrent"):
        other, other_state = mixer(x, form=form)
        torch.testing.assert_close(other, out)
        torch.testing.assert_close(other_state, state)
    steps, step_state = [], None
    for t in range(10):
        step, step_state = mixer(x[:, t : t + 1], step_state, form="recurrent")
        steps.append(step)
    torch.testing.assert_close(torch.cat(steps, dim=1), out)
    log_a = mixer.log_gate(x)
    assert log_a.shape == ((2, 3, 10, 4) if gate == "vector" else (2, 3, 10))
    assert bool((log_a < 0).all())
    out.sum().backward()
    missing = [name for name, p in mixer.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing and x.grad is not None


@pytest.mark.parametrize("conv_size", [1, 2, 4])
@pytest.mark.parametrize("gate", GATES)
def test_a_short_convolution_decodes_from_its_history(gate, conv_size):
    """With Mamba-2's short convolution, every form, token by token from the inputs before it,
    and a sequence cut in two give the same outputs (the convolution reads the last K - 1
    inputs: passing more changes nothing)."""
    torch.manual_seed(8)
    mixer = GatedLinearAttention(12, 3, gate=gate, conv_size=conv_size).double()
    x = torch.randn(2, 9, 12, dtype=F64)
    out, state = mixer(x, form="parallel")
    torch.testing.assert_close(mixer(x, form="chunked", chunk_size=4)[0], out)
    steps, step_state = [], None
    for t in range(9):
        step, step_state = mixer(x[:, t : t + 1], step_state, form="recurrent", history=x[:, :t] if t else None)
        steps.append(step)
    torch.testing.assert_close(torch.cat(steps, dim=1), out)
    torch.testing.assert_close(step_state, state)
    first, middle = mixer(x[:, :5])
    second, _ = mixer(x[:, 5:], middle, history=x[:, 5 - (conv_size - 1) : 5] if conv_size > 1 else None)
    torch.testing.assert_close(torch.cat([first, second], dim=1), out)


def test_the_short_convolution_mixes_each_channel_over_its_last_k_positions():
    """Channel c of the queries at position t is silu(sum_j w_cj p_c(t - K + 1 + j) + b_c), p the
    projection, zeros before the start; without the history the next token would not see the
    token before it."""
    torch.manual_seed(9)
    mixer = GatedLinearAttention(4, 1, gate="fixed", conv_size=3).double()
    x = torch.randn(1, 6, 4, dtype=F64)
    q, k, _ = mixer.project(x)  # (B, H, N, E)
    p = torch.nn.functional.pad(mixer.q_proj(x), (0, 0, 2, 0))  # (1, 2 + N, D): two zeros before
    w, b = mixer.conv.weight[:4, 0], mixer.conv.bias[:4]  # the queries' channels come first: (D, K), (D,)
    expected = torch.stack([torch.nn.functional.silu((p[0, t : t + 3].T * w).sum(-1) + b) for t in range(6)])
    torch.testing.assert_close(q[0, 0], expected)
    alone = mixer.project(x[:, 5:])[1]
    assert not torch.allclose(alone[0, 0, 0], k[0, 0, 5])
    torch.testing.assert_close(mixer.project(x[:, 5:], x[:, :5])[1][0, 0, 0], k[0, 0, 5])


def test_the_mixers_gates_are_the_papers():
    fixed = GatedLinearAttention(8, 4, gate="fixed")
    assert not list(p for name, p in fixed.named_parameters() if "gate" in name or "A_log" in name)
    torch.testing.assert_close(fixed.log_gate(torch.zeros(1, 2, 8))[0, :, 0], retnet_decay(4, log=True))
    torch.manual_seed(6)
    scalar = GatedLinearAttention(8, 4, gate="scalar")
    A, dt = scalar.A_log.exp(), torch.nn.functional.softplus(scalar.dt_bias)
    assert bool(((A >= 1) & (A <= 16)).all()) and bool(((dt >= 1e-3 - 1e-9) & (dt <= 0.1 + 1e-9)).all())
    torch.testing.assert_close(scalar.log_gate(torch.zeros(1, 2, 8))[0, :, 0], -A * dt)  # x = 0: the bias alone
    vector = GatedLinearAttention(8, 4, gate="vector")
    x = torch.randn(1, 2, 8)
    logits = vector.gate_proj(x).view(1, 2, 4, 2).transpose(1, 2)  # (B, H, N, E): a rank-16 projection
    assert vector.gate_proj[0].out_features == 16
    torch.testing.assert_close((16 * vector.log_gate(x)).exp(), torch.sigmoid(logits))  # a^16 = sigmoid(.)


def test_the_norm_makes_each_heads_output_unit_rms():
    torch.manual_seed(7)
    mixer = GatedLinearAttention(8, 2, gate="fixed", norm=True)
    mixer.out_proj.weight.data = torch.eye(8)
    out, _ = mixer(torch.randn(1, 5, 8))
    rms = out.view(1, 5, 2, 4).pow(2).mean(-1).sqrt()
    torch.testing.assert_close(rms, torch.ones(1, 5, 2), atol=1e-3, rtol=0)
    plain = GatedLinearAttention(8, 2, gate="fixed", norm=False)
    plain.load_state_dict(mixer.state_dict())
    assert not torch.allclose(plain(torch.randn(1, 5, 8))[0].view(1, 5, 2, 4).pow(2).mean(-1), torch.ones(1, 5, 2))


def test_bad_input_is_named():
    q, k, v = qkv(6, dtype=torch.float32)
    g = torch.zeros(B, H, 6)
    with pytest.raises(
        ValueError, match=r"^gated_linear_attention: log_gate must have shape \(\.\.\., N\) = \(2, 3, 6\)"
    ):
        gated_linear_attention(q, k, v, torch.zeros(B, H, 5))
    with pytest.raises(ValueError, match=r"or \(\.\.\., N, E\) = \(2, 3, 6, 4\).*got \(2, 3, 6, 3\)$"):
        gated_linear_attention(q, k, v, torch.zeros(B, H, 6, 3))
    with pytest.raises(ValueError, match=r"log_gate must have shape .* got \(6,\)$"):
        gated_linear_attention(q, k, v, torch.zeros(6))
    with pytest.raises(
        TypeError, match=r"^gated_linear_attention: log_gate must be a floating-point tensor, got torch.int64"
    ):
        gated_linear_attention(q, k, v, g.long())
    with pytest.raises(TypeError, match=r"log_gate must have the query's dtype torch\.float32, got torch\.float64$"):
        gated_linear_attention(q, k, v, g.double())
    with pytest.raises(ValueError, match=r"^gated_linear_attention: chunk_size must be an int >= 1, got 0$"):
        gated_linear_attention(q, k, v, g, form="chunked", chunk_size=0)
    with pytest.raises(TypeError, match=r"^gated_linear_attention: chunk_size must be an int, got float \(2.0\)$"):
        gated_linear_attention(q, k, v, g, chunk_size=2.0)
    with pytest.raises(
        ValueError,
        match=r"^gated_linear_attention: form must be one of \('parallel', 'recurrent', 'chunked'\), got 'chunk'$",
    ):
        gated_linear_attention(q, k, v, g, form="chunk")
    with pytest.raises(
        ValueError,
        match=r"^gated_linear_attention: state must have shape \(\.\.\., E, Ev\) = \(2, 3, 4, 5\), got \(2, 3, 5, 4\)$",
    ):
        gated_linear_attention(q, k, v, g, state=torch.zeros(B, H, EV, E))
    with pytest.raises(ValueError, match="needs as many queries as keys"):
        gated_linear_attention(q[..., :5, :], k, v, g)
    with pytest.raises(ValueError, match=r"^gated_linear_attention: expected query \(\.\.\., L, E\)"):
        gated_linear_attention(q, k[..., :3], v, g)
    with pytest.raises(ValueError, match=r"^gated_attention_weights: query and key must have one shape"):
        gated_attention_weights(q, k[..., :5, :], g)
    with pytest.raises(ValueError, match=r"^retnet_decay: num_heads must be an int >= 1, got 0$"):
        retnet_decay(0)
    with pytest.raises(
        ValueError, match=r"^GatedLinearAttention: gate must be one of \('scalar', 'vector', 'fixed'\), got 'gla'$"
    ):
        GatedLinearAttention(8, 2, gate="gla")
    with pytest.raises(
        ValueError, match=r"^GatedLinearAttention: embed_dim \(8\) must be divisible by num_heads \(3\)$"
    ):
        GatedLinearAttention(8, 3)
    with pytest.raises(ValueError, match=r"^GatedLinearAttention: x must have shape \(B, N, D\), got \(1, 5, 6\)$"):
        GatedLinearAttention(8, 2)(torch.zeros(1, 5, 6))
    with pytest.raises(ValueError, match=r"^GatedLinearAttention: conv_size must be an int >= 0, got -1$"):
        GatedLinearAttention(8, 2, conv_size=-1)
    with pytest.raises(ValueError, match=r"^GatedLinearAttention: history is for a short convolution, and this layer"):
        GatedLinearAttention(8, 2)(torch.zeros(1, 5, 8), history=torch.zeros(1, 2, 8))
    with pytest.raises(
        ValueError, match=r"^GatedLinearAttention: history must have shape \(B, M, D\), got \(2, 3, 8\)$"
    ):
        GatedLinearAttention(8, 2, conv_size=4)(torch.zeros(1, 5, 8), history=torch.zeros(2, 3, 8))
