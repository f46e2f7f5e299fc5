"""Listings: the chapters print the package's own code, by name, never by text position.

A chapter that shows how the package computes something prints part of its source. Cutting the
source at literal text (``source[source.index("    if mask"):]``) breaks silently when the code
is reformatted; so the parts a chapter shows are marked in the source with two comment lines,

    # listing: NAME
    ...the lines the chapter shows...
    # end listing: NAME

and a chapter asks for ``listing(obj, "NAME")``. Marker lines never appear in a listing, and a
name that is not marked in ``obj``'s source is a ``ValueError``, so a chapter whose listing lost
its code fails when it is executed (and ``tests/unit/test_listings.py`` checks every listing of
every chapter without executing them).

Some listings show internals (the loop every trainer shares, the naive kernel, the blockwise
kernel's autograd function): those are named by their dotted path as a string,
``listing("attnlab.train._train_loop", "step")``. A chapter imports only public names; this
helper is the one place where the book reaches inside, and it says so.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
from pathlib import Path
from typing import Any

__all__ = ["listing"]

_START = re.compile(r"^\s*# listing: (?P<name>[\w-]+)\s*$")
_END = re.compile(r"^\s*# end listing: (?P<name>[\w-]+)\s*$")


class _Source:
    """The source text of a function of a module that cannot be imported here (see ``_resolve``)."""

    def __init__(self, source: str, name: str):
        self.source, self.__qualname__ = source, name


def _resolve(path: str) -> Any:
    """``"attnlab.train._train_loop"`` or ``"attnlab.models.Decoder.forward"`` -> the object.

    A module that needs an optional dependency missing here (``attnlab.kernels.flash_triton``
    imports Triton, which has no build for macOS) is read, not imported: its top-level function
    or class of that name comes back as its source text, so that the listing still prints.
    """
    if not path.startswith("attnlab."):
        raise ValueError(f"listing: a dotted path must start with 'attnlab.', got {path!r}")
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
        module = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and not exc.name.startswith("attnlab") and cut < len(parts):
                return _read_definition(module, parts[cut], path)
            continue
        except ImportError:
            continue
        try:
            for attribute in parts[cut:]:
                obj = getattr(obj, attribute)
        except AttributeError:
            raise ValueError(f"listing: {path!r} names nothing in the package") from None
        return obj
    raise ValueError(f"listing: {path!r} names nothing in the package")  # pragma: no cover


def _read_definition(module: str, name: str, path: str) -> _Source:
    """The source of the top-level ``def`` or ``class`` ``name`` of ``module``, read from its file."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:  # pragma: no cover
        raise ValueError(f"listing: {path!r} names nothing in the package")
    text = Path(spec.origin).read_text(encoding="utf-8")
    body = ast.parse(text).body
    lines = text.splitlines(keepends=True)
    starts = [min([n.lineno, *(d.lineno for d in getattr(n, "decorator_list", []))]) for n in body]
    for i, node in enumerate(body):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            # up to the next statement of the module: a closing marker comment is after the body
            end = starts[i + 1] - 1 if i + 1 < len(body) else len(lines)
            return _Source("".join(lines[starts[i] - 1 : end]), name)
    raise ValueError(f"listing: {path!r} names nothing in the package")


def regions(source: str) -> dict[str, str]:
    """Every marked region of ``source``: name -> its lines (marker lines of inner regions removed).

    Raises ``ValueError`` on a marker without its partner, a name marked twice, or an end
    marker before its start.
    """
    lines = source.splitlines(keepends=True)
    open_at: dict[str, int] = {}
    found: dict[str, tuple[int, int]] = {}
    for i, line in enumerate(lines):
        if start := _START.match(line):
            name = start["name"]
            if name in open_at or name in found:
                raise ValueError(f"listing: the region {name!r} is marked twice")
            open_at[name] = i
        elif end := _END.match(line):
            name = end["name"]
            if name not in open_at:
                raise ValueError(f"listing: '# end listing: {name}' without '# listing: {name}' before it")
            found[name] = (open_at.pop(name), i)
    if open_at:
        raise ValueError(f"listing: '# listing: {next(iter(open_at))}' is never ended")
    return {name: _without_markers(lines[a + 1 : b]) for name, (a, b) in found.items()}


def _without_markers(lines: list[str]) -> str:
    kept = [line for line in lines if not (_START.match(line) or _END.match(line))]
    while kept and not kept[-1].strip():  # a blank line before the end marker (the formatter puts one after a def)
        kept.pop()
    return "".join(kept)


def listing(obj: Any, part: str | None = None) -> str:
    """The source of ``obj`` (a function, method or class of the package), or its part ``part``.

    ``obj`` may also be a dotted path such as ``"attnlab.train._train_loop"``, for the internals
    a chapter shows. Marker comments are left out. Print the result: ``print(listing(...))``.

    Raises:
        TypeError: ``obj`` has no source (a built-in, a number) or ``part`` is not a string.
        ValueError: the dotted path names nothing, or ``part`` is not marked in ``obj``'s source.
    """
    if isinstance(obj, str):
        obj = _resolve(obj)
    if part is not None and not isinstance(part, str):
        raise TypeError(f"listing: part must be a region name (str) or None, got {type(part).__name__}")
    # A kernel compiled by Triton (@triton.jit) keeps the Python function it was given as .fn.
    fn = getattr(obj, "fn", None)
    if inspect.isfunction(fn):
        obj = fn
    try:
        source = obj.source if isinstance(obj, _Source) else inspect.getsource(obj)
    except (TypeError, OSError) as exc:
        raise TypeError(
            f"listing: obj must be a function, method or class with Python source, got {type(obj).__name__} ({exc})"
        ) from None
    if part is None:
        return _without_markers(source.splitlines(keepends=True))
    found = regions(source)
    if part not in found:
        name = getattr(obj, "__qualname__", repr(obj))
        raise ValueError(
            f"listing: no region {part!r} is marked in the source of {name}; marked: {sorted(found) or 'none'}"
        )
    return found[part]
