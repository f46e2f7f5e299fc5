"""The chapter harness can fail: strict nbval rejects a notebook whose stored output was altered.

`make test` runs every chapter with `pytest --nbval` (strict, not --nbval-lax) and the sanitize
file tests/nbval_sanitize.cfg. These tests run the same command on copies of a small fixture
notebook and of a real chapter, with and without tampering.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
SANITIZE = ROOT / "tests" / "nbval_sanitize.cfg"
FIXTURE = ROOT / "tests" / "fixtures" / "harness.ipynb"


def _nbval(notebook: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pytest", "--nbval", str(notebook), "--nbval-sanitize-with", str(SANITIZE),
               "-p", "no:cacheprovider", "-q", "--rootdir", str(notebook.parent)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(command, cwd=notebook.parent, capture_output=True, text=True, timeout=300, env=env)


def _alter(path: Path, cell_index: int, old: str, new: str) -> None:
    nb = nbformat.read(path, as_version=4)
    cell = [c for c in nb.cells if c.cell_type == "code"][cell_index]
    output = cell.outputs[0]
    if output.output_type == "stream":
        assert old in output.text, (old, output.text)
        output.text = output.text.replace(old, new)
    else:
        assert old in output.data["text/plain"], (old, output.data["text/plain"])
        output.data["text/plain"] = output.data["text/plain"].replace(old, new)
    nbformat.write(nb, path)


@pytest.fixture
def fixture_copy(tmp_path: Path) -> Path:
    return Path(shutil.copy(FIXTURE, tmp_path / "harness.ipynb"))


def test_untouched_fixture_passes(fixture_copy):
    result = _nbval(fixture_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout


@pytest.mark.parametrize(("cell", "old", "new"), [(1, "45", "46"), (2, "0.1429", "0.143")])
def test_an_altered_output_fails(fixture_copy, cell, old, new):
    _alter(fixture_copy, cell, old, new)
    result = _nbval(fixture_copy)
    assert result.returncode != 0, "nbval accepted a tampered output"
    assert "1 failed" in result.stdout and "mismatch" in result.stdout.lower(), result.stdout


def test_the_sanitizer_masks_only_volatile_text(fixture_copy):
    _alter(fixture_copy, 0, "device: cpu", "device: cuda")  # a GPU runtime prints cuda: not a failure
    result = _nbval(fixture_copy)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_tampered_chapter_fails(tmp_path):
    chapter = Path(shutil.copy(ROOT / "chapters" / "00_preliminaries.ipynb", tmp_path / "chapter.ipynb"))
    nb = nbformat.read(chapter, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    target = next(i for i, c in enumerate(cells) if c.outputs and c.outputs[0].output_type == "stream"
                  and "maximum possible entropy" in c.outputs[0].text)
    _alter(chapter, target, "1.792", "1.800")
    result = _nbval(chapter)
    assert result.returncode != 0, "nbval accepted a tampered chapter"
    assert "1 failed" in result.stdout, result.stdout[-3000:]


def test_nbval_waits_long_enough_for_a_busy_kernel(tmp_path):
    """The root conftest.py raises nbval's hard-coded 5 s wait for a cell's output messages."""
    from nbval.plugin import IPyNbCell

    assert getattr(IPyNbCell, "_attnlab_patient", False), "conftest.py did not patch nbval"
    notebook = tmp_path / "slow_output.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('done')")])
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="done\n")]
    nb.cells[0].execution_count = 1
    nbformat.write(nb, notebook)
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")  # as when running from the repository
    result = _nbval(notebook)
    assert result.returncode == 0, result.stdout + result.stderr
