"""Small Sphinx fixes for the attnlab website (loaded through _config.yml's local_extensions).

Duplicate inline scripts: with Sphinx 7.4, the inline configuration scripts that sphinx-thebe
and sphinx-togglebutton add after the builder starts appear twice on every page. The second
copy of ``const THEBE_JS_URL = ...`` throws "Identifier 'THEBE_JS_URL' has already been
declared" in the browser. This drops exact duplicates (same file, same attributes, same
body) from each page's script list. The browser check in tests/site catches a regression.

Accessibility (axe-core's WCAG 2.1 A and AA rules, checked on every page by
tests/site/test_accessibility.py). Each fix sits where the problem is made:

- Header buttons whose accessible name did not contain their visible label (WCAG 2.5.3):
  ``templates/search-button-field.html`` and ``templates/theme-switcher.html`` override
  pydata-sphinx-theme 0.17.1's components of the same name (this folder comes first in
  ``templates_path``). The search button is named by its visible text ("Search Ctrl+K")
  instead of an ``aria-label`` of "Search"; the colour-mode button by a visually hidden text
  beside the icon it shows, which says what it is for and the mode ("Color mode: Light").
- The sidebar's ``<summary>`` that opens a chapter's sections showed only a chevron and had
  no name: ``generate_toctree_html`` (the theme's template function) is wrapped so that each
  such ``<summary>`` carries visually hidden text, "Toggle navigation of <chapter title>".
- The bibliography: docutils writes each citation as ``role="doc-biblioentry"``, a role
  DPUB-ARIA 1.1 deprecates, inside ``role="list"``, which then has no list items (axe:
  ``aria-required-children``, critical, and ``aria-deprecated-role``). The HTML translator
  writes ``role="listitem"`` instead.
- ``static/attnlab-a11y.css``: a darker link colour inside exercises (colour contrast), and
  rows of widgets that wrap on narrow pages instead of scrolling out of the keyboard's reach
  (reflow at 320 px).
- Widgets (ipywidgets 8 through @jupyter-widgets/html-manager 1.0): the sliders' handles
  (noUiSlider, ``role="slider"``) are not tied to the description label that the widget
  shows, and the widget images have no ``alt``; ipywidgets' saved state cannot carry either.
  ``static/attnlab-widgets-a11y.js``, loaded on pages with widgets, names each handle by its
  label, gives it the readout as its value text, and gives each widget image an ``alt``: the
  code cell's ``mystnb: image: alt`` metadata (the key MyST-NB reads for a cell's image
  outputs, passed here as ``data-alt`` on the cell's widget view), else the image's title
  (``attnlab.figure_slider`` describes each picture in its tooltip).

Citations: the text cites author-year (``bibtex_reference_style: author_year``), "Cho et al.
[2014a]" and "[Cho et al., 2014a]"; pybtex's default bibliography style labels the entries
alpha-style ("[CvMerrienboerG+14]"), which a reader cannot match to the text. The style
registered here, ``attnlab_author_year`` (``bibtex_default_style``), labels each entry as a
parenthetical citation shows it, "[Cho et al., 2014a]", and sorts the entries by those labels.
Two papers with the same first author, the same "et al." and the same year would be cited
alike: references.bib gives their years the letters a and b (in the order of their titles),
and tests/book/test_bibliography.py fails on such a pair without them.
"""

from __future__ import annotations

import html
import json
import types
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from bs4 import BeautifulSoup
from docutils import nodes
from pybtex.backends.plaintext import Backend as PlainText
from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting import BaseSortingStyle
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinxcontrib.bibtex.style.names.last import LastNameStyle

HERE = Path(__file__).resolve().parent
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_SCRIPT = f'<script type="{WIDGET_VIEW}">'
logger = logging.getLogger(__name__)


def _script_key(script: Any) -> tuple:
    attributes = getattr(script, "attributes", {}) or {}
    # An inline script is registered once with filename None and once with "": the same script.
    filename = getattr(script, "filename", script) or ""
    return (filename, tuple(sorted((k, str(v)) for k, v in attributes.items())))


def drop_duplicate_scripts(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple] = set()
    unique = []
    for script in scripts:
        key = _script_key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique  # in place: the builder restores its own list after each page


# --- accessibility ------------------------------------------------------------------------


