"""The autograding is real: full marks for the reference, zero for the untouched student
version, and every plausible wrong solution in ``assignments/wrong_solutions.yml`` loses points
on its question with a message that teaches.

Grades with ``otter run`` (no Docker) against the autograder zip that ``make assignments``
builds; the build here goes to a temporary folder. About 10 s per graded notebook.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "assignments"))
import build  # noqa: E402

WRONG = yaml.safe_load((ROOT / "assignments" / "wrong_solutions.yml").read_text(encoding="utf-8"))
NAMES = [p.stem for p in build.sources()]


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("assignments")
    return {dest.name: dest for dest in build.main(out)}


def grade(dest: Path, notebook: Path, tmp: Path) -> dict[str, dict]:
    """Grade ``notebook`` with the assignment's autograder zip; question name -> result."""
    name = dest.name
    work = tmp / f"grade-{notebook.stem}"
    work.mkdir()
    submission = work / f"{name}.ipynb"
    shutil.copy(notebook, submission)
    done = subprocess.run([build.otter(), "run", "-a", str(dest / "autograder" / f"{name}-autograder.zip"),
                           "-o", str(work), str(submission)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((work / "results.json").read_text())
    return {t["name"]: t for t in results["tests"] if t["name"] != "Public Tests"}


def test_every_assignment_has_questions_and_wrong_solutions():
    assert len(NAMES) >= 3, f"at least three assignments, found {NAMES}"
    for name in NAMES:
        wrong = [w for w in WRONG if w["assignment"] == name]
        assert len(wrong) >= 2, f"{name}: at least two plausible wrong solutions, found {len(wrong)}"


@pytest.mark.parametrize("name", NAMES)
def test_reference_solution_scores_full_marks(built, name, tmp_path):
    dest = built[name]
    grades = grade(dest, dest / "autograder" / f"{name}.ipynb", tmp_path)
    assert grades, "no questions graded"
    for question, g in grades.items():
        assert g["score"] == g["max_score"] > 0, f"{name} {question}: {g['score']}/{g['max_score']}\n{g['output']}"


@pytest.mark.parametrize("name", NAMES)
def test_untouched_student_version_scores_zero(built, name, tmp_path):
    dest = built[name]
    student = nbformat.read(dest / "student" / f"{name}.ipynb", as_version=4)
    code = "\n".join(c.source for c in student.cells if c.cell_type == "code")
    assert "BEGIN SOLUTION" not in code and "# END SOLUTION" not in code
    grades = grade(dest, dest / "student" / f"{name}.ipynb", tmp_path)
    assert {q: g["score"] for q, g in grades.items()} == {q: 0 for q in grades}


@pytest.mark.parametrize("wrong", WRONG, ids=[f"{w['assignment']}-{w['question']}-{w['mistake']}" for w in WRONG])
def test_wrong_solution_fails_with_a_teaching_message(built, wrong, tmp_path):
    dest = built[wrong["assignment"]]
    nb = nbformat.read(dest / "autograder" / f"{dest.name}.ipynb", as_version=4)
    hits = [c for c in nb.cells if c.cell_type == "code" and wrong["find"] in c.source]
    assert len(hits) == 1, f"the edit {wrong['find']!r} must match one solution cell, matched {len(hits)}"
    hits[0].source = hits[0].source.replace(wrong["find"], wrong["replace"])
    path = tmp_path / "wrong.ipynb"
    nbformat.write(nb, path)
    g = grade(dest, path, tmp_path)[wrong["question"]]
    assert g["score"] < g["max_score"], f"{wrong['mistake']!r} kept full marks on {wrong['question']}"
    assert wrong["message"] in g["output"], f"message {wrong['message']!r} not shown; output:\n{g['output']}"
