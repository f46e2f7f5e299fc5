"""Attention restricted to a window: banded self-attention (chapter 5) and Luong's local attention.

Banded self-attention: introduced in chapter 5, measured in chapter 7. Vaswani et al. list "self-attention (restricted)"
with window ``r``: per-layer cost O(r n d) instead of O(n^2 d). The point of the implementation is
that cost: it cuts the queries into chunks and lets each chunk attend, with one matrix product,
to the keys its windows can reach (gathered with ``unfold``); it never builds the ``n x n``
score matrix. ``band_mask`` gives the equivalent full mask, so that the
banded computation can be checked against full attention.

Shapes: query ``(..., N, E)``, key ``(..., N, E)``, value ``(..., N, Ev)`` (self-attention:
queries and keys have the same length ``N``); banded weights ``(..., N, 2r + 1)``, where column
``r + o`` holds the weight of key ``i + o`` for query ``i``.

Sliding-window attention (chapter 8) is the causal band under the name today's decoders use
(Jiang et al. 2023; Longformer, Beltagy et al. 2020, puts a window on each side of a token): a
decoder's token ``i`` attends to the positions ``i - w, ..., i``. While generating, it needs only
the keys and values of the last ``w + 1`` positions: ``RollingKVCache`` keeps them in a buffer of
fixed size, overwritten in turn. Through ``N`` such layers information still travels ``N * w``
positions (``receptive_field``).

Attention sinks (chapter 9): a model trained with full attention and served with a window
loses the first tokens, on which its heads park the weight they do not need (Xiao et al.
2024, "StreamingLLM"); ``SinkKVCache`` keeps the first ``sinks`` positions besides the window, and
``sliding_window_mask`` is the same rule as a mask, for a whole sequence at once.

Local attention (chapter 4): a decoder's query ``t`` attends to the ``2w + 1`` source positions
around a centre ``p_t``, fixed (local-m, ``p_t = t``) or predicted (local-p, with a Gaussian
factor); the window is gathered, so the cost does not grow with the source length.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from attnlab.attention.cache import tensor_bytes
from attnlab.attention.masking import masked_softmax
from attnlab.validation import check_int, check_tensor

__all__ = [
    "RollingKVCache",
    "SinkKVCache",
    "band_mask",
    "band_to_dense",
    "banded_attention",
    "local_attention",
    "receptive_field",
    "sliding_window_mask",
    "window_to_dense",
]


def band_mask(n: int, window: int, *, causal: bool = False, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean ``(n, n)`` mask, True where ``|i - j| <= window`` (and ``j <= i`` if ``causal``)."""
    check_int("band_mask", "n", n)
    check_int("band_mask", "window", window, low=0)
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    mask = (i - j).abs() <= window
    return mask & (j <= i) if causal else mask


