"""What the website's checks share: one local server over _build/html, one Chromium per worker with
one tab that goes from page to page, and the page that the last check opened.

Three checks read every page (test_figures.py's only the pages with a diagram): test_accessibility.py's
(axe-core's scans), test_figures.py's (the diagrams at a desktop and a phone width, in both colour
modes) and test_site.py's (it loads, offline, with math and widgets). Each page is loaded for the
first of them and kept for the others: all the tests of a page carry the page as their xdist group
("page:" and its path), so that `make test`'s `pytest -n 3 --dist loadgroup` runs them one after
the other on one worker. Loading a chapter (MathJax, widgets, the network falling quiet) took about
3 s of the machine's two cores here; resizing the loaded page or switching its colour mode, 0.3 s.
The page is opened with everything the checks need: the failed requests, console errors and
requests that leave the site are recorded from the first request on, and the stored widgets have
rendered. Each check asks `OpenedPages.get` for the window size and colour mode it reads the page
in, and the page is resized and switched in place. A check that fails while it uses the page
discards it (`OpenedPages.discard`), so that the next one starts from a fresh load; run alone, or
in another order, each check opens its page itself.

Screenshots go through the `screenshot` fixture. Chromium takes at most a few seconds for one
here, but once (in CI, on a page that had loaded and passed its checks) it never delivered the
frame, and the test failed after 120 s. A screenshot that has not come in SHOT_TIMEOUT_MS has
stalled: the `again_if_stalled` fixture then discards the page and runs the whole check once more
on a fresh load; a second stall fails.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# The flags that worked here (TOOLING.md), shared with the PDF's print (scripts/build_pdf.py).
sys.path.insert(0, str(ROOT / "scripts"))
from build_pdf import CHROMIUM_ARGS as LAUNCH_ARGS  # noqa: E402

VIEWPORT = {"width": 1280, "height": 900}
# Two device pixels to a CSS pixel, as on a phone or a laptop's high-density screen: the diagrams'
# screenshots are drawn at that density (the full-page ones are taken at one pixel to a CSS pixel).
# Nothing the checks measure is in device pixels; loading a chapter cost the same at 1 and at 2.
DEVICE_SCALE = 2
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGETS_TIMEOUT_MS = 20_000
SHOT_TIMEOUT_MS = 30_000  # a chapter's full-page screenshot takes 1.6 to 2.3 s here, a diagram's 0.1 to 0.3 s


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every check of this folder reads the built website: marked `site`, like those of tests/book that
    do (`make site` runs `pytest tests/site tests/book -m site`)."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.site)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output readable
        pass


@pytest.fixture(scope="session")
def server():
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: `make browser` installs Debian's chromium")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
        yield browser
        browser.close()


class ScreenshotStalled(Exception):
    """Chromium did not deliver a screenshot within SHOT_TIMEOUT_MS."""


def _screenshot(page, *, stall_ms: int = SHOT_TIMEOUT_MS, **options) -> None:
    """page.screenshot(**options), raising ScreenshotStalled if it takes longer than stall_ms."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.screenshot(timeout=stall_ms, **options)
    except PlaywrightTimeout as error:
        raise ScreenshotStalled(
            f"Chromium's screenshot of {page.url} stalled (no image after {stall_ms / 1000:g} s)"
        ) from error


def _again_if_stalled(check: Callable[[], None], discard: Callable[[], None]) -> None:
    """check(); if one of its screenshots stalls, discard() the page and check() once more from a
    fresh load (said as a warning in pytest's summary). A second stall fails the test."""
    try:
        check()
    except ScreenshotStalled as stall:
        discard()
        warnings.warn(f"{stall}; checked again on a fresh load", stacklevel=2)
        check()


