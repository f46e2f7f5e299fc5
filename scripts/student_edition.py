"""The student edition: the book without the exercises' solutions, so that a course can set the
chapters' exercises as homework.

Two products, both made from the chapters as committed (nothing is executed):

- ``python scripts/student_edition.py notebooks``: ``student/chapters/*.ipynb``, the chapters
  with every solution removed and their outputs cleared, committed so that students open them
  on Colab (the student site's Colab buttons point at them). ``tests/book/test_student_edition.py``
  fails when they are older than the chapters: run this after ``make execute``.
- ``python scripts/student_edition.py sources OUT``: a Jupyter Book source tree in ``OUT`` with
  the same pages, solutions removed (the chapters' and the written questions' model answers and
  rubrics), outputs kept, and no instructor guide; ``make book-student`` builds it into
  ``_build/html-student``.

What counts as a solution (sphinx-exercise's two forms, as the chapters write them):

- a ``:::{solution} LABEL`` directive in a markdown cell, to its closing ``:::``;
- a gated solution, from the line ``:::{solution-start} LABEL`` to the closing fence after
  ``:::{solution-end}``, with every cell in between (its code, its outputs, its glued numbers).

Exercises stay, word for word. A cell left empty is dropped.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import shutil
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
STUDENT_NOTEBOOKS = ROOT / "student" / "chapters"
# Pages of the instructor edition that the student edition leaves out.
INSTRUCTOR_ONLY = ("book/instructor-guide",)
EDITION_NOTE = (
    "*This is the student edition: the exercises' solutions are left out, so that a course can "
    "set them as homework. Everything else is the book as published.*"
)

_FENCE = re.compile(r"^:::\s*$")
_SOLUTION = re.compile(r"^:::\{solution\}")
_START = re.compile(r"^:::\{solution-start\}")
_END = re.compile(r"^:::\{solution-end\}")


def _cut_plain(text: str, where: str) -> str:
    """``text`` without its ``:::{solution}`` blocks (each to its closing ``:::``)."""
    lines, kept, i = text.split("\n"), [], 0
    while i < len(lines):
        if _SOLUTION.match(lines[i]):
            j = i + 1
            while j < len(lines) and not _FENCE.match(lines[j]):
                if lines[j].startswith(":::"):
                    raise ValueError(f"{where}: a directive inside a solution at line {j + 1}: not supported")
                j += 1
            if j == len(lines):
                raise ValueError(f"{where}: the solution at line {i + 1} has no closing ':::'")
            i = j + 1
            continue
        kept.append(lines[i])
        i += 1
    return "\n".join(kept)


def _tidy(text: str) -> str:
    """No runs of blank lines where a solution was, no blank lines at either end."""
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


def strip_solutions(nb: dict, where: str = "notebook") -> dict:
    """A copy of the notebook ``nb`` (as JSON) without its exercises' solutions."""
    out = copy.deepcopy(nb)
    cells, inside = [], False
    for n, cell in enumerate(nb["cells"]):
        text = "".join(cell["source"])
        if cell["cell_type"] != "markdown" or not (inside or "{solution" in text):
            if not inside:  # a cell without a solution stays as it is
                cells.append(copy.deepcopy(cell))
            continue
        kept, lines = [], text.split("\n")
        i = 0
        while i < len(lines):
            line = lines[i]
            if inside:
                if _END.match(line):  # the end directive and its closing fence
                    if i + 1 >= len(lines) or not _FENCE.match(lines[i + 1]):
                        raise ValueError(f"{where}, cell {n}: ':::{{solution-end}}' without its closing ':::'")
                    inside, i = False, i + 2
                    continue
                i += 1
                continue
            if _START.match(line):
                inside = True
            elif _END.match(line):
                raise ValueError(f"{where}, cell {n}: ':::{{solution-end}}' without a solution-start")
            else:
                kept.append(line)
            i += 1
        source = _tidy(_cut_plain("\n".join(kept), f"{where}, cell {n}"))
        if source.strip():
            new = copy.deepcopy(cell)
            new["source"] = source.splitlines(keepends=True)
            cells.append(new)
    if inside:
        raise ValueError(f"{where}: a solution-start without its solution-end")
    out["cells"] = cells
    return out


