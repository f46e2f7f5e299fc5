"""The PDF edition, `_build/pdf/attnlab.pdf`, as `make pdf` (scripts/build_pdf.py) prints it from the
built website: a title page with the version, contents whose page numbers are right, every chapter
with its title, figures and outputs, internal links, the glossary's Chinese in a font that has it, no
code or figure wider than the printed column, and a size within bounds.

`make site` prints it after building the website; run alone, `make pdf` first.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import tomllib
import unicodedata
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
PDF = ROOT / "_build" / "pdf" / "attnlab.pdf"
REPORT = PDF.with_name("report.json")
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
sys.path.insert(0, str(ROOT / "scripts"))
import build_pdf  # noqa: E402

# Bounds: the book printed to 302 pages and 8.9 MB on 2026-12-08; a chapter more or a figure
# fewer moves both, a page that lost its outputs or a figure embedded a hundred times breaks them.
PAGES = (150, 600)
MAX_BYTES = 40_000_000


@functools.cache
def _reader():
    from pypdf import PdfReader

    if not PDF.is_file():
        pytest.fail(f"no PDF at {PDF}: run `make pdf` (`make site` does)")
    return PdfReader(str(PDF))


@functools.cache
def _text(index: int) -> str:
    """Page ``index``'s text layer; NFKC, because the CJK fonts map some characters to their Kangxi
    radical twins (U+2F3C for 心), which read the same."""
    return " ".join(unicodedata.normalize("NFKC", _reader().pages[index].extract_text() or "").split())


def _order() -> list[tuple[str, str]]:
    """(slug, path) of every page of the book, in _toc.yml's order."""
    return [(path.removesuffix(".html").replace("/", "-"), path) for _, path in build_pdf.toc_pages(ROOT)]


def _title(path: str) -> str:
    soup = BeautifulSoup((SITE / path).read_text(encoding="utf-8"), "html.parser")
    return " ".join(soup.select_one("article.bd-article h1").get_text(" ", strip=True).rstrip("#").split())


def test_size_and_pages_within_bounds():
    pages, size = len(_reader().pages), PDF.stat().st_size
    assert PAGES[0] <= pages <= PAGES[1], f"{pages} pages"
    assert size <= MAX_BYTES, f"{size / 1e6:.1f} MB"


def test_the_title_page_names_the_book_and_its_version():
    title = _text(0)
    assert "attnlab" in title and f"Version {VERSION}" in title, title


def test_the_contents_give_each_chapters_first_page():
    """The page each entry of the contents names is the page its chapter starts on (read from the
    PDF's own destinations, and from the text of that page: its title is there)."""
    from pypdf import PdfReader  # noqa: F401  (the reader above)

    first = build_pdf.first_pages(PDF, [slug for slug, _ in _order()])
    contents = " ".join(_text(i) for i in range(1, 3))
    for slug, path in _order():
        title = _title(path)
        words = re.escape(title[:40]).replace(r"\ ", r"\s*")
        entry = re.search(words + r".*?(\d+)", contents)
        assert entry, f"the contents have no entry for {title!r}"
        assert int(entry.group(1)) == first[slug], (
            f"{title!r}: contents say {entry.group(1)}, it starts on {first[slug]}"
        )
        compact = lambda s: re.sub(r"\s+", "", s)  # noqa: E731  (the text layer splits some words)
        assert compact(title) in compact(_text(first[slug] - 1)), f"page {first[slug]} does not show {title!r}"


def _images(resources) -> int:
    """The raster images a page's resources hold, inside its forms too (read, not decoded)."""
    count = 0
    for xobject in ((resources or {}).get("/XObject") or {}).values():
        xobject = xobject.get_object()
        if xobject.get("/Subtype") == "/Image":
            count += 1
        elif xobject.get("/Subtype") == "/Form":
            count += _images(xobject.get("/Resources"))
    return count


