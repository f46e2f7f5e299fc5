"""The student edition (scripts/student_edition.py): every solution gone, every exercise kept, and
nothing that remains depends on what was removed.

The stripping is checked on a small notebook with both forms of solution, on every chapter, on
the committed Colab notebooks (``student/chapters/``, which must be up to date) and, after
``make book-student`` (``make test`` builds it), on the built student site against the
instructor edition's.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import student_edition as se  # noqa: E402

CHAPTERS = se.chapters()
STUDENT_SITE = ROOT / "_build" / "html-student"
SITE = ROOT / "_build" / "html"


def _md(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text.splitlines(keepends=True)}


def _code(text: str) -> dict:
    return {
        "cell_type": "code",
        "metadata": {},
        "execution_count": 3,
        "source": text.splitlines(keepends=True),
        "outputs": [{"output_type": "stream", "name": "stdout", "text": ["4\n"]}],
    }


def _text(nb: dict) -> str:
    return "\n".join("".join(c["source"]) for c in nb["cells"])


def _exercises(text: str) -> list[str]:
    return re.findall(r"^:::\{exercise\}.*\n:label: ([\w-]+)", text, re.M)


def test_both_forms_of_solution_are_removed_and_the_exercises_kept():
    nb = {
        "cells": [
            _md(
                "## Exercises\n\n:::{exercise}\n:label: ex-a\n\nProve it.\n:::\n\n"
                ":::{solution} ex-a\n:class: dropdown\n\nBy induction: SECRET-A.\n:::\n\n"
                ":::{exercise}\n:label: ex-b\n\nCode it.\n:::\n\n:::{solution-start} ex-b\n:class: dropdown\n:::\n\n"
                "Run this (SECRET-B):"
            ),
            _code("answer = 2 + 2  # SECRET-C\nprint(answer)"),
            _md("It prints 4, SECRET-D.\n\n:::{solution-end}\n:::\n\n:::{exercise}\n:label: ex-c\n\nThink.\n:::"),
            _code("print('after the exercises')"),
        ],
        "metadata": {"widgets": {"state": "..."}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    out = se.strip_solutions(nb)
    text = _text(out)
    assert not re.search(r"SECRET|solution", text), text
    assert _exercises(text) == ["ex-a", "ex-b", "ex-c"] and "Prove it." in text and "Think." in text
    assert [c["cell_type"] for c in out["cells"]] == ["markdown", "markdown", "code"]
    assert "".join(out["cells"][-1]["source"]) == "print('after the exercises')"
    assert _text(nb).count("SECRET") == 4, "the input is left as it was"
    cleared = se.clear_outputs(out)
    assert all(
        c["outputs"] == [] and c["execution_count"] is None for c in cleared["cells"] if c["cell_type"] == "code"
    )
    assert "widgets" not in cleared["metadata"], "the widgets' saved state is output too"


@pytest.mark.parametrize(
    "broken",
    [
        ":::{solution} ex-a\nno end",
        ":::{solution-start} ex-a\n:::\nnever ended",
        ":::{solution-end}\n:::",
        ":::{solution-start} ex-a\n:::\ntext\n:::{solution-end}",
    ],
)
def test_a_solution_that_is_not_closed_is_an_error_not_a_leak(broken):
    with pytest.raises(ValueError, match="solution"):
        se.strip_solutions({"cells": [_md(broken)], "metadata": {}})


def _names(source: str) -> tuple[set[str], set[str]]:
    """(names a code cell binds, names it reads); IPython's % lines are left out."""
    source = "\n".join(
        line[: len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!")) else line
        for line in source.splitlines()
    )
    tree = ast.parse(source)
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, ast.Store) else read).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return bound, read


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_each_chapter_loses_its_solutions_and_nothing_else(chapter):
    nb = json.loads(chapter.read_text(encoding="utf-8"))
    out = se.strip_solutions(nb, chapter.name)
    before, after = _text(nb), _text(out)
    labels = _exercises(before)
    assert labels, f"{chapter.name}: no exercises"
    assert _exercises(after) == labels, f"{chapter.name}: exercises lost"
    assert "{solution" not in after, f"{chapter.name}: a solution is left"
    assert before.count("{solution") >= len(labels), f"{chapter.name}: an exercise without a solution?"
    # the text before the exercises, word for word
    head = before.index("## Exercises")
    assert after[: after.index("## Exercises")] == before[:head], (
        f"{chapter.name}: the text before the exercises changed"
    )
    # no code that stays reads a name that only the removed code binds
    kept_code = ["".join(c["source"]) for c in out["cells"] if c["cell_type"] == "code"]
    removed = [c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]) not in kept_code]
    removed_bound = set().union(*(_names("".join(c["source"]))[0] for c in removed)) if removed else set()
    kept_bound = set().union(*(_names(s)[0] for s in kept_code))
    for source in kept_code:
        orphans = (_names(source)[1] & removed_bound) - kept_bound
        assert not orphans, f"{chapter.name}: a cell that stays reads {orphans}, bound only in a removed solution"


