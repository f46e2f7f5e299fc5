"""Decayed and gated linear attention: linear attention that forgets, in three forms that agree.

Introduced in the chapter "Beyond softmax". Causal linear attention without a feature map or a
normaliser keeps one ``(E, Ev)`` state, ``S_t = S_{t-1} + k_t v_t^T``, and reads it with
``o_t = S_t^T q_t``: every key it has seen stays in the state with the same weight. A gate
``a_t`` lets the state forget:

    S_t = a_t S_{t-1} + k_t v_t^T,        o_t = S_t^T q_t,

and, unrolled, ``o_t = sum_{s<=t} (prod_{r=s+1..t} a_r) (q_t . k_s) v_s``: key ``s`` counts less
the more gates have closed since. Three kinds of gate:

- a fixed number per head, RetNet's ``gamma_h = 1 - 2^(-5-h)`` (Sun et al. 2023,
  arXiv:2307.08621; ``retnet_decay``): the weight of key ``s`` for query ``t`` is
  ``gamma^(t-s)``;
- a number per head and step computed from the input, Mamba-2's ``a_t = exp(Delta_t A)`` with
  ``Delta_t = softplus(.) > 0`` and ``A < 0`` (Dao and Gu 2024, arXiv:2405.21060: its state-space
  model is this recurrence, with ``C`` for ``q``, ``B`` for ``k`` and ``Delta x`` for ``v``);
- a number per key feature and step, GLA's ``a_t`` in ``(0, 1)^E`` (Yang et al. 2024,
  arXiv:2312.06635): ``S_t = diag(a_t) S_{t-1} + k_t v_t^T``, each row of the state forgetting at
  its own rate.

Three forms compute the same outputs (``gated_linear_attention``'s ``form``):

- ``"parallel"``: the ``(N, N)`` matrix of decayed scores, masked below the diagonal, times the
  values, as softmax attention is computed: time ``O(N^2 (E + Ev))``, memory ``O(N^2)`` for a
  gate per head and ``O(N^2 E)`` for a gate per key feature.
- ``"recurrent"``: the recurrence, one step after another: time ``O(N E Ev)``, memory ``O(E Ev)``
  besides the inputs and outputs; what a decoder runs, one token at a time.
- ``"chunked"``: chunks of ``C`` positions, the parallel form inside each and the recurrence
  between them, carried by the state at each chunk's end: time ``O(N C (E + Ev) + N E Ev)``, and
  ``N / C`` sequential steps instead of ``N``. GLA's and Mamba-2's training algorithm (Mamba-2's
  "state-space duality": the parallel form and the recurrence are two ways to multiply by the
  same lower-triangular matrix, and chunks mix them).

All three start from a state (zeros when none is given) and return the state after the last
position, so that any form can continue where another stopped.

Why log space. The gates are given as ``log a_t <= 0`` (``log_gate``). The product
``prod_{r=s+1..t} a_r`` of many numbers in ``(0, 1)`` underflows to zero, and the usual way to
avoid building it for each pair, the ratio of cumulative products ``P_t / P_s``, then divides
zero by zero. In log space the product is a sum, ``sum_{r=s+1..t} log a_r``, which does not
underflow, and ``exp`` of it is at most 1. This module computes each such segment sum as a sum
of the gates in the segment (a cumulative sum of the masked ``(N, N)`` matrix of gates, Mamba-2's
``segsum`` in ``ssd_minimal.py``), not as the difference ``b_t - b_s`` of cumulative sums
``b_t = sum_{r<=t} log a_r``: that difference is exact in exact arithmetic and avoids the
underflow too, but ``b_t`` grows with the length, and in float32 the difference of two large
numbers keeps few correct digits. The chunked form only ever sums within a chunk.

No normaliser: linear attention's division by ``q_t . sum_s k_s`` (``attnlab.attention.linear``)
is dropped, as RetNet and GLA drop it, and a normalisation of each head's output follows instead
(``GatedLinearAttention``'s ``norm``). With every gate 1 (``log_gate = 0``) the output is the
numerator of causal ``linear_attention`` with the identity as feature map; its denominator is
the same computation with a value of ones.

Shapes: query ``(..., N, E)`` (``(B, H, N, E)`` in a model), key ``(..., N, E)``, value
``(..., N, Ev)``; ``log_gate`` ``(..., N)`` (one gate per head and step) or ``(..., N, E)`` (one
per key feature), broadcastable; state ``(..., E, Ev)``; output ``(..., N, Ev)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.validation import (
    check_bool,
    check_choice,
    check_dtype,
    check_int,
    check_ints,
    check_qkv_shapes,
    check_tensor,
)

__all__ = [
    "GATED_FORMS",
    "GATES",
    "GatedLinearAttention",
    "gated_attention_weights",
    "gated_linear_attention",
    "retnet_decay",
]

GATED_FORMS = ("parallel", "recurrent", "chunked")
GATES = ("scalar", "vector", "fixed")


def retnet_decay(
    num_heads: int, *, log: bool = False, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """RetNet's fixed decay of each head, ``gamma_h = 1 - 2^(-5-h)`` for ``h = 0 .. H-1``, shape ``(H,)``.

    Defined in the chapter "Beyond softmax" (Sun et al. 2023, arXiv:2307.08621, section 2.2;
    ``RetNetRelPos`` in microsoft/torchscale computes the same ``log(1 - 2^(-5-h))``). Head 0
    forgets fastest (``1/32`` of its state per step); each further head keeps its keys about
    twice as long. ``log=True`` returns ``log gamma_h``, the ``log_gate`` of
    ``gated_linear_attention``, computed as ``log1p(-2^(-5-h))`` in double precision and rounded
    once, not as the log of the rounded ``gamma_h``: from ``h = 20`` on, ``gamma_h`` rounds to 1
    in float32 and its log would be 0, a head that never forgets.
    """
    check_int("retnet_decay", "num_heads", num_heads)
    check_bool("retnet_decay", "log", log)
    check_dtype("retnet_decay", "dtype", dtype)
    # in Python's doubles, then rounded once to dtype (MPS has no float64)
    decay = [math.log1p(-(2.0 ** (-5 - h))) if log else 1 - 2.0 ** (-5 - h) for h in range(num_heads)]
    return torch.tensor(decay, dtype=dtype, device=device)


def _check_log_gate(where: str, query: torch.Tensor, log_gate: object) -> torch.Tensor:
    """``log_gate`` broadcast to ``(..., N, 1)`` (a gate per head and step) or ``(..., N, E)``."""
    lead, (N, E) = query.shape[:-2], query.shape[-2:]
    scalar, vector = (*lead, N), (*lead, N, E)
    wanted = f"(..., N) = {scalar} or (..., N, E) = {vector}, or broadcastable to one of them"
    gate = check_tensor(where, "log_gate", log_gate, kind="float")
    target = scalar if gate.dim() == query.dim() - 1 else vector
    try:
        fits = gate.dim() in (query.dim() - 1, query.dim()) and torch.broadcast_shapes(gate.shape, target) == target
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"{where}: log_gate must have shape {wanted}; got {tuple(gate.shape)}")
    if gate.dtype != query.dtype:
        raise TypeError(f"{where}: log_gate must have the query's dtype {query.dtype}, got {gate.dtype}")
    if target == scalar:
        return gate[..., None].expand(*scalar, 1)  # (..., N, 1): one gate for every key feature
    return gate.expand(*lead, N, gate.shape[-1])  # (..., N, E), or (..., N, 1) if given so


def _segment_sums(log_gate: torch.Tensor) -> torch.Tensor:
    """``(..., N, G) -> (..., N, N, G)``: ``sum_{r=s+1..t} log a_r`` at ``[t, s]`` for ``s <= t``, ``-inf`` above.

    Summed, never differenced (see the module's docstring): column ``s`` holds ``log a_r`` in the
    rows ``r > s`` and 0 elsewhere, and a cumulative sum down the rows adds up each segment.
    """
    N = log_gate.shape[-2]
    ones = torch.ones(N, N, dtype=torch.bool, device=log_gate.device)
    gates = log_gate[..., :, None, :].expand(*log_gate.shape[:-2], N, N, log_gate.shape[-1])  # [r, s] = log a_r
    sums = gates.masked_fill(~ones.tril(-1)[:, :, None], 0).cumsum(dim=-3)  # [t, s] = sum_{s<r<=t} log a_r
    return sums.masked_fill(~ones.tril()[:, :, None], -math.inf)  # exp(-inf) = 0: the future takes no part


def _decayed_scores(query: torch.Tensor, key: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
    """``(..., N, N)`` scores ``sum_e q_te k_se exp(segment_tse)``: the decay inside the dot product."""
    if segments.shape[-1] == 1:  # one gate for all features: it multiplies the whole score
        return (query @ key.transpose(-2, -1)) * segments[..., 0].exp()  # (..., N, N)
    # a gate per feature: the decay sits between q_t and k_s, feature by feature, (..., N, N, E) summed over E
    return (query[..., :, None, :] * key[..., None, :, :] * segments.exp()).sum(-1)


def _parallel(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, log_gate: torch.Tensor, state: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    # listing: parallel
    segments = _segment_sums(log_gate)  # (..., N, N, G): log prod_{r=s+1..t} a_r, -inf for s > t
    out = _decayed_scores(query, key, segments) @ value  # (..., N, N) @ (..., N, Ev) -> (..., N, Ev)
    from_start = log_gate.cumsum(dim=-2)  # (..., N, G): log prod_{r=1..t} a_r, what is left of the state
    out = out + (query * from_start.exp()) @ state  # (..., N, E) @ (..., E, Ev)
    to_end = segments[..., -1, :, :].exp()  # (..., N, G): prod_{r=s+1..N} a_r, what is left of k_s v_s^T
    state = from_start[..., -1, :, None].exp() * state + (key * to_end).transpose(-2, -1) @ value  # (..., E, Ev)
    # end listing: parallel
    return out, state


def _recurrent(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, log_gate: torch.Tensor, state: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    outputs = []
    # listing: recurrent
    for t in range(query.shape[-2]):
        a = log_gate[..., t, :, None].exp()  # (..., G, 1): a_t, one per row of the state (or one for all)
        state = a * state + key[..., t, :, None] * value[..., t, None, :]  # S_t = a_t S_{t-1} + k_t v_t^T
        outputs.append((query[..., t, None, :] @ state).squeeze(-2))  # o_t = S_t^T q_t, (..., Ev)
    # end listing: recurrent
    return torch.stack(outputs, dim=-2), state


def _chunked(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    log_gate: torch.Tensor,
    state: torch.Tensor,
    chunk_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    N = query.shape[-2]
    C = max(1, min(chunk_size, N))  # a chunk longer than the sequence would only pad it
    n = -(-N // C)  # chunks; the last one padded: a gate of 1 and a key and value of 0 leave the state as it is
    q, k, v, g = (F.pad(t, (0, 0, 0, n * C - N)).unflatten(-2, (n, C)) for t in (query, key, value, log_gate))
    # listing: chunked
    segments = _segment_sums(g)  # (..., n, C, C, G): within each chunk only
    inside = _decayed_scores(q, k, segments) @ v  # (..., n, C, Ev): the parallel form in every chunk at once
    from_start = g.cumsum(dim=-2)  # (..., n, C, G): log prod of the chunk's gates up to t
    to_end = segments[..., -1, :, :].exp()  # (..., n, C, G): prod_{r=s+1..chunk's end} a_r
    added = (k * to_end).transpose(-2, -1) @ v  # (..., n, E, Ev): what each chunk adds to the state
    kept = from_start[..., -1, :, None].exp()  # (..., n, G, 1): what each chunk leaves of the state before it
    before = []
    for j in range(n):  # the recurrence, one chunk per step: S_(end of j) = kept_j S_(end of j-1) + added_j
        before.append(state)
        state = kept[..., j, :, :] * state + added[..., j, :, :]
    carried = (q * from_start.exp()) @ torch.stack(before, dim=-3)  # (..., n, C, E) @ (..., n, E, Ev)
    out = (inside + carried).flatten(-3, -2)[..., :N, :]  # (..., n, C, Ev) -> (..., N, Ev)
    # end listing: chunked
    return out, state


def gated_linear_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    log_gate: torch.Tensor,
    *,
    form: str = "parallel",
    chunk_size: int = 64,
    state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal linear attention whose state decays by a gate: ``S_t = a_t S_{t-1} + k_t v_t^T``, ``o_t = S_t^T q_t``.

    Defined in the chapter "Beyond softmax"; the module's docstring has the gates, the forms and
    their costs. No feature map and no normaliser: ``o_t = sum_{s<=t} (prod_{r=s+1..t} a_r)
    (q_t . k_s) v_s``, plus ``(prod_{r=1..t} a_r)`` times what ``state`` gives ``q_t``.

    Args:
        query, key: ``(..., N, E)``, ``(B, H, N, E)`` in a model.
        value: ``(..., N, Ev)``.
        log_gate: ``log a_t``, at most 0 for a state that forgets (not checked: reading the
            values would need the host); ``(..., N)`` for one gate per head and step (RetNet,
            Mamba-2) or ``(..., N, E)`` for one per key feature (GLA), broadcastable, of the
            query's dtype.
        form: ``"parallel"``, ``"recurrent"`` or ``"chunked"``; equal outputs and states.
        chunk_size: ``C``, the chunked form's chunk (any size >= 1: the last chunk may be short;
            1 is the recurrence, ``>= N`` the parallel form).
        state: ``(..., E, Ev)``, the state before the first position (zeros when ``None``).

    Returns:
        ``(output (..., N, Ev), state (..., E, Ev) after the last position)``: pass the state to
        the next call to continue the sequence.
    """
    name = "gated_linear_attention"
    check_qkv_shapes(name, query, key, value)
    if query.shape[-2] != key.shape[-2]:
        raise ValueError(
            f"{name}: needs as many queries as keys (causal self-attention), got {query.shape[-2]} and {key.shape[-2]}"
        )
    gate = _check_log_gate(name, query, log_gate)
    check_choice(name, "form", form, GATED_FORMS)
    check_int(name, "chunk_size", chunk_size)
    lead, E, Ev = query.shape[:-2], query.shape[-1], value.shape[-1]
    if state is None:
        state = value.new_zeros(*lead, E, Ev)
    else:
        check_tensor(name, "state", state, kind="float", shape=(*lead, E, Ev), names=f"(..., E, Ev) = {(*lead, E, Ev)}")
    if query.shape[-2] == 0:  # no position: no output, and the state as it was
        return value.new_zeros(*lead, 0, Ev), state
    if form == "parallel":
        return _parallel(query, key, value, gate, state)
    if form == "recurrent":
        return _recurrent(query, key, value, gate, state)
    return _chunked(query, key, value, gate, state, chunk_size)


def gated_attention_weights(query: torch.Tensor, key: torch.Tensor, log_gate: torch.Tensor) -> torch.Tensor:
    """The ``(..., N, N)`` weights ``sum_e q_te k_se prod_{r=s+1..t} a_re`` of the parallel form (below the diagonal).

    Defined in the chapter "Beyond softmax", for plots and tests: ``weights @ value`` is
    ``gated_linear_attention``'s output from a zero state. They are not normalised and may be
    negative. With RetNet's fixed gate they are ``gamma^(t-s) (q_t . k_s)``.
    """
    name = "gated_attention_weights"
    check_tensor(name, "query", query, kind="float")
    check_tensor(name, "key", key, kind="float")
    if query.dim() < 2 or query.shape != key.shape:
        raise ValueError(
            f"{name}: query and key must have one shape (..., N, E); got {tuple(query.shape)} and {tuple(key.shape)}"
        )
    return _decayed_scores(query, key, _segment_sums(_check_log_gate(name, query, log_gate)))


class GatedLinearAttention(nn.Module):
    """A token mixer of gated linear attention: projections, a gate per head, the kernel, a norm.

    Defined in the chapter "Beyond softmax". Projects ``x`` to queries, keys and values of ``H``
    heads of size ``E = D / H`` (the queries scaled by ``1 / sqrt(E)``), computes each head's
    ``log_gate`` from ``x``, runs ``gated_linear_attention``, normalises each head's output and
    projects the heads back to ``D``. The gate (``gate``):

    - ``"fixed"``: RetNet's ``log gamma_h`` (``retnet_decay``), a buffer, not learned;
    - ``"scalar"``: Mamba-2's ``log a_t = -exp(A_log_h) softplus(x_t w_h + dt_bias_h)``, one per
      head and step; ``A_h = exp(A_log_h)`` starts uniform in ``[1, 16]`` and
      ``softplus(dt_bias_h)`` log-uniform in ``[0.001, 0.1]``, as in ``mamba_ssm``'s ``Mamba2``;
    - ``"vector"``: GLA's ``log a_t = logsigmoid(x_t W_1 W_2 + b) / 16``, one per head, step and
      key feature, through a rank-16 projection (Yang et al. 2024; the defaults of
      ``fla.layers.GatedLinearAttention``).

    ``norm``: divide each head's output by its root mean square (GLA's per-head RMSNorm without
    its weight, which ``out_proj`` can learn; RetNet's GroupNorm with one group per head is the
    same idea). Without it the output grows with the number of keys the state holds.

    ``conv_size``: ``K > 0`` puts Mamba-2's short convolution on the queries, keys and values
    (``mamba_ssm``'s ``Mamba2``, ``d_conv=4``; GLA and Zoology's models have one too): each
    channel becomes a learned mix of its last ``K`` positions, causal, then ``silu``. A key can
    then carry the token before it, so that one step of the state binds two neighbouring tokens.
    ``0`` (the default) leaves it out. Left out: the models' output gate (``swish(x W_g)``
    times the normalised output).

    ``forward(x (B, N, D), state=None, *, form="chunked", chunk_size=64, history=None)``
    returns ``(output (B, N, D), state (B, H, E, E))``, as ``nn.GRU`` returns its last hidden
    state: ``out, _ = mixer(x)`` where a tensor is wanted, and the state passed back in to
    decode one token at a time. With a convolution, ``history (B, M, D)`` holds the inputs of the
    ``M`` positions before ``x`` (none: ``x`` starts the sequence), of which the convolution
    reads the last ``K - 1``.
    """

    log_decay: torch.Tensor  # the "fixed" gate's buffer, (H,)

    def __init__(self, embed_dim: int, num_heads: int, *, gate: str = "scalar", norm: bool = True, conv_size: int = 0):
        super().__init__()
        name = "GatedLinearAttention"
        check_ints(name, embed_dim=embed_dim, num_heads=num_heads)
        check_choice(name, "gate", gate, GATES)
        check_bool(name, "norm", norm)
        check_int(name, "conv_size", conv_size, low=0)
        if embed_dim % num_heads:
            raise ValueError(f"{name}: embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        H = num_heads
        self.embed_dim, self.num_heads, self.head_dim, self.gate, self.norm = embed_dim, H, embed_dim // H, gate, norm
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.conv_size = conv_size
        # one filter of K taps and a bias per channel of q, k and v (groups: no mixing of channels)
        self.conv = nn.Conv1d(3 * embed_dim, 3 * embed_dim, conv_size, groups=3 * embed_dim) if conv_size else None
        self.gate_proj: nn.Module | None = None
        if gate == "fixed":
            self.register_buffer("log_decay", retnet_decay(H, log=True))  # (H,)
        elif gate == "scalar":
            self.gate_proj = nn.Linear(embed_dim, H, bias=False)  # x_t w_h
            dt = torch.exp(torch.empty(H).uniform_(math.log(1e-3), math.log(1e-1)))  # softplus(dt_bias) at the start
            self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus's inverse
            self.A_log = nn.Parameter(torch.empty(H).uniform_(1, 16).log())
        else:
            self.gate_proj = nn.Sequential(nn.Linear(embed_dim, 16, bias=False), nn.Linear(16, embed_dim))

    def log_gate(self, x: torch.Tensor) -> torch.Tensor:
        """``x (B, N, D)`` -> ``log a`` of shape ``(B, H, N)`` (``"fixed"``, ``"scalar"``) or ``(B, H, N, E)``."""
        B, N, _ = x.shape
        if self.gate == "fixed":
            return self.log_decay.to(x.dtype)[None, :, None].expand(B, self.num_heads, N)  # (B, H, N)
        assert self.gate_proj is not None
        if self.gate == "scalar":
            delta = F.softplus(self.gate_proj(x) + self.dt_bias)  # (B, N, H): Delta_t > 0
            return (-self.A_log.exp() * delta).transpose(1, 2)  # (B, N, H) -> (B, H, N): Delta_t A, A < 0
        gates = F.logsigmoid(self.gate_proj(x)) / 16  # (B, N, D): log of sigmoid^(1/16), in (-inf, 0)
        return gates.view(B, N, self.num_heads, self.head_dim).transpose(1, 2)  # (B, N, H, E) -> (B, H, N, E)

    def project(self, x: torch.Tensor, history: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """Queries, keys and values ``(B, H, N, E)`` of ``x (B, N, D)``, through the short
        convolution when there is one (reading ``history (B, M, D)``, the inputs before ``x``)."""
        B, N, D = x.shape
        if self.conv is None:
            q, k, v = (proj(x) for proj in (self.q_proj, self.k_proj, self.v_proj))
        else:
            K = self.conv_size
            past = x[:, :0] if history is None or K == 1 else history[:, 1 - K :]  # the last K - 1 at most
            xs = torch.cat([past, x], dim=1)  # (B, M + N, D)
            qkv = torch.cat([proj(xs) for proj in (self.q_proj, self.k_proj, self.v_proj)], dim=-1)  # (B, M + N, 3D)
            qkv = F.pad(qkv.transpose(1, 2), (K - 1 - past.shape[1], 0))  # (B, 3D, K - 1 + N): zeros before
            q, k, v = F.silu(self.conv(qkv)).transpose(1, 2).split(D, dim=-1)  # (B, N, D) each
        return tuple(t.view(B, N, self.num_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))

    def forward(
        self,
        x: torch.Tensor,
        state: torch.Tensor | None = None,
        *,
        form: str = "chunked",
        chunk_size: int = 64,
        history: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        name = "GatedLinearAttention"
        check_tensor(name, "x", x, kind="float", shape=(None, None, self.embed_dim), names="(B, N, D)")
        B, N, _ = x.shape
        H, E = self.num_heads, self.head_dim
        if history is not None:
            if self.conv is None:
                raise ValueError(f"{name}: history is for a short convolution, and this layer has none (conv_size=0)")
            check_tensor(name, "history", history, kind="float", shape=(B, None, self.embed_dim), names="(B, M, D)")
        q, k, v = self.project(x, history)
        out, state = gated_linear_attention(
            q / math.sqrt(E), k, v, self.log_gate(x), form=form, chunk_size=chunk_size, state=state
        )  # (B, H, N, E), (B, H, E, E)
        if self.norm:
            out = F.rms_norm(out, (E,))
        return self.out_proj(out.transpose(1, 2).reshape(B, N, H * E)), state  # (B, H, N, E) -> (B, N, H E)
