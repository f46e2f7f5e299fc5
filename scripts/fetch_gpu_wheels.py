"""Download, here, the wheels that `make test-gpu` needs on a CUDA machine without a network.

The CUDA machine we verify on has Python 3.12, its own CUDA build of torch (kept: never
reinstalled, as on Colab), numpy, matplotlib, pytest, pytest-xdist, hypothesis and tqdm, but
no Jupyter stack. This script takes the Jupyter packages that executing the chapters needs
(nbval, nbclient, ipykernel, ipywidgets and everything they require), at the versions pinned in
requirements.txt, and downloads them as wheels for CPython 3.12 on manylinux x86_64 into
``.gpu-wheels/`` (git-ignored; it travels with the working tree to the GPU machine, about
20 MB). ``scripts/test_gpu.sh`` installs them there with ``pip install --no-index --no-deps
--target``.

Usage: python scripts/fetch_gpu_wheels.py [--dest .gpu-wheels] [--python-version 3.12]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
# What executing and comparing the chapters needs beyond the package's own dependencies.
ROOTS = ("nbval", "nbclient", "ipykernel", "ipywidgets", "nbformat", "jupyter_client")
# Present on the CUDA machine (and on Colab), with their own dependencies: never shadowed.
PRESENT = ("torch", "numpy", "matplotlib", "pytest", "pytest-xdist", "hypothesis", "tqdm")
PLATFORMS = (
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
)


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line.strip())
        if match:
            pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def _closure(names: tuple[str, ...], environment: dict[str, str], strict: bool = True) -> set[str]:
    """Canonical names of ``names`` and everything they require (per this environment's metadata).

    With ``strict=False`` a package not installed here counts with no requirements.
    """
    seen: set[str] = set()
    todo = [canonicalize_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            if not strict:
                continue
            raise SystemExit(
                f"fetch_gpu_wheels: {name} is not installed in this environment (run `make install`)"
            ) from None
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate(environment | {"extra": ""}):
                continue
            todo.append(canonicalize_name(requirement.name))
    return seen


def wanted(python_version: str) -> dict[str, str]:
    """``{distribution: pinned version}`` of the wheels the GPU machine lacks."""
    environment = dict(default_environment())
    environment.update(
        python_version=python_version,
        python_full_version=f"{python_version}.0",
        sys_platform="linux",
        platform_system="Linux",
        platform_machine="x86_64",
        implementation_name="cpython",
        platform_python_implementation="CPython",
    )
    needed = _closure(ROOTS, environment) - _closure(PRESENT, environment, strict=False)
    pins = _pins()
    missing = sorted(n for n in needed if n not in pins)
    if missing:
        raise SystemExit(f"fetch_gpu_wheels: not pinned in requirements.txt: {missing}")
    return {name: pins[name] for name in sorted(needed)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", default=str(ROOT / ".gpu-wheels"))
    parser.add_argument("--python-version", default="3.12")
    args = parser.parse_args(argv)
    packages = wanted(args.python_version)
    dest = Path(args.dest)
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        args.python_version,
        "--implementation",
        "cp",
        "--dest",
        str(dest),
    ]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    command += [f"{name}=={version}" for name, version in packages.items()]
    subprocess.run(command, check=True)
    wheels = sorted(dest.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels) / 2**20
    print(f"fetch_gpu_wheels: {len(wheels)} wheels for Python {args.python_version} ({size:.1f} MB) in {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