def banded_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    window: int,
    *,
    causal: bool = False,
    scale: float | None = None,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product self-attention restricted to a window of ``window`` positions each side.

    Defined in chapter 5. Equal to full attention with ``band_mask(n, window, causal=causal)``, in
    ``O(n (c + 2r) E)`` time and memory instead of ``O(n^2)``, for ``n`` positions: the queries are cut into chunks
    of ``c = chunk_size`` positions (``max(2 * window, 32)`` by default), and each chunk attends,
    with one matrix product, to the ``c + 2r`` keys its windows can reach. The scores outside a
    query's own window are masked, and its ``2r + 1`` band weights are gathered from the chunk.

    Returns:
        ``(output, banded_weights)``: ``(..., N, Ev)`` and ``(..., N, 2 * window + 1)``, where
        column ``r + o`` holds the weight of key ``i + o`` for query ``i``.

    Raises:
        TypeError: a tensor is not floating, or the window or chunk size is not an int.
        ValueError: the shapes do not match, or the window or chunk size is out of range.
    """
    check_int("banded_attention", "window", window, low=0)
    check_int("banded_attention", "chunk_size", chunk_size, none=True)
    for arg, t in (("query", query), ("key", key), ("value", value)):
        check_tensor("banded_attention", arg, t, kind="float")
        if t.dim() < 2:
            raise ValueError(f"banded_attention: {arg} must have shape (..., N, features), got {tuple(t.shape)}")
    if query.shape[:-1] != key.shape[:-1] or key.shape[:-1] != value.shape[:-1] or query.shape[-1] != key.shape[-1]:
        raise ValueError(
            "banded_attention: self-attention needs query (..., N, E), key (..., N, E), value (..., N, Ev); got "
            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )
    # listing: windows
    n, r = query.shape[-2], window
    c = chunk_size or max(2 * r, 32)
    m = -(-n // c)  # number of chunks
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    # Queries: pad to m * c positions and cut into chunks.
    q = F.pad(query, (0, 0, 0, m * c - n)).unflatten(-2, (m, c))  # (..., N, E) -> (..., m, c, E)
    # Keys and values: r positions of padding in front, enough behind, then one window of c + 2r per chunk.
    k_pad = F.pad(key, (0, 0, r, m * c - n + r))  # (..., m c + 2r, E)
    v_pad = F.pad(value, (0, 0, r, m * c - n + r))  # (..., m c + 2r, Ev)
    k_win = k_pad.unfold(-2, c + 2 * r, c).transpose(-1, -2)  # (..., m, E, c+2r) -> (..., m, c+2r, E)
    v_win = v_pad.unfold(-2, c + 2 * r, c).transpose(-1, -2)  # (..., m, c+2r, Ev)
    scores = q @ k_win.transpose(-1, -2) * scale  # (..., m, c, E) @ (..., m, E, c+2r) -> (..., m, c, c+2r)
    # Query a of chunk i is position i c + a; column b of its chunk is key i c - r + b, at offset b - a - r.
    a = torch.arange(c, device=query.device)[:, None]
    b = torch.arange(c + 2 * r, device=query.device)[None, :]
    offset = b - a - r  # (c, c+2r)
    key_pos = torch.arange(m, device=query.device)[:, None, None] * c - r + b  # (m, 1, c+2r)
    valid = (offset.abs() <= r) & (key_pos >= 0) & (key_pos < n)  # (m, c, c+2r)
    if causal:
        valid = valid & (offset <= 0)
    weights = masked_softmax(scores, valid)  # (..., m, c, c+2r)
    out = (weights @ v_win).flatten(-3, -2)[..., :n, :]  # (..., m, c, Ev) -> (..., N, Ev)
    # end listing: windows
    band = a + torch.arange(2 * r + 1, device=query.device)[None, :]  # (c, 2r+1): columns of the window
    banded = weights.gather(-1, band.expand(*weights.shape[:-1], 2 * r + 1))  # (..., m, c, 2r+1)
    return out, banded.flatten(-3, -2)[..., :n, :]  # (..., N, 2r+1)


def band_to_dense(weights: torch.Tensor, window: int) -> torch.Tensor:
    """Banded weights ``(..., N, 2r + 1)`` as the full ``(..., N, N)`` matrix (zeros off the band)."""
    check_int("band_to_dense", "window", window, low=0)
    check_tensor("band_to_dense", "weights", weights)
    if weights.dim() < 2 or weights.shape[-1] != 2 * window + 1:
        raise ValueError(
            f"band_to_dense: weights must have shape (..., N, {2 * window + 1}), got {tuple(weights.shape)}"
        )
    n = weights.shape[-2]
    dense = weights.new_zeros(*weights.shape[:-1], n + 2 * window)  # (..., N, N + 2r)
    rows = torch.arange(n, device=weights.device)[:, None]
    cols = rows + torch.arange(2 * window + 1, device=weights.device)[None, :]  # (N, 2r+1) padded index
    dense[..., rows, cols] = weights
    return dense[..., window : window + n]  # drop the padding columns: (..., N, N)


# --- sliding windows while generating (chapter 8) ---------------------------------------------------


def receptive_field(num_layers: int, window: int) -> int:
    """How far back ``num_layers`` causal windows of ``window`` positions reach: ``num_layers * window``.

    Defined in chapter 8. Position ``i`` of layer 1 sees inputs ``i - w, ..., i``; each layer
    above adds ``w`` more (Jiang et al. 2023: after k layers, "up to W x k tokens"). The chapter
    checks it against the gradient: the output at ``i`` depends on input ``j`` exactly when
    ``0 <= i - j <= num_layers * window``.
    """
    check_int("receptive_field", "num_layers", num_layers)
    check_int("receptive_field", "window", window, low=0)
    return num_layers * window


class RollingKVCache:
    """The keys and values of the last ``window + 1`` positions, in a buffer of fixed size (chapter 8).

    The rolling buffer of Jiang et al. (2023), who store position ``i`` in slot ``i mod W``; here
    the ``window`` keys before a token and the token's own are kept, so the token at position ``p``
    is written into slot ``p mod (window + 1)``, over the token ``window + 1`` positions before it,
    which no later query may see. The order of the slots does not matter to attention (positions are
    already in the keys, by ``rotary_embedding``, or in the model's bias), so ``append`` returns the
    filled slots as they lie. Memory: ``nbytes``, the same after ``window + 1`` tokens as after a
    million. (Each step makes the buffer anew, out of place, so that gradients can flow through it
    too.)

    Shapes: ``append(key (B, H, 1, E), value (B, H, 1, Ev))`` -> keys ``(B, H, n, E)`` and values
    ``(B, H, n, Ev)``, ``n = min(tokens so far, window + 1)``.

    A ``KeyValueCache`` (``attnlab.attention.cache``): ``cached_keys`` and ``cached_values`` are the
    filled slots that ``append`` returns, ``cached_length`` is ``n`` (``length`` counts every token
    appended), and ``nbytes`` counts the whole buffer, empty slots too. ``keys`` and ``values`` are
    the buffers themselves, ``window + 1`` slots each.
    """

    def __init__(self, window: int):
        self.window = check_int("RollingKVCache", "window", window, low=0)
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.length = 0  # tokens appended so far

    def append(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        check_tensor(
            "RollingKVCache",
            "key",
            key,
            kind="float",
            shape=(None, None, 1, None),
            names="(B, H, 1, E)",
            note="one new position",
        )
        check_tensor(
            "RollingKVCache",
            "value",
            value,
            kind="float",
            shape=(*key.shape[:2], 1, None),
            names=f"({key.shape[0]}, {key.shape[1]}, 1, Ev)",
            note="one new position",
        )
        if self.keys is None or self.values is None:
            size = self.window + 1
            self.keys = key.new_zeros(*key.shape[:2], size, key.shape[-1])  # (B, H, w + 1, E)
            self.values = value.new_zeros(*value.shape[:2], size, value.shape[-1])  # (B, H, w + 1, Ev)
        elif key.shape[:2] != self.keys.shape[:2] or key.shape[-1] != self.keys.shape[-1]:
            raise ValueError(
                f"RollingKVCache: key must have shape {(*self.keys.shape[:2], 1, self.keys.shape[-1])} like the "
                f"cached ones, got {tuple(key.shape)}"
            )
        # listing: rolling
        slot = self.length % (self.window + 1)  # overwrite the position that fell out of the window
        self.keys = torch.cat([self.keys[:, :, :slot], key, self.keys[:, :, slot + 1 :]], dim=2)  # (B, H, w + 1, E)
        self.values = torch.cat([self.values[:, :, :slot], value, self.values[:, :, slot + 1 :]], dim=2)
        self.length += 1
        n = min(self.length, self.window + 1)
        return self.keys[:, :, :n], self.values[:, :, :n]
        # end listing: rolling

    @property
    def nbytes(self) -> int:
        """Bytes the buffer holds (0 before the first ``append``)."""
        return tensor_bytes(self.keys, self.values)

    @property
    def cached_length(self) -> int:
        """The positions whose keys and values are held: ``min(length, window + 1)``."""
        return min(self.length, self.window + 1)

    @property
    def cached_keys(self) -> torch.Tensor | None:
        """The filled slots of the keys' buffer, ``(B, H, cached_length, E)``."""
        return None if self.keys is None else self.keys[:, :, : self.cached_length]

    @property
    def cached_values(self) -> torch.Tensor | None:
        """The filled slots of the values' buffer, ``(B, H, cached_length, Ev)``."""
        return None if self.values is None else self.values[:, :, : self.cached_length]


def sliding_window_mask(
    query_positions: torch.Tensor, key_positions: torch.Tensor, window: int | None, *, sinks: int = 0
) -> torch.Tensor:
    """Which keys each query of a decoder sees: ``(N, S)`` bool, True where key ``k`` takes part.

    Defined in chapter 9. Query position ``q`` sees key position ``k`` when ``k <= q`` (causal) and
    either ``q - k <= window`` (the sliding window; ``None``: every earlier position) or
    ``k < sinks`` (the first ``sinks`` positions, kept as attention sinks, Xiao et al. 2024).
    ``query_positions (N,)`` and ``key_positions (S,)`` are integer positions, in any order: a
    cache that evicts keeps its keys' positions (``SinkKVCache.key_positions``). With
    ``window=None`` and ``sinks=0`` this is the causal mask; with ``sinks=0``, the causal band of
    ``band_mask``.
    """
    check_tensor("sliding_window_mask", "query_positions", query_positions, kind="long", dim=1, names="(N,)")
    check_tensor("sliding_window_mask", "key_positions", key_positions, kind="long", dim=1, names="(S,)")
    check_int("sliding_window_mask", "window", window, low=0, none=True)
    check_int("sliding_window_mask", "sinks", sinks, low=0)
    # listing: sink-mask
    q, k = query_positions[:, None], key_positions[None, :]  # (N, 1), (1, S)
    seen = k <= q  # causal
    if window is not None:
        seen = seen & ((q - k <= window) | (k < sinks))  # the window, and the sinks
    return seen  # (N, S)
    # end listing: sink-mask


class SinkKVCache:
    """The keys and values of the first ``sinks`` positions and of the last ``window`` (chapter 9).

    StreamingLLM's cache (Xiao et al. 2024): a model served with a sliding window keeps, besides
    the window, the keys and values of the first few tokens, the "attention sinks" on which its
    heads put the weight they need to put somewhere. ``sinks=0`` is a plain sliding window. Each
    ``append`` returns every key the new queries may need (the held ones and the new ones), then
    evicts those no later query can see: what remains is at most ``sinks + window`` positions, the
    same after a million tokens as after a hundred. Keys keep the positions they were given
    (rotary keys are rotated before they are cached); ``key_positions`` are those of the keys the
    last ``append`` returned, from which ``sliding_window_mask`` makes the new queries' mask.

    Shapes: ``append(key (B, G, n, E), value (B, G, n, Ev))`` -> ``(B, G, h + n, E)`` and
    ``(B, G, h + n, Ev)``, ``h`` the positions held before; ``key_positions (h + n,)``. A
    ``KeyValueCache``: ``cached_keys``, ``cached_values`` and ``cached_length`` describe what is
    held after eviction, and ``nbytes`` counts it.
    """

    def __init__(self, window: int, sinks: int = 0):
        self.window = check_int("SinkKVCache", "window", window)
        self.sinks = check_int("SinkKVCache", "sinks", sinks, low=0)
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.held: list[int] = []  # positions of the held keys, in order
        self.key_positions: torch.Tensor | None = None
        self.length = 0  # positions appended so far

    def append(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        check_tensor("SinkKVCache", "key", key, kind="float", dim=4, names="(B, G, n, E)")
        B, G, n, _ = key.shape
        check_tensor("SinkKVCache", "value", value, kind="float", shape=(B, G, n, None), names=f"({B}, {G}, {n}, Ev)")
        keys, values = key, value
        if self.keys is not None and self.values is not None:
            if key.shape[:2] != self.keys.shape[:2] or key.shape[-1] != self.keys.shape[-1]:
                raise ValueError(
                    f"SinkKVCache: key must have the batch, heads and size of the cached ones, "
                    f"{tuple(self.keys.shape)}; got {tuple(key.shape)}"
                )
            keys = torch.cat([self.keys, key], dim=2)  # (B, G, h + n, E)
            values = torch.cat([self.values, value], dim=2)  # (B, G, h + n, Ev)
        positions = self.held + list(range(self.length, self.length + n))  # of keys' columns, in order
        self.length += n
        self.key_positions = torch.tensor(positions, dtype=torch.long, device=key.device)  # (h + n,)
        # listing: sink-cache
        # Evict what no later query (at self.length or after) can see: keep the sinks and the window.
        sinks = sum(p < self.sinks for p in positions)  # the first columns
        recent = sum(p >= max(self.sinks, self.length - self.window) for p in positions)  # the last ones
        self.held = positions[:sinks] + positions[len(positions) - recent :]
        self.keys = torch.cat([keys[:, :, :sinks], keys[:, :, keys.shape[2] - recent :]], dim=2)
        self.values = torch.cat([values[:, :, :sinks], values[:, :, values.shape[2] - recent :]], dim=2)
        # end listing: sink-cache
        return keys, values

    @property
    def nbytes(self) -> int:
        """Bytes of the held keys and values (0 before the first ``append``)."""
        return tensor_bytes(self.keys, self.values)

    @property
    def cached_length(self) -> int:
        """The positions held: at most ``sinks + window``."""
        return len(self.held)

    @property
    def cached_keys(self) -> torch.Tensor | None:
        """The held keys, ``(B, G, cached_length, E)``."""
        return self.keys

    @property
    def cached_values(self) -> torch.Tensor | None:
        """The held values, ``(B, G, cached_length, Ev)``."""
        return self.values


# --- Luong et al. (2015): local attention in a sequence-to-sequence decoder (chapter 4) -----------


def local_attention(
    score: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    centres: torch.Tensor,
    window: int,
    *,
    lengths: torch.Tensor | None = None,
    gaussian: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Local attention of Luong et al. (2015): each query attends to ``2w + 1`` source positions.

    Defined in chapter 4. Query ``t`` looks only at the window :math:`[p_t - w, p_t + w]` around
    its centre :math:`p_t` (``centres``): the window's keys and values are *gathered*, so time and
    memory grow with ``w``, not with the source length. (Luong et al. write ``D`` for the
    half-width; this book keeps ``D`` for the size of a state.) The scores come from any score module of
    chapter 3 (``score(query (B', 1, Dq), keys (B', W, Dk)) -> (B', 1, W)``), the softmax runs over
    the window's real positions, and with ``gaussian=True`` (local-p) each weight is multiplied by
    :math:`\exp(-(s - p_t)^2 / (2\sigma^2))`, :math:`\sigma = w / 2`, which lets the gradient reach
    a predicted real-valued :math:`p_t`. Local-m is ``centres = t`` with ``gaussian=False``.

    Args:
        score: a score module (``attnlab.attention.make_score``) or any function with its interface.
        query: ``(B, L, Dq)``; keys: ``(B, S, Dk)``; values: ``(B, S, Dv)``.
        centres: ``(B, L)`` real positions :math:`p_t`; the window is centred on ``round(p_t)``.
        window: the half-width ``w >= 1``; the window holds ``W = 2w + 1`` positions.
        lengths: ``(B,)`` real source lengths (positions at or past them are padding), or ``None``.
        gaussian: multiply by the Gaussian factor (local-p) or not (local-m).

    Returns:
        ``(context (B, L, Dv), weights (B, L, W), positions (B, L, W))``: ``positions[b, t, j]`` is
        the source position of window slot ``j``; slots outside ``[0, lengths[b])`` have weight 0
        (``window_to_dense`` spreads the weights over all ``S`` positions, for plots).
    """
    name = "local_attention"
    check_int(name, "window", window)  # w, half the window
    for arg, t, dims in (("query", query, 3), ("keys", keys, 3), ("values", values, 3), ("centres", centres, 2)):
        check_tensor(name, arg, t, kind="float", dim=dims)
    B, L, S = query.shape[0], query.shape[1], keys.shape[1]
    if keys.shape[0] != B or values.shape[:2] != keys.shape[:2] or centres.shape != (B, L):
        raise ValueError(
            f"{name}: expected query (B, L, Dq), keys (B, S, Dk), values (B, S, Dv), centres (B, L); got "
            f"{tuple(query.shape)}, {tuple(keys.shape)}, {tuple(values.shape)}, {tuple(centres.shape)}"
        )
    if lengths is None:
        lengths = torch.full((B,), S, device=keys.device)
    else:
        check_tensor(name, "lengths", lengths, shape=(B,))
    # listing: window
    W = 2 * window + 1
    offsets = torch.arange(-window, window + 1, device=keys.device)  # (W,)
    positions = centres.detach().round().long()[..., None] + offsets  # (B, L, W)
    valid = (positions >= 0) & (positions < lengths[:, None, None])  # (B, L, W)
    index = positions.clamp(0, S - 1).reshape(B, L * W)  # (B, L W)
    k_win = keys.gather(1, index[..., None].expand(-1, -1, keys.shape[-1]))  # (B, L W, Dk)
    v_win = values.gather(1, index[..., None].expand(-1, -1, values.shape[-1]))  # (B, L W, Dv)
    scores = score(query.reshape(B * L, 1, -1), k_win.reshape(B * L, W, -1))  # (B L, 1, W)
    weights = masked_softmax(scores.reshape(B, L, W), valid)  # (B, L, W)
    if gaussian:
        sigma = window / 2
        distance = positions.to(centres.dtype) - centres[..., None]  # (B, L, W), differentiable in p_t
        weights = weights * torch.exp(-(distance**2) / (2 * sigma**2))
    context = (weights[..., None] * v_win.reshape(B, L, W, -1)).sum(dim=2)  # (B, L, W, Dv) -> (B, L, Dv)
    # end listing: window
    return context, weights, positions


def window_to_dense(weights: torch.Tensor, positions: torch.Tensor, source_length: int) -> torch.Tensor:
    """Window weights ``(B, L, W)`` at ``positions`` as ``(B, L, S)`` (zeros outside the window)."""
    check_tensor("window_to_dense", "weights", weights)
    check_tensor(
        "window_to_dense",
        "positions",
        positions,
        kind="integer",
        shape=tuple(weights.shape),
        names=f"{tuple(weights.shape)} (that of weights)",
    )
    check_int("window_to_dense", "source_length", source_length)
    inside = (positions >= 0) & (positions < source_length)
    dense = weights.new_zeros(*weights.shape[:-1], source_length)
    return dense.scatter_add(-1, positions.clamp(0, source_length - 1), weights * inside)