def test_the_committed_colab_notebooks_are_up_to_date():
    committed = sorted(p.name for p in se.STUDENT_NOTEBOOKS.glob("*.ipynb"))
    assert committed == [c.name for c in CHAPTERS], (
        "student/chapters/ must hold one notebook per chapter: run `python scripts/student_edition.py notebooks`"
    )
    for chapter in CHAPTERS:
        text = (se.STUDENT_NOTEBOOKS / chapter.name).read_text(encoding="utf-8")
        assert text == se.student_notebook(chapter), (
            f"student/chapters/{chapter.name} is older than the chapter: run `python scripts/student_edition.py "
            "notebooks` and commit it"
        )
        nb = json.loads(text)
        assert all(not c.get("outputs") for c in nb["cells"]), chapter.name


def test_the_student_toc_and_intro_leave_out_the_instructor_guide():
    import yaml

    toc = se.student_toc(yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8")))
    files = [c["file"] for part in toc["parts"] for c in part["chapters"]]
    assert "book/instructor-guide" not in files and "chapters/07_complexity" in files
    intro = se.student_intro((ROOT / "book" / "intro.md").read_text(encoding="utf-8"))
    assert "instructor-guide" not in intro and se.EDITION_NOTE in intro and "{doc}`how-to-use`" in intro


def _soup(path: Path) -> BeautifulSoup:
    if not path.exists():
        raise RuntimeError(f"no built site at {path}: run `make book book-student` first (`make test` does)")
    return BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")


@pytest.mark.site
@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_the_student_site_shows_the_exercises_without_their_solutions(chapter):
    page = f"chapters/{chapter.stem}.html"
    student, instructor = _soup(STUDENT_SITE / page), _soup(SITE / page)
    exercises = [e.get("id") for e in instructor.select("div.exercise")]
    assert exercises and [e.get("id") for e in student.select("div.exercise")] == exercises
    assert instructor.select("div.solution"), f"{page}: the instructor edition shows its solutions"
    assert not student.select("div.solution") and "Solution to" not in student.get_text(), (
        f"{page}: the student edition shows a solution"
    )
    colab = [a["href"] for a in student.select('a[href*="colab.research.google.com"]')]
    assert colab and all(h.endswith(f"/student/chapters/{chapter.name}") for h in colab), colab
    assert (se.STUDENT_NOTEBOOKS / chapter.name).exists()


@pytest.mark.site
def test_the_student_site_has_no_instructor_guide_and_says_which_edition_it_is():
    assert (SITE / "book" / "instructor-guide.html").exists()
    assert not (STUDENT_SITE / "book" / "instructor-guide.html").exists()
    intro = _soup(STUDENT_SITE / "book" / "intro.html").get_text()
    assert (
        "This is the student edition" in intro
        and "(student edition)" in _soup(STUDENT_SITE / "book" / "intro.html").title.get_text()
    )


def test_the_written_questions_have_a_model_answer_and_a_rubric_whose_points_add_up():
    text = (ROOT / "book" / "written-questions.md").read_text(encoding="utf-8")
    exercises = [
        (label, points)
        for points, label in re.findall(
            r"^:::\{exercise\} Question \d+: .*\((\d+) points\)\n:label: ([\w-]+)$", text, re.M
        )
    ]
    assert len(exercises) >= 3, f"at least three written questions with their points, found {exercises}"
    for label, points in exercises:
        solution = text.split(f":::{{solution}} {label}\n", 1)[1].split("\n:::\n", 1)[0]
        assert "*Model answer.*" in solution, f"{label}: no model answer"
        rubric = re.search(r"\*Rubric \((\d+) points\)\.\*(.*)", solution, re.S)
        assert rubric and rubric.group(1) == points, (
            f"{label}: the rubric must be out of the question's {points} points"
        )
        parts = [int(n) for n in re.findall(r"(?<=\s)(\d+):(?=\s)", rubric.group(2))]
        each = re.search(r"(\d+) for each part", rubric.group(2))
        n_parts = len(re.findall(r"^\d\. ", text.split(f":label: {label}\n", 1)[1].split("\n:::\n", 1)[0], re.M))
        total = int(each.group(1)) * n_parts if each else sum(parts)
        assert total == int(points), f"{label}: the rubric's marks add up to {total}, the question gives {points}"


@pytest.mark.site
def test_the_student_site_shows_the_written_questions_without_answers_or_rubrics():
    page = "book/written-questions.html"
    student, instructor = _soup(STUDENT_SITE / page), _soup(SITE / page)
    questions = [e.get("id") for e in instructor.select("div.exercise")]
    assert len(questions) >= 3 and [e.get("id") for e in student.select("div.exercise")] == questions
    assert len(instructor.select("div.solution")) == len(questions)
    assert (
        not student.select("div.solution")
        and "Rubric" not in student.get_text()
        and "Model answer" not in (student.get_text())
    ), f"{page}: the student edition shows an answer or a rubric"
    assert "instructor guide" not in student.get_text().lower(), (
        f"{page}: the student edition points to a page it has not"
    )
