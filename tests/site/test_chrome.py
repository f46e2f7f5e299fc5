"""The published site's chrome, on every page: one search field, the reader's colour mode, columns
that never cut their text, the licence in the footer; and the 404 page, the sitemap and the
preview cards (OpenGraph) that a link shared in a course forum shows.

The chrome itself is set in _config.yml and book/_ext/attnlab_sphinx.py (``published_chrome``)
and styled in book/_ext/static/attnlab-a11y.css. The checks that read a page in Chromium share the
page that tests/site/test_site.py opened (same xdist group), resized in place to a phone's, a
tablet's and a desktop's width.
"""

from __future__ import annotations

import functools
import http.server
import re
import threading
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest
import yaml
from bs4 import BeautifulSoup
from test_site import PAGE_PARAMS, PAGES, REPO_URL

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
BASEURL = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["html"]["baseurl"]
WIDTHS = {
    "phone": {"width": 390, "height": 844},
    "tablet": {"width": 820, "height": 1180},
    "desktop": {"width": 1280, "height": 900},
}
LICENCE = "https://creativecommons.org/licenses/by/4.0/"

# Every control that opens the search, visible (CSS) or not: the sidebar's field, the header's
# field, the article header's button (narrow pages), a plain search form.
SEARCH_CONTROLS = """() => Array.from(document.querySelectorAll(
    'form.bd-search, .search-button-field, button.search-button, input[type=search]'))
  .filter(e => e.checkVisibility() && e.getBoundingClientRect().width > 0)
  .filter(e => !(e.matches('input') && e.closest('form.bd-search')))  // a form's field: the form
  .filter(e => !e.closest('article, .bd-search-container'))  // search.html's own query field: its content
  .map(e => e.className || e.tagName)"""

# Elements of either sidebar or the article that reach past their column's box, or whose text
# is cut off (overflow hidden and wider content), outside any region that scrolls sideways (a
# code block or a wide table scrolls: its text is reachable). A sidebar that is a closed drawer
# (narrow pages) lies outside the window and is skipped; text for screen readers only is clipped
# by design; so are MathJax's own parts (its stretchy glyphs, its hidden MathML).
OVERFLOWING = """() => {
  const found = [];
  for (const sel of ['.bd-sidebar-primary', '.bd-sidebar-secondary', 'article.bd-article']) {
    const box = document.querySelector(sel);
    if (!box || !box.checkVisibility()) continue;
    const outer = box.getBoundingClientRect();
    const width = document.documentElement.clientWidth;
    if (outer.left >= width - 1 || outer.right <= 1) continue;
    const right = Math.min(outer.right, width);
    for (const e of box.querySelectorAll('*')) {
      if (!e.checkVisibility() || e.closest('.visually-hidden, .sr-only, mjx-container')) continue;
      let scrolls = false;
      for (let a = e.parentElement; a && a !== box; a = a.parentElement) {
        const o = getComputedStyle(a).overflowX;
        if (o === 'auto' || o === 'scroll') { scrolls = true; break; }
      }
      if (scrolls) continue;
      const r = e.getBoundingClientRect();
      if (r.width === 0 || r.height === 0) continue;
      const style = getComputedStyle(e);
      const clipped = style.display !== 'inline' && !e.matches('span.math')
        && (style.overflowX === 'hidden' || style.overflowX === 'clip') && e.scrollWidth > e.clientWidth + 1;
      if (r.right > right + 1 || r.left < outer.left - 1 || clipped) {
        const text = (e.textContent || '').trim().slice(0, 50);
        found.push(`${sel}: <${e.tagName.toLowerCase()} class="${e.className}"> "${text}" `
          + `spans x = ${Math.round(r.left)}..${Math.round(r.right)} in ${Math.round(outer.left)}..${Math.round(right)}`
          + (clipped ? ' (its text is cut off)' : ''));
      }
    }
  }
  return found;
}"""


@pytest.mark.parametrize("page_path", PAGE_PARAMS)
def test_one_search_field_and_no_clipped_column_at_any_width(opened, page_path):
    problems = []
    try:
        for name, viewport in WIDTHS.items():
            page, _ = opened.get(page_path, viewport)
            controls = page.evaluate(SEARCH_CONTROLS)
            if len(controls) != 1:
                problems.append(f"{name}: {len(controls)} visible search fields, expected 1: {controls}")
            problems.extend(f"{name}: {found}" for found in page.evaluate(OVERFLOWING)[:5])
            licence = page.locator(f'footer.bd-footer-content a[href="{LICENCE}"]')
            if not (licence.count() == 1 and licence.first.evaluate("e => e.checkVisibility()")):
                problems.append(f"{name}: the footer's licence link is not shown")
    except BaseException:
        opened.discard()
        raise
    assert not problems, f"{page_path}:\n  " + "\n  ".join(problems)


