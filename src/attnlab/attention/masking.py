"""Masks and the masked softmax: which keys each query may attend to.

Introduced in the chapter "Preliminaries". The convention is the one of
``torch.nn.functional.scaled_dot_product_attention``: a boolean mask is ``True`` where a
key *takes part*, and broadcasts to the scores' shape ``(B, H, L, S)``; a float mask is
*added* to the scores (0 keeps, ``-inf`` removes).

A query whose keys are all masked gets all-zero weights (and so a zero output and zero
gradients), never NaN: see ``masked_softmax``.
"""

from __future__ import annotations

import torch

from attnlab.validation import check_int, check_ints, check_mask, check_tensor

__all__ = ["causal_mask", "from_key_padding_mask", "masked_softmax", "padding_mask", "to_float_mask"]


def causal_mask(
    num_queries: int,
    num_keys: int | None = None,
    *,
    align: str = "top-left",
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Boolean mask of shape ``(L, S)`` letting each query attend only to keys not after it.

    Defined in the chapter "Preliminaries". When ``L == S`` this is the lower triangle
    including the diagonal. When ``L != S`` the alignment of the triangle must be chosen:

    - ``align="top-left"`` (default): query ``i`` sees keys ``0..i``, as
      ``torch.nn.functional.scaled_dot_product_attention(..., is_causal=True)`` does
      (``torch.ones(L, S).tril()``).
    - ``align="bottom-right"``: the *last* query sees every key, query ``i`` sees keys
      ``0..i + S - L``; this is what decoding with a cache of ``S - L`` earlier keys needs.

    Shapes:
        returns: ``(L, S)``, dtype ``torch.bool``; ``True`` = takes part.

    Raises:
        TypeError: a length is not an int.
        ValueError: a length is below 1, or ``align`` is unknown.
    """
    num_keys = num_queries if num_keys is None else num_keys
    check_ints("causal_mask", num_queries=num_queries, num_keys=num_keys)
    if align not in ("top-left", "bottom-right"):
        raise ValueError(f"causal_mask: align must be 'top-left' or 'bottom-right', got {align!r}")
    offset = 0 if align == "top-left" else num_keys - num_queries
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).tril(diagonal=offset)


def to_float_mask(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The additive form of a boolean mask: 0 where a key takes part, ``-inf`` where it does not.

    Defined in chapter 3. Adding the result to the scores has the same effect as the boolean
    mask; float masks can also hold finite biases (soft preferences).

    Raises:
        TypeError: ``mask`` is not boolean, or ``dtype`` is not a floating dtype.
    """
    check_tensor("to_float_mask", "mask", mask, kind="bool", note="True = takes part")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"to_float_mask: dtype must be a floating torch.dtype, got {dtype!r}")
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))


def padding_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """Boolean key mask of shape ``(B, 1, 1, S)`` from the true lengths of padded sequences.

    Defined in the chapter "Preliminaries". Sequence ``b`` has ``lengths[b]`` real tokens
    followed by padding; the mask is ``True`` on the real tokens. Its shape broadcasts
    against scores of shape ``(B, H, L, S)``, so every head and every query ignores padding.

    Shapes:
        lengths: ``(B,)`` integer tensor; returns ``(B, 1, 1, S)`` with ``S = max_len``
        (default: the largest length).

    Raises:
        TypeError: ``lengths`` is not an integer tensor.
        ValueError: ``lengths`` is not 1-D, holds a negative length, or one above ``max_len``.
    """
    check_tensor("padding_mask", "lengths", lengths, kind="integer", shape=(None,), names="(B,)")
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"padding_mask: lengths must be non-negative, got {lengths.tolist()}")
    longest = int(lengths.max()) if lengths.numel() else 0
    if max_len is None:
        max_len = longest
    else:
        check_int("padding_mask", "max_len", max_len, low=longest, note="the largest length")
    positions = torch.arange(max_len, device=lengths.device)  # (S,)
    mask = positions[None, :] < lengths[:, None]  # (B, 1) vs (1, S) -> (B, S)
    return mask[:, None, None, :]  # (B, S) -> (B, 1, 1, S)


