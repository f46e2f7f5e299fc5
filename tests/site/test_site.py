"""The built website, opened page by page in headless Chromium as a reader would.

Runs after `make book` (the `make test` target builds first). For every page it fails on: a page
that does not load, a failed request or a request that leaves the site (the site must work
offline), a console error, math that MathJax did not typeset, widgets that did not render, a
chapter page without its Colab launch link, and a broken internal link. A screenshot of each
page's first screen (1280 x 900) is saved under _build/screenshots/ for a person to look at;
`make screenshots` (ATTNLAB_FULL_PAGE_SHOTS=1) saves each page whole instead (a whole page
costs Chromium far more than its first screen, and nothing is checked in it). The local server,
the browser and the opened page come from tests/site/conftest.py.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest
import yaml
from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
FULL_PAGE = os.environ.get("ATTNLAB_FULL_PAGE_SHOTS") == "1"  # `make screenshots`
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _pages() -> list[str]:
    if not (SITE / "index.html").exists():
        raise RuntimeError(f"no built site at {SITE}: run `make book` first (`make test` does)")
    # genindex.html: Sphinx's generated index, empty for this book; 404.html: served in place of a
    # missing page, with links from the published site's root (tests/site/test_chrome.py opens it so)
    skip = {"genindex.html", "404.html"}
    pages = sorted(p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html"))
    return [p for p in pages if not p.startswith(("_", "vendor/")) and p not in skip]


PAGES = _pages()
_REPOSITORY = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["repository"]
REPO_URL = _REPOSITORY["url"].rstrip("/")
RELEASE = _REPOSITORY["branch"]  # the release tag the Colab links open (tests/book/test_release.py)


# Each page's browser checks (test_accessibility.py's, test_figures.py's and this one) on one worker,
# one after the other: the later ones reuse the page the first loaded (tests/site/conftest.py).
PAGE_PARAMS = [pytest.param(p, marks=pytest.mark.xdist_group(f"page:{p}")) for p in PAGES]


@pytest.mark.parametrize("page_path", PAGE_PARAMS)
def test_page_renders_offline(opened, screenshot, again_if_stalled, page_path):
    problems: list[str] = []

    def check() -> None:
        page, loading = opened.get(page_path)
        # what went wrong while it loaded, and since (the other check's use)
        problems[:] = loading
        _check_rendering(opened, screenshot, page, page_path, problems)

    again_if_stalled(check, opened.discard)
    assert not problems, f"{page_path}:\n  " + "\n  ".join(problems)


def _check_rendering(opened, screenshot, page, page_path: str, problems: list[str]) -> None:
    """The test above on the opened page: what is wrong goes into problems; a screenshot that stalls raises."""
    try:
        # Math: every formula on the page is typeset, without errors.
        n_math = page.locator(".math").count()
        if n_math:
            typeset = page.locator(".math mjx-container").count()
            if typeset < n_math:
                problems.append(f"math not typeset: {n_math - typeset} of {n_math} formulas")
            if page.locator("mjx-merror").count():
                problems.append("MathJax reported an error in a formula")
        # Widgets: every stored widget view is replaced by a rendered widget.
        n_views = page.locator(f'script[type="{WIDGET_VIEW}"]').count()
        if n_views:
            rendered = page.locator(".jupyter-widgets.widget-interact, .widget-vbox, .widget-hbox").count()
            if rendered < n_views:
                problems.append(f"{n_views} widget views stored, {rendered} rendered")
        # Sliders over pre-rendered figures (attnlab.figure_slider, figure_grid) work with no
        # kernel: moving each slider with the keyboard changes its readout and the picture shown.
        sliders = page.locator(".widget-vbox:has(.noUi-handle):has(img.widget-image)")
        for i in range(sliders.count()):
            widget = sliders.nth(i)
            handles = widget.locator(".noUi-handle")
            for j in range(handles.count()):
                handle, readout = handles.nth(j), widget.locator(".widget-readout").nth(j)
                before = (widget.locator("img.widget-image:visible").first.get_attribute("src"), readout.inner_text())
                handle.focus()
                page.keyboard.press("ArrowRight" if handle.get_attribute("aria-valuenow") == "0.0" else "ArrowLeft")
                page.wait_for_timeout(300)
                after = (widget.locator("img.widget-image:visible").first.get_attribute("src"), readout.inner_text())
                if after[0] == before[0] or after[1] == before[1]:
                    problems.append(
                        f"slider {i}.{j} does not change its figure in the browser: {before[1]!r} -> {after[1]!r}"
                    )
        # Chapters: the Colab launch button points at this notebook in the book's repository
        # (a chapter's Markdown overview page has no notebook, hence no button).
        if page_path.startswith("chapters/") and (ROOT / page_path).with_suffix(".ipynb").exists():
            colab = page.locator('a[href*="colab.research.google.com"]')
            hrefs = [colab.nth(i).get_attribute("href") for i in range(colab.count())]
            notebook = page_path.removesuffix(".html") + ".ipynb"
            repo_path = urlparse(REPO_URL).path.strip("/")
            if not any(repo_path in h and f"/blob/{RELEASE}/" in h and h.endswith(notebook) for h in hrefs):
                problems.append(f"no Colab link to {repo_path}/blob/{RELEASE}/.../{notebook}: found {hrefs}")
        # JPEG: encoding a whole chapter as PNG took 2.2-4 s of Chromium's time, as JPEG 1.6-2.3 s; one
        # pixel to a CSS pixel (scale="css"; the page has two): at two, a chapter took twice as long
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.evaluate("() => window.scrollTo(0, 0)")  # scrolled by the sliders' focus, the sidebars came out blank
        shot = SHOTS / (page_path.replace("/", "__").removesuffix(".html") + ".jpg")
        shot.unlink(missing_ok=True)
        screenshot(page, path=str(shot), full_page=FULL_PAGE, type="jpeg", quality=85, scale="css")
        problems.extend(_shot_problems(page, shot))
    except BaseException:
        opened.discard()  # the next check of this page starts from a fresh load
        raise


def _shot_problems(page, shot: Path) -> list[str]:
    """The saved screenshot is what it says it is: the first screen, or (FULL_PAGE) the whole page."""
    from PIL import Image

    if not shot.is_file():
        return [f"no screenshot saved at {shot}"]
    size = page.viewport_size
    expected = (
        size["width"],
        page.evaluate("() => document.documentElement.scrollHeight") if FULL_PAGE else size["height"],
    )
    with Image.open(shot) as image:
        got = image.size
    what = "the whole page" if FULL_PAGE else "the first screen"
    return (
        []
        if got == expected
        else [f"the screenshot is {got[0]} x {got[1]} px, {what} is {expected[0]} x {expected[1]}"]
    )


@functools.cache
def _ids(path: Path) -> frozenset[str]:
    """The anchors of a page (parsed once per page: every link with a fragment asks for them)."""
    soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
    return frozenset(
        {tag["id"] for tag in soup.find_all(id=True)}
        | {tag["name"] for tag in soup.find_all("a", attrs={"name": True})}
    )


@pytest.mark.parametrize("page_path", PAGES)
def test_internal_links_resolve(page_path):
    source = SITE / page_path
    soup = BeautifulSoup(source.read_text(encoding="utf-8"), "html.parser")
    broken = []
    for tag in soup.find_all("a", href=True):
        href = tag["href"]
        if re.match(r"^[a-z][a-z0-9+.-]*:", href) or href.startswith("//"):
            continue  # external link (http:, mailto:, ...): not followed offline
        url = urlparse(urljoin("http://site/" + page_path, href))
        target = SITE / unquote(url.path).lstrip("/")
        if target.is_dir():
            target = target / "index.html"
        if not target.exists():
            broken.append(f"{href} -> missing {target.relative_to(SITE)}")
        elif url.fragment and target.suffix == ".html" and unquote(url.fragment) not in _ids(target):
            broken.append(f"{href} -> no anchor #{url.fragment} in {target.relative_to(SITE)}")
    assert not broken, f"{page_path} has broken internal links:\n  " + "\n  ".join(broken)


@pytest.mark.parametrize("page_path", [p for p in PAGES if p.startswith("chapters/")])
def test_printed_output_reads_as_one_block(page_path):
    """A cell's printed lines are one block on the page (nb_merge_streams), not a box per print."""
    soup = BeautifulSoup((SITE / page_path).read_text(encoding="utf-8"), "html.parser")
    split = []
    for output in soup.select("div.cell_output"):
        blocks = [" ".join(tag.get("class", [])) for tag in output.find_all(recursive=False)]
        for first, second in itertools.pairwise(blocks):
            if "output stream" in first and "output stream" in second and "stderr" not in first + second:
                split.append(output.get_text()[:80].strip())
                break
    assert not split, f"{page_path}: printed output split into several blocks: {split}"