@pytest.fixture(scope="module")
def system_pages(browser, server):
    """A function: the colour mode ``<html data-theme>`` that each page opens in for a reader whose
    system asks for ``scheme``, before the reader has chosen a mode (a new browser profile)."""

    def modes(scheme: str) -> dict[str, str]:
        context = browser.new_context(color_scheme=scheme)
        page = context.new_page()
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(server) else route.abort())
        try:
            found = {}
            for path in PAGES:
                if path == "index.html":  # a redirect to the front page, which is in PAGES
                    continue
                page.goto(server + path, wait_until="domcontentloaded")  # the theme sets the mode in <head>
                found[path] = page.evaluate("() => document.documentElement.dataset.theme")
            return found
        finally:
            context.close()

    return modes


def test_every_page_defaults_to_the_systems_colour_mode():
    """The theme's default mode is "auto" (_config.yml's html_context): the system's, until the reader
    chooses one with the header's button (kept in localStorage)."""
    wrong = {}
    for path in (p for p in PAGES if p != "index.html"):
        body = BeautifulSoup((SITE / path).read_text(encoding="utf-8"), "html.parser").body
        if body.get("data-default-mode") != "auto":
            wrong[path] = body.get("data-default-mode")
    assert not wrong, f"pages whose default colour mode is not the system's: {wrong}"


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_the_colour_mode_follows_the_system(system_pages, scheme):
    found = system_pages(scheme)
    wrong = {path: mode for path, mode in found.items() if mode != scheme}
    assert not wrong, f"pages not in the system's {scheme} mode (prefers-color-scheme: {scheme}): {wrong}"


class _PagesHandler(http.server.SimpleHTTPRequestHandler):
    """GitHub Pages for a project site: the site under /<repository>/, and 404.html with status 404
    for any path that has no file."""

    prefix = "/"

    def log_message(self, *args):
        pass

    def translate_path(self, path: str) -> str:
        path = urlparse(path).path
        inside = path.startswith(self.prefix)
        return super().translate_path("/" + path[len(self.prefix) :] if inside else "/no-such-file")

    def send_head(self):
        if Path(self.translate_path(self.path)).exists():
            return super().send_head()
        body = (SITE / "404.html").read_bytes()
        self.send_response(404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return None


@pytest.fixture(scope="module")
def pages_server():
    prefix = urlparse(BASEURL).path
    handler = functools.partial(type("Handler", (_PagesHandler,), {"prefix": prefix}), directory=str(SITE))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}{prefix}"
    httpd.shutdown()


@pytest.mark.parametrize("missing", ["no-such-page.html", "chapters/99_no_such_chapter.html", "a/b/c/"])
def test_a_missing_page_shows_the_404_page_with_the_site_around_it(browser, pages_server, missing):
    """At any depth: its styles, scripts and links start from the site's root path, so that they load
    wherever GitHub Pages serves it; its link to the front page opens the front page."""
    context = browser.new_context()
    page = context.new_page()
    failed = []
    page.on("response", lambda r: r.status >= 400 and r.url != pages_server + missing and failed.append(r.url))
    page.on("requestfailed", lambda r: failed.append(r.url))
    try:
        response = page.goto(pages_server + missing, wait_until="load")
        assert response is not None and response.status == 404
        page.wait_for_load_state("networkidle")
        assert page.get_by_role("heading", name="Page not found").count() == 1
        assert not failed, f"{missing}: these did not load: {failed}"
        assert page.locator(".bd-sidebar-primary nav").count() >= 1, "the 404 page has no book navigation"
        background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
        assert background not in ("", "rgba(0, 0, 0, 0)"), "the theme's styles did not load"
        page.get_by_role("link", name="the front page").click()
        page.wait_for_url(re.compile(r".*/book/intro\.html$"))  # the root's index.html redirects there
        page.wait_for_load_state("load")
        assert page.title().startswith("attnlab"), page.title()
    finally:
        context.close()


