"""The package's one argument-checking idiom (attnlab.validation) and its rule.

Wrong type -> TypeError; right type, wrong value or shape -> ValueError; the message names the
function, the argument, what was expected and what came. The last tests read the package's
source: no module writes its own int check, and no isinstance test raises a ValueError.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import attnlab
from attnlab.validation import (
    check_bool,
    check_choice,
    check_dtype,
    check_grouped_qkv,
    check_instance,
    check_int,
    check_int_sequence,
    check_ints,
    check_model,
    check_number,
    check_pairs,
    check_tensor,
    check_training,
)

PACKAGE = Path(attnlab.__file__).parent


@pytest.mark.parametrize("bad", [2.0, "3", True, None, torch.tensor(3)])
def test_check_int_wrong_type_is_a_type_error(bad):
    with pytest.raises(TypeError, match=r"^f: n must be an int, got "):
        check_int("f", "n", bad)


@pytest.mark.parametrize(
    ("kwargs", "value", "message"),
    [
        ({}, 0, r"^f: n must be an int >= 1, got 0$"),
        ({"low": 0}, -1, r"^f: n must be an int >= 0, got -1$"),
        ({"low": 2, "high": 26}, 27, r"^f: n must be an int in \[2, 26\], got 27$"),
        ({"low": None, "high": 5}, 6, r"^f: n must be an int <= 5, got 6$"),
        ({"low": 3, "note": "the largest length"}, 2, r"^f: n must be an int >= 3 \(the largest length\), got 2$"),
    ],
)
def test_check_int_out_of_range_is_a_value_error(kwargs, value, message):
    with pytest.raises(ValueError, match=message):
        check_int("f", "n", value, **kwargs)


def test_check_int_accepts_what_it_should():
    assert check_int("f", "n", 1) == 1
    assert check_int("f", "n", -5, low=None) == -5
    assert check_int("f", "n", None, none=True) is None
    with pytest.raises(TypeError, match="n must be an int or None, got float"):
        check_int("f", "n", 1.5, none=True)
    check_ints("f", a=1, b=2)
    with pytest.raises(ValueError, match="f: b must be an int >= 1, got 0"):
        check_ints("f", a=1, b=0)


def test_check_number():
    assert check_number("f", "p", 0) == 0 and check_number("f", "p", 0.5, low=0, high=1) == 0.5
    for bad in (True, "0.1", None, torch.tensor(0.1)):
        with pytest.raises(TypeError, match="f: p must be a number, got "):
            check_number("f", "p", bad)
    with pytest.raises(ValueError, match=r"f: p must be a number in \[0, 1\), got 1"):
        check_number("f", "p", 1, low=0, high=1, high_open=True)
    with pytest.raises(ValueError, match=r"f: p must be a number > 0, got 0"):
        check_number("f", "p", 0, low=0, low_open=True)
    with pytest.raises(ValueError, match=r"f: p must be a finite number, got nan"):
        check_number("f", "p", float("nan"))
    assert check_number("f", "p", None, none=True) is None


def test_check_choice_and_sequences():
    assert check_choice("f", "mode", "a", ("a", "b")) == "a"
    with pytest.raises(ValueError, match=r"f: mode must be one of \('a', 'b'\), got 'c'"):
        check_choice("f", "mode", "c", ("a", "b"))
    with pytest.raises(ValueError, match="got True"):
        check_choice("f", "mode", True, (1, 2))  # True == 1, but it is not the choice 1
    assert check_int_sequence("f", "sizes", (1, 2)) == (1, 2)
    with pytest.raises(TypeError, match=r"f: sizes must be a tuple of ints, got list"):
        check_int_sequence("f", "sizes", [1, 2])
    with pytest.raises(TypeError, match=r"f: sizes must be a tuple of ints, got tuple \(\(1, True\)\)"):
        check_int_sequence("f", "sizes", (1, True))
    with pytest.raises(ValueError, match=r"non-empty, each >= 1; got \(1, 0\)"):
        check_int_sequence("f", "sizes", (1, 0))


def test_check_bool_and_dtype():
    assert check_bool("f", "flag", False) is False
    for bad in (0, 1, None, "yes"):
        with pytest.raises(TypeError, match=r"^f: flag must be a bool, got "):
            check_bool("f", "flag", bad)
    assert check_dtype("f", "dtype", torch.float16) is torch.float16
    with pytest.raises(TypeError, match=r"^f: dtype must be a torch\.dtype, got str$"):
        check_dtype("f", "dtype", "float16")


def test_check_instance():
    class Option:
        pass

    option = Option()
    assert check_instance("f", "scaling", option, Option) is option
    assert check_instance("f", "scaling", None, Option, none=True) is None
    with pytest.raises(TypeError, match=r"^f: scaling must be a Option or None, got str \('yarn'\)$"):
        check_instance("f", "scaling", "yarn", Option, none=True)
    with pytest.raises(TypeError, match=r"^f: scaling must be a Option, got NoneType \(None\)$"):
        check_instance("f", "scaling", None, Option)


def test_check_tensor():
    x = torch.zeros(2, 3)
    assert check_tensor("f", "x", x, kind="float", dim=2, shape=(2, None)) is x
    with pytest.raises(TypeError, match=r"^f: x must be a tensor, got list \(\[1, 2\]\)$"):
        check_tensor("f", "x", [1, 2])
    with pytest.raises(TypeError, match=r"^f: x must be a torch.long tensor \(token ids\), got torch.float32$"):
        check_tensor("f", "x", x, kind="long", note="token ids")
    with pytest.raises(TypeError, match=r"x must be a boolean tensor, got torch\.float32"):
        check_tensor("f", "x", x, kind="bool")
    with pytest.raises(TypeError, match=r"x must be an integer tensor, got torch\.bool"):
        check_tensor("f", "x", x.bool(), kind="integer")
    with pytest.raises(ValueError, match=r"^f: x must be 3-D, got shape \(2, 3\)$"):
        check_tensor("f", "x", x, dim=3)
    with pytest.raises(ValueError, match=r"^f: x must have shape \(B, L, E\), got shape \(2, 3\)$"):
        check_tensor("f", "x", x, dim=3, names="(B, L, E)")
    with pytest.raises(ValueError, match=r"^f: x must have shape \(\*, 4\), got \(2, 3\)$"):
        check_tensor("f", "x", x, shape=(None, 4))
    with pytest.raises(ValueError, match=r"^f: x must have shape \(3,\), got \(2, 3\)$"):
        check_tensor("f", "x", x, shape=(3,))


def test_check_grouped_qkv():
    q, k, v = torch.zeros(2, 4, 3, 5), torch.zeros(2, 2, 7, 5), torch.zeros(2, 2, 7, 6)
    check_grouped_qkv("f", q, k, v)
    check_grouped_qkv("f", q, torch.zeros(9, 2, 7, 5), torch.zeros(9, 2, 7, 6), same_batch=False)
    with pytest.raises(ValueError, match=r"^f: key must have shape \(B, G, S, E\), got shape \(2, 7, 5\)$"):
        check_grouped_qkv("f", q, k[0], v)
    with pytest.raises(
        ValueError, match=r"^f: pool \(P, G, bs, E\) and vp \(P, G, bs, Ev\) must agree but in the last"
    ):
        check_grouped_qkv(
            "f",
            q,
            k,
            v[:, :1],
            args=("query", "pool", "vp"),
            shapes=("(B, H, N, E)", "(P, G, bs, E)", "(P, G, bs, Ev)"),
        )
    with pytest.raises(
        ValueError, match=r"^f: the query's heads H must be a multiple of the key's and value's heads G"
    ):
        check_grouped_qkv("f", q[:, :3], k, v)
    with pytest.raises(ValueError, match=r"^f: query and key must have the same feature size E"):
        check_grouped_qkv("f", q[..., :4], k, v)
    with pytest.raises(ValueError, match=r"^f: query and key must have the same batch size B"):
        check_grouped_qkv("f", q[:1], k, v)
    with pytest.raises(TypeError, match=r"^f: query, key and value must share one dtype, got torch.float64"):
        check_grouped_qkv("f", q.double(), k, v)
    with pytest.raises(TypeError, match=r"^f: value must be a floating-point tensor, got torch.int64"):
        check_grouped_qkv("f", q, k, v.long())


def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name != "validation.py":
            yield path, ast.parse(path.read_text(), filename=str(path))


def _isinstance_of_int(node: ast.AST) -> bool:
    """``isinstance(x, int)`` or ``isinstance(x, (int, float, ...))``: an int check."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"):
        return False
    kinds = node.args[1]
    names = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
    return any(isinstance(n, ast.Name) and n.id in ("int", "float") for n in names)


