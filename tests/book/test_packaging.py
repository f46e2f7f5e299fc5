"""Pins for the book's environment, lower bounds for the package, and the two commands."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _requirements() -> list[str]:
    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return [l.strip() for l in lines if l.strip() and not l.startswith("#")]


def test_every_requirement_is_pinned():
    loose = [r for r in _requirements() if not re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[A-Za-z0-9_.+\-]+", r)]
    assert not loose, f"requirements.txt must pin every package with ==: {loose}"


def test_torch_is_pinned_to_the_wheel_on_disk():
    assert "torch==2.13.0" in _requirements()


def test_package_dependencies_are_lower_bounds_only():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["requires-python"] == ">=3.10"
    for dep in project["dependencies"]:
        assert ">=" in dep and "==" not in dep and "<" not in dep, f"{dep}: Colab must keep its own build"
    pinned = {r.split("==")[0].lower() for r in _requirements()}
    for dep in project["dependencies"]:
        assert re.split(r"[<>=]", dep)[0].lower() in pinned, f"{dep} is not pinned in requirements.txt"


def test_readme_gives_the_two_commands_first():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_block = readme.split("```")[1]
    assert "make book" in first_block and "make test" in first_block


def test_ci_runs_make_test():
    assert "make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_npm_assets_are_pinned_and_locked():
    import json

    package = json.loads((ROOT / "package.json").read_text(encoding="utf-8"))
    lock = json.loads((ROOT / "package-lock.json").read_text(encoding="utf-8"))
    pinned = {**package["dependencies"], **package.get("devDependencies", {})}  # axe-core: tests only
    for name, version in pinned.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name}@{version} is not an exact version"
        assert lock["packages"][f"node_modules/{name}"]["version"] == version


# --- the package's declared dependencies ----------------------------------------------------
# `import attnlab` once needed tqdm, which pyproject.toml did not declare: on a machine without
# it, `pip install attnlab` succeeded and the first import failed. These tests read the imports
# of every module of src/attnlab (also those inside functions) and compare them with
# pyproject.toml, in both directions.

SRC = ROOT / "src" / "attnlab"
COLAB_VERSIONS = Path(__file__).with_name("colab_versions.txt")


def _third_party_imports() -> dict[str, set[str]]:
    """Top-level module name -> the files of src/attnlab that import it (stdlib and attnlab dropped)."""
    import ast
    import sys

    found: dict[str, set[str]] = {}
    modules = sorted(SRC.rglob("*.py"))
    assert len(modules) > 10, f"found only {len(modules)} modules under {SRC}"
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue  # relative imports stay inside the package
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "attnlab":
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def _distribution_of(module: str) -> str:
    """The distribution that provides an import name, as this environment knows it (PyYAML for
    yaml, Pillow for PIL, ...); the name itself when nothing installed provides it."""
    from importlib.metadata import packages_distributions

    from packaging.utils import canonicalize_name

    dists = packages_distributions().get(module, [module])
    assert len(set(dists)) == 1, f"import {module} is provided by several distributions: {dists}"
    return canonicalize_name(dists[0])


def _declared(extra: str | None = None) -> dict[str, "Requirement"]:
    """The package's dependencies, or those of one of its extras."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    listed = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    reqs = [Requirement(d) for d in listed]
    return {canonicalize_name(r.name): r for r in reqs}


def test_every_third_party_import_of_the_package_is_declared():
    imports = _third_party_imports()
    assert {"torch", "numpy", "matplotlib", "ipywidgets", "tqdm"} <= set(imports), imports  # the scan works
    declared, grading = _declared(), _declared("grading")
    missing = {
        f"{module} (distribution {_distribution_of(module)}), imported by {sorted(files)}"
        for module, files in imports.items()
        if _distribution_of(module) not in declared
        # attnlab.grading runs where the assignments are graded: its imports may come from the extra
        and not (all("/grading/" in f for f in files) and _distribution_of(module) in grading)
    }
    assert not missing, f"pyproject.toml's dependencies do not declare: {sorted(missing)}"


def test_every_declared_dependency_is_imported():
    used = {_distribution_of(m) for m in _third_party_imports()}
    unused = sorted((set(_declared()) | set(_declared("grading"))) - used)
    assert not unused, f"pyproject.toml declares {unused}, which no module of src/attnlab imports"


def _colab_versions() -> dict[str, str]:
    from packaging.utils import canonicalize_name

    pins = {}
    for line in COLAB_VERSIONS.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.strip().split("==")
            pins[canonicalize_name(name)] = version
    return pins


def test_colab_satisfies_every_lower_bound():
    # Installing the book's package on Colab must upgrade nothing that Colab already has.
    colab = _colab_versions()
    for name, requirement in _declared().items():
        assert name in colab, f"{name} is not in {COLAB_VERSIONS.name}: add Colab's version of it"
        assert requirement.specifier.contains(colab[name]), (
            f"pyproject.toml asks for {requirement}, Colab has {name}=={colab[name]}: pip would upgrade it there"
        )
