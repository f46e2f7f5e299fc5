"""The checks' tab goes from page to page (tests/site/conftest.py, `OpenedPages`), and each page
still opens as a first visit: at the checks' window size, with nothing stored by the page before
(the colour mode it was switched to), and with only its own problems recorded; a tab that no
longer answers (its renderer crashed, its context closed) gives way to a new one."""

from __future__ import annotations

from conftest import VIEWPORT, OpenedPages

# Recorded as the page's document is made, before any of its scripts runs (the theme's first one
# stores the mode it starts in) and before any check resizes or switches it.
AT_LOAD = "window.attnlabAtLoad = {width: innerWidth, mode: localStorage.getItem('mode')};"


def test_each_page_in_the_tab_opens_as_a_first_visit(browser, server):
    pages = OpenedPages(browser, server)
    try:
        first, problems = pages.get("book/notation.html", {"width": 320, "height": 900}, "dark")
        first.context.add_init_script(AT_LOAD)  # for the pages opened from now on
        first.evaluate("() => console.error('left by the page before')")
        assert any("left by the page before" in p for p in problems), problems

        page, problems = pages.get("book/glossary.html")
        assert page is first, "the next page opened in another tab"
        assert not [p for p in problems if "left by the page before" in p], problems
        at_load = page.evaluate("() => window.attnlabAtLoad")
        assert at_load == {"width": VIEWPORT["width"], "mode": None}, (
            f"the page opened at {at_load}, not as a first visit would, at {VIEWPORT['width']} px with nothing stored"
        )

        pages.discard()  # as a failed check does: the next page opens in a new browser context
        page, _ = pages.get("book/notation.html")
        assert page is not first and page.evaluate("() => window.attnlabAtLoad") is None
    finally:
        pages.discard()


def test_a_tab_that_no_longer_answers_is_replaced(browser, server):
    pages = OpenedPages(browser, server)
    try:
        first, _ = pages.get("book/notation.html")
        first.context.close()  # as a renderer that crashed leaves it
        page, problems = pages.get("book/glossary.html")
        assert page is not first and page.evaluate("() => document.title"), problems
    finally:
        pages.discard()