def test_no_module_writes_its_own_int_or_number_check():
    found = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path, tree in _sources()
        for node in ast.walk(tree)
        if _isinstance_of_int(node)
    ]
    assert not found, f"use attnlab.validation.check_int / check_number instead: {found}"


def _raises(body: list[ast.stmt], name: str) -> bool:
    return any(
        isinstance(s, ast.Raise)
        and isinstance(s.exc, ast.Call)
        and isinstance(s.exc.func, ast.Name)
        and s.exc.func.id == name
        for s in body
    )


def _value_errors_for_types(tree: ast.AST) -> list[int]:
    """Lines of ``if not isinstance(x, T) [or ...]: raise ValueError``: a type test whose failure
    raises a ValueError. (``if flag and not isinstance(model, M)`` is a combination of values, not
    a type test, and is not flagged.)"""
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.If) and _raises(node.body, "ValueError")):
            continue
        tests = (
            node.test.values if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.Or) else [node.test]
        )
        if any(
            isinstance(t, ast.UnaryOp)
            and isinstance(t.op, ast.Not)
            and isinstance(t.operand, ast.Call)
            and getattr(t.operand.func, "id", "") == "isinstance"
            for t in tests
        ):
            lines.append(node.lineno)
    return lines


def test_a_failed_isinstance_check_raises_a_type_error():
    found = [
        f"{path.relative_to(PACKAGE)}:{line}" for path, tree in _sources() for line in _value_errors_for_types(tree)
    ]
    assert not found, f"a wrong type must raise TypeError (split the type and the value checks): {found}"