def _sitemap() -> list[str]:
    tree = ET.parse(SITE / "sitemap.xml")
    return [loc.text or "" for loc in tree.getroot().iter("{http://www.sitemaps.org/schemas/sitemap/0.9}loc")]


def test_the_sitemap_lists_every_page_at_its_published_address():
    listed = _sitemap()
    assert len(listed) == len(set(listed)), "a page is listed twice"
    readable = {p for p in PAGES if p not in ("index.html", "search.html")}
    addresses = {BASEURL + p for p in readable}
    assert addresses <= set(listed), f"pages missing from sitemap.xml: {sorted(addresses - set(listed))}"
    for loc in listed:
        assert loc.startswith(BASEURL), loc
        assert (SITE / loc.removeprefix(BASEURL)).is_file(), f"sitemap.xml lists {loc}, which the site does not have"


@pytest.mark.parametrize("page_path", [p for p in PAGES if p not in ("index.html", "search.html")])
def test_every_page_has_a_preview_card(page_path):
    """og:title is the page's title, og:description its opening text, og:url its published address,
    og:image a picture the site has (a chapter's first raster figure, or the book's card)."""
    soup = BeautifulSoup((SITE / page_path).read_text(encoding="utf-8"), "html.parser")
    tags = {m["property"]: m.get("content", "") for m in soup.find_all("meta", property=True)}
    title = soup.find("h1").get_text(" ", strip=True).rstrip("#").strip()
    # the page's title, with its chapter number where it has one ("10. Beyond softmax")
    og_title = tags.get("og:title", "")
    assert og_title == title or re.fullmatch(r"\d+(\.\d+)*\. " + re.escape(title), og_title), (
        f"{page_path}: og:title {og_title!r}, the page's title {title!r}"
    )
    assert tags.get("og:url") == BASEURL + page_path
    description = tags.get("og:description", "")
    assert len(description) >= 40, f"{page_path}: og:description {description!r}"
    assert soup.find("meta", attrs={"name": "description"}), f"{page_path}: no meta description"
    image = tags.get("og:image", "")
    assert image.startswith(BASEURL), f"{page_path}: og:image {image!r}"
    assert Path(image).suffix in (".png", ".jpg", ".jpeg"), f"{page_path}: og:image {image!r} is not a raster image"
    assert (SITE / urljoin(BASEURL, image).removeprefix(BASEURL)).is_file(), f"{page_path}: {image} is not in the site"
    assert tags.get("og:image:alt"), f"{page_path}: og:image has no alt text"


def test_a_chapter_card_shows_its_first_figure():
    soup = BeautifulSoup((SITE / "chapters" / "10_beyond_softmax.html").read_text(encoding="utf-8"), "html.parser")
    image = soup.find("meta", property="og:image")["content"]
    first = next(img["src"] for img in soup.select("article img") if Path(img["src"]).suffix == ".png")
    assert image == urljoin(BASEURL + "chapters/10_beyond_softmax.html", first)


def test_the_header_links_to_the_repository_named_in_the_config():
    """The hidden header bar took nothing with it: the repository button is still on the page."""
    soup = BeautifulSoup((SITE / "chapters" / "10_beyond_softmax.html").read_text(encoding="utf-8"), "html.parser")
    assert soup.select_one(f'.bd-header-article a[href="{REPO_URL}"]'), "no repository button in the article header"


@pytest.mark.parametrize("notebook", sorted((ROOT / "chapters").glob("*.ipynb")), ids=lambda p: p.stem)
def test_a_chapter_page_names_the_torch_and_the_date_of_its_outputs(notebook):
    """Written into the notebook's metadata when its outputs are recorded (scripts/nbval_mode.py),
    shown at the end of its page (book/_ext/attnlab_sphinx.py)."""
    import json

    meta = json.loads(notebook.read_text(encoding="utf-8"))["metadata"]["attnlab"]
    torch_version = meta["platform"]["torch"].split("+")[0]
    soup = BeautifulSoup((SITE / "chapters" / f"{notebook.stem}.html").read_text(encoding="utf-8"), "html.parser")
    shown = soup.select_one("article p.attnlab-computed-with")
    assert shown is not None, f"{notebook.stem}: no line naming the torch version and date"
    assert shown.get_text(" ", strip=True) == (
        f"The outputs on this page were computed with PyTorch {torch_version} on {meta['recorded']}."
    )