def from_key_padding_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """Convert ``nn.MultiheadAttention``'s ``key_padding_mask`` to the book's convention.

    Defined in the chapter "Preliminaries". ``torch.nn.MultiheadAttention`` marks padding keys
    with ``True`` (= *ignore*), the opposite of ``scaled_dot_product_attention`` and of this
    book (``True`` = *takes part*). This is the one place where the convention flips.

    Shapes:
        key_padding_mask: ``(B, S)`` boolean, ``True`` = padding (ignored).
        returns: ``(B, 1, 1, S)`` boolean, ``True`` = takes part; broadcasts to ``(B, H, L, S)``.

    Raises:
        TypeError: ``key_padding_mask`` is not a boolean tensor.
        ValueError: ``key_padding_mask`` is not 2-D.
    """
    check_tensor(
        "from_key_padding_mask",
        "key_padding_mask",
        key_padding_mask,
        kind="bool",
        dim=2,
        names="(B, S)",
        note="True = ignore",
    )
    return ~key_padding_mask[:, None, None, :]  # (B, S) -> (B, 1, 1, S), True = takes part


def _check_mask(scores: torch.Tensor, mask: torch.Tensor) -> None:
    check_mask(
        "masked_softmax",
        "mask",
        mask,
        scores.shape,
        shape_name=f"the shape of scores {tuple(scores.shape)}",
        added="added to the scores",
        dtype_name="dtype ",
    )


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None, dim: int = -1) -> torch.Tensor:
    """Softmax of ``scores`` over ``dim``, restricted to the positions that ``mask`` keeps.

    Defined in the chapter "Preliminaries": the normalisation stage of attention.
    Numerically stable (the row maximum is subtracted before ``exp``), and total:

    - masked positions get a weight of exactly 0;
    - a row in which every position is masked gets all-zero weights instead of NaN, so a
      query with nothing to attend to yields a zero output and zero gradients. Without a
      ``mask`` nothing is masked: the scores go to ``torch.softmax`` as they are (so a row
      of scores that are all ``-inf`` gives NaN, as in PyTorch; pass such masks as ``mask``).

    The weights have the dtype of ``scores``: a float mask is converted to it before it is
    added (``-inf`` stays ``-inf``), so a float32 mask does not turn float16 attention into
    float32. There is no host synchronisation (no branch on the values of a tensor): the
    same operations run whether or not some row is fully masked, on any device.

    Shapes:
        scores: any shape, typically ``(B, H, L, S)``; the softmax runs over ``dim``.
        mask: ``None``, or boolean / float, broadcastable to ``scores.shape``.
        returns: the shape and dtype of ``scores``.

    Raises:
        TypeError: ``scores`` is not a floating tensor, or ``mask`` has the wrong type.
        ValueError: ``mask`` does not broadcast to ``scores``, or ``dim`` is out of range.
    """
    check_tensor("masked_softmax", "scores", scores, kind="float")
    check_int("masked_softmax", "dim", dim, low=-scores.dim(), high=max(scores.dim(), 1) - 1)
    # listing: mask
    if mask is not None:
        _check_mask(scores, mask)
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))  # exp(-inf) = 0
        else:
            scores = scores + mask.to(scores.dtype)  # float masks are added, in the scores' dtype
        # A row whose keys are all masked has a maximum of -inf, where softmax would compute
        # (-inf) - (-inf) = NaN. Without asking whether there is such a row (that would wait
        # for the device), give every such row scores of 0 (finite, so no NaN in the gradient
        # either), then weights of 0: the weights of each row are multiplied by 1 or by 0.
        empty = scores.amax(dim=dim, keepdim=True) == float("-inf")  # one read of the scores
        keep = (~empty).to(scores.dtype)  # 1 where a row has a key, 0 where it has none
        scores.masked_fill_(empty, 0.0)  # in place: this tensor was made above, not passed in
        weights = torch.softmax(scores, dim=dim)
        return weights * keep if weights.requires_grad else weights.mul_(keep)  # in place when no backward needs them
    # torch.softmax subtracts the row maximum before exp, as exp(e - max e) / sum does by hand,
    # in one pass that keeps only its output for the backward (not exp, sum and quotient).
    return torch.softmax(scores, dim=dim)
    # end listing: mask
