"""The book's diagrams: drawn by book/figures/draw.py, committed as SVG, placed and described in the text.

Fails on: a committed SVG that differs from what draw.py draws (an SVG edited by hand, or a drawing
changed without `python book/figures/draw.py`), an SVG that draw.py does not draw, an SVG that does not
parse or breaks the house rules (no title, too wide, text under 13 px, a reference to anything outside
the file), an image in the text (Markdown image, figure or image directive, HTML img) whose file is
missing or that has no alt text, a figure file that no page shows, a figure directive without a name,
a caption or the theme class, and numbers or notation in a figure that disagree with the chapter or
the package.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "book" / "figures"
SVG = "{http://www.w3.org/2000/svg}"


def _load_draw():
    spec = importlib.util.spec_from_file_location("attnlab_book_draw", FIGURES / "draw.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


draw = _load_draw()
SVG_FILES = sorted(FIGURES.glob("*.svg"))


# --- finding the images in the text -------------------------------------------------------------
@dataclass(frozen=True)
class Image:
    document: Path  # the file whose text shows the image
    where: str  # e.g. "cell 11" for a notebook
    kind: str  # "markdown", "figure", "image" or "html"
    src: str
    alt: str | None
    options: dict[str, str]
    body: str  # a figure directive's caption

    @property
    def path(self) -> Path:
        return (self.document.parent / self.src).resolve()


MARKDOWN_IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<src>[^)\s]+)[^)]*\)")
DIRECTIVE = re.compile(
    r"^(?P<fence>:{3,}|`{3,})\{(?P<kind>figure|image)\}[ \t]+(?P<src>\S+)[ \t]*\n"
    r"(?P<options>(?:[ \t]*:[\w-]+:[^\n]*\n)*)(?P<body>.*?)^(?P=fence)[ \t]*$",
    re.M | re.S,
)
HTML_IMAGE = re.compile(r"<img\b[^>]*>", re.I)
ATTRIBUTE = re.compile(r"""(\w+)\s*=\s*("[^"]*"|'[^']*')""")


def find_images(text: str, document: Path, where: str) -> list[Image]:
    """Every image that the Markdown ``text`` shows."""
    found = []
    for m in DIRECTIVE.finditer(text):
        options = dict(re.findall(r"^[ \t]*:([\w-]+):[ \t]*(.*)$", m.group("options"), re.M))
        found.append(
            Image(
                document, where, m.group("kind"), m.group("src"), options.get("alt"), options, m.group("body").strip()
            )
        )
    found += [
        Image(document, where, "markdown", m.group("src"), m.group("alt"), {}, "")
        for m in MARKDOWN_IMAGE.finditer(text)
    ]
    for m in HTML_IMAGE.finditer(text):
        attrs = {k.lower(): v[1:-1] for k, v in ATTRIBUTE.findall(m.group())}
        found.append(Image(document, where, "html", attrs.get("src", ""), attrs.get("alt"), {}, ""))
    return found


def _documents() -> list[tuple[Path, str, str]]:
    """(file, where, Markdown text) of every page source: chapters' Markdown cells, chapters/*.md, book/*.md."""
    docs = []
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        docs += [(path, f"cell {i}", c.source) for i, c in enumerate(nb.cells) if c.cell_type == "markdown"]
    for path in sorted((ROOT / "chapters").glob("*.md")) + sorted((ROOT / "book").glob("*.md")):
        docs.append((path, "", path.read_text(encoding="utf-8")))
    return docs


IMAGES = [image for path, where, text in _documents() for image in find_images(text, path, where)]


def _id(image: Image) -> str:
    return f"{image.document.name}:{image.where}:{Path(image.src).name}"


def test_the_finder_sees_images_with_and_without_alt_text():
    """The checks below can fail: the finder reports every form of image, and a missing alt as None."""
    text = (
        "A ![](a.png) and ![a cat](b.png).\n\n"
        ":::{figure} ../book/figures/x.svg\n:name: fig-x\n\nA caption.\n:::\n\n"
        "```{image} y.png\n:alt: a dog\n```\n\n"
        '<img src="z.png"> and <img alt="" src="w.png">\n'
    )
    found = {(i.kind, i.src): i.alt for i in find_images(text, ROOT / "chapters" / "t.md", "")}
    assert found == {
        ("markdown", "a.png"): "",
        ("markdown", "b.png"): "a cat",
        ("figure", "../book/figures/x.svg"): None,
        ("image", "y.png"): "a dog",
        ("html", "z.png"): None,
        ("html", "w.png"): "",
    }
    (figure,) = [i for i in find_images(text, ROOT / "chapters" / "t.md", "") if i.kind == "figure"]
    assert figure.body == "A caption." and figure.options == {"name": "fig-x"}
    assert figure.path == FIGURES / "x.svg"


