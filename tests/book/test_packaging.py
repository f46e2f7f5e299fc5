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
    for name, version in package["dependencies"].items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name}@{version} is not an exact version"
        assert lock["packages"][f"node_modules/{name}"]["version"] == version
