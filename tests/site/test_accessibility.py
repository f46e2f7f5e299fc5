"""Accessibility of the built website: axe-core's WCAG 2.1 A and AA rules on every page.

Runs after `make book`, like tests/site/test_site.py, on the same local server over _build/html, in
the same Chromium and on the same loaded page (tests/site/conftest.py). Every page is opened in
light and in dark mode (pydata-sphinx-theme's `data-theme`: colour contrast differs), 1280 pixels
wide, then in light mode 320 pixels wide (WCAG's reflow width), after the widgets have rendered;
axe-core is injected and run with the tags wcag2a, wcag2aa, wcag21a and wcag21aa each time, and the
test fails listing each violation: rule, impact, the elements (CSS selectors) and axe's one-line
help. No rule is disabled and no page or element is excluded. On the same page two more checks:
every <img>, visible or not, has a real alternative text, present, not empty and not a file name
(docutils writes the image's path as its alt when none is given, which axe accepts but a screen
reader reads out as a path); and every widget slider is named and tells the value its readout shows,
also once moved with the keyboard (the widget manager gives it neither;
book/_ext/static/attnlab-widgets-a11y.js does), and no slider's readout cuts off a value it can show
(measured with each selection slider's every label in each readout).

axe-core comes from npm (package.json pins it; `npm ci` installs it into node_modules/). Where
node_modules lacks it, ATTNLAB_AXE_JS names another copy of axe.min.js of the same version.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
WIDE, NARROW = {"width": 1280, "height": 900}, {"width": 320, "height": 900}
# Both colour modes (contrast differs), then the light one 320 CSS pixels wide: the width at which
# WCAG 1.4.10 (reflow) asks that nothing need scrolling sideways (a 1280-pixel screen zoomed to
# 400 %), where the theme's narrow layout shows and rows of widgets would scroll out of reach.
SCANS = [(WIDE, "dark"), (WIDE, "light"), (NARROW, "light")]


def _pages() -> list[str]:
    if not (SITE / "index.html").exists():
        raise RuntimeError(f"no built site at {SITE}: run `make book` first (`make test` does)")
    pages = sorted(p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html"))
    # every page a reader can open; 404.html, served in place of a missing page, is scanned by
    # tests/site/test_chrome.py at the address where the published site serves it
    return [p for p in pages if not p.startswith(("_", "vendor/")) and p != "404.html"]


PAGES = _pages()


def _axe_path() -> Path:
    """axe.min.js: node_modules' copy (package.json's version), else $ATTNLAB_AXE_JS."""
    candidates = [ROOT / "node_modules" / "axe-core" / "axe.min.js"]
    if os.environ.get("ATTNLAB_AXE_JS"):
        candidates.append(Path(os.environ["ATTNLAB_AXE_JS"]))
    for path in candidates:
        if path.is_file():
            return path
    pytest.fail(
        "axe-core is missing: run `npm ci` (package.json lists axe-core), or set ATTNLAB_AXE_JS "
        f"to a copy of axe.min.js; looked at {[str(p) for p in candidates]}"
    )


@functools.cache
def _axe_source() -> str:
    path = _axe_path()
    pinned = json.loads((ROOT / "package.json").read_text(encoding="utf-8"))["devDependencies"]["axe-core"]
    source = path.read_text(encoding="utf-8")
    found = re.search(r"axe v([0-9][0-9.]*)", source[:500])
    assert found and found.group(1) == pinned, (
        f"{path} is axe-core {found and found.group(1)}, package.json pins {pinned}"
    )
    return source


def _check_mode(page, page_path: str, mode: str) -> None:
    """That the page shows the colour mode it was switched to."""
    background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    dark = background not in ("rgb(255, 255, 255)", "rgba(0, 0, 0, 0)")
    assert dark == (mode == "dark"), f"{page_path}: asked for {mode} mode, the page's background is {background}"


def _violations(page) -> list[dict]:
    return page.evaluate(
        """async (tags) => {
            const result = await axe.run(document, {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']});
            return result.violations.map(v => ({
                id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.map(n => n.target.map(t => Array.isArray(t) ? t.join(' >>> ') : t).join(' ')),
            }));
        }""",
        WCAG_TAGS,
    )


def _report(page_path: str, how: str, violations: list[dict]) -> str:
    lines = [f"{page_path} ({how}): {sum(len(v['nodes']) for v in violations)} axe-core violation(s)"]
    for v in violations:
        lines.append(f"  {v['id']} ({v['impact']}): {v['help']}")
        lines.extend(f"      {target}" for target in v["nodes"])
    return "\n".join(lines)


_IMAGE_FILE = re.compile(r"\.(png|jpe?g|gif|svg|webp)$", re.IGNORECASE)


def _images_without_alt(page) -> list[str]:
    images = page.evaluate(
        """() => Array.from(document.querySelectorAll('img')).map(img => ({
            alt: img.getAttribute('alt'), src: (img.getAttribute('src') || '').slice(0, 60),
            where: (img.closest('[id]') || {}).id || '',
        }))"""
    )
    return [
        f"<img src={i['src']!r}> in #{i['where']}: alt={i['alt']!r}"
        for i in images
        if i["alt"] is None or not i["alt"].strip() or _IMAGE_FILE.search(i["alt"].strip())
    ]


def _formulas_past_the_column(page) -> list[str]:
    """Inline formulas wider than the text column at the page's width: MathJax does not break an
    inline formula, so its end is cut off on a phone. Display formulas scroll; so does anything
    inside a scrolling box (a table, a cell's output)."""
    return page.evaluate(
        """() => {
            const column = (document.querySelector('article') || document.body).getBoundingClientRect().right;
            return Array.from(document.querySelectorAll('mjx-container:not([display="true"])')).filter(m => {
                if (m.getBoundingClientRect().right <= column + 1) return false;
                for (let e = m.parentElement; e && e !== document.body; e = e.parentElement) {
                    const overflow = getComputedStyle(e).overflowX;
                    if (overflow === 'auto' || overflow === 'scroll') return false;
                }
                return true;
            }).map(m => (m.getAttribute('aria-label') || m.textContent).slice(0, 60));
        }"""
    )


_SLIDERS = """() => Array.from(document.querySelectorAll('.widget-slider [role="slider"]')).map(handle => {
    const ids = (handle.getAttribute('aria-labelledby') || '').split(/\\s+/).filter(Boolean);
    const named = ids.map(id => (document.getElementById(id) || {}).textContent || '').join(' ').trim();
    const readout = handle.closest('.widget-slider').querySelector('.widget-readout');
    return {name: named || handle.getAttribute('aria-label') || '', value: handle.getAttribute('aria-valuetext'),
            readout: readout ? readout.textContent.trim() : null};
})"""


_CUT_OFF = """(labels) => Array.from(document.querySelectorAll('.widget-slider .widget-readout')).flatMap(
  (readout, i) => {
    const shown = readout.textContent;
    const cut = [shown, ...labels].filter(label => {
        readout.textContent = label;
        return readout.scrollWidth > readout.clientWidth;
    });
    readout.textContent = shown;
    return cut.map(label => `slider ${i}: its readout cuts off ${JSON.stringify(label)}`);
})"""


def _selection_labels(page) -> list[str]:
    """Every value that a selection slider on the page can show (the saved widget state's
    ``_options_labels``; a numeric slider shows numbers no wider than its range's ends)."""
    labels = set()
    for text in page.locator('script[type="application/vnd.jupyter.widget-state+json"]').all_text_contents():
        for model in json.loads(text)["state"].values():
            labels.update(
                model["state"].get("_options_labels", []) if model["model_name"] == "SelectionSliderModel" else []
            )
    return sorted(labels)


def _slider_problems(page) -> list[str]:
    """Each widget slider is named by its label and tells the value its readout shows, also
    after a move with the keyboard (axe checks the name, not the value); and no readout cuts
    off a value, for any value a selection slider on the page can show (@jupyter-widgets
    gives a readout 72 px; book/_ext/static/attnlab-a11y.css lets it keep its text's width)."""
    problems = page.evaluate(_CUT_OFF, _selection_labels(page))
    handles = page.locator('.widget-slider [role="slider"]')
    for moved in (False, True) if handles.count() else ():
        if moved:
            for i in range(handles.count()):
                handles.nth(i).focus()
                page.keyboard.press(
                    "ArrowRight" if handles.nth(i).get_attribute("aria-valuenow") == "0.0" else "ArrowLeft"
                )
            page.wait_for_timeout(300)
        for i, s in enumerate(page.evaluate(_SLIDERS)):
            if not s["name"]:
                problems.append(f"slider {i} has no accessible name")
            if s["value"] != s["readout"]:
                problems.append(
                    f"slider {i}{' after a move' if moved else ''}: "
                    f"aria-valuetext {s['value']!r}, readout {s['readout']!r}"
                )
    return problems


# Each page's browser checks (this one, test_figures.py's and test_site.py's) on one worker, one
# after the other: the later ones reuse the page this one loaded (tests/site/conftest.py).
PAGE_PARAMS = [pytest.param(p, marks=pytest.mark.xdist_group(f"page:{p}")) for p in PAGES]


@pytest.mark.parametrize("page_path", PAGE_PARAMS)
def test_page_is_accessible(opened, page_path):
    page, problems = opened.get(page_path)
    report = [p for p in problems if p.startswith("the stored widgets")]  # the scans need them drawn
    try:
        if not page.evaluate("() => !!window.axe"):  # injected once per page load
            page.add_script_tag(content=_axe_source())
        for viewport, mode in SCANS:  # the page resized and switched in place (tests/site/conftest.py)
            opened.get(page_path, viewport, mode)
            _check_mode(page, page_path, mode)
            violations = _violations(page)
            if violations:
                width = "" if viewport is WIDE else f", {viewport['width']} px wide"
                report.append(_report(page_path, f"{mode} mode{width}", violations))
        images = _images_without_alt(page)  # neither depends on the width: checked at the last one
        sliders = _slider_problems(page)
        formulas = _formulas_past_the_column(page)  # the last scan's width is a phone's
    except BaseException:
        opened.discard()  # the next check of this page starts from a fresh load
        raise
    if images:
        report.append("images without a real alternative text:\n  " + "\n  ".join(images))
    if sliders:
        report.append("widget sliders:\n  " + "\n  ".join(sliders))
    if formulas:
        report.append(
            f"inline formulas cut off at {SCANS[-1][0]['width']} px (make them display math, $$...$$):\n  "
            + "\n  ".join(formulas)
        )
    assert not report, f"{page_path}:\n" + "\n".join(report)