@pytest.mark.parametrize("page_path", [p for p in PAGES if p != "index.html"])  # index.html: a redirect
def test_every_page_names_the_holder_and_the_licences(page_path):
    soup = BeautifulSoup((SITE / page_path).read_text(encoding="utf-8"), "html.parser")
    footer = soup.select_one("footer.bd-footer-content")  # the article's footer (the theme has others)
    assert footer is not None, f"{page_path}: no article footer"
    text = " ".join(footer.get_text(" ").split())
    assert "2026 The attnlab authors" in text, f"{page_path}: the footer names no copyright holder: {text!r}"
    links = {a["href"]: a.get_text(strip=True) for a in footer.find_all("a", href=True)}
    assert links.get("https://creativecommons.org/licenses/by/4.0/") == "CC BY 4.0", f"{page_path}: {links}"
    assert links.get(f"{REPO_URL}/blob/main/LICENSE") == "MIT", f"{page_path}: {links}"


def test_every_chapter_has_a_page():
    chapters = sorted(p.stem for p in (ROOT / "chapters").glob("*.ipynb"))
    assert chapters, "no chapters found"
    missing = [c for c in chapters if f"chapters/{c}.html" not in PAGES]
    assert not missing, f"chapters without a page on the site: {missing}"


def test_assets_are_served_by_the_site_not_injected_into_every_page():
    index = (SITE / "book" / "intro.html").read_text(encoding="utf-8")
    assert "vendor/mathjax/tex-chtml.js" in index
    assert "cdn.jsdelivr.net" not in index and "cdnjs.cloudflare.com" not in index
    for ours in ("mathjax", "require.min.js", "@jupyter-widgets"):  # (_static/vendor/fontawesome is the theme's)
        assert not (SITE / "_static" / "vendor" / ours).exists(), ours
        assert (SITE / "vendor" / ours).exists(), ours
    sources = [
        urlparse(urljoin("http://site/book/intro.html", src)).path
        for src in re.findall(r'<script[^>]+src="([^"]+)"', index)
    ]
    assert "/vendor/mathjax/tex-chtml.js" in sources, sources
    assert not any(p.startswith("/_static/") and ("mathjax" in p or "embed-amd" in p) for p in sources), sources
