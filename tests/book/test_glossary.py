"""The glossary (book/glossary.md): every term in English and Chinese, in alphabetical order, and
the Chinese lecture notes' own names kept where the book's name differs from theirs.

Read from the page's source: a ``{glossary}`` block whose entries are term lines (the English
name, then one or more Chinese names) followed by an indented definition.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GLOSSARY = Path(__file__).resolve().parents[2] / "book" / "glossary.md"
CJK = re.compile(r"[\u4e00-\u9fff]")

# Names that the Chinese lecture notes (the syllabus the book follows) give to terms, checked
# against the notes when the entries were written. Where the common Chinese name differs, the
# notes' name follows it, marked 讲义.
NOTES_NAMES = {
    "Attention weights": "权重系数（讲义）",
    "Distraction model": "分心模型",
    "Hierarchical attention": "多层注意力机制（讲义）",
    "Peeky decoder": "偷窥",
    "Soft addressing": "软寻址",
    "General attention (in the lecture notes)": "普通注意力",
}


def entries(text: str) -> dict[str, list[str]]:
    """English term -> the term's other lines (its Chinese names), in the page's order. A term's
    lines start at the margin; its definition is indented and may hold blank lines (display math)."""
    block = text.split("```{glossary}", 1)[1].split("\n```", 1)[0]
    found: dict[str, list[str]] = {}
    names: list[str] = []  # the term lines of the entry being read
    defined = False
    for line in block.strip("\n").split("\n"):
        if line and not line.startswith(" "):  # a term line
            if defined or not names:  # a new entry
                assert not names or defined, f"{names[0]!r} has no indented definition"
                names, defined = [line], False
                found[line] = []
            else:  # another name of the same term
                found[names[0]].append(line)
                names.append(line)
        elif line.strip():
            assert names, f"a definition without a term line: {line[:60]!r}"
            defined = True
    assert not names or defined, f"{names[0]!r} has no indented definition"
    return found


@pytest.fixture(scope="module")
def glossary() -> dict[str, list[str]]:
    return entries(GLOSSARY.read_text(encoding="utf-8"))


def test_every_term_has_an_english_and_a_chinese_name(glossary):
    assert len(glossary) > 50
    for english, chinese in glossary.items():
        assert not CJK.search(english), f"{english!r}: the first line is the English name"
        assert chinese and all(CJK.search(name) for name in chinese), f"{english!r} has no Chinese name line: {chinese}"


def test_terms_are_in_alphabetical_order(glossary):
    terms = list(glossary)
    assert terms == sorted(terms, key=str.casefold)


def test_the_lecture_notes_names_are_kept(glossary):
    for english, name in NOTES_NAMES.items():
        assert english in glossary, f"{english!r} left the glossary"
        assert any(name in line for line in glossary[english]), f"{english!r} lost the notes' name {name!r}"


def test_the_parser_sees_a_missing_chinese_name_and_a_wrong_order():
    text = "```{glossary}\nBeta\n贝塔\n  b.\n\nAlpha\n  a.\n```\n"
    found = entries(text)
    assert found == {"Beta": ["贝塔"], "Alpha": []}
    assert list(found) != sorted(found, key=str.casefold)