def clear_outputs(nb: dict) -> dict:
    """A copy of ``nb`` with no outputs, execution counts, timings or widget state (what students
    run themselves)."""
    out = copy.deepcopy(nb)
    out["metadata"].pop("widgets", None)
    for cell in out["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
            cell["metadata"].pop("execution", None)
    return out


def dumps(nb: dict) -> str:
    """A notebook as the chapters are written: JSON, indent 1, a final newline."""
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def chapters() -> list[Path]:
    return sorted((ROOT / "chapters").glob("*.ipynb"))


def student_notebook(chapter: Path) -> str:
    """The text of ``student/chapters/<name>.ipynb`` for ``chapter``."""
    nb = json.loads(chapter.read_text(encoding="utf-8"))
    return dumps(clear_outputs(strip_solutions(nb, chapter.name)))


def write_notebooks(folder: Path = STUDENT_NOTEBOOKS) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.ipynb"):
        old.unlink()
    written = []
    for chapter in chapters():
        path = folder / chapter.name
        path.write_text(student_notebook(chapter), encoding="utf-8")
        written.append(path)
    return written


def student_toc(toc: dict) -> dict:
    """The table of contents without the instructor-only pages."""
    toc = copy.deepcopy(toc)
    for part in toc["parts"]:
        part["chapters"] = [c for c in part["chapters"] if c["file"] not in INSTRUCTOR_ONLY]
    return toc


def student_config(config: dict) -> dict:
    config = copy.deepcopy(config)
    config["title"] = f"{config['title']} (student edition)"
    config["repository"]["path_to_book"] = "student"  # Colab opens student/chapters/*.ipynb
    config.setdefault("sphinx", {}).setdefault("config", {})["hide_solutions"] = True
    return config


def student_intro(text: str) -> str:
    """The front page: the edition note after the title, no paragraph about the instructor guide."""
    paragraphs = [p for p in text.split("\n\n") if "instructor-guide" not in p]
    title, rest = paragraphs[0], paragraphs[1:]
    return "\n\n".join([title, EDITION_NOTE, *rest])


def student_page(text: str, where: str = "page") -> str:
    """A Markdown page of the book without its solutions and without the paragraphs that point
    to the instructor-only pages."""
    if "{solution" in text:
        nb = strip_solutions({"cells": [{"cell_type": "markdown", "metadata": {}, "source": [text]}]}, where)
        text = "".join(nb["cells"][0]["source"]) + "\n"
    paragraphs = text.split("\n\n")
    return "\n\n".join(p for p in paragraphs if not any(page.split("/")[-1] in p for page in INSTRUCTOR_ONLY))


def write_sources(out: Path) -> Path:
    """The student edition's Jupyter Book source tree in ``out``."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    (out / "_config.yml").write_text(
        yaml.safe_dump(student_config(config), sort_keys=False, allow_unicode=True), encoding="utf-8"
    )
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    (out / "_toc.yml").write_text(yaml.safe_dump(student_toc(toc), sort_keys=False), encoding="utf-8")
    shutil.copytree(ROOT / "book", out / "book", ignore=shutil.ignore_patterns("__pycache__"))
    for page in INSTRUCTOR_ONLY:
        (out / f"{page}.md").unlink()
    intro = out / "book" / "intro.md"
    intro.write_text(student_intro(intro.read_text(encoding="utf-8")), encoding="utf-8")
    for page in sorted((out / "book").glob("*.md")):  # the written questions' rubrics, say
        text = page.read_text(encoding="utf-8")
        page.write_text(student_page(text, page.name), encoding="utf-8")
    (out / "chapters").mkdir()
    for page in (ROOT / "chapters").iterdir():
        if page.suffix == ".ipynb":
            nb = json.loads(page.read_text(encoding="utf-8"))
            (out / "chapters" / page.name).write_text(dumps(strip_solutions(nb, page.name)), encoding="utf-8")
        elif page.suffix == ".md":
            shutil.copy(page, out / "chapters" / page.name)
    # what the pages include from outside book/ (the benchmark appendix's tables), and the
    # instructor edition's vendored assets
    (out / "benchmarks").mkdir()
    for table in ("results.md", "results-gpu.md"):
        shutil.copy(ROOT / "benchmarks" / table, out / "benchmarks" / table)
    (out / "_build").mkdir()
    (out / "_build" / "vendor-root").symlink_to(ROOT / "_build" / "vendor-root", target_is_directory=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("notebooks", help="write student/chapters/*.ipynb")
    sources = sub.add_parser("sources", help="write the student site's source tree")
    sources.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.what == "notebooks":
        for path in write_notebooks():
            print(f"wrote {path.relative_to(ROOT)}")
    else:
        print(f"student edition sources in {write_sources(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
