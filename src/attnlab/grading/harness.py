"""Installing the sealed harness in a grading kernel, and the snapshots it takes there.

``install`` is the first cell of a sealed submission (``attnlab.grading.plugin`` writes it): it
reads the set-up, deletes it, runs :mod:`attnlab.grading.sealed` in a namespace of its own and
adds that harness's audit hook. ``module_snapshot`` and ``watched_classes`` take, at that moment
and before any of the student's code runs, what the harness later checks for changes.
"""

from __future__ import annotations

import builtins
import json
import os
import sys
from typing import Any

from attnlab.grading.rules import SKIPPED


def module_snapshot(names: tuple[str, ...]) -> dict[str, tuple[object, dict]]:
    """Each loaded module of ``names`` with a copy of its namespace (less ``SKIPPED``'s names)."""
    found: dict[str, tuple[object, dict]] = {}
    for name in names:
        module = sys.modules.get(name)
        if module is not None:
            skip = SKIPPED.get(name, frozenset())
            found[name] = (module, {k: v for k, v in vars(module).items() if k not in skip})
    return found


def watched_classes() -> list[type]:
    """torch.Tensor, nn.Parameter and every class that torch.nn, torch.autograd, torch.profiler
    and otter's test files name: the tests call their methods on the student's results."""
    import otter.test_files
    import otter.test_files.abstract_test
    import torch

    classes: set[type] = {torch.Tensor, torch.nn.Parameter}
    for module in (
        torch.nn,
        torch.autograd,
        torch.profiler,
        torch.overrides,
        otter.test_files,
        otter.test_files.abstract_test,
    ):
        classes.update(v for v in vars(module).values() if isinstance(v, type))
    return [c for c in classes if not c.__flags__ & (1 << 8)]  # immutable (C) types cannot change


def install(setup_path: str) -> None:
    """Read the set-up, delete it, and seal this kernel (see the module's docstring)."""
    with open(setup_path, encoding="utf-8") as f:
        setup = json.load(f)
    os.remove(setup_path)
    prefixes: tuple[str, ...]
    try:
        shell = get_ipython()  # type: ignore[name-defined]  # IPython's builtin
        cell = shell.compile.get_code_name("", "", 0)
        prefixes = (os.path.join(os.path.dirname(cell), ""), "<ipython-input-")
    except NameError:
        prefixes = ("<ipython-input-",)
    harness_cell = sys._getframe(1).f_code.co_filename
    # The harness's module, in a namespace of its own whose builtins are a copy: the harness
    # then looks up nothing that the student's code can replace (this module's globals, builtins).
    path = os.path.join(os.path.dirname(__file__), "sealed.py")
    private: dict[str, Any] = {"__name__": "attnlab.grading.sealed", "__file__": path}
    private["__builtins__"] = dict(vars(builtins))
    with open(path, encoding="utf-8") as f:
        exec(compile(f.read(), path, "exec"), private)  # attnlab.grading.sealed
    sealed = private["_Sealed"](setup, prefixes, harness_cell)
    sys.addaudithook(sealed.hook)
