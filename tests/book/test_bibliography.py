"""Citations a reader can follow: one in-text form per paper, and the bibliography labelled as
the text cites.

The chapters cite author-year ("Cho et al. [2014a]", "[Cho et al., 2014a]"); the bibliography
labels each entry the same way (book/_ext/attnlab_sphinx.py, ``attnlab_author_year``). Two
papers with the same first author, the same "et al." and the same year would read alike in the
text, so references.bib gives their years the letters a, b, ... in the order of their titles.
Checked in the .bib file, and on the built website (`make book`; `make test` builds it first):
every citation link's text names the year of the entry it leads to, no text leads to two
entries, and the bibliography's labels are the entries' citations, in order.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from pybtex.database import parse_file

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import attnlab_sphinx  # noqa: E402

ENTRIES = parse_file(ROOT / "book" / "references.bib").entries
YEAR = re.compile(r"^(\d{4})([a-z]?)$")


def _base(entry) -> str:
    """The citation without a year's letter: "Cho et al., 2014"."""
    return re.sub(r"[a-z]$", "", attnlab_sphinx.author_year(entry))


def test_every_year_is_a_year_with_at_most_a_letter():
    bad = {key: e.fields.get("year") for key, e in ENTRIES.items() if not YEAR.match(e.fields.get("year", ""))}
    assert not bad, f"references.bib: years must read 2017 or 2017a: {bad}"


def test_papers_cited_alike_take_the_letters_a_b_in_the_order_of_their_titles():
    groups = defaultdict(list)
    for key, entry in ENTRIES.items():
        groups[_base(entry)].append((entry.fields["title"].casefold(), key, YEAR.match(entry.fields["year"]).group(2)))
    for base, papers in groups.items():
        papers.sort()
        letters = [letter for _, _, letter in papers]
        if len(papers) == 1:
            assert letters == [""], f"{papers[0][1]}: the letter in {base}{letters[0]} tells it from nothing: drop it"
        else:
            expected = [chr(ord("a") + i) for i in range(len(papers))]
            assert letters == expected, (
                f"{[key for _, key, _ in papers]} are all cited as '{base}': their years need the letters "
                f"{expected} in the order of their titles, they have {letters}"
            )


def _soup(path: Path) -> BeautifulSoup:
    if not path.exists():
        pytest.fail(f"no built site at {SITE}: run `make book` first (`make test` does)")
    return BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")


def _bibliography() -> dict[str, str]:
    """The bibliography page's entries: anchor id -> label, in the page's order."""
    soup = _soup(SITE / "book" / "bibliography.html")
    return {c["id"]: c.select_one("span.label").get_text().strip("[]") for c in soup.select("div.citation")}


@pytest.mark.site
def test_the_bibliography_is_labelled_as_the_text_cites_in_that_order():
    labels = list(_bibliography().values())
    expected = [attnlab_sphinx.author_year(e) for e in ENTRIES.values()]
    assert sorted(labels) == sorted(expected), (
        f"the bibliography's labels are not the entries' citations: {sorted(set(labels) ^ set(expected))}"
    )
    order = [attnlab_sphinx.author_year(e) for e in attnlab_sphinx.AuthorYearSorting().sort(ENTRIES.values())]
    assert labels == order, f"the bibliography is not in the order of its labels: {labels}"
    assert labels.index("Cho et al., 2014a") < labels.index("Cho et al., 2014b")
    assert labels.index("Dao, 2023") < labels.index("Dao et al., 2022"), "one author before 'et al.'"


def _text_before(link, chars: int = 120) -> str:
    """The text just before ``link`` in its paragraph (a textual citation's names)."""
    parts = []
    for node in link.previous_siblings:
        parts.insert(0, node.get_text() if hasattr(node, "get_text") else str(node))
        if sum(map(len, parts)) >= chars:
            break
    return " ".join("".join(parts).split())


@pytest.mark.site
def test_each_citation_in_the_text_reads_as_its_papers_label():
    """A textual citation, "Cho et al. [2014a]" (the link on the year), or a parenthetical one,
    "[Cho et al., 2014a]" (the link on both), reads as the label of the entry it leads to; with
    one label per entry (above), no citation can stand for two papers."""
    labels = _bibliography()
    cited: dict[str, set[str]] = defaultdict(set)
    wrong = []
    pages = sorted(SITE.glob("chapters/*.html")) + sorted(SITE.glob("book/*.html"))
    for page in pages:
        for link in _soup(page).select('a.reference.internal[href*="bibliography.html#"]'):
            anchor = link["href"].split("#", 1)[1]
            if anchor not in labels:
                continue  # a link to the page itself or to a heading, not to an entry
            who, _, year = labels[anchor].rpartition(", ")
            text = " ".join(link.get_text().split())
            if text == year:  # textual: the names stand before the bracket
                before = _text_before(link)
                reads = f"{who}, {year}" if before.endswith(f"{who} [") else f"{before[-40:]}{text}]"
            else:
                reads = text
            if reads != labels[anchor]:
                wrong.append(f"{page.name}: '{reads}' leads to [{labels[anchor]}]")
            cited[reads].add(anchor)
    assert cited, "no citation links found"
    assert not wrong, "citations that do not read as their entry's label:\n" + "\n".join(wrong)
    assert {"Cho et al., 2014a", "Cho et al., 2014b", "Liu et al., 2020a", "Liu et al., 2020b"} <= set(cited), sorted(
        cited
    )
    assert len(set(labels.values())) == len(labels), f"two entries share a label: {sorted(labels.values())}"