def test_the_book_shows_figures():
    assert len([i for i in IMAGES if i.path.parent == FIGURES]) >= 15, "the diagrams of issue 20 are missing"


@pytest.mark.parametrize("image", IMAGES, ids=_id)
def test_every_image_exists(image):
    assert image.path.is_file(), f"{image.document.name} ({image.where}) shows {image.src}, which does not exist"


@pytest.mark.parametrize("image", IMAGES, ids=_id)
def test_every_image_has_alt_text(image):
    alt = (image.alt or "").strip()
    assert len(alt.split()) >= 5, (
        f"{image.document.name} ({image.where}): {image.src} needs an alt text that says what the image shows "
        f"(a sentence or two), got {image.alt!r}"
    )


@pytest.mark.parametrize("image", [i for i in IMAGES if i.path.parent == FIGURES], ids=_id)
def test_every_diagram_is_a_numbered_captioned_figure_the_theme_leaves_alone(image):
    assert image.kind == "figure", f"{image.src}: use the figure directive, so that it is numbered and captioned"
    assert image.options.get("name") == f"fig-{image.path.stem}", f"{image.src}: name it fig-{image.path.stem}"
    assert len(image.body.split()) >= 8, f"{image.src}: the caption must say what to look at"
    # pydata-sphinx-theme dims every image on dark pages unless it has this class; the SVGs draw their
    # own light card instead (tests/site/test_figures.py looks at them in both modes)
    assert image.options.get("class") == "dark-light", f"{image.src}: add `:class: dark-light`"


@pytest.mark.parametrize("path", SVG_FILES, ids=lambda p: p.name)
def test_every_figure_file_is_shown_somewhere(path):
    users = {f"{i.document.name} ({i.where})" for i in IMAGES if i.path == path}
    assert users, f"book/figures/{path.name} is shown by no page: place it in its chapter or delete it"


def test_every_figure_file_is_drawn_by_the_source():
    on_disk = {p.stem for p in SVG_FILES}
    assert on_disk == set(draw.FIGURES), (
        f"SVGs that draw.py does not draw: {sorted(on_disk - set(draw.FIGURES))}; "
        f"drawings never written: {sorted(set(draw.FIGURES) - on_disk)} (run `python book/figures/draw.py`)"
    )


@pytest.mark.parametrize("name", sorted(draw.FIGURES))
def test_committed_svg_is_what_the_source_draws(name):
    path = FIGURES / f"{name}.svg"
    assert path.exists(), f"{path.name} is missing: run `python book/figures/draw.py`"
    committed = path.read_text(encoding="utf-8")
    drawn = draw.render(name)
    if committed != drawn:
        first = next(i for i, (a, b) in enumerate(zip(committed + "\0", drawn + "\0", strict=False)) if a != b)
        line = committed.count("\n", 0, first) + 1
        pytest.fail(
            f"{path.name} differs from what book/figures/draw.py draws (first at line {line}): change the "
            f"drawing in draw.py, never the SVG, and run `python book/figures/draw.py`"
        )


def _font_sizes(root: ET.Element) -> list[float]:
    return [float(e.get("font-size")) for e in root.iter() if e.get("font-size") is not None]


@pytest.mark.parametrize("path", SVG_FILES, ids=lambda p: p.name)
def test_svg_parses_and_follows_the_house_rules(path):
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as error:
        pytest.fail(f"{path.name} is not well-formed XML: {error}")
    assert root.tag == f"{SVG}svg", f"{path.name}: the root element is {root.tag}, not an SVG"
    width, height = int(root.get("width")), int(root.get("height"))
    assert root.get("viewBox") == f"0 0 {width} {height}", f"{path.name}: viewBox and size disagree"
    assert width <= draw.MAX_WIDTH, f"{path.name}: {width} px wide; at most {draw.MAX_WIDTH} stays readable on a phone"
    for tag in ("title", "desc"):
        element = root.find(f"{SVG}{tag}")
        assert element is not None and (element.text or "").strip(), f"{path.name} has no <{tag}>"
    sizes = _font_sizes(root)
    assert sizes and min(sizes) >= draw.SMALL, f"{path.name}: text of {min(sizes)} px, under {draw.SMALL} px"
    assert "DejaVu Sans" in root.get("font-family", ""), f"{path.name}: not in the book's font"
    # self-contained: the site must work offline, and an <img> SVG cannot load anything anyway
    for element in root.iter():
        name = element.tag.removeprefix(SVG)
        assert name not in {"image", "script", "style", "foreignObject", "a"}, f"{path.name}: a <{name}> element"
        for attr, value in element.attrib.items():
            assert not attr.endswith("href"), f"{path.name}: <{name} {attr}={value!r}> refers to another resource"
            assert "url(" not in value, f"{path.name}: <{name} {attr}={value!r}> refers to another resource"


