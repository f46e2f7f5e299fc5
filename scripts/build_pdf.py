"""The PDF edition: ``make pdf`` prints the built website into ``_build/pdf/attnlab.pdf``.

Why a print of the site, not LaTeX: the chapters are the executed notebooks as the site shows
them (outputs, figures, the slider figures of ipywidgets, MathJax, the glossary's Chinese), and
the site is what every test already checks. Sphinx's LaTeX builder would need a TeX installation
of several GB, would typeset the widgets as nothing, and would be a second rendering to keep
right. Chromium, which the site's checks already drive (Playwright with Debian's chromium), prints
what a reader sees, offline.

How (no network: the site is served from a local server):

1. Each page of ``_toc.yml``, in order, is opened as a reader opens it: MathJax typeset, widgets
   rendered. Its article is taken out with what the page computed: the widgets become their
   figures (the picture the slider shows first, as an image, with the slider's readout), the
   math keeps MathJax's rendering (its styles go with it), every address becomes absolute, and a
   link to another page of the book becomes a link inside the PDF (ids are prefixed with the
   page's name, so that they stay unique).
2. One document holds a title page (title, version, authors, licences, address), a table of
   contents and the pages, each starting on a new sheet, with the site's own style sheets and a
   print style sheet: code wraps at the right margin instead of being cut, outputs are not
   clipped to a scroll box, solutions are open.
3. Chromium prints it to A4 with the page number in every page's footer. The contents need the
   page numbers that printing gives: a first print finds the page of each chapter (the PDF's
   named destinations: Chromium names each target of an internal link), a second prints the
   contents with them.

Usage: ``python scripts/build_pdf.py [--site _build/html] [--out _build/pdf/attnlab.pdf]``.
"""

from __future__ import annotations

import argparse
import functools
import html
import http.server
import json
import shutil
import sys
import threading
import time
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

# Run in each opened page: its article, made to stand in another document (see the docstring).
EXTRACT = """async (slug) => {
  const article = document.querySelector('article.bd-article');
  const pages = new Set(window.__bookPages);
  const site = new URL(window.__siteRoot, location.href).href;
  // Widgets: what they show, as figures. Images the widget manager made are blob: URLs,
  // which die with the page: read them into data: URLs first.
  for (const area of article.querySelectorAll('.widget-subarea')) {
    const figure = document.createElement('div');
    figure.className = 'print-widget';
    const images = [...area.querySelectorAll('img')].filter(i => i.checkVisibility());
    for (const shown of images) {
      const img = document.createElement('img');
      const blob = await (await fetch(shown.src)).blob();
      img.src = await new Promise(done => {
        const reader = new FileReader();
        reader.onload = () => done(reader.result);
        reader.readAsDataURL(blob);
      });
      img.alt = shown.alt || '';
      figure.append(img);
    }
    // each control's name and the value it shows: a slider's readout, a text box's text
    const settings = [...area.querySelectorAll('.widget-inline-hbox')].filter(r => r.checkVisibility())
      .map(row => {
        const name = row.querySelector('.widget-label')?.textContent.trim();
        const value = row.querySelector('.widget-readout')?.textContent.trim()
          ?? row.querySelector('input[type=text], textarea')?.value ?? row.querySelector('select')?.value;
        return name && value ? `${name} = ${value}` : null;
      }).filter(Boolean);
    if (images.length && settings.length) {
      const caption = document.createElement('p');
      caption.className = 'print-widget-caption';
      caption.textContent = 'Shown for ' + settings.join(', ')
        + ' (on the website and in the notebook, a control chooses).';
      figure.append(caption);
    } else if (!images.length) {
      const text = document.createElement('pre');
      text.textContent = area.innerText.trim();
      figure.append(text);
    }
    area.replaceWith(figure);
  }
  article.querySelectorAll(`script[type="${'WIDGET_VIEW'}"], .headerlink, button, .copybtn, .toggle-button`)
    .forEach(e => e.remove());
  article.querySelectorAll('details').forEach(d => d.setAttribute('open', ''));
  article.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'));
  // Addresses: absolute; a link into the book: a link inside the PDF.
  const local = (href) => {
    const url = new URL(href, location.href);
    if (!url.href.startsWith(site)) return null;
    const path = url.pathname.slice(new URL(site).pathname.length);
    if (!pages.has(path)) return null;
    const page = path.replace(/\\.html$/, '').replaceAll('/', '-');
    return '#' + page + (url.hash ? '--' + decodeURIComponent(url.hash.slice(1)) : '');
  };
  for (const e of article.querySelectorAll('[href]')) {
    const inside = local(e.href);
    e.setAttribute('href', inside ?? e.href);
  }
  for (const e of article.querySelectorAll('img[src]')) e.setAttribute('src', e.src);
  for (const e of article.querySelectorAll('[id]')) e.id = slug + '--' + e.id;
  const style = document.getElementById('MJX-CHTML-styles');
  return {
    html: article.innerHTML,
    title: (article.querySelector('h1')?.innerText || document.title).replace(/[#\\s]+$/, ''),
    math: style ? style.textContent : '',
  };
}""".replace("'WIDGET_VIEW'", json.dumps(WIDGET_VIEW))

