"""The package's layers (CONTRIBUTING.md, "Where things are"): a module imports only from its own
layer or a lower one, so that serving code never reaches into the models it is passed, and
the attention functions never into the models built from them."""

from __future__ import annotations

import ast
from pathlib import Path

import attnlab

PACKAGE = Path(attnlab.__file__).parent

# Layer of each top-level part of the package (a folder or a module), lowest first.
LAYERS = {
    "validation": 0,
    "shapes": 0,
    "utils": 0,
    "viz": 0,
    "listings": 0,
    "prose": 0,
    "attention": 1,
    "kernels": 1,
    "data": 1,
    "complexity": 1,
    "inference": 2,
    "alignment": 2,
    "attribution": 2,
    "models": 3,
    "train": 4,
    "grading": 4,
}


def _part(module: str) -> str | None:
    """``attnlab.attention.core`` -> ``attention``; ``attnlab`` itself -> None (the face)."""
    names = module.split(".")
    return names[1] if names[0] == "attnlab" and len(names) > 1 else None


def _upward_imports(path: Path, tree: ast.AST) -> list[str]:
    own = _part(".".join(("attnlab", *path.relative_to(PACKAGE).with_suffix("").parts)))
    if own is None or own not in LAYERS:
        return []
    typing_only = {  # imports for annotations only (`if TYPE_CHECKING:`) run nothing
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        for module in modules:
            part = _part(module)
            if part is not None and part in LAYERS and LAYERS[part] > LAYERS[own]:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} imports {module}")
    return found


def test_every_part_of_the_package_has_a_layer():
    modules = {p.stem for p in PACKAGE.glob("*.py") if not p.name.startswith("_")}
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    parts = modules | folders
    assert parts <= set(LAYERS), f"give these a layer: {sorted(parts - set(LAYERS))}"


def test_no_module_imports_from_a_higher_layer():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += _upward_imports(path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    assert not found, f"imports that run up the layers: {found}"


def test_the_kernels_import_nothing_of_the_package_but_validation():
    # A fused kernel is read beside its algorithm; it leans on no other part of the package.
    found = []
    for path in sorted((PACKAGE / "kernels").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            found += [
                f"{path.name} imports {n}"
                for n in names
                if n.startswith("attnlab") and not n.startswith(("attnlab.validation", "attnlab.kernels"))
            ]
    assert not found, found


def test_the_layer_check_finds_what_it_looks_for():
    inference = PACKAGE / "inference" / "paged.py"
    tree = ast.parse("from attnlab.models import TransformerLM\nfrom attnlab.attention import masking\n")
    assert _upward_imports(inference, tree) == ["inference/paged.py:1 imports attnlab.models"]
    attention = PACKAGE / "attention" / "core.py"
    assert _upward_imports(attention, ast.parse("import attnlab.train.loop\n")) == [
        "attention/core.py:1 imports attnlab.train.loop"
    ]
    typing_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from attnlab.models import Seq2Seq\n"
    assert _upward_imports(inference, ast.parse(typing_only)) == []
    models = PACKAGE / "models" / "lm.py"
    assert _upward_imports(models, ast.parse("from attnlab.inference import PagedKVCache\n")) == []