@pytest.mark.parametrize(
    ("code", "int_checks", "flagged"),
    [
        ("if isinstance(n, bool) or not isinstance(n, int) or n < 1:\n    raise ValueError('n')\n", 1, [1]),
        ("if not isinstance(p, (int, float)):\n    raise ValueError('p')\n", 1, [1]),
        ("if not isinstance(t, torch.Tensor) or t.dim() != 2:\n    raise ValueError('t')\n", 0, [1]),
        ("if not isinstance(t, torch.Tensor):\n    raise TypeError('t')\n", 0, []),
        ("if penalty and not isinstance(model, M):\n    raise ValueError('p')\n", 0, []),
    ],
)
def test_the_source_checks_find_what_they_look_for(code, int_checks, flagged):
    tree = ast.parse(code)
    assert sum(_isinstance_of_int(node) for node in ast.walk(tree)) == int_checks
    assert _value_errors_for_types(tree) == flagged


def _private_imports(path: Path, tree: ast.AST) -> list[str]:
    """``from attnlab.x import _name`` (or ``from .x import _name``) in a module that is not ``x``'s
    own package ``__init__``: a private helper shared between modules."""
    package = ".".join(("attnlab", *path.relative_to(PACKAGE).parent.parts))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = node.module or ""
        if not (node.level or source.startswith("attnlab")):
            continue  # another library's names
        if path.name == "__init__.py" and (node.level == 1 or source.startswith(package + ".")):
            continue  # a package re-exporting its own modules' names
        found += [f"{path.relative_to(PACKAGE)}:{node.lineno} {a.name}" for a in node.names if a.name.startswith("_")]
    return found


def test_no_module_imports_another_modules_private_helper():
    """A check or helper that several modules need is public (in attnlab.validation for checks);
    only a package's own __init__ may re-export a private name of its modules, for a listing's path."""
    found = [f for path, tree in _sources() for f in _private_imports(path, tree)]
    assert not found, f"make the helper public (a shared check: in attnlab.validation): {found}"


def test_the_private_import_check_finds_what_it_looks_for():
    module = PACKAGE / "attention" / "core.py"
    tree = ast.parse("from attnlab.attention.core import _naive\nfrom attnlab.validation import check_int\n")
    assert _private_imports(module, tree) == ["attention/core.py:1 _naive"]
    init = PACKAGE / "attention" / "__init__.py"
    assert _private_imports(init, ast.parse("from attnlab.attention.core import _naive\n")) == []


def test_the_trainers_checks_name_what_they_wanted():
    from torch import nn

    check_model("f", nn.Linear(1, 1), nn.Module)
    with pytest.raises(TypeError, match=r"^f: model must be a Linear or GRU, got str$"):
        check_model("f", "m", (nn.Linear, nn.GRU))
    with pytest.raises(TypeError, match=r"^f: model must be a captioner, got int$"):
        check_model("f", 3, nn.Module, "a captioner")
    check_pairs("f", [("a", "b")])
    with pytest.raises(ValueError, match=r"^f: pairs must be a non-empty sequence"):
        check_pairs("f", [])
    with pytest.raises(ValueError, match=r"^f: lr must be a number > 0, got 0$"):
        check_training("f", 1, None, 1, lr=0)