def test_every_chapter_with_its_figures_and_outputs():
    """Every image of the site's chapters is in the printed document, the PDF holds at least as many
    raster images as their pages show, every image loaded, and the chapters' printed outputs are there."""
    document = BeautifulSoup(PDF.with_suffix(".html").read_text(encoding="utf-8"), "html.parser")
    printed = {Path(img["src"].split("?")[0]).name for img in document.find_all("img")}
    site_rasters = 0
    for chapter in sorted((SITE / "chapters").glob("*.html")):
        article = BeautifulSoup(chapter.read_text(encoding="utf-8"), "html.parser").select_one("article.bd-article")
        names = [Path(img["src"].split("?")[0]).name for img in article.find_all("img")]
        missing = [n for n in names if n not in printed]
        assert not missing, f"{chapter.name}: images not printed: {missing}"
        site_rasters += sum(not n.endswith(".svg") for n in names)
    pdf_rasters = sum(_images(page.get("/Resources")) for page in _reader().pages)
    assert pdf_rasters >= site_rasters, f"the PDF holds {pdf_rasters} images, the chapters show {site_rasters}"
    report = json.loads(REPORT.read_text(encoding="utf-8"))
    assert report["broken_images"] == [], report["broken_images"]
    # an output the reader reads in chapter 1: its held-out exact match
    first = build_pdf.first_pages(PDF, [slug for slug, _ in _order()])
    chapter_1 = " ".join(_text(i) for i in range(first["chapters-01_bottleneck"] - 1, first["chapters-02_alignment"]))
    assert "all 5000 held-out dates: exact match" in chapter_1


def test_nothing_is_wider_than_the_printed_column():
    """Code wraps at the right margin, and no figure, table or formula runs past it (as Chromium lays
    the document out for print on A4)."""
    report = json.loads(REPORT.read_text(encoding="utf-8"))
    assert report["overflow"] == [], "wider than the printed column:\n" + "\n".join(report["overflow"])


def test_links_inside_the_book_go_to_its_pages():
    """A link to another page of the book (a cross-reference, a citation into the bibliography) is a
    link inside the PDF: many of them, and citations land on the bibliography's pages."""
    reader = _reader()
    first = build_pdf.first_pages(PDF, [slug for slug, _ in _order()])
    bibliography = first["book-bibliography"]
    named = reader.named_destinations  # computed anew at each access: once here
    internal, to_bibliography = 0, 0
    for page in reader.pages:
        for annotation in page.get("/Annots") or []:
            link = annotation.get_object()
            if link.get("/Subtype") != "/Link":
                continue
            destination = link.get("/Dest") or (link.get("/A") or {}).get("/D")
            if destination is None:
                continue
            internal += 1
            if isinstance(destination, str) or hasattr(destination, "startswith"):
                target = named.get(str(destination))
                number = reader.get_destination_page_number(target) + 1 if target is not None else None
            else:
                number = reader.get_page_number(destination[0].get_object()) + 1
            if number is not None and number >= bibliography:
                to_bibliography += 1
    assert internal >= 200, f"{internal} links inside the PDF"
    assert to_bibliography >= 50, f"{to_bibliography} links reach the bibliography"


def _is_cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" or "\u2f00" <= ch <= "\u2fdf" for ch in text)


def test_the_glossarys_chinese_is_set_in_a_font_that_has_it():
    """The glossary page's text layer holds its Chinese terms, and every piece of Chinese text is drawn
    by a font that has the glyphs: a CJK font embedded by name, or (as Chromium embeds the Noto CJK
    fonts) a Type 3 font whose glyphs are drawn outlines, not the small box of a missing glyph. The
    page's Latin font, DejaVu Sans, has no Chinese: Chinese drawn with it would be boxes."""
    import statistics

    first = build_pdf.first_pages(PDF, [slug for slug, _ in _order()])
    page = _reader().pages[first["book-glossary"] - 1]
    text = _text(first["book-glossary"] - 1)
    assert "术语表" in text and "加性注意力" in text, text[:200]
    fonts = {}

    def visit(chunk, cm, tm, font, size):
        if font is not None and _is_cjk(chunk):
            font = font.get_object() if hasattr(font, "get_object") else font
            fonts[id(font)] = font

    page.extract_text(visitor_text=visit)
    assert fonts, "no Chinese text found on the glossary page"
    for font in fonts.values():
        name = str(font.get("/BaseFont"))
        if font.get("/Subtype") == "/Type3":
            sizes = [len(glyph.get_object().get_data()) for glyph in font["/CharProcs"].values()]
            assert statistics.median(sizes) > 300, f"a Type 3 font's glyphs are tiny (boxes?): {sorted(sizes)}"
        else:
            assert "CJK" in name or "Han" in name, f"Chinese drawn with {name}, which has no Chinese glyphs"
