"""Linear attention: a kernel feature map in place of the softmax (Katharopoulos et al. 2020).

Introduced in chapter 8. Softmax attention weighs value ``j`` for query ``i`` by
``exp(q_i . k_j)``; linear attention by ``phi(q_i) . phi(k_j)`` with a feature map ``phi`` whose
values are positive (``elu(x) + 1``, the paper's choice). The product can then be regrouped:

    out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / phi(q_i)^T (sum_j phi(k_j))

so the ``(N, N)`` matrix of weights is never formed: time and memory ``O(n E Ev)``, linear in the
length ``n``. With a causal mask the sums run over ``j <= i``, and the same computation is a recurrent
network whose state is the ``(E, Ev)`` matrix ``S_i = S_{i-1} + phi(k_i) v_i^T`` and the ``(E,)``
vector ``z_i = z_{i-1} + phi(k_i)`` ("transformers are RNNs", the paper's title): a constant amount of memory per
generated token, where softmax attention's KV cache grows.

- ``linear_attention``: the parallel form (all positions at once; causal with prefix sums).
- ``linear_attention_recurrent``: the recurrent form, one position at a time, from a state.
- ``linear_attention_weights``: the ``(N, N)`` weights the two forms never build, for plots and tests.

Shapes: query ``(..., N, E)``, key ``(..., N, E)``, value ``(..., N, Ev)``; output ``(..., N, Ev)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from attnlab.validation import check_number, check_qkv_shapes, check_tensor

__all__ = ["elu_feature_map", "linear_attention", "linear_attention_recurrent", "linear_attention_weights"]

FeatureMap = Callable[[torch.Tensor], torch.Tensor]


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """``elu(x) + 1``: positive and smooth, the feature map of Katharopoulos et al. (2020)."""
    return F.elu(x) + 1


def _check(name: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, eps: float) -> None:
    check_qkv_shapes(name, query, key, value)
    check_number(name, "eps", eps, low=0)


def linear_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    causal: bool = False,
    feature_map: FeatureMap = elu_feature_map,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Linear attention in its parallel form (defined in chapter 8).

    Without ``causal``: ``phi(Q) (phi(K)^T V)`` divided row by row by ``phi(Q) phi(K)^T 1``, in
    ``O((L + S) E Ev)``; the queries and keys may differ in length. With ``causal`` (self-attention,
    ``L = S = n``): the same sums over ``j <= i``, as prefix sums of ``phi(k_j) v_j^T`` (memory
    ``O(n E Ev)``, still no ``(N, N)`` matrix). ``eps`` keeps the division away from zero.
    """
    _check("linear_attention", query, key, value, eps)
    if causal and query.shape[-2] != key.shape[-2]:
        raise ValueError(
            f"linear_attention: causal needs as many queries as keys, got {query.shape[-2]} and {key.shape[-2]}"
        )
    # listing: parallel
    q, k = feature_map(query), feature_map(key)  # (..., L, E), (..., S, E): positive features
    if not causal:
        kv = k.transpose(-2, -1) @ value  # (..., E, S) @ (..., S, Ev) -> (..., E, Ev): sum_j phi(k_j) v_j^T
        z = k.sum(dim=-2)  # (..., E): sum_j phi(k_j)
        return (q @ kv) / ((q * z[..., None, :]).sum(-1, keepdim=True) + eps)  # (..., L, Ev)
    kv = torch.cumsum(k[..., :, None] * value[..., None, :], dim=-3)  # (..., N, E, Ev): S_i = sum_{j<=i}
    z = torch.cumsum(k, dim=-2)  # (..., N, E): z_i = sum_{j<=i} phi(k_j)
    numerator = (q[..., None, :] @ kv).squeeze(-2)  # (..., N, 1, E) @ (..., N, E, Ev) -> (..., N, Ev)
    return numerator / ((q * z).sum(-1, keepdim=True) + eps)
    # end listing: parallel


def linear_attention_recurrent(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    state: tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    feature_map: FeatureMap = elu_feature_map,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Causal linear attention as a recurrent network, one position after another (chapter 8).

    ``state`` is ``(S (..., E, Ev), z (..., E))`` after the positions before these (zeros when
    ``None``). Returns ``(output (..., N, Ev), state after the last position)``: a generator
    calls it with ``N = 1`` per token and carries the state, whose size never changes.
    """
    _check("linear_attention_recurrent", query, key, value, eps)
    if query.shape[-2] != key.shape[-2]:
        raise ValueError(
            "linear_attention_recurrent: needs as many queries as keys (self-attention), got "
            f"{query.shape[-2]} and {key.shape[-2]}"
        )
    lead, E, Ev = key.shape[:-2], key.shape[-1], value.shape[-1]
    if state is None:
        s = value.new_zeros(*lead, E, Ev)
        z = value.new_zeros(*lead, E)
    else:
        if not isinstance(state, tuple) or len(state) != 2:
            raise TypeError(f"linear_attention_recurrent: state must be a tuple (S, z), got {type(state).__name__}")
        s, z = state
        check_tensor("linear_attention_recurrent", "state's S", s, kind="float", shape=(*lead, E, Ev))
        check_tensor("linear_attention_recurrent", "state's z", z, kind="float", shape=(*lead, E))
    q, k = feature_map(query), feature_map(key)  # (..., N, E)
    outputs = []
    # listing: recurrent
    for i in range(q.shape[-2]):
        s = s + k[..., i, :, None] * value[..., i, None, :]  # (..., E, Ev): S_i = S_{i-1} + phi(k_i) v_i^T
        z = z + k[..., i, :]  # (..., E): z_i = z_{i-1} + phi(k_i)
        q_i = q[..., i, None, :]  # (..., 1, E)
        outputs.append((q_i @ s).squeeze(-2) / ((q_i.squeeze(-2) * z).sum(-1, keepdim=True) + eps))  # (..., Ev)
    # end listing: recurrent
    return torch.stack(outputs, dim=-2), (s, z)


def linear_attention_weights(
    query: torch.Tensor,
    key: torch.Tensor,
    *,
    causal: bool = False,
    feature_map: FeatureMap = elu_feature_map,
    eps: float = 1e-6,
) -> torch.Tensor:
    """The ``(..., L, S)`` weights ``phi(q_i) . phi(k_j) / sum_j' phi(q_i) . phi(k_j')`` (chapter 8).

    What the parallel and recurrent forms compute without building it: ``weights @ value`` equals
    their output. Quadratic in the length; for plots and tests.
    """
    check_tensor("linear_attention_weights", "query", query, kind="float")
    check_tensor("linear_attention_weights", "key", key, kind="float")
    if query.dim() < 2 or query.shape[-1] != key.shape[-1] or query.shape[:-2] != key.shape[:-2]:
        raise ValueError(
            f"linear_attention_weights: expected query (..., L, E) and key (..., S, E); got {tuple(query.shape)} "
            f"and {tuple(key.shape)}"
        )
    check_number("linear_attention_weights", "eps", eps, low=0)
    similarity = feature_map(query) @ feature_map(key).transpose(-2, -1)  # (..., L, S), positive
    if causal:
        similarity = similarity.tril()
    return similarity / (similarity.sum(-1, keepdim=True) + eps)
