"""Positional encodings: how self-attention learns where a token is.

Introduced in chapter 5. Self-attention without positions is a bag of words: permuting the input
rows permutes the output rows. Adding a position vector to each token breaks that symmetry.

- ``sinusoidal_encoding``: Vaswani et al.'s fixed encoding,
  PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d)).
- ``relative_rotation``: the matrix M_k with PE(p + k) = M_k PE(p) for every p (a rotation of
  each (sin, cos) pair), the reason the encoding lets attention express relative offsets.
- ``LearnedPositionalEmbedding``: one trained vector per position.

Chapter 8 adds the two ways today's models give positions to attention itself, instead of to
the tokens:

- ``rotary_embedding`` (RoPE, Su et al. 2021): rotate each pair of features of a query or key
  at position p by the angle ``p * w_i``, so that the score of a query at m and a key at n
  depends on the offset ``n - m`` only (chapter 5's rotation, applied to q and k).
- ``alibi_slopes``, ``alibi_bias`` (Press et al. 2022): no position vectors at all; each head
  adds ``-m_h |i - j|`` to its scores, a penalty that grows with the distance.

and the ways to run a rotary model past the length it was trained on, without retraining:

- ``rotary_frequencies`` and ``RopeScaling``: RoPE's frequencies ``w_i``, stretched by position
  interpolation (``"linear"``), NTK-aware scaling (``"ntk"``), YaRN (``"yarn"``) or Llama 3.1's
  rule (``"llama3"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from attnlab.validation import check_choice, check_instance, check_int, check_ints, check_number, check_tensor

__all__ = [
    "ROPE_SCALINGS",
    "LearnedPositionalEmbedding",
    "RopeScaling",
    "alibi_bias",
    "alibi_slopes",
    "relative_rotation",
    "rotary_embedding",
    "rotary_frequencies",
    "sinusoidal_encoding",
]

ROPE_SCALINGS = ("linear", "ntk", "yarn", "llama3")


def _frequencies(d_model: int, base: float, dtype: torch.dtype, device: torch.device | str | None) -> torch.Tensor:
    return torch.exp(-math.log(base) * torch.arange(0, d_model, 2, dtype=dtype, device=device) / d_model)  # (d/2,)


def sinusoidal_encoding(
    max_len: int,
    d_model: int,
    *,
    base: float = 10_000.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The sinusoidal positional encoding, shape ``(max_len, d_model)`` (defined in chapter 5).

    Even columns hold sines and odd columns cosines of ``p * w_i`` with ``w_i = base^(-2i/d)``.
    Made on ``device`` (PyTorch's default, the CPU, when ``None``); a module that registers it
    as a buffer takes it along when it moves.

    Raises:
        TypeError: a size is not an int.
        ValueError: a size is below 1, or ``d_model`` is odd.
    """
    check_ints("sinusoidal_encoding", max_len=max_len, d_model=d_model)
    if d_model % 2:
        raise ValueError(f"sinusoidal_encoding: d_model must be even (sin/cos pairs), got {d_model}")
    positions = torch.arange(max_len, dtype=dtype, device=device)[:, None]  # (max_len, 1)
    angles = positions * _frequencies(d_model, base, dtype, device)[None, :]  # (max_len, d/2)
    pe = torch.zeros(max_len, d_model, dtype=dtype, device=device)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe


def relative_rotation(
    offset: int,
    d_model: int,
    *,
    base: float = 10_000.0,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The matrix ``M_k`` of shape ``(d_model, d_model)`` with ``PE(p + k) = M_k @ PE(p)`` (chapter 5).

    Each pair (sin(p w), cos(p w)) is rotated by the angle ``k w``:
    sin((p+k)w) = cos(kw) sin(pw) + sin(kw) cos(pw); cos((p+k)w) = -sin(kw) sin(pw) + cos(kw) cos(pw).
    Made on ``device`` (the CPU when ``None``), like ``sinusoidal_encoding``.
    """
    check_int("relative_rotation", "offset", offset, low=None)
    check_int("relative_rotation", "d_model", d_model)
    if d_model % 2:
        raise ValueError(f"relative_rotation: d_model must be even, got {d_model}")
    angles = offset * _frequencies(d_model, base, dtype, device)  # (d/2,)
    m = torch.zeros(d_model, d_model, dtype=dtype, device=device)
    c, s = torch.cos(angles), torch.sin(angles)
    idx = torch.arange(0, d_model, 2, device=device)
    m[idx, idx], m[idx, idx + 1] = c, s  # new sin = cos(kw) sin + sin(kw) cos
    m[idx + 1, idx], m[idx + 1, idx + 1] = -s, c  # new cos = -sin(kw) sin + cos(kw) cos
    return m


class LearnedPositionalEmbedding(nn.Module):
    """One trained vector per position, added to the token embeddings (defined in chapter 5).

    Shapes: input ``(B, N, d_model)`` with ``N <= max_len``; output the same.
    """

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        check_ints("LearnedPositionalEmbedding", max_len=max_len, d_model=d_model)
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3 or x.shape[-1] != self.embedding.embedding_dim:
            raise ValueError(
                f"LearnedPositionalEmbedding: x must have shape (B, N, {self.embedding.embedding_dim}), "
                f"got {tuple(x.shape)}"
            )
        if x.shape[1] > self.max_len:
            raise ValueError(f"LearnedPositionalEmbedding: sequence length {x.shape[1]} exceeds max_len {self.max_len}")
        positions = torch.arange(x.shape[1], device=x.device)  # (N,)
        return x + self.embedding(positions)[None]  # (B, N, D) + (1, N, D)


@dataclass(frozen=True)
class RopeScaling:
    """How to stretch rotary frequencies to run a model past its trained length (chapter 8).

    A model trained on ``original_length = L`` positions runs on ``s L`` with ``factor = s``.
    Each method changes the frequencies ``w_i = base^(-2i/E)`` of ``rotary_embedding`` (see
    ``rotary_frequencies``) and nothing else, but for YaRN's temperature. Pair ``i`` has the
    wavelength ``lambda_i = 2 pi / w_i`` and turns ``r_i = L / lambda_i`` times over ``L``.

    - ``"linear"``, position interpolation (Chen, Wong, Chen, Tian 2023, arXiv:2306.15595):
      positions divided by ``s``, the same as every frequency divided by ``s``: ``w_i / s``.
    - ``"ntk"``, NTK-aware scaling (bloc97 2023, as the YaRN paper writes it in Section 3.1): the
      base multiplied by ``s^(E/(E-2))``, which divides the lowest frequency by ``s`` and leaves
      the highest, ``w_0 = 1``, alone (with ``E = 2`` it is the only one: nothing changes).
    - ``"yarn"``, YaRN (Peng, Quesnelle, Fan, Shippole 2023, arXiv:2309.00071): NTK-by-parts
      interpolation (Section 3.2), ``w_i -> (1 - g_i) w_i / s + g_i w_i`` with the ramp
      ``g_i = clip((r_i - alpha) / (beta - alpha), 0, 1)``: pairs whose wavelength is below
      ``L / beta`` are left alone, those above ``L / alpha`` are interpolated as by ``"linear"``,
      those between are blended. ``alpha = 1``, ``beta = 32``, the paper's values for Llama,
      unless given. And a temperature (Section 3.4), ``sqrt(1/t) = 0.1 ln(s) + 1``, which is
      ``attention_factor``.
    - ``"llama3"``, Llama 3.1's rule (``apply_scaling`` in meta-llama/llama-models,
      ``models/llama3/model.py``): the same ramp with ``alpha = low_freq_factor``, ``beta =
      high_freq_factor``, by default 1 and 4 (Llama 3.1: ``factor = 8``, ``original_length =
      8192``), and no temperature.

    Args:
        method: one of ``ROPE_SCALINGS``.
        factor: ``s``, the new length over the trained one: a number >= 1.
        original_length: ``L``. ``"yarn"`` and ``"llama3"`` need it (their ramp measures
            wavelengths against it; Hugging Face calls it ``original_max_position_embeddings``);
            ``"linear"`` and ``"ntk"`` do not read it.
        alpha, beta: the ramp's ends, in turns over ``L``, ``0 < alpha < beta`` (``"yarn"`` and
            ``"llama3"`` only; ``None``: the method's values, which the instance then holds).

    Checked against the papers and this code: the YaRN authors' (jquesnelle/yarn at 995db5b,
    ``scaled_rope/``: ``LlamaLinearScaledRotaryEmbedding.py`` L13, ``LlamaNTKScaledRotaryEmbedding.py``
    L6, ``LlamaYaRNScaledRotaryEmbedding.py`` L5-27 and L74-84); Hugging Face transformers'
    ``modeling_rope_utils.py`` at ef46806 (``_compute_linear_scaling_rope_parameters``,
    ``_compute_yarn_parameters``, ``_compute_llama3_parameters``; ``_compute_ntk_parameters`` in
    older versions); llama-models at a9c89c4, ``models/llama3/model.py`` L45-62, which this rule
    matches to rounding.

    YaRN's ramp differs between the paper and the code. The paper's ramp (and Llama 3.1's) is
    linear in ``r_i``, as here. The YaRN code, Hugging Face and DeepSeek-V3 (at 9b4e978,
    ``inference/model.py`` L314-370) ramp linearly in the pair's index ``i`` instead, between the
    floor and the ceiling of the fractional indices at which a pair turns ``beta`` and ``alpha``
    times; gpt-oss (at 7b58334, ``gpt_oss/torch/model.py`` L85-123) does so without rounding.
    When ``L > 2 pi beta`` all of them leave the same pairs alone and interpolate the same pairs
    fully; the pairs between are blended differently.

    The dynamic variants, whose factor grows with the sequence, are left out: they would rotate
    the keys already in a cache with other frequencies than the new ones.
    """

    method: str
    factor: float
    original_length: int | None = None
    alpha: float | None = None
    beta: float | None = None

    def __post_init__(self) -> None:
        where = "RopeScaling"
        check_choice(where, "method", self.method, ROPE_SCALINGS)
        check_number(where, "factor", self.factor, low=1)
        check_int(where, "original_length", self.original_length, none=True)
        if self.method in ("linear", "ntk"):
            if self.alpha is not None or self.beta is not None:
                raise ValueError(
                    f"{where}: alpha and beta are the ramp of 'yarn' and 'llama3'; {self.method!r} has none, "
                    f"got alpha={self.alpha!r}, beta={self.beta!r}"
                )
            return
        if self.original_length is None:
            raise ValueError(
                f"{where}: {self.method!r} needs original_length, the trained length its ramp measures "
                "wavelengths against; got None"
            )
        default_alpha, default_beta = (1.0, 32.0) if self.method == "yarn" else (1.0, 4.0)
        alpha = check_number(where, "alpha", default_alpha if self.alpha is None else self.alpha, low=0, low_open=True)
        beta = check_number(where, "beta", default_beta if self.beta is None else self.beta, low=alpha, low_open=True)
        object.__setattr__(self, "alpha", alpha)  # frozen: the values the ramp uses, for repr and ==
        object.__setattr__(self, "beta", beta)

    @property
    def attention_factor(self) -> float:
        """What YaRN multiplies each query and each key by, ``sqrt(1/t) = 0.1 ln(s) + 1``; 1 otherwise.

        The scores ``q . k`` are multiplied by its square, ``1/t`` (the YaRN code scales RoPE's
        cos and sin by it, so queries and keys alike; DeepSeek-V3 multiplies its softmax scale
        by its square, ``inference/model.py`` L434-437). ``rotary_embedding`` does not apply it:
        ``LMBlock`` multiplies its softmax scale by ``attention_factor ** 2``.
        """
        return 0.1 * math.log(self.factor) + 1.0 if self.method == "yarn" else 1.0


def rotary_frequencies(
    head_dim: int,
    *,
    base: float = 10_000.0,
    scaling: RopeScaling | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """RoPE's frequencies ``w_i``, shape ``(head_dim / 2,)``, stretched by ``scaling`` (chapter 8).

    ``w_i = base^(-2i/E)`` for ``i = 0, ..., E/2 - 1`` (``E = head_dim``), the frequencies of
    ``sinusoidal_encoding`` and ``rotary_embedding``. ``scaling`` (a ``RopeScaling``, which
    states each method's rule and its sources) changes them so that positions up to ``factor``
    times the trained length turn the pairs by angles like those seen in training. Made on
    ``device`` (the CPU when ``None``) in ``dtype``.

    Raises:
        TypeError: ``head_dim`` is not an int, or ``scaling`` not a ``RopeScaling`` or ``None``.
        ValueError: ``head_dim`` is below 2 or odd, or ``base`` is not above 1.
    """
    name = "rotary_frequencies"
    E = check_int(name, "head_dim", head_dim, low=2)
    if E % 2:
        raise ValueError(f"{name}: head_dim must be even (the features rotate in pairs), got {E}")
    check_number(name, "base", base, low=1, low_open=True)
    check_instance(name, "scaling", scaling, RopeScaling, none=True)
    w = _frequencies(E, base, dtype, device)  # (E/2,): w_i = base^(-2i/E)
    if scaling is None:
        return w
    s, L, alpha, beta = scaling.factor, scaling.original_length, scaling.alpha, scaling.beta
    # listing: rope-scaling
    if scaling.method == "linear":  # every position p / s, so every angle p w_i / s
        return w / s
    if scaling.method == "ntk":  # the base times s^(E/(E-2)); with E = 2, w_0 = 1 whatever the base
        return _frequencies(E, base * s ** (E / (E - 2)), dtype, device) if E > 2 else w
    assert L is not None and alpha is not None and beta is not None  # RopeScaling: "yarn" and "llama3" have them
    turns = L * w / (2 * math.pi)  # r_i = L / lambda_i: how often pair i turns over the trained length
    ramp = ((turns - alpha) / (beta - alpha)).clamp(0, 1)  # 1: left alone, 0: interpolated, between: blended
    return (1 - ramp) * w / s + ramp * w  # NTK-by-parts ("yarn", "llama3")
    # end listing: rope-scaling


def _rotate_pairs(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """``x (..., N, E)`` with pair ``i`` of row ``n`` rotated by ``angles[n, i]`` (``(N, E/2)``), as
    ``rotary_embedding``'s listing does it."""
    cos, sin = torch.cos(angles), torch.sin(angles)
    even, odd = x[..., 0::2].to(angles.dtype), x[..., 1::2].to(angles.dtype)  # (..., N, E/2) each
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (..., N, E/2, 2)
    return rotated.flatten(-2).to(x.dtype)  # (..., N, E)


def rotary_embedding(
    x: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    base: float = 10_000.0,
    scaling: RopeScaling | None = None,
) -> torch.Tensor:
    """Rotary position embedding (RoPE): ``x`` with each feature pair rotated by its position's angle.

    Defined in chapter 8, after Su et al. (2021). Features ``(2i, 2i+1)`` of the row at
    position ``p`` are rotated by the angle ``p * w_i``, ``w_i = base^(-2i/E)`` (the frequencies
    of ``sinusoidal_encoding``): as a complex number, ``x_{2i} + i x_{2i+1}`` is multiplied by
    ``e^{i p w_i}``. Applied to queries and keys (never to values), it makes the score
    ``rope(q, m) . rope(k, n)`` a function of ``q``, ``k`` and the offset ``n - m`` only.

    Args:
        x: ``(..., N, E)``, ``E`` even: queries or keys (per head: ``(B, H, N, E)``).
        positions: ``(N,)`` positions of the rows (``0, ..., N-1`` when ``None``; a decoder with
            a cache passes ``t, ..., t + N - 1``).
        base: the base of the frequencies.
        scaling: a ``RopeScaling`` to run past the trained length (``rotary_frequencies``), or
            ``None``. Only the frequencies change, so the score still depends on the offset
            only. YaRN's temperature is not applied here: multiply the scores by
            ``scaling.attention_factor ** 2``.

    Returns:
        A tensor of the shape and dtype of ``x``.
    """
    check_tensor("rotary_embedding", "x", x, kind="float")
    if x.dim() < 2 or x.shape[-1] % 2:
        raise ValueError(f"rotary_embedding: x must have shape (..., N, E) with E even, got {tuple(x.shape)}")
    check_number("rotary_embedding", "base", base, low=1, low_open=True)
    scaling = check_instance("rotary_embedding", "scaling", scaling, RopeScaling, none=True)
    n = x.shape[-2]
    if positions is None:
        positions = torch.arange(n, device=x.device)
    else:
        check_tensor("rotary_embedding", "positions", positions, dim=1, shape=(n,), names=f"(N,) = ({n},)")
    if scaling is not None:  # the stretched frequencies' angles, then the rotation of the listing below
        dtype = torch.promote_types(x.dtype, torch.float32)
        w = rotary_frequencies(x.shape[-1], base=base, scaling=scaling, dtype=dtype, device=x.device)  # (E/2,)
        angles = positions.to(dtype)[:, None] * w  # (N, E/2)
        return _rotate_pairs(x, angles)  # (..., N, E)
    # Chapter 8 prints this listing, plain RoPE, with its output: a change here changes the chapter.
    # listing: rope
    dtype = torch.promote_types(x.dtype, torch.float32)  # the angles in float32 at least
    angles = positions.to(dtype)[:, None] * _frequencies(x.shape[-1], base, dtype, x.device)  # (N, E/2)
    cos, sin = torch.cos(angles), torch.sin(angles)
    even, odd = x[..., 0::2].to(dtype), x[..., 1::2].to(dtype)  # (..., N, E/2) each
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)  # (..., N, E/2, 2)
    return rotated.flatten(-2).to(x.dtype)  # (..., N, E)
    # end listing: rope


def alibi_slopes(num_heads: int, *, device: torch.device | str | None = None) -> torch.Tensor:
    """ALiBi's slope ``m_h`` for each head, shape ``(num_heads,)`` (defined in chapter 8).

    Press et al. (2022), section 3: for ``n`` heads, a geometric sequence that starts at
    ``2^(-8/n)`` with that ratio (``1/2, 1/4, ..., 1/256`` for 8 heads). When ``n`` is not a power
    of two, the slopes of the closest smaller power of two, followed by every other slope of
    twice that many heads (as in the authors' code).
    """
    check_int("alibi_slopes", "num_heads", num_heads)

    def geometric(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    closest = 2 ** int(math.log2(num_heads))
    slopes = geometric(closest) + geometric(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32, device=device)


def alibi_bias(
    num_heads: int,
    num_queries: int,
    num_keys: int | None = None,
    *,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """ALiBi's bias ``-m_h |i - j|``, shape ``(num_heads, L, S)``: a float mask added to the scores.

    Defined in chapter 8, after Press et al. (2022). Query ``i`` sits at position ``S - L + i``
    (aligned bottom-right, like a decoder's new tokens after its cache), key ``j`` at ``j``. In a
    causal model only keys ``j <= i`` take part, and there the bias is the paper's
    ``-m_h (i - j)``. Pass it, broadcast over the batch, as ``attn_mask`` (combine it with a
    causal mask by putting ``-inf`` where the causal mask is False).
    """
    check_ints("alibi_bias", num_heads=num_heads, num_queries=num_queries)
    num_keys = num_queries if num_keys is None else num_keys
    check_int("alibi_bias", "num_keys", num_keys, low=num_queries, note="at least num_queries")
    i = torch.arange(num_keys - num_queries, num_keys, device=device)[:, None]  # (L, 1): query positions
    j = torch.arange(num_keys, device=device)[None, :]  # (1, S)
    distance = (i - j).abs().to(torch.float32)  # (L, S)
    return -alibi_slopes(num_heads, device=device)[:, None, None] * distance  # (H, L, S)
