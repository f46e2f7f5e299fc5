"""Argument checks: the one idiom every public function of the package uses.

The rule (CONTRIBUTING.md, "Rules of the house", says the same):

- a value of the wrong **type** raises ``TypeError``: an ``int`` argument given a ``float`` or a
  ``bool``, a tensor argument given a list, a tensor of the wrong dtype (``torch.long`` token ids
  given as floats);
- a value of the right type but the wrong **value or shape** raises ``ValueError``: a size of 0, a
  probability of 1.5, a tensor with the wrong number of dimensions or a size that does not match
  another argument's, a name that is not among the fixed choices (``check_choice``: anything that
  is not one of them, whatever its type).

Every message names the function, the argument, what was expected and what came::

    band_mask: n must be an int >= 1, got 0
    causal_mask: num_keys must be an int, got float (2.5)
    Seq2Seq: src must be a torch.long tensor, got torch.float32

The checks that several modules share live here too, whatever they check: attention's query, key,
value and mask (``check_qkv``, ``check_qkv_shapes``, ``check_mask``), so that every kernel says the
same thing about the same mistake, and what the trainers and evaluators of ``attnlab.train`` share
(``check_training``, ``check_pairs``, ``check_model``, ``check_tagged``, ``check_labelled``). This
module imports nothing of the package: a check that needs a model's class is given it.

Defined for the package (no chapter introduces it); tests/unit/test_validation.py checks the rule
and that no module writes its own version of these checks.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from typing import Literal, TypeGuard, TypeVar, cast, overload

import torch

__all__ = [
    "check_attn_mask",
    "check_bool",
    "check_choice",
    "check_dtype",
    "check_grouped_qkv",
    "check_instance",
    "check_int",
    "check_int_sequence",
    "check_ints",
    "check_labelled",
    "check_mask",
    "check_model",
    "check_number",
    "check_pairs",
    "check_qkv",
    "check_qkv_shapes",
    "check_tagged",
    "check_tensor",
    "check_training",
    "describe",
]

T = TypeVar("T")


def describe(value: object) -> str:
    """How a message shows a value that came: its type, and the value itself when it is short."""
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    text = repr(value)
    return f"{type(value).__name__} ({text})" if len(text) <= 40 else type(value).__name__


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


# The checks return the value they accepted; None only where `none=True` lets it through.
@overload
def check_int(
    where: str,
    arg: str,
    value: object,
    *,
    low: int | None = 1,
    high: int | None = None,
    none: Literal[False] = False,
    note: str | None = None,
) -> int: ...
@overload
def check_int(
    where: str,
    arg: str,
    value: object,
    *,
    low: int | None = 1,
    high: int | None = None,
    none: bool,
    note: str | None = None,
) -> int | None: ...
def check_int(
    where: str,
    arg: str,
    value: object,
    *,
    low: int | None = 1,
    high: int | None = None,
    none: bool = False,
    note: str | None = None,
) -> int | None:
    """``value`` as an ``int`` in ``[low, high]`` (``None`` also, when ``none``); ``bool`` is not an int.

    ``low=1`` by default (sizes, counts, steps); ``low=0`` for non-negative; ``low=None`` for any.
    ``note`` says where a bound comes from: ``check_int(f, "max_len", m, low=longest, note="the
    largest length")`` -> ``"max_len must be an int >= 3 (the largest length), got 2"``.
    """
    if value is None and none:
        return None
    if not _is_int(value):
        raise TypeError(f"{where}: {arg} must be an int{' or None' if none else ''}, got {describe(value)}")
    if (low is not None and value < low) or (high is not None and value > high):
        if high is None:
            wanted = f"an int >= {low}"
        elif low is None:
            wanted = f"an int <= {high}"
        else:
            wanted = f"an int in [{low}, {high}]"
        raise ValueError(f"{where}: {arg} must be {wanted}{f' ({note})' if note else ''}, got {value}")
    return value


def check_ints(where: str, *, low: int | None = 1, **values: object) -> None:
    """``check_int`` for each keyword: ``check_ints("band_mask", n=n, window=window)``."""
    for arg, value in values.items():
        check_int(where, arg, value, low=low)


def check_int_sequence(
    where: str,
    arg: str,
    value: object,
    *,
    low: int | None = 1,
    types: tuple[type, ...] = (tuple,),
) -> tuple[int, ...]:
    """``value`` as a non-empty ``tuple`` (or one of ``types``) of ints, each at least ``low``."""
    kinds = " or ".join(t.__name__ for t in types)
    # isinstance with a tuple of types given at run time tells mypy nothing: the casts say what it checked
    if not isinstance(value, types) or not all(_is_int(v) for v in cast("Iterable[object]", value)):
        raise TypeError(f"{where}: {arg} must be a {kinds} of ints, got {describe(value)}")
    ints = cast("Sequence[int]", value)
    if not ints or (low is not None and min(ints) < low):
        wanted = "non-empty" if low is None else f"non-empty, each >= {low}"
        raise ValueError(f"{where}: {arg} must be a {kinds} of ints, {wanted}; got {value!r}")
    return tuple(ints)


@overload
def check_number(
    where: str,
    arg: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    none: Literal[False] = False,
) -> float: ...
@overload
def check_number(
    where: str,
    arg: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    none: bool,
) -> float | None: ...
def check_number(
    where: str,
    arg: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    none: bool = False,
) -> float | None:
    """``value`` as a finite real number (``int`` or ``float``, not ``bool``) within the bounds.

    ``low_open``/``high_open`` exclude the bound: ``check_number(f, "dropout", p, low=0, high=1,
    high_open=True)`` accepts ``[0, 1)``.
    """
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{where}: {arg} must be a number{' or None' if none else ''}, got {describe(value)}")
    below = low is not None and (value <= low if low_open else value < low)
    above = high is not None and (value >= high if high_open else value > high)
    if not math.isfinite(value) or below or above:
        if low is not None and high is not None:
            wanted = f"a number in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        elif low is not None:
            wanted = f"a number {'>' if low_open else '>='} {low}"
        elif high is not None:
            wanted = f"a number {'<' if high_open else '<='} {high}"
        else:
            wanted = "a finite number"
        raise ValueError(f"{where}: {arg} must be {wanted}, got {value!r}")
    return value


def check_choice(where: str, arg: str, value: object, choices: Collection[object]) -> object:
    """``value`` as one of ``choices`` (compared with ``==``; a wrong type is just not a choice)."""
    if not any(type(value) is type(c) and value == c for c in choices):
        raise ValueError(f"{where}: {arg} must be one of {tuple(choices)}, got {value!r}")
    return value


def check_bool(where: str, arg: str, value: object) -> bool:
    """``value`` as a ``bool`` (a flag): ``0``, ``1`` or ``None`` are not flags."""
    if not isinstance(value, bool):
        raise TypeError(f"{where}: {arg} must be a bool, got {describe(value)}")
    return value


@overload
def check_instance(where: str, arg: str, value: object, kind: type[T], *, none: Literal[False] = False) -> T: ...
@overload
def check_instance(where: str, arg: str, value: object, kind: type[T], *, none: bool) -> T | None: ...
def check_instance(where: str, arg: str, value: object, kind: type[T], *, none: bool = False) -> T | None:
    """``value`` as an instance of ``kind`` (``None`` also, when ``none``): an option given as a
    small object, such as a rotary scaling. The caller passes the class (this module imports
    nothing of the package)."""
    if value is None and none:
        return None
    if not isinstance(value, kind):
        raise TypeError(f"{where}: {arg} must be a {kind.__name__}{' or None' if none else ''}, got {describe(value)}")
    return value


def check_dtype(where: str, arg: str, value: object) -> torch.dtype:
    """``value`` as a ``torch.dtype`` (``torch.float16``, not the string ``"float16"``)."""
    if not isinstance(value, torch.dtype):
        raise TypeError(f"{where}: {arg} must be a torch.dtype, got {type(value).__name__}")
    return value


_KINDS = {
    "float": (lambda t: t.dtype.is_floating_point, "a floating-point"),
    "long": (lambda t: t.dtype == torch.long, "a torch.long"),
    "bool": (lambda t: t.dtype == torch.bool, "a boolean"),
    "integer": (
        lambda t: not t.dtype.is_floating_point and not t.dtype.is_complex and t.dtype != torch.bool,
        "an integer",
    ),
}


def check_tensor(
    where: str,
    arg: str,
    value: object,
    *,
    kind: str | None = None,
    dim: int | Iterable[int] | None = None,
    shape: tuple[int | None, ...] | None = None,
    names: str | None = None,
    note: str | None = None,
) -> torch.Tensor:
    """``value`` as a tensor of the given ``kind`` of dtype, number of dimensions and shape.

    Args:
        where, arg: the function and the argument, for the message.
        kind: ``"float"``, ``"long"``, ``"bool"`` or ``"integer"`` (any integer dtype); a tensor of
            another dtype raises ``TypeError``.
        dim: the number of dimensions, or several allowed numbers; else ``ValueError``.
        shape: the exact shape, ``None`` for a size that may be anything; else ``ValueError``.
        names: the shape as the message shows it, e.g. ``"(B, S)"`` (default: built from ``shape``).
        note: said after what was expected, e.g. ``"True = takes part"``.
    """
    extra = f" ({note})" if note else ""
    kind_text = _KINDS[kind][1] if kind is not None else "a"
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{where}: {arg} must be {kind_text} tensor{extra}, got {describe(value)}")
    if kind is not None and not _KINDS[kind][0](value):
        raise TypeError(f"{where}: {arg} must be {kind_text} tensor{extra}, got {value.dtype}")
    if dim is not None:
        allowed = (dim,) if isinstance(dim, int) else tuple(dim)
        if value.dim() not in allowed:
            wanted = f"have shape {names}" if names else "be " + " or ".join(f"{d}-D" for d in allowed)
            raise ValueError(f"{where}: {arg} must {wanted}{extra}, got shape {tuple(value.shape)}")
    if shape is not None and (
        value.dim() != len(shape) or any(s is not None and s != v for s, v in zip(shape, value.shape, strict=True))
    ):
        sizes = ["*" if s is None else str(s) for s in shape]
        wanted = names or "(" + ", ".join(sizes) + ("," if len(sizes) == 1 else "") + ")"
        raise ValueError(f"{where}: {arg} must have shape {wanted}{extra}, got {tuple(value.shape)}")
    return value


# --- attention's arguments: the checks its kernels share ----------------------------------------


def check_qkv(where: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    """Query ``(..., L, E)``, key ``(..., S, E)``, value ``(..., S, Ev)``: floating, one dtype, the
    same leading dimensions; the rule of ``scaled_dot_product_attention`` and of every kernel with
    its signature."""
    for arg, t in (("query", query), ("key", key), ("value", value)):
        check_tensor(where, arg, t, kind="float")
        if t.dim() < 2:
            raise ValueError(
                f"{where}: {arg} must have at least 2 dimensions (..., length, features), got {tuple(t.shape)}"
            )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"{where}: key and value must have the same length S, got key {tuple(key.shape)} and value "
            f"{tuple(value.shape)}"
        )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"{where}: query and key must have the same feature size E, got query {tuple(query.shape)} and key "
            f"{tuple(key.shape)}"
        )
    if query.shape[:-2] != key.shape[:-2] or key.shape[:-2] != value.shape[:-2]:
        raise ValueError(
            f"{where}: query, key and value must have the same leading dimensions, got "
            f"{tuple(query.shape)}, {tuple(key.shape)} and {tuple(value.shape)}"
        )
    if not (query.dtype == key.dtype == value.dtype):
        raise TypeError(
            f"{where}: query, key and value must share one dtype, got {query.dtype}, {key.dtype}, {value.dtype}"
        )


def check_qkv_shapes(where: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    """Floating query ``(..., L, E)``, key ``(..., S, E)``, value ``(..., S, Ev)``, else a named error
    (the shapes only: linear attention and the tiled kernels of chapter 8)."""
    for arg, t in (("query", query), ("key", key), ("value", value)):
        check_tensor(where, arg, t, kind="float")
        if t.dim() < 2:
            raise ValueError(f"{where}: {arg} must have shape (..., N, features), got {tuple(t.shape)}")
    if key.shape[:-1] != value.shape[:-1] or query.shape[-1] != key.shape[-1] or query.shape[:-2] != key.shape[:-2]:
        raise ValueError(
            f"{where}: expected query (..., L, E), key (..., S, E), value (..., S, Ev); got "
            f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
        )


def check_grouped_qkv(
    where: str,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    args: tuple[str, str, str] = ("query", "key", "value"),
    shapes: tuple[str, str, str] = ("(B, H, L, E)", "(B, G, S, E)", "(B, G, S, Ev)"),
    same_batch: bool = True,
) -> None:
    """Grouped-query attention's inputs: floating 4-D query ``(B, H, L, E)``, key ``(B, G, S, E)``
    and value ``(B, G, S, Ev)`` of one dtype, ``H`` a multiple of ``G``.

    ``args`` and ``shapes`` name the three arguments and their shapes in the messages (a paged
    kernel reads its keys from a pool, ``key_pool (P, G, bs, E)``); the key's and value's first
    three sizes must agree. ``same_batch``: the query's and the key's first sizes must agree too.
    """
    q_arg, k_arg, v_arg = args
    for arg, t, names in zip(args, (query, key, value), shapes, strict=True):
        check_tensor(where, arg, t, kind="float", dim=4, names=names)
    got = f"got {q_arg} {tuple(query.shape)}, {k_arg} {tuple(key.shape)}, {v_arg} {tuple(value.shape)}"
    if key.shape[:3] != value.shape[:3]:
        raise ValueError(f"{where}: {k_arg} {shapes[1]} and {v_arg} {shapes[2]} must agree but in the last size; {got}")
    if query.shape[1] % key.shape[1]:
        raise ValueError(f"{where}: the query's heads H must be a multiple of the key's and value's heads G; {got}")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"{where}: {q_arg} and {k_arg} must have the same feature size E; {got}")
    if same_batch and query.shape[0] != key.shape[0]:
        raise ValueError(f"{where}: {q_arg} and {k_arg} must have the same batch size B; {got}")
    if not (query.dtype == key.dtype == value.dtype):
        raise TypeError(
            f"{where}: {q_arg}, {k_arg} and {v_arg} must share one dtype, got {query.dtype}, {key.dtype}, {value.dtype}"
        )


def check_mask(
    where: str,
    arg: str,
    mask: object,
    shape: Sequence[int],
    *,
    shape_name: str,
    added: str = "added",
    dtype_name: str = "",
) -> torch.Tensor:
    """``mask`` as the book's masks are: boolean (True = takes part) or floating (added), and
    broadcastable to ``shape``, which the message calls ``shape_name``.

    ``added`` says where a float mask goes, ``dtype_name`` what the message puts before a wrong
    dtype: ``masked_softmax``'s message reads "floating (added to the scores), got dtype ...".
    """
    tensor = check_tensor(where, arg, mask)
    if tensor.dtype != torch.bool and not tensor.dtype.is_floating_point:
        raise TypeError(
            f"{where}: {arg} must be boolean (True = takes part) or floating ({added}), got {dtype_name}{tensor.dtype}"
        )
    try:
        fits = torch.broadcast_shapes(tensor.shape, shape) == torch.Size(shape)
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"{where}: the shape of {arg} is {tuple(tensor.shape)}, but it must broadcast to {shape_name}")
    return tensor


def check_attn_mask(
    where: str, mask: torch.Tensor | None, query: torch.Tensor, key: torch.Tensor, *, is_causal: bool = False
) -> None:
    """``attn_mask`` of a kernel with PyTorch's signature: ``None``, or a mask that broadcasts to the
    scores ``(..., L, S)`` of ``query (..., L, E)`` and ``key (..., S, E)``, and never together with
    ``is_causal=True`` (PyTorch refuses the two together too)."""
    if mask is None:
        return
    target = (*query.shape[:-1], key.shape[-2])  # (..., L, S)
    check_mask(where, "attn_mask", mask, target, shape_name=f"(..., L, S) = {target}")
    if is_causal:
        raise ValueError(f"{where}: pass either is_causal=True or attn_mask, not both (combine them into one mask)")


# --- what attnlab.train's trainers and evaluators share -----------------------------------------


def check_training(where: str, steps: int, eval_every: int | None, batch_size: int, **rates: float) -> None:
    """The arguments every trainer shares: counts are ints >= 1, rates (``lr``, ``clip``) numbers > 0."""
    check_int(where, "steps", steps)
    check_int(where, "eval_every", eval_every, none=True)
    check_int(where, "batch_size", batch_size)
    for arg, value in rates.items():
        check_number(where, arg, value, low=0, low_open=True)


def check_pairs(where: str, pairs: object) -> None:
    """``pairs`` as a non-empty sequence of ``(source, target)`` strings (its first pair is looked at)."""
    if not isinstance(pairs, Sequence) or isinstance(pairs, str):
        raise TypeError(f"{where}: pairs must be a sequence of (source, target) strings, got {type(pairs).__name__}")
    if len(pairs) == 0:
        raise ValueError(f"{where}: pairs must be a non-empty sequence of (source, target) strings, got an empty one")
    first = pairs[0]
    if not (isinstance(first, tuple) and len(first) == 2 and all(isinstance(x, str) for x in first)):
        raise TypeError(f"{where}: pairs must hold (source, target) string tuples, got {first!r}")


def check_model(where: str, model: object, kinds: type | tuple[type, ...], wanted: str | None = None) -> None:
    """``model`` as an instance of ``kinds``; the message says ``wanted`` (default: "a K1 or K2")."""
    if not isinstance(model, kinds):
        names = " or ".join(k.__name__ for k in (kinds if isinstance(kinds, tuple) else (kinds,)))
        raise TypeError(f"{where}: model must be {wanted or 'a ' + names}, got {type(model).__name__}")


def check_tagged(where: str, tokens: torch.Tensor, targets: torch.Tensor, *, num_outputs: int, vocab_size: int) -> None:
    """A tagger's data: token ids in ``[0, vocab_size)``, ``N`` per example, and ``num_outputs`` labels
    per token. (The message's ``(n, N)`` counts the examples with ``n``.)"""
    for arg, t in (("tokens", tokens), ("targets", targets)):
        check_tensor(where, arg, t, kind="long")
    want = (*tokens.shape, num_outputs)
    if tokens.dim() != 2 or tuple(targets.shape) != want or len(tokens) == 0:
        raise ValueError(
            f"{where}: tokens must be (n, N) and targets (n, N, num_outputs={num_outputs}); "
            f"got {tuple(tokens.shape)} and {tuple(targets.shape)}"
        )
    low, high = (int(tokens.min()), int(tokens.max())) if tokens.numel() else (0, 0)  # once per call
    if low < 0 or high >= vocab_size:
        raise ValueError(f"{where}: tokens must lie in [0, {vocab_size}), got [{low}, {high}]")


def check_labelled(where: str, tokens: torch.Tensor, labels: torch.Tensor, *, dims: int) -> None:
    """A classifier's data: ``dims``-D token ids with one label each (``labels (n,)``)."""
    for arg, t in (("tokens", tokens), ("labels", labels)):
        check_tensor(where, arg, t, kind="long")
    if tokens.dim() != dims or labels.shape != (tokens.shape[0],) or len(tokens) == 0:
        raise ValueError(
            f"{where}: tokens must be {dims}-D with one label each; got {tuple(tokens.shape)} and {tuple(labels.shape)}"
        )
