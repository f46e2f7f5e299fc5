"""What Colab does: install the package from a built wheel, then run a chapter against that copy.

The wheel goes into a fresh virtual environment, and the chapter runs from a folder outside the
repository, so a chapter that only works because src/ happens to be importable (or because a
file is missing from the wheel) fails here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = ROOT / "chapters" / "00_preliminaries.ipynb"


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, **kwargs)
    assert result.returncode == 0, f"{' '.join(map(str, command))}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # A copy of the tree, so that building leaves no build/ or egg-info behind in the repository.
    source = out / "source"
    shutil.copytree(
        ROOT, source, ignore=shutil.ignore_patterns(".venv", "node_modules", "_build", ".git", "*.egg-info")
    )
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)])
    (found,) = out.glob("attnlab-*.whl")
    return found


def test_wheel_holds_the_package_and_nothing_else(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for needed in (
        "attnlab/__init__.py",
        "attnlab/py.typed",
        "attnlab/utils.py",
        "attnlab/viz.py",
        "attnlab/attention/masking.py",
    ):
        assert needed in names, f"{needed} is missing from the wheel"
    assert not [n for n in names if n.startswith(("tests/", "chapters/", "book/"))]
    # the licences travel with the package: its own, and the corpus's beside the corpus
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "LICENSE is missing from the wheel"
    assert "attnlab/data/corpus/LICENSE.txt" in names


def test_a_chapter_runs_against_the_installed_wheel(wheel, tmp_path):
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)])
    # The heavy dependencies (torch, Jupyter) come from the book's environment, appended after the
    # new environment's own site-packages: attnlab itself must come from the wheel.
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (site / "book_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")

    workdir = tmp_path / "reader"
    workdir.mkdir()
    shutil.copy(CHAPTER, workdir / CHAPTER.name)
    script = textwrap.dedent(f"""
        import nbformat
        from nbclient import NotebookClient

        nb = nbformat.read({str(workdir / CHAPTER.name)!r}, as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell("import attnlab; print(attnlab.__file__)"))
        NotebookClient(nb, kernel_name="python3", timeout=600,
                       resources={{"metadata": {{"path": {str(workdir)!r}}}}}).execute()
        print("ATTNLAB_FILE", nb.cells[-1].outputs[0].text.strip())
    """)
    result = _run([str(python), "-c", script], cwd=workdir)
    location = result.stdout.split("ATTNLAB_FILE", 1)[1].strip()
    assert location.startswith(str(venv)), f"the chapter imported attnlab from {location}, not the wheel"