PRINT_CSS = """
@page { size: A4; margin: 16mm 15mm 18mm 15mm; }
html { font-size: 13px; }
/* sphinx-book-theme's print styles hide each article's first h1 (it prints its own title) and
   indent the content: here every page is a section of one article, and its title must show. */
.bd-main .bd-content { margin-left: 0 !important; }
.bd-main .bd-content .bd-article h1:first-of-type { display: block !important; }
body { background: white; }
.bd-article { max-width: none; padding: 0; }
.print-title { height: 240mm; display: flex; flex-direction: column; justify-content: center; }
.print-title h1 { font-size: 2.6rem; margin-bottom: 1rem; }
.print-title .subtitle { font-size: 1.4rem; color: #1f3b73; }
.print-title .meta { margin-top: 3rem; font-size: 1rem; line-height: 1.7; }
.print-toc { break-before: page; }
.print-toc ol { list-style: none; padding: 0; }
.print-toc li { display: flex; gap: 0.5em; margin: 0.35em 0; }
.print-toc li .dots { flex: 1; border-bottom: 1px dotted #999; margin-bottom: 0.3em; }
.print-toc li.part { font-weight: bold; margin-top: 1em; }
.print-toc li.part .dots, .print-toc li.part .page { visibility: hidden; }
.print-toc a { color: inherit; text-decoration: none; }
section.print-page { break-before: page; }
pre, .highlight pre, .output pre, div.cell_output pre {
  white-space: pre-wrap !important; overflow-wrap: anywhere; word-break: break-word; overflow: visible !important;
}
:not(pre) > code, :not(pre) > code .pre { white-space: normal !important; overflow-wrap: anywhere; }
div.cell_output, .output, .cell_output .output, div.highlight, .table-wrapper, .pst-scrollable-table-container {
  max-height: none !important; overflow: visible !important;
}
.bd-article table { font-size: 0.85em; }
img, figure, .print-widget, div.cell_input { break-inside: avoid; max-width: 100%; }
.print-widget img { display: block; max-width: 100%; height: auto; margin: 0.5em 0; }
.print-widget-caption { font-size: 0.9em; color: #555; }
h1, h2, h3, h4 { break-after: avoid; }
mjx-container[display="true"] { overflow: visible !important; }
a { color: #145fcc; }
"""


