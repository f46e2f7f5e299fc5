"""What the website's checks share: one local server over _build/html and one Chromium per worker,
and the page that the last check opened.

Two checks read every page: test_site.py's (it loads, offline, with math and widgets) and
test_accessibility.py's (axe-core's scans). Each page is loaded for the first of them and kept
for the second: both tests of a page carry the page as their xdist group ("page:" and its path),
so that `make test`'s `pytest -n 2 --dist loadgroup` runs them one after the other on one worker.
Loading a chapter (MathJax, widgets, the network falling quiet) is a few seconds of Chromium's
time, once instead of twice per page. The page is opened with everything both checks need:
the failed requests, console errors and requests that leave the site are recorded from the
first request on, and the stored widgets have rendered. A check that fails while it uses the page
discards it (`OpenedPages.discard`), so that the next one starts from a fresh load; run alone,
or in another order, each check opens its page itself.

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
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 900}
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGETS_TIMEOUT_MS = 20_000
SHOT_TIMEOUT_MS = 30_000  # a chapter's full-page screenshot takes 1.6 to 2.3 s here, a diagram's 0.1 to 0.3 s


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
        raise ScreenshotStalled(f"Chromium's screenshot of {page.url} stalled (no image after "
                                f"{stall_ms / 1000:g} s)") from error


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
    """The page last opened, 1280 x 900 in light mode, kept for the next check of the same page."""

    def __init__(self, browser, server: str) -> None:
        self.browser, self.server = browser, server
        self.path: str | None = None
        self.page, self.problems = None, []

    def get(self, page_path: str) -> tuple:
        """(page, problems): the page loaded, its math typeset and its widgets rendered (or waited
        for in vain), and what went wrong since its first request, as sentences."""
        if self.path != page_path:
            self.discard()
            self.page, self.problems = self._open(page_path)
            self.path = page_path
        return self.page, self.problems

    def discard(self) -> None:
        if self.page is not None:
            self.page.context.close()
        self.path, self.page, self.problems = None, None, []

    def _open(self, page_path: str) -> tuple:
        context = self.browser.new_context(viewport=VIEWPORT)
        page = context.new_page()
        problems: list[str] = []
        page.on("console", lambda m: m.type == "error" and problems.append(f"console error: {m.text}"))
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} ({r.failure})"))
        page.on("response", lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.url}"))
        server = self.server

        def offline_only(route):
            if route.request.url.startswith(server) or route.request.url.startswith("data:"):
                route.continue_()
            else:
                problems.append(f"request leaves the site: {route.request.url}")
                route.abort()

        page.route("**/*", offline_only)
        response = page.goto(server + page_path, wait_until="load")
        if response is None or not response.ok:
            problems.append(f"page did not load: {page_path}")
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
                            return area && area.classList.contains('widget-subarea') && area.querySelector('.jupyter-widgets');
                        }});
                    }}""",
                    timeout=WIDGETS_TIMEOUT_MS,
                )
            except Exception:  # playwright's TimeoutError: the checks say what did not render
                problems.append(f"the stored widgets had not all rendered after {WIDGETS_TIMEOUT_MS // 1000} s")
            page.wait_for_timeout(300)  # let the last images and labels settle
        return page, problems


@pytest.fixture(scope="session")
def opened(browser, server):
    pages = OpenedPages(browser, server)
    yield pages
    pages.discard()


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
def switch_mode():
    """_switch_mode, for the checks that read a page in both colour modes."""
    return _switch_mode


@pytest.fixture(scope="session")
def screenshot():
    """_screenshot: page.screenshot that raises ScreenshotStalled after SHOT_TIMEOUT_MS."""
    return _screenshot


@pytest.fixture(scope="session")
def again_if_stalled():
    """_again_if_stalled: a check run once more on a fresh load if a screenshot stalled."""
    return _again_if_stalled
