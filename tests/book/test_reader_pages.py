"""The reader's pages are written for a reader: of a readable length, free of the maintainers'
vocabulary, and with stored outputs that show what a reader wants to see (no wall-clock seconds,
no progress bar frozen in its text form).

What the maintainers need (how the book is verified, how a run went) lives in CONTRIBUTING.md,
the tests and the commits, not on a page of the book.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
MAX_WORDS = 3500  # of prose per chapter, exercises included

# Pages a reader reads, beside the chapters. The instructor guide talks about tests because its
# reader grades with them; How to use may say, once, that the book's claims are checked.
READER_PAGES = [
    ROOT / "book" / name
    for name in ("intro.md", "glossary.md", "notation.md", "written-questions.md", "bibliography.md", "performance.md")
] + sorted((ROOT / "chapters").glob("*.md"))

MAINTAINER_WORDS = re.compile(
    r"\bnbval\b|\b(strict|portable) (mode|check)s?\b|\bassert(s|ed|ing|ion|ions)?\b|\btest suite\b"
    r"|\bpytest\b|\bthe tests (of the package )?(check|compare)|\bfailed runs?\b|\bworkaround\b"
    r"|\brun[- ]by[- ]run\b|\bre-?record(ed|s)?\b|\bmake test\b",
    re.IGNORECASE,
)

# A time a chapter printed: "trained in 12.3 s", "0.52 ms per call", "(3.1 s)", "12.34it/s".
SECONDS = re.compile(r"\b\d+(\.\d+)?\s?(s|ms|µs|us|sec|secs|seconds?)\b(?!\w)|\bit/s\b|\bs/it\b")
PROGRESS_BAR = re.compile(r"\d+%\|")  # tqdm's text form, "  0%|          | 0/800"


def prose_words(markdown: str) -> int:
    """Words of a Markdown text, math left out: every run of letters and digits counts, so a
    role, a code span or a figure's alt text counts by the words it holds."""
    text = re.sub(r"\$\$.*?\$\$", " ", markdown, flags=re.DOTALL)  # display math
    text = re.sub(r"\$[^$\n]*\$", " ", text)  # inline math
    return len(re.findall(r"\w+", text))


def _markdown(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def _output_texts(path: Path):
    """(cell index, text) for every stored text output of a chapter."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if output.get("output_type") == "stream":
                yield i, output.get("text", "")
            for mime in ("text/plain", "text/html", "text/markdown"):
                data = output.get("data", {}).get(mime)
                if data:
                    yield i, data if isinstance(data, str) else "".join(data)


def test_prose_words_leaves_out_math_only():
    """Math does not count; words in roles, code spans and alt text do."""
    text = (
        "The scores $q \\cdot k$ are scaled {cite:p}`vaswani2017attention`.\n\n"
        "$$\nA = softmax(QK^T)\n$$\n\n:::{figure} a.svg\n:alt: two words\nIt's here.\n:::\n"
    )
    words = "The scores are scaled cite p vaswani2017attention figure a svg alt two words It s here"
    assert prose_words(text) == len(words.split())


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_is_at_most_3500_words_of_prose(path):
    """A chapter says each thing once: at most MAX_WORDS words of prose, exercises included."""
    words = prose_words(_markdown(path))
    assert words <= MAX_WORDS, f"{path.name}: {words} words of prose, more than {MAX_WORDS}"


@pytest.mark.parametrize("path", CHAPTERS + READER_PAGES, ids=lambda p: p.name)
def test_reader_page_has_no_maintainer_vocabulary(path):
    """No test mechanics (nbval, modes, 'asserted' remarks, the test suite) on a reader's page."""
    text = _markdown(path) if path.suffix == ".ipynb" else path.read_text(encoding="utf-8")
    found = sorted({m.group(0) for m in MAINTAINER_WORDS.finditer(text)})
    assert not found, f"{path.name} speaks to maintainers, not readers: {found}"


def test_how_to_use_mentions_the_checks_once():
    """How to use may say in one paragraph that the claims are checked; no more."""
    text = (ROOT / "book" / "how-to-use.md").read_text(encoding="utf-8")
    paragraphs = [p for p in re.split(r"\n\s*\n", text) if MAINTAINER_WORDS.search(p)]
    assert len(paragraphs) <= 1, [p[:80] for p in paragraphs]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_prints_no_seconds_and_no_frozen_progress_bar(path):
    """A stored output holds no wall-clock time and no progress bar's frozen text form."""
    problems = [
        (i, line.strip())
        for i, text in _output_texts(path)
        for line in text.splitlines()
        if SECONDS.search(line) or PROGRESS_BAR.search(line)
    ]
    assert not problems, f"{path.name} stores times or progress bars (cell, line): {problems[:5]}"


@pytest.mark.parametrize(
    "line",
    [
        "trained in 12.3 s",
        "3 seeds trained in 8.0 s)",
        "0.52 ms per call",
        "dates:   0%|          | 0/800 [00:00<?, ?it/s]",
        "took 3 seconds",
    ],
)
def test_the_output_check_sees_times_and_bars(line):
    """The patterns catch what chapters used to print."""
    assert SECONDS.search(line) or PROGRESS_BAR.search(line)


@pytest.mark.parametrize(
    "line",
    [
        "held-out exact match 0.952 0.931",
        "step  200: loss 1.23",
        "D = 16:  0.27  0.21",
        "1994-09-27",
        "shape (2, 3, 5)",
    ],
)
def test_the_output_check_passes_ordinary_lines(line):
    """Numbers that are not times are not flagged."""
    assert not (SECONDS.search(line) or PROGRESS_BAR.search(line))