class OpenedPages:
    """The page last opened, kept for the next check of the same page; and the browser tab it
    was opened in, kept for the next page.

    Each worker opens its pages one after the other in one tab, as a reader goes from page to
    page: a chapter's scripts (MathJax, the widget manager, the theme's icons: about 6 MB) are
    then compiled once in the tab's process instead of once for each page, and the process is
    started once. Each page still starts as a first visit would: the tab is back at VIEWPORT, the page's storage
    (the colour mode the checks switched to) is cleared, and what went wrong is recorded anew
    from the page's first request. A check that fails discards the tab (`discard`): the next
    check opens its page in a new browser context."""

    def __init__(self, browser, server: str) -> None:
        self.browser, self.server = browser, server
        self.path: str | None = None
        self.page, self.problems = None, []

    def get(self, page_path: str, viewport: dict | None = None, mode: str = "light") -> tuple:
        """(page, problems): the page loaded, its math typeset and its widgets rendered (or waited
        for in vain), and what went wrong since its first request, as sentences; shown at
        ``viewport`` (VIEWPORT unless given) in the colour ``mode``, resized and switched in place."""
        if self.path != page_path:
            self.path = None
            try:
                self._open(page_path)
            except BaseException:
                self.discard()  # a tab that failed to open a page is not used again
                raise
            self.path = page_path
        viewport = viewport or VIEWPORT
        if self.page.viewport_size != viewport:
            _resize(self.page, viewport)
        shown = self.page.evaluate("() => [innerWidth, innerHeight]")
        assert shown == [viewport["width"], viewport["height"]], (
            f"{page_path}: asked for {viewport}, the window is {shown}"
        )
        if self.page.evaluate("() => document.documentElement.dataset.theme") != mode:
            _switch_mode(self.page, mode)
        return self.page, self.problems

    def discard(self) -> None:
        if self.page is not None:
            self.page.context.close()
        self.path, self.page, self.problems = None, None, []

    def _tab(self):
        """The tab, opened in a new browser context with the recorders of what goes wrong (into
        ``self.problems``, whichever page is open) the first time, and back at VIEWPORT with the
        open page's storage cleared afterwards."""
        if self.page is not None:
            try:
                self.page.evaluate("() => { localStorage.clear(); sessionStorage.clear(); }")
                if self.page.viewport_size != VIEWPORT:
                    self.page.set_viewport_size(VIEWPORT)
                return self.page
            except Exception:  # a tab that no longer answers: a new one below
                self.discard()
        context = self.browser.new_context(viewport=VIEWPORT, device_scale_factor=DEVICE_SCALE)
        page = context.new_page()
        page.on("console", lambda m: m.type == "error" and self.problems.append(f"console error: {m.text}"))
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: self.problems.append(f"request failed: {r.url} ({r.failure})"))
        page.on("response", lambda r: r.status >= 400 and self.problems.append(f"HTTP {r.status}: {r.url}"))
        server = self.server

        def offline_only(route):
            if route.request.url.startswith(server) or route.request.url.startswith("data:"):
                route.continue_()
            else:
                self.problems.append(f"request leaves the site: {route.request.url}")
                route.abort()

        page.route("**/*", offline_only)
        self.page = page
        return page

    def _open(self, page_path: str) -> None:
        page = self._tab()
        self.problems = []  # this page's, from its first request on
        response = page.goto(self.server + page_path, wait_until="load")
        if response is None or not response.ok:
            self.problems.append(f"page did not load: {page_path}")
        page.wait_for_load_state("networkidle")
        if page.evaluate("() => !!(window.MathJax && window.MathJax.startup)"):
            page.evaluate("() => window.MathJax.startup.promise")
        if page.locator(f'script[type="{WIDGET_VIEW}"]').count():
            # The widget manager puts each view into a div.widget-subarea before its <script>.
            try:
                page.wait_for_function(
                    f"""() => {{
                        const tags = document.querySelectorAll('script[type="{WIDGET_VIEW}"]');
                        return Array.from(tags).every(t => {{
                            const area = t.previousElementSibling;
                            return area && area.classList.contains('widget-subarea') &&
                                area.querySelector('.jupyter-widgets');
                        }});
                    }}""",
                    timeout=WIDGETS_TIMEOUT_MS,
                )
            except Exception:  # playwright's TimeoutError: the checks say what did not render
                self.problems.append(f"the stored widgets had not all rendered after {WIDGETS_TIMEOUT_MS // 1000} s")
            page.wait_for_timeout(300)  # let the last images and labels settle


@pytest.fixture(scope="session")
def opened(browser, server):
    pages = OpenedPages(browser, server)
    yield pages
    pages.discard()


def _resize(page, viewport: dict) -> None:
    """Resize as a reader's window or zoom does, then wait, in the page, past the theme's own
    answer: pydata-sphinx-theme makes a code block or table a tab stop when it scrolls sideways,
    300 ms (debounced) after the last resize event. The event is dispatched before the next frame's
    animation callbacks; a timer of the same 300 ms set in that callback fires after the theme's.
    (Measured on every page at 320 px: without the wait, axe reports 15 to 45 code blocks that
    scroll and cannot be reached with the keyboard on each chapter; with it, none.)"""
    page.set_viewport_size(viewport)
    page.evaluate("() => new Promise(resolve => requestAnimationFrame(() => setTimeout(resolve, 300)))")


def _switch_mode(page, mode: str) -> None:
    """Switch the colour mode in place as the theme's button does: pydata-sphinx-theme's colours
    hang on <html data-theme>, its mode switcher on data-mode, the reader's choice is kept in
    localStorage. The colour transitions the switch starts (57 of 150 ms on a chapter, 0.4 s in
    all in Chromium here) are finished at once: each sets the colour it would have ended on."""
    page.evaluate(
        """async (mode) => {
            localStorage.setItem('mode', mode);
            localStorage.setItem('theme', mode);
            document.documentElement.dataset.mode = mode;
            document.documentElement.dataset.theme = mode;
            await new Promise(requestAnimationFrame);
            const running = document.getAnimations();
            running.filter(a => a instanceof CSSTransition).forEach(a => a.finish());
            await Promise.all(running.map(a => a.finished));
        }""",
        mode,
    )


@pytest.fixture(scope="session")
def screenshot():
    """_screenshot: page.screenshot that raises ScreenshotStalled after SHOT_TIMEOUT_MS."""
    return _screenshot


@pytest.fixture(scope="session")
def again_if_stalled():
    """_again_if_stalled: a check run once more on a fresh load if a screenshot stalled."""
    return _again_if_stalled