def toc_pages(root: Path) -> list[tuple[str | None, str]]:
    """(part caption or None, page path ``chapters/x.html``) in the order of _toc.yml."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    order: list[tuple[str | None, str]] = [(None, toc["root"] + ".html")]

    def walk(entries: list[dict], caption: str | None) -> None:
        for entry in entries:
            order.append((caption, entry["file"] + ".html"))
            caption = None
            walk(entry.get("sections", []), None)

    for part in toc["parts"]:
        walk(part["chapters"], part.get("caption"))
    return order


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/"


def _open(page, url: str) -> None:
    """Load a page of the site as a reader does: typeset math, rendered widgets."""
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")
    if page.evaluate("() => !!(window.MathJax && window.MathJax.startup)"):
        page.evaluate("() => window.MathJax.startup.promise")
    views = page.locator(f'script[type="{WIDGET_VIEW}"]').count()
    if views:
        page.wait_for_function(
            f"""() => Array.from(document.querySelectorAll('script[type="{WIDGET_VIEW}"]')).every(t => {{
                const area = t.previousElementSibling;
                return area && area.classList.contains('widget-subarea') && area.querySelector('.jupyter-widgets');
            }})""",
            timeout=30_000,
        )
        page.wait_for_timeout(300)


def _document(parts: list[dict], root: Path, site: str, stylesheets: list[str], numbers: dict[str, int]) -> str:
    """The whole book as one HTML document; ``numbers``: each page's first PDF page (empty: a first
    print, whose contents show placeholders of the same width)."""
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    version = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    name, _, subtitle = config["title"].partition(": ")
    math = "\n".join(dict.fromkeys(p["math"] for p in parts if p["math"]))
    links = "\n".join(f'<link rel="stylesheet" href="{html.escape(s)}">' for s in stylesheets)
    toc = []
    for part in parts:
        if part["caption"]:
            toc.append(f'<li class="part"><span>{html.escape(part["caption"])}</span></li>')
        number = str(numbers.get(part["slug"], "000"))
        toc.append(
            f'<li><a href="#{part["slug"]}">{html.escape(part["title"])}</a><span class="dots"></span>'
            f'<span class="page">{number}</span></li>'
        )
    sections = "\n".join(f'<section class="print-page" id="{p["slug"]}">{p["html"]}</section>' for p in parts)
    return f"""<!DOCTYPE html>
<html lang="en" data-theme="light" data-mode="light">
<head><meta charset="utf-8"><title>{html.escape(config["title"])}</title>
{links}
<style>{math}</style>
<style>{PRINT_CSS}</style>
</head>
<body class="attnlab-print"><main class="bd-main"><div class="bd-content"><article class="bd-article">
<section class="print-title">
  <h1>{html.escape(name)}</h1>
  <p class="subtitle">{html.escape(subtitle.capitalize())}</p>
  <p class="meta">Version {html.escape(version)}<br>{html.escape(config["author"])}<br>
  <a href="{html.escape(config["html"]["baseurl"])}">{html.escape(config["html"]["baseurl"])}</a><br>
  Text and figures: CC BY 4.0. Code: MIT.</p>
