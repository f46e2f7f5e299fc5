"""The book's diagrams on the built website, in headless Chromium: light and dark mode, desktop and phone.

Runs after `make book`. For every page that shows a diagram (an SVG of book/figures), in the light
and the dark colour mode of pydata-sphinx-theme, at a desktop width and at a phone's 390 px, it
fails on: a diagram that did not load (naturalWidth 0), a figure (image or caption) that reaches
past the screen, so that the page would scroll sideways, a diagram drawn larger than its own size,
text in a diagram smaller than MIN_TEXT_PX on screen, and a diagram that the theme dims on dark
pages (the SVGs draw their own light card instead). A screenshot of every diagram in every mode, at
two device pixels to a CSS pixel, is saved under _build/screenshots/figures/ for a person to look
at. The page is the one the site's other checks read (tests/site/conftest.py: loaded once for all of
them), resized to each width and switched to each mode in place, as a reader's window and the
theme's button do.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots" / "figures"
FIGURES = ROOT / "book" / "figures"
WIDTHS = {"desktop": 1280, "phone": 390}
HEIGHT = 1500  # tall enough that the tallest figure and its caption fit in the window, at both widths
THEMES = ("light", "dark")
MIN_TEXT_PX = 8.0  # the smallest SVG text (13 px) at a phone's width: 342 / 540 * 13 = 8.2 px


def _pages_with_figures() -> dict[str, list[str]]:
    """{page: [figure names]} for every built page that shows an SVG of book/figures."""
    if not (SITE / "index.html").exists():
        raise RuntimeError(f"no built site at {SITE}: run `make book` first (`make test` does)")
    ours = {p.name for p in FIGURES.glob("*.svg")}
    pages = {}
    for path in sorted(SITE.rglob("*.html")):
        page = path.relative_to(SITE).as_posix()
        if page.startswith(("_", "vendor/")):
            continue
        soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
        names = [Path(img["src"]).stem for img in soup.select("figure img[src]") if Path(img["src"]).name in ours]
        if names:
            pages[page] = names
    return pages


PAGES = _pages_with_figures()
# Page by page, width by width, then both modes. Each case carries its page's xdist group, as the
# other checks of the page do: `make test` (pytest -n 3 --dist loadgroup) runs them one after the
# other on one worker, on the page the first of them loaded (tests/site/conftest.py).
CASES = [
    pytest.param(page, theme, width, marks=pytest.mark.xdist_group(f"page:{page}"), id=f"{page}-{theme}-{width}")
    for page in PAGES
    for width in WIDTHS
    for theme in THEMES
]


def _smallest_font(name: str) -> float:
    root = ET.parse(FIGURES / f"{name}.svg").getroot()
    return min(float(e.get("font-size")) for e in root.iter() if e.get("font-size") is not None)


def test_the_site_shows_every_diagram():
    shown = {name for names in PAGES.values() for name in names}
    drawn = {p.stem for p in FIGURES.glob("*.svg")}
    assert shown == drawn, f"diagrams missing from the site: {sorted(drawn - shown)}"


@pytest.mark.parametrize("page_path, theme, width", CASES)
def test_diagrams_load_fit_and_read_in_every_mode(opened, screenshot, again_if_stalled, page_path, theme, width):
    problems: list[str] = []

    def check() -> None:
        problems.clear()
        _check_diagrams(opened, screenshot, page_path, theme, width, problems)

    again_if_stalled(check, opened.discard)
    assert not problems, f"{page_path} ({theme}, {width}):\n  " + "\n  ".join(problems)


def _check_diagrams(opened, screenshot, page_path: str, theme: str, width: str, problems: list[str]) -> None:
    """One case of the test above: what is wrong goes into problems; a screenshot that stalls raises."""
    try:
        page, _ = opened.get(page_path, {"width": WIDTHS[width], "height": HEIGHT}, theme)
        applied = page.evaluate(
            "() => [document.documentElement.dataset.theme, getComputedStyle(document.body).backgroundColor]"
        )
        assert applied[0] == theme, f"the theme is {applied[0]!r}, not {theme!r}"
        dark_page = applied[1] in ("rgb(18, 18, 18)",)
        assert dark_page == (theme == "dark"), f"{theme} mode, but the page's background is {applied[1]}"
        viewport = page.evaluate("() => window.innerWidth")
        for name in PAGES[page_path]:
            figure = page.locator(f"figure#fig-{name}")
            figure.scroll_into_view_if_needed()
            img = figure.locator("img")
            img.evaluate("img => img.decode ? img.decode().catch(() => null) : null")
            natural, shown, right, filt = img.evaluate(
                "img => [img.naturalWidth, img.getBoundingClientRect().width, img.getBoundingClientRect().right,"
                " getComputedStyle(img).filter]"
            )
            if natural == 0:
                problems.append(f"{name}: the image did not load")
                continue
            # nothing in the figure (image, caption) reaches past the screen: it cannot make the page scroll
            widest = figure.evaluate(
                "f => Math.max(...[f, ...f.querySelectorAll('*')].map(e => e.getBoundingClientRect().right))"
            )
            if max(right, widest) > viewport + 0.5:
                problems.append(f"{name}: reaches {max(right, widest):.0f} px, past the {viewport} px screen")
            if shown > natural + 0.5:
                problems.append(f"{name}: drawn {shown:.0f} px wide, larger than its own {natural} px")
            smallest = _smallest_font(name) * shown / natural
            if smallest < MIN_TEXT_PX:
                problems.append(f"{name}: its smallest text is {smallest:.1f} px on screen, under {MIN_TEXT_PX}")
            if filt != "none":
                problems.append(f"{name}: the theme applies `filter: {filt}` to it")
            # the figure 100 px below the top of the window, clear of the theme's sticky header
            box = figure.evaluate(
                "f => { scrollTo(0, f.getBoundingClientRect().top + scrollY - 100);"
                " const r = f.getBoundingClientRect();"
                " return {x: r.left, y: r.top, width: r.width, height: r.height, top: scrollY}; }"
            )
            SHOTS.mkdir(parents=True, exist_ok=True)
            shot = SHOTS / f"{name}-{theme}-{width}.png"
            if box["y"] + box["height"] <= HEIGHT:
                screenshot(page, path=str(shot), clip={k: box[k] for k in ("x", "y", "width", "height")})
            else:  # taller than the window: cut it out of the whole page
                screenshot(
                    page,
                    path=str(shot),
                    full_page=True,
                    clip={"x": box["x"], "y": box["y"] + box["top"], "width": box["width"], "height": box["height"]},
                )
    except BaseException:
        opened.discard()  # the next check starts from a fresh load
        raise