def name_toctree_toggles(soup: Any) -> Any:
    """Give every nameless ``<summary>`` of a toctree the title of the entry it opens."""
    if not isinstance(soup, BeautifulSoup):
        return soup
    for summary in soup.find_all("summary"):
        if summary.get_text(strip=True) or summary.get("aria-label"):
            continue
        entry = summary.find_parent("li")
        link = entry.find("a", recursive=False) if entry else None
        title = link.get_text(" ", strip=True) if link else ""
        hidden = soup.new_tag("span", attrs={"class": "visually-hidden"})
        hidden.string = f"Toggle navigation of {title}" if title else "Toggle navigation"
        summary.append(hidden)
    return soup


def wrap_toctree_function(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    generate = context.get("generate_toctree_html")
    if generate is None or getattr(generate, "attnlab_named", False):
        return

    def generate_named(*args: Any, **kwargs: Any) -> Any:
        return name_toctree_toggles(generate(*args, **kwargs))

    generate_named.attnlab_named = True  # type: ignore[attr-defined]
    context["generate_toctree_html"] = generate_named


class _ListItemCitations:
    """Citations as list items of docutils' ``role="list"`` container (see the docstring)."""

    def visit_citation(self, node: nodes.Element) -> None:
        super().visit_citation(node)  # type: ignore[misc]
        self.body[-1] = self.body[-1].replace('role="doc-biblioentry"', 'role="listitem"')  # type: ignore[attr-defined]


def use_listitem_citations(app: Sphinx) -> None:
    if app.builder.format != "html":
        return
    base = app.registry.get_translator_class(app.builder)
    if base is None or issubclass(base, _ListItemCitations):
        return
    translator = types.new_class("AttnlabHTMLTranslator", (_ListItemCitations, base), {})
    app.set_translator(app.builder.name, translator, override=True)


def _cell_alt(cell: nodes.Element) -> str:
    options = (cell.get("cell_metadata") or {}).get("mystnb", {}).get("image", {})
    return str(options.get("alt", "")).strip() if isinstance(options, dict) else ""


def pass_alt_to_widgets(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Put a code cell's ``mystnb: image: alt`` on its widget views, as ``data-alt``."""
    for cell in doctree.findall(nodes.container):
        if cell.get("nb_element") != "cell_code" or not (alt := _cell_alt(cell)):
            continue
        for raw in cell.findall(nodes.raw):
            text = raw.astext()
            if raw.get("format") == "html" and text.startswith(WIDGET_SCRIPT):
                tagged = f'<script type="{WIDGET_VIEW}" data-alt="{html.escape(alt, quote=True)}">'
                raw.replace_self(nodes.raw("", tagged + text[len(WIDGET_SCRIPT) :], format="html"))


def add_widget_script(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    if WIDGET_VIEW in context.get("body", ""):
        app.builder.add_js_file("attnlab-widgets-a11y.js")  # this page only: reverted after it


_PLAIN = PlainText()  # render_as("text") would look the backend up among the entry points each time


def _cited_names(entry: Any) -> list[str]:
    """The names a citation of ``entry`` (a pybtex entry) is made of ("von" part and last name):
    the first two authors' and, for more, as many empty strings."""
    people = entry.persons.get("author") or entry.persons.get("editor")
    if not people:
        raise ValueError(f"references.bib: {entry.key} has neither author nor editor to cite it by")
    first_two = [LastNameStyle().format(person).format().render(_PLAIN) for person in people[:2]]
    return first_two + [""] * (len(people) - 2)


def author_year(entry: Any) -> str:
    """How a parenthetical citation of ``entry`` reads inside its brackets, as the in-text
    citations give it: "Vaswani et al., 2017", "Jain and Wallace, 2019", "Saitoh, 2018"."""
    names = _cited_names(entry)
    who = names[0] if len(names) == 1 else " and ".join(names) if len(names) == 2 else f"{names[0]} et al."
    return f"{who}, {entry.fields['year']}"


class AuthorYearLabels(BaseLabelStyle):
    def format_labels(self, sorted_entries: Any) -> Any:
        for entry in sorted_entries:
            yield author_year(entry)


class AuthorYearSorting(BaseSortingStyle):
    """In the order of the labels, as a reader looks a citation up: by first author, one author
    before two before "et al.", then by year ("Cho et al., 2014a" before "Cho et al., 2014b";
    pybtex's author_year_title compares whole author lists first, which can put b before a)."""

    def sorting_key(self, entry: Any) -> tuple:
        names = [name.casefold() for name in _cited_names(entry)]
        second = names[1] if len(names) == 2 else ""
        return names[0], min(len(names), 3), second, entry.fields["year"], entry.fields.get("title", "").casefold()


class AuthorYearStyle(UnsrtStyle):
    default_label_style = "attnlab_author_year"
    default_sorting_style = "attnlab_author_year"


register_plugin("pybtex.style.labels", "attnlab_author_year", AuthorYearLabels)
register_plugin("pybtex.style.sorting", "attnlab_author_year", AuthorYearSorting)
register_plugin("pybtex.style.formatting", "attnlab_author_year", AuthorYearStyle)


def published_chrome(app: Sphinx, config: Any) -> None:
    """The published site's chrome, from the one address in _config.yml (``html.baseurl``).

    - One search field: pydata-sphinx-theme 0.17 puts a search field into a header bar that
      sphinx-book-theme 1.3 leaves otherwise empty, above the sidebar's own field. An empty
      ``navbar_persistent`` removes it (the sidebar's field stays on wide pages, the article
      header's search button on narrow ones); the header bar is then hidden by attnlab-a11y.css.
    - The 404 page (sphinx-notfound-page) is served for any missing path, at any depth: its links
      start from the site's root path, "/attnlab/" for https://attnlab.github.io/attnlab/.
    - The preview cards (sphinxext-opengraph) give each page's address under the same root.
    """
    base = config.html_baseurl
    if not base.startswith("https://") or not base.endswith("/"):
        raise ValueError(f"_config.yml: html.baseurl must be the site's https address ending in '/', got {base!r}")
    config.html_theme_options["navbar_persistent"] = []
    root = urlparse(base).path
    config.notfound_urls_prefix = root
    config.notfound_context = {
        "title": "Page not found",
        "body": (
            "<h1>Page not found</h1>\n"
            "<p>There is no page at this address. The book's chapters are listed in its menu; "
            f'<a href="{root}">the front page</a> starts from the beginning.</p>'
        ),
    }
    config.ogp_site_url = base


def add_computed_with(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    """A chapter's page ends with the PyTorch version and the date its outputs were computed with:
    ``metadata.attnlab`` of the notebook, which scripts/nbval_mode.py writes when the outputs are
    recorded (``make execute``). Notebook metadata, not an output: nbval compares none of it. A
    chapter without it warns, which fails the build (-W)."""
    notebook = Path(app.srcdir) / f"{pagename}.ipynb"
    if not pagename.startswith("chapters/") or not notebook.is_file() or "body" not in context:
        return
    meta = json.loads(notebook.read_text(encoding="utf-8")).get("metadata", {}).get("attnlab", {})
    torch_version = str(meta.get("platform", {}).get("torch", "")).split("+")[0]
    date = meta.get("recorded")
    if not torch_version or not date:
        logger.warning(
            f"{notebook.name}: no metadata.attnlab.platform.torch or .recorded: run scripts/nbval_mode.py record"
        )
        return
    context["body"] += (
        '<p class="attnlab-computed-with">The outputs on this page were computed with '
        f"PyTorch {html.escape(torch_version)} on {html.escape(date)}.</p>"
    )


def add_static_files(app: Sphinx) -> None:
    if app.builder.format == "html":
        app.config.html_static_path.append(str(HERE / "static"))


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("html-page-context", drop_duplicate_scripts, priority=900)
    app.connect("config-inited", published_chrome)
    # Before pydata-sphinx-theme's own components folder, which it appends in its setup().
    app.config.templates_path.insert(0, str(HERE / "templates"))
    app.connect("html-page-context", wrap_toctree_function, priority=600)  # after the theme's (500)
    app.connect("builder-inited", use_listitem_citations, priority=900)  # after the theme's translator
    app.connect("builder-inited", add_static_files)
    app.connect("doctree-resolved", pass_alt_to_widgets)
    app.connect("html-page-context", add_widget_script)
    app.connect("html-page-context", add_computed_with)
    app.add_css_file("attnlab-a11y.css")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