</section>
<nav class="print-toc"><h1>Contents</h1><ol>{"".join(toc)}</ol></nav>
{sections}
</article></div></main></body></html>
"""


def _print(page, url: str, out: Path) -> None:
    page.goto(url, wait_until="load")  # "load": every image and style sheet is in
    page.evaluate("async () => { await document.fonts.ready; }")
    page.pdf(
        path=str(out),
        format="A4",
        print_background=True,
        display_header_footer=True,
        header_template="<span></span>",
        footer_template=(
            '<div style="font-size:8px;width:100%;text-align:center;color:#555"><span class="pageNumber"></span></div>'
        ),
        margin={"top": "16mm", "bottom": "18mm", "left": "15mm", "right": "15mm"},
    )


# What the printed document holds that would not print well, read from the document as Chromium
# lays it out for print on A4 (the page's width less the margins, 180 mm at 96 px to the inch).
PRINT_PROBLEMS = """() => {
  const article = document.querySelector('article.bd-article');
  const right = article.getBoundingClientRect().right;
  const wide = [...article.querySelectorAll('pre, code, img, table, mjx-container, .print-widget, svg')]
    .filter(e => e.getBoundingClientRect().right > right + 1)
    .map(e => `${e.closest('section.print-page')?.id}: <${e.tagName.toLowerCase()}> `
              + `"${(e.textContent || e.getAttribute('src') || '').trim().slice(0, 60)}"`);
  const broken = [...article.querySelectorAll('img')]
    .filter(i => !i.complete || i.naturalWidth === 0)
    .map(i => `${i.closest('section.print-page')?.id}: ${i.getAttribute('src').slice(0, 80)}`);
  return {overflow: wide, broken_images: broken};
}"""


def _print_problems(page) -> dict[str, list[str]]:
    """Elements wider than the printed column, and images that did not load, in the document last printed."""
    page.set_viewport_size({"width": round(180 / 25.4 * 96), "height": 1000})
    page.emulate_media(media="print")
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
    try:
        return page.evaluate(PRINT_PROBLEMS)
    finally:
        page.emulate_media(media="screen")


def first_pages(pdf: Path, slugs: list[str]) -> dict[str, int]:
    """Each section's first page (1-based), from the PDF's named destinations."""
    from pypdf import PdfReader

    reader = PdfReader(str(pdf))
    found = {}
    for name, destination in reader.named_destinations.items():
        key = str(name).lstrip("/")
        if key in slugs:
            found[key] = reader.get_destination_page_number(destination) + 1
    missing = [s for s in slugs if s not in found]
    if missing:
        raise RuntimeError(f"build_pdf: the printed PDF has no destination for {missing}")
    return found


def build(site: Path, out: Path, root: Path = ROOT) -> dict[str, object]:
    """Print the built site at ``site`` into ``out``; return what a log line reports."""
    from playwright.sync_api import sync_playwright

    if not (site / "index.html").is_file():
        raise FileNotFoundError(f"build_pdf: no built site at {site}: run `make book` first")
    started = time.perf_counter()
    order = toc_pages(root)
    out.parent.mkdir(parents=True, exist_ok=True)
    # One server for both: the site's pages and the document that gathers them (beside the PDF).
    if site.resolve().parent != out.resolve().parent.parent:
        raise ValueError(f"build_pdf: the site ({site}) and the PDF's folder ({out.parent}) must be side by side")
    httpd, base = _serve(site.resolve().parent)
    site_url = base + site.name + "/"
    try:
        with sync_playwright() as p:
            chromium = shutil.which("chromium") or "/usr/bin/chromium"
            browser = p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1100, "height": 1400}, color_scheme="light")
            page = context.new_page()
            page.route(
                "**/*",
                lambda r: (
                    r.continue_()
                    if r.request.url.startswith(base) or r.request.url.startswith(("data:", "blob:"))
                    else r.abort()
                ),
            )
            paths = [path for _, path in order]
            page.add_init_script(
                f"window.__bookPages = {json.dumps(paths)}; window.__siteRoot = {json.dumps(site_url)};"
            )
            parts, stylesheets = [], []
            for caption, path in order:
                _open(page, site_url + path)
                if not stylesheets:
                    stylesheets = page.evaluate(
                        "() => [...document.querySelectorAll('link[rel=stylesheet]')].map(l => l.href)"
                    )
                slug = path.removesuffix(".html").replace("/", "-")
                extracted = page.evaluate(EXTRACT, slug)
                parts.append({"slug": slug, "caption": caption, **extracted})
            document = out.parent / (out.stem + ".html")
            slugs = [p["slug"] for p in parts]
            document.write_text(_document(parts, root, site_url, stylesheets, {}), encoding="utf-8")
            doc_url = base + f"{out.parent.name}/{document.name}"
            _print(page, doc_url, out)
            numbers = first_pages(out, slugs)
            document.write_text(_document(parts, root, site_url, stylesheets, numbers), encoding="utf-8")
            _print(page, doc_url, out)
            problems = _print_problems(page)
            again = first_pages(out, slugs)
            if again != numbers:
                raise RuntimeError(f"build_pdf: the contents moved the pages: {numbers} then {again}")
            browser.close()
    finally:
        httpd.shutdown()
    from pypdf import PdfReader

    report = {
        "pages": len(PdfReader(str(out)).pages),
        "bytes": out.stat().st_size,
        "seconds": round(time.perf_counter() - started, 1),
        "first_pages": numbers,
        **problems,
    }
    (out.parent / "report.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=ROOT / "_build" / "html")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "pdf" / "attnlab.pdf")
    args = parser.parse_args(argv)
    report = build(args.site, args.out)
    print(f"build_pdf: {args.out} ({report['pages']} pages, {report['bytes'] / 1e6:.1f} MB, {report['seconds']:.0f} s)")
    for kind in ("overflow", "broken_images"):
        for problem in report[kind]:
            print(f"build_pdf: {kind}: {problem}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
