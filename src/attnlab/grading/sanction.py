"""The code a test may call: what the sealed grader (attnlab.grading.sealed) lets run inside a test.

A test is given the student's functions and objects by name. Their code, and only theirs, may run
while a test checks its results; any other code of the submission that runs there is tampering.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

from attnlab.grading.rules import CALLABLE_DUNDERS


def sanctioned_codes(
    objects: list, student_globals: dict[str, Any], is_student: Callable[[types.CodeType], bool], torch: Any
) -> set[types.CodeType]:
    """The code that a test may call: the functions it is given, and the methods (but the
    dunders that answer for an object: __eq__, __bool__, __torch_function__, ...) of the
    classes it is given, of its objects' classes and of the notebook's own classes (a
    model's parts; an autograd Function, whose backward PyTorch calls), and the function
    inside a Triton kernel it is given, which Triton's interpreter runs. A tensor's class
    of the student's own has none. ``is_student`` says whether code is the submission's;
    ``torch`` is the module as the harness found it."""
    codes, seen = set(), set()
    todo = list(objects)  # and every class of the notebook's: a model's parts, an autograd Function
    todo += [
        v
        for v in student_globals.values()
        if issubclass(type(v), type)
        and any(is_student(f.__code__) for f in vars(v).values() if type(f) is types.FunctionType)
    ]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        kind = type(obj)
        if kind is functools.partial:
            todo.append(obj.func)
        elif kind is types.FunctionType:
            codes.add(obj.__code__)
            # a decorator's wrapper (torch.no_grad(), functools.wraps): the student's function inside
            todo.extend(c.cell_contents for c in (obj.__closure__ or ()) if type(c.cell_contents) is types.FunctionType)
            wrapped = vars(obj).get("__wrapped__")
            if wrapped is not None:
                todo.append(wrapped)
        elif type(getattr(obj, "fn", None)) is types.FunctionType and kind.__module__.startswith("triton"):
            # a Triton kernel (@triton.jit): the student's function it compiles, or the copy of it
            # that Triton's interpreter rewrites (made once per function, and kept) and runs
            todo.append(obj.fn)
            rewrite = getattr(obj, "rewrite", None)
            if callable(rewrite):
                todo.append(rewrite())
        elif kind is types.MethodType or kind in (staticmethod, classmethod):
            todo.append(obj.__func__)
        elif kind is property:
            todo.extend(f for f in (obj.fget, obj.fset) if f is not None)
        elif isinstance(kind, type) and issubclass(kind, type):  # a class
            if issubclass(obj, torch.Tensor):
                continue  # a tensor of the student's own class has nothing to answer for a test
            for cls in obj.__mro__:
                for name, value in vars(cls).items():
                    if not (name.startswith("__") and name.endswith("__")) or name in CALLABLE_DUNDERS:
                        todo.append(value)
        elif obj is not None and not issubclass(kind, (torch.Tensor, int, float, str, bytes, tuple, list, dict)):
            todo.append(kind)  # an object (a model): its class's methods
    return {c for c in codes if is_student(c)}