def _text(path: Path) -> str:
    root = ET.parse(path).getroot()
    return " ".join("".join(t.itertext()) for t in root.iter(f"{SVG}text"))


@pytest.mark.parametrize(
    "name, shapes",
    [
        ("three-stages", ["(B, H, L, E)", "K: (B, H, S, E)", "(B, H, S, Ev)", "scores (B, H, L, S)", "(B, H, L, Ev)"]),
        (
            "multihead",
            [
                "(B, L, D)",
                "(B, S, D)",
                "(B, L, D) → (B, L, H, E) → (B, H, L, E)",
                "(B, L, S)",
                "(B, H, L, E) → (B, L, H, E) → (B, L, D)",
                "q_proj",
                "out_proj",
            ],
        ),
        ("masks", ["(B, 1, 1, S)", "(L, S)", "(B, 1, L, S)"]),
        ("kv-cache", ["(B, H, t, E)", "(B, H, S, E)", "self_k", "cross_v"]),
        ("transformer", ["memory (B, S, D)", "logits (B, L, V)", "num_encoder_layers", "num_decoder_layers"]),
        ("bahdanau-luong", ["st−1", "ht", "ct", "tanh(Wc[ct; ht])"]),
        ("online-softmax", ["m", "ℓ", "a (acc)", "tile s: (L, b)"]),
        ("show-attend-tell", ["S = 16 regions", "D = 32 numbers"]),
        ("soft-hard-local", ["pt ± w"]),
        ("seq2seq", ["yL"]),
        (
            "local-hierarchical",
            ["S · σ(vp⊤ tanh(Wp ht))", "pt ± w", "σ = w/2", "at(s)", "uit⊤uw", "ui⊤us", "si = ∑t αit hit"],
        ),
        ("visual-attention", ["query q", "keys ki", "weights αi", "values vi"]),
    ],
)
def test_figures_use_the_books_letters(name, shapes):
    """Shapes and names as book/notation.md and the package's docstrings write them."""
    text = _text(FIGURES / f"{name}.svg")
    missing = [s for s in shapes if s not in text]
    assert not missing, f"{name}.svg does not show {missing}; its text: {text[:300]}"


def test_soft_addressing_figure_shows_the_chapters_numbers():
    """The weights and the answer in the figure are those chapter 3 prints for T = 1."""
    nb = nbformat.read(ROOT / "chapters" / "03_three_stages.ipynb", as_version=4)
    printed = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" and "cow @ keys.T" in c.source for o in c.outputs
    )
    m = re.search(r"T =\s+1\.0: weights \[([^\]]+)\] -> value ([\d.]+)", printed)
    assert m, f"chapter 3's soft addressing output changed: {printed!r}"
    _, weights, read = draw.soft_read(draw.COW)
    assert [round(w, 3) for w in weights] == [float(x) for x in m.group(1).split(",")]
    assert round(read, 3) == float(m.group(2))
    text = _text(FIGURES / "soft-addressing.svg")
    for w in weights:
        assert draw._num(w) in text
    assert f"{read:.2f}" in text


def test_path_length_figure_counts_as_the_package():
    from attnlab.complexity import table_row

    counts = draw.path_lengths()
    for layer, count in counts.items():
        assert count == table_row(layer, draw.N_PATH, k=draw.K_CONV, r=draw.R_BAND)[1], layer
    text = _text(FIGURES / "path-length.svg")
    assert f"{counts['recurrent']} steps" in text and f"{counts['restricted']} layers" in text


def test_the_palette_is_written_down_once():
    """The legend of book/notation.md is drawn from the same palette the figures use."""
    notation = (ROOT / "book" / "notation.md").read_text(encoding="utf-8")
    assert "figures/legend.svg" in notation and "viridis" in notation
    legend = (FIGURES / "legend.svg").read_text(encoding="utf-8")
    for role in ("query", "key", "value", "state"):
        assert draw.ROLES[role].stroke in legend, role
    assert draw.viridis(0) == draw.VIRIDIS[0] and draw.viridis(1) == draw.VIRIDIS[-1] == "#fde725"
