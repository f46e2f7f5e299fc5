"""The book's schematic figures, drawn as SVG by this file (Python's standard library only).

``python book/figures/draw.py`` rewrites every ``book/figures/*.svg`` from the functions below;
``python book/figures/draw.py --check`` only reports the files that differ from what this source
draws. ``tests/book/test_figure_sources.py`` does the same check, so a committed SVG is always what this
file produces: change a figure here, never in the SVG.

One visual language for the whole book (``book/notation.md`` says it in a sentence, and
``legend.svg``, drawn by ``legend()``, shows it):

Colours, by the role of a tensor, the same in every figure; an arrow takes the colour of what it
carries:

- **queries**: orange (``ROLES["query"]``);
- **keys**: blue (``ROLES["key"]``);
- **values**: reddish purple (``ROLES["value"]``), and so is what attention makes of them: a
  context vector or an attention output is a weighted sum of values;
- **attention weights**: the ``viridis`` colour map of the chapters' heatmaps
  (``attnlab.plot_attention``), dark purple for a weight near 0 and yellow-green for a high
  weight (``viridis()``); a weight drawn without a value uses ``ROLES["weight"]``, viridis's green;
- **everything else** (hidden states, embeddings, tokens): blue-grey (``ROLES["state"]``).

Shapes:

- **rounded rectangles** are layers: anything with learned parameters (a GRU, a linear map, a
  feed-forward network, a layer normalisation);
- **plain grids** of square cells are tensors, one cell per row vector or per number, labelled
  with their shape in the book's letters (``B, H, L, S, E, D``, see ``book/notation.md``);
- **circles** are operations without parameters: ⊕ addition, ⊗ a weighted sum or product,
  softmax, [ ; ] concatenation.

Every SVG draws its own light card with rounded corners, so it reads the same on the site's light
and dark pages (an SVG shown through ``<img>`` cannot see the page's theme); the figure directives
give the image the theme's ``dark-light`` class, which tells pydata-sphinx-theme not to dim it.
Text is DejaVu Sans (the site's machine has it; other machines fall back to their sans-serif), at
least ``SMALL`` = 13 px at the intrinsic size, and no figure is wider than ``MAX_WIDTH`` pixels,
so that on a phone 390 px wide, where a figure gets 342 px, no text is under 8 px.
"""

from __future__ import annotations

import math
import sys
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

HERE = Path(__file__).resolve().parent

FONT = "'DejaVu Sans', 'Bitstream Vera Sans', Verdana, sans-serif"
MONO = "'DejaVu Sans Mono', 'Bitstream Vera Sans Mono', monospace"
SIZE = 15  # ordinary text, px at the intrinsic size
SMALL = 13  # the smallest text anywhere (shapes, subscripts, notes)
MAX_WIDTH = 540  # px; the site's figures get 688 px on a desktop and 342 px on a 390 px phone

INK = "#1b2a41"  # text
MUTED = "#4d5d74"  # secondary text: shapes, notes
LINE = "#5b6b82"  # arrows that carry nothing in particular
CARD = "#f8fafc"  # the figure's own background
CARD_EDGE = "#c9d3e0"
FAINT = "#b8c2d0"  # what is there but not used (discarded states, masked cells)


@dataclass(frozen=True)
class Role:
    stroke: str  # outlines, arrows and the text of this role
    fill: str  # light fill of a tensor or box of this role


ROLES = {
    "query": Role("#c4500a", "#fde3cf"),
    "key": Role("#0a68a3", "#d5e8f6"),
    "value": Role("#a3337a", "#f5dcea"),
    "weight": Role("#1e8c6e", "#cdebb0"),  # viridis's green; weights with values use viridis()
    "state": Role("#4d5d74", "#e5eaf1"),
    "layer": Role("#1f3b73", "#e3e9f5"),
}

# viridis at 0, 1/16, ..., 1 (matplotlib's colour map, sampled once); viridis() interpolates.
VIRIDIS = ["#440154", "#48186a", "#472d7b", "#424086", "#3b528b", "#33638d", "#2c728e", "#26828e",
           "#21918c", "#1fa088", "#28ae80", "#3fbc73", "#5ec962", "#84d44b", "#addc30", "#d8e219",
           "#fde725"]


def viridis(x: float) -> str:
    """The viridis colour of ``x`` in [0, 1], as the chapters' heatmaps show a weight."""
    x = min(1.0, max(0.0, x)) * (len(VIRIDIS) - 1)
    i = min(int(x), len(VIRIDIS) - 2)
    t = x - i
    a, b = VIRIDIS[i], VIRIDIS[i + 1]
    rgb = [round(int(a[k:k + 2], 16) * (1 - t) + int(b[k:k + 2], 16) * t) for k in (1, 3, 5)]
    return "#" + "".join(f"{c:02x}" for c in rgb)


def on_viridis(x: float) -> str:
    """Text colour readable on ``viridis(x)``: white on the dark half, ink on the light half."""
    return "#ffffff" if x < 0.5 else INK


# --- text -----------------------------------------------------------------------------------
# Advance widths of DejaVu Sans, in thousandths of an em, for the printable ASCII characters
# (read once from the font); other characters count as WIDE_CHAR. Used to size boxes around
# their labels; the browser does the actual layout.
_ASCII = (
    "318 401 460 838 636 950 780 275 390 390 500 838 318 361 318 337 636 636 636 636 636 636 636 636 "
    "636 636 337 337 838 838 838 531 1000 684 686 698 770 632 575 775 752 295 295 656 557 863 748 787 "
    "603 787 695 635 611 732 684 989 685 611 685 390 337 390 838 500 500 613 635 550 635 615 352 635 "
    "634 278 278 579 278 974 634 612 635 635 411 521 392 634 592 818 592 592 525 636 337 636 838"
)
WIDTHS = {chr(32 + i): int(w) for i, w in enumerate(_ASCII.split())}
WIDTHS.update({"′": 227, "α": 659, "ℓ": 413, "⊕": 838, "⊗": 838, "×": 838, "→": 838, "−": 838, "·": 318,
               "…": 1000, "√": 637, "∑": 674, "ᵀ": 385, "–": 500, "σ": 603, "⊤": 838, "∞": 833,
               "≤": 838, "≈": 838})
WIDE_CHAR = 700
BOLD = 1.1  # bold DejaVu Sans is about this much wider
MONO_CHAR = 602


@dataclass(frozen=True)
class Run:
    """A stretch of text in one style: ``shift`` is -1 for a subscript, +1 for a superscript."""

    text: str
    italic: bool = False
    bold: bool = False
    code: bool = False
    shift: float = 0


def parse(s: str) -> list[Run]:
    """A small markup for labels, so that a figure writes its letters as the text does.

    ``$...$`` is math: letters in it are italic, ``-`` becomes a minus sign; ``**...**`` is bold
    (upright, as ``\\mathbf``); ``_x`` or ``_{...}`` is a subscript and ``^x`` or ``^{...}`` a
    superscript; a backquoted ``...`` is code (monospace, no markup inside). ``\\`` escapes the
    next character.
    """
    runs: list[Run] = []

    def put(ch: str, math_mode: bool, bold: bool, shift: float) -> None:
        if math_mode and ch == "-":
            ch = "−"
        italic = math_mode and not bold and ch.isalpha() and not unicodedata.combining(ch)
        if unicodedata.combining(ch) and runs:  # a combining mark keeps its letter's style
            last = runs[-1]
            runs[-1] = Run(last.text + ch, last.italic, last.bold, last.code, last.shift)
            return
        runs.append(Run(ch, italic, bold, False, shift))

    def walk(text: str, math_mode: bool, bold: bool, shift: float) -> None:
        i = 0
        while i < len(text):
            ch = text[i]
            if ch == "\\" and i + 1 < len(text):
                put(text[i + 1], math_mode, bold, shift)
                i += 2
            elif ch == "`":
                end = text.index("`", i + 1)
                runs.append(Run(text[i + 1:end], code=True, shift=shift))
                i = end + 1
            elif ch == "$":
                math_mode = not math_mode
                i += 1
            elif text.startswith("**", i):
                bold = not bold
                i += 2
            elif ch in "_^" and i + 1 < len(text):
                step = -1 if ch == "_" else 1
                if shift * step < 0:  # a subscript inside a superscript (or the reverse): half a step
                    step /= 2
                sign = shift + step  # a subscript of a subscript goes lower still
                if text[i + 1] == "{":
                    depth, j = 1, i + 2
                    while depth:
                        depth += {"{": 1, "}": -1}.get(text[j], 0)
                        j += 1
                    walk(text[i + 2:j - 1], math_mode, bold, sign)
                    i = j
                else:
                    walk(text[i + 1], math_mode, bold, sign)
                    i += 2
            else:
                put(ch, math_mode, bold, shift)
                i += 1

    walk(s, False, False, 0)
    merged: list[Run] = []
    for run in runs:
        if merged and not run.code and not merged[-1].code and (
                merged[-1].italic, merged[-1].bold, merged[-1].shift) == (run.italic, run.bold, run.shift):
            merged[-1] = Run(merged[-1].text + run.text, run.italic, run.bold, False, run.shift)
        else:
            merged.append(run)
    return merged


def _run_size(run: Run, size: float) -> float:
    return size if run.shift == 0 else max(SMALL, round(size * 0.8))


def text_width(s: str, size: float = SIZE) -> float:
    """Approximate width in px of the label ``s`` (markup as in ``parse``)."""
    total = 0.0
    for run in parse(s):
        px = _run_size(run, size)
        if run.code:
            total += len(run.text) * MONO_CHAR * px / 1000
            continue
        w = sum(WIDTHS.get(ch, 0 if unicodedata.combining(ch) else WIDE_CHAR) for ch in run.text)
        total += w * px / 1000 * (BOLD if run.bold else 1.0)
    return total


def fmt(x: float) -> str:
    """A coordinate as short, stable text: at most two decimals, no trailing zeros."""
    s = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def _tspans(s: str, size: float) -> str:
    out, level = [], 0
    for run in parse(s):
        px = _run_size(run, size)
        target = round(size * 0.3) * -run.shift if run.shift < 0 else -round(size * 0.42) * run.shift
        attrs = []
        if target != level:
            attrs.append(f'dy="{fmt(target - level)}"')
            level = target
        if px != size:
            attrs.append(f'font-size="{fmt(px)}"')
        if run.italic:
            attrs.append('font-style="italic"')
        if run.bold:
            attrs.append('font-weight="bold"')
        if run.code:
            attrs.append(f"font-family={quoteattr(MONO)}")
        text = escape(run.text)
        out.append(f"<tspan {' '.join(attrs)}>{text}</tspan>" if attrs else text)
    return "".join(out)


# --- geometry -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Box:
    """An axis-aligned rectangle; every primitive returns the box it drew, to attach arrows to."""

    x: float
    y: float
    w: float
    h: float

    @property
    def cx(self) -> float:
        return self.x + self.w / 2

    @property
    def cy(self) -> float:
        return self.y + self.h / 2

    @property
    def right(self) -> float:
        return self.x + self.w

    @property
    def bottom(self) -> float:
        return self.y + self.h

    @property
    def top(self) -> tuple[float, float]:
        return (self.cx, self.y)

    @property
    def base(self) -> tuple[float, float]:
        return (self.cx, self.bottom)

    @property
    def west(self) -> tuple[float, float]:
        return (self.x, self.cy)

    @property
    def east(self) -> tuple[float, float]:
        return (self.right, self.cy)

    def rim(self, x: float, y: float) -> tuple[float, float]:
        """The point of the circle inscribed in this box that faces ``(x, y)`` (for ``op``s)."""
        d = math.hypot(x - self.cx, y - self.cy)
        r = self.w / 2
        return (self.cx + (x - self.cx) * r / d, self.cy + (y - self.cy) * r / d)


class Figure:
    """An SVG drawing of ``width`` x ``height`` px with the book's card, fonts and primitives."""

    def __init__(self, width: int, height: int, title: str, description: str):
        if width > MAX_WIDTH:
            raise ValueError(f"Figure: width {width} exceeds MAX_WIDTH {MAX_WIDTH}")
        self.width, self.height = width, height
        self.title, self.description = title, description
        self.items: list[str] = []

    # low-level
    def add(self, element: str) -> None:
        self.items.append(element)

    def text(self, x: float, y: float, s: str, *, size: float = SIZE, anchor: str = "middle",
             color: str = INK, bold: bool = False) -> Box:
        """Text whose baseline is at ``y``; returns its approximate box."""
        attrs = [f'x="{fmt(x)}"', f'y="{fmt(y)}"']
        if anchor != "start":
            attrs.append(f'text-anchor="{anchor}"')
        if size != SIZE:
            attrs.append(f'font-size="{fmt(size)}"')
        if color != INK:
            attrs.append(f'fill="{color}"')
        if bold:
            attrs.append('font-weight="bold"')
        self.add(f"<text {' '.join(attrs)}>{_tspans(s, size)}</text>")
        w = text_width(s, size) * (BOLD if bold else 1)
        left = {"start": x, "middle": x - w / 2, "end": x - w}[anchor]
        return Box(left, y - 0.76 * size, w, size)

    def label(self, cx: float, cy: float, s: str, **kw) -> Box:
        """Text centred vertically on ``cy`` (for one line of DejaVu Sans)."""
        size = kw.get("size", SIZE)
        return self.text(cx, cy + 0.36 * size, s, **kw)

    def rect(self, x: float, y: float, w: float, h: float, *, fill: str = "none", stroke: str = LINE,
             width: float = 1.2, rx: float = 0, dash: str | None = None, opacity: float | None = None) -> Box:
        attrs = [f'x="{fmt(x)}" y="{fmt(y)}" width="{fmt(w)}" height="{fmt(h)}"']
        if rx:
            attrs.append(f'rx="{fmt(rx)}"')
        attrs.append(f'fill="{fill}"')
        if stroke != "none":
            attrs.append(f'stroke="{stroke}" stroke-width="{fmt(width)}"')
        if dash:
            attrs.append(f'stroke-dasharray="{dash}"')
        if opacity is not None:
            attrs.append(f'opacity="{fmt(opacity)}"')
        self.add(f"<rect {' '.join(attrs)}/>")
        return Box(x, y, w, h)

    def path(self, d: str, *, stroke: str = LINE, width: float = 1.5, fill: str = "none",
             dash: str | None = None) -> None:
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(f'<path d="{d}" fill="{fill}" stroke="{stroke}" stroke-width="{fmt(width)}"'
                 f' stroke-linecap="round" stroke-linejoin="round"{extra}/>')

    # the book's shapes
    def layer(self, x: float, y: float, w: float, h: float, s: str, *, note: str | None = None,
              role: str = "layer", size: float = SIZE, dash: str | None = None) -> Box:
        """A layer (learned parameters): a rounded rectangle with a label (and a smaller note)."""
        r = ROLES[role]
        box = self.rect(x, y, w, h, fill=r.fill, stroke=r.stroke, width=1.4, rx=7, dash=dash)
        if note is None:
            self.label(box.cx, box.cy, s, size=size)
        else:
            self.label(box.cx, box.cy - 0.42 * size, s, size=size)
            self.label(box.cx, box.cy + 0.62 * size, note, size=SMALL, color=MUTED)
        return box

    def tensor(self, x: float, y: float, rows: int, cols: int, cell: float = 14, *, role: str = "state",
               values: Sequence[Sequence[float | None]] | None = None, cell_h: float | None = None,
               faint: bool = False, numbers: bool = False, highlight: Sequence[tuple[int, int]] = ()) -> Box:
        """A tensor: a plain grid of ``rows`` x ``cols`` cells in the colour of its role.

        ``values`` (rows x cols, in [0, 1], ``None`` for an empty cell) colours the cells with
        viridis, as weights are drawn; ``numbers`` writes them in. ``faint`` greys the tensor
        out (present but unused). ``highlight`` outlines some cells more strongly.
        """
        r = ROLES[role]
        ch = cell if cell_h is None else cell_h
        stroke = FAINT if faint else r.stroke
        for i in range(rows):
            for j in range(cols):
                v = values[i][j] if values is not None else None
                if values is not None and v is None:
                    fill = "#ffffff"
                elif v is not None:
                    fill = viridis(v)
                else:
                    fill = "#eef1f5" if faint else r.fill
                self.rect(x + j * cell, y + i * ch, cell, ch, fill=fill, stroke=stroke, width=0.9)
                if numbers and v is not None:
                    self.label(x + (j + 0.5) * cell, y + (i + 0.5) * ch, f"{v:.2f}".lstrip("0"),
                               size=SMALL, color=on_viridis(v))
        for i, j in highlight:
            self.rect(x + j * cell, y + i * ch, cell, ch, stroke=INK, width=2.2)
        return self.rect(x, y, cols * cell, rows * ch, stroke=stroke, width=1.6)

    def op(self, cx: float, cy: float, s: str, *, r: float | None = None, size: float = SIZE) -> Box:
        """An operation without parameters: a circle with a symbol or a short word."""
        radius = r if r is not None else max(12.0, text_width(s, size) / 2 + (7 if len(s) <= 3 else 3.5))
        self.add(f'<circle cx="{fmt(cx)}" cy="{fmt(cy)}" r="{fmt(radius)}" fill="#ffffff" '
                 f'stroke="{LINE}" stroke-width="1.4"/>')
        self.label(cx, cy, s, size=size)
        return Box(cx - radius, cy - radius, 2 * radius, 2 * radius)

    def arrow(self, *points: tuple[float, float], role: str | None = None, color: str | None = None,
              width: float = 1.6, dash: str | None = None, head: bool = True) -> None:
        """A polyline through ``points`` with an arrowhead at the last one, coloured by role."""
        stroke = color or (ROLES[role].stroke if role else LINE)
        pts = list(points)
        if head:
            (x0, y0), (x1, y1) = pts[-2], pts[-1]
            length = math.hypot(x1 - x0, y1 - y0)
            ux, uy = (x1 - x0) / length, (y1 - y0) / length
            back = (x1 - ux * 8.5, y1 - uy * 8.5)
            pts[-1] = (x1 - ux * 4, y1 - uy * 4)  # the line stops inside the head
            left = (back[0] - uy * 4.5, back[1] + ux * 4.5)
            right = (back[0] + uy * 4.5, back[1] - ux * 4.5)
        d = "M" + " L".join(f"{fmt(x)} {fmt(y)}" for x, y in pts)
        self.path(d, stroke=stroke, width=width, dash=dash)
        if head:
            tri = " ".join(f"{fmt(x)},{fmt(y)}" for x, y in ((x1, y1), left, right))
            self.add(f'<polygon points="{tri}" fill="{stroke}"/>')

    def panel(self, x: float, y: float, s: str) -> Box:
        """A panel's heading, bold, at the top left of the panel."""
        return self.text(x, y, s, anchor="start", bold=True)

    def svg(self) -> str:
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height}" '
                f'viewBox="0 0 {self.width} {self.height}" role="img" font-family={quoteattr(FONT)} '
                f'font-size="{SIZE}" fill="{INK}">')
        card = (f'<rect x="0.75" y="0.75" width="{fmt(self.width - 1.5)}" height="{fmt(self.height - 1.5)}" '
                f'rx="12" fill="{CARD}" stroke="{CARD_EDGE}" stroke-width="1.5"/>')
        body = "\n".join([head, f"<title>{escape(self.title)}</title>",
                          f"<desc>{escape(self.description)}</desc>", card, *self.items, "</svg>"])
        return body + "\n"


# --- the figures ----------------------------------------------------------------------------
FIGURES: dict[str, Callable[[], Figure]] = {}


def figure(name: str) -> Callable[[Callable[[], Figure]], Callable[[], Figure]]:
    """Register a function that draws ``book/figures/<name>.svg``."""

    def register(fn: Callable[[], Figure]) -> Callable[[], Figure]:
        FIGURES[name] = fn
        return fn

    return register


# chapter 1 ----------------------------------------------------------------------------------
@figure("seq2seq")
def seq2seq() -> Figure:
    """Chapter 1: the encoder's states, the one context vector, the decoder (``models.seq2seq``)."""
    f = Figure(540, 390, "An encoder-decoder with one fixed-length context vector",
               "A GRU encoder reads x_1 to x_S and produces states h_1 to h_S; only the context "
               "vector c (the last state, or the mean or maximum of all states) reaches the decoder, "
               "whose first state is tanh(W c); the decoder GRU then writes y_1 to y_L.")
    bw, bh = 46, 32
    f.rect(10, 10, 248, 222, fill="#eef2f8", stroke="none", rx=9)
    f.rect(222, 244, 308, 136, fill="#eef2f8", stroke="none", rx=9)
    f.panel(20, 32, "encoder")
    f.text(232, 372, "decoder", anchor="start", bold=True)

    def chain(boxes: list[Box], states: list[str]) -> None:
        for i in range(1, len(boxes)):
            a, b = boxes[i - 1], boxes[i]
            gap = b.x - a.right
            if gap > 28:
                f.label((a.right + b.x) / 2, b.cy, "…")
                f.arrow(a.east, (a.right + gap / 2 - 8, a.cy))
                f.arrow((b.x - gap / 2 + 8, b.cy), b.west)
            else:
                f.arrow(a.east, b.west)
            if states[i - 1]:
                f.text(b.x - 3, b.y - 5, states[i - 1], anchor="end", size=SMALL)

    # encoder: x_s -> GRU -> h_s
    enc = []
    for x, sub in zip([20, 86, 180], ["1", "2", "S"]):
        box = f.layer(x, 112, bw, bh, "GRU", size=SMALL)
        enc.append(box)
        f.arrow((box.cx, 184), box.base)
        f.label(box.cx, 198, f"$x_{sub}$")
        used = sub == "S"
        vec = f.tensor(box.cx - 22, 66, 1, 4, 11, faint=not used)
        f.arrow(box.top, (box.cx, vec.bottom + 1), color=LINE if used else FAINT)
        f.text(vec.cx, vec.y - 7, f"$**h**_{sub}$", color=INK if used else MUTED)
    chain(enc, ["", ""])
    f.text(20, 258, "$hs$ = [$**h**$_1; …; $**h**_S$]: $S$ states", anchor="start", size=SMALL, color=MUTED)
    f.text(20, 275, "of $D$ numbers each. Only one", anchor="start", size=SMALL, color=MUTED)
    f.text(20, 292, "vector of $D$ numbers reaches", anchor="start", size=SMALL, color=MUTED)
    f.text(20, 309, "the decoder, however long", anchor="start", size=SMALL, color=MUTED)
    f.text(20, 326, "the source.", anchor="start", size=SMALL, color=MUTED)
    # the context vector
    c = f.tensor(278, 50, 4, 1, 14)
    f.rect(c.x - 3, c.y - 3, c.w + 6, c.h + 6, stroke=INK, width=2.2)
    f.arrow((enc[-1].cx + 22, 71.5), (c.x - 4, 71.5))
    f.text(c.right + 12, 64, "$**c**$ = $**h**_S$", anchor="start")
    f.text(c.right + 12, 84, "or the mean or the", anchor="start", size=SMALL, color=MUTED)
    f.text(c.right + 12, 100, "maximum of $**h**$_1 … $**h**_S$:", anchor="start", size=SMALL, color=MUTED)
    f.text(c.right + 12, 116, "$D$ numbers", anchor="start", size=SMALL, color=MUTED)
    # decoder: s_0 = tanh(W c), then s_t = GRU(y_{t-1}, s_{t-1}), p(y_t) = softmax(W s_t)
    bridge = f.layer(c.cx - 39, 290, 78, 30, "tanh($W$**c**)", size=SMALL)
    f.arrow((c.cx, c.bottom + 3), bridge.top)
    dec = [f.layer(x, 289, 42, bh, "GRU", size=SMALL) for x in (342, 404, 482)]
    f.arrow(bridge.east, dec[0].west)
    f.text(bridge.right + 4, bridge.y - 4, "$**s**$_0", anchor="start", size=SMALL)
    chain(dec, ["$**s**$_1", ""])
    for box, y_in, y_out in zip(dec, ["<s>", "$y$_1", "$y_{L-1}$"], ["$y$_1", "$y$_2", "$y_L$"]):
        f.arrow((box.cx, 350), box.base)
        f.label(box.cx, 362, y_in, size=SMALL)
        f.arrow(box.top, (box.cx, 266))
        f.label(box.cx, 255, y_out)
    f.text(20, 354, "$**s**_t$ = GRU($y_{t-1}$, $**s**_{t-1}$)", anchor="start", size=SMALL, color=MUTED)
    f.text(20, 372, "$p$($y_t$) = softmax($W **s**_t$)", anchor="start", size=SMALL, color=MUTED)
    return f


# chapter 2 ----------------------------------------------------------------------------------
ALPHA = [0.04, 0.1, 0.72, 0.1, 0.04]  # an illustrative weight vector over S = 5 positions


@figure("decoder-improvements")
def decoder_improvements() -> Figure:
    """Chapter 2: Saitoh's three decoder improvements, S = 5 source positions, D = 4."""
    f = Figure(540, 624, "The three decoder improvements",
               "Improvement 1: the context c is the weighted sum of the rows of hs with weights alpha. "
               "Improvement 2: the weights come from comparing the decoder state h with every row of "
               "hs (dot products), normalised by a softmax. Improvement 3: an Attention layer, made of "
               "the two, sits between the decoder's recurrent layer and its output layer, which reads "
               "the context and the state concatenated.")
    cell = 20
    top = max(ALPHA)
    shades = [[a / top] for a in ALPHA]
    # 1: a weighted sum
    f.panel(18, 30, "1  Select with weights: a weighted sum")
    alpha = f.tensor(40, 70, 5, 1, 38, cell_h=cell, values=shades)
    for i, a in enumerate(ALPHA):
        f.label(alpha.cx, alpha.y + (i + 0.5) * cell, f"{a:.2f}".lstrip("0"), size=SMALL, color=on_viridis(a / top))
    f.text(alpha.cx, alpha.y - 8, "$α$", size=SIZE)
    hs = f.tensor(100, 70, 5, 4, cell)
    f.text(hs.cx, hs.y - 8, "$hs$  ($S$ × $D$)")
    for i in range(5):
        f.label(89, hs.y + (i + 0.5) * cell, "×", size=SMALL, color=MUTED)
    s = f.op(236, hs.cy, "∑")
    f.arrow(hs.east, s.west, role="value")
    c = f.tensor(290, hs.cy - cell / 2, 1, 4, cell, role="value")
    f.arrow(s.east, c.west, role="value")
    f.text(c.cx, c.y - 10, "$**c**$ = $α$^⊤ $hs$")
    f.text(290, c.bottom + 26, "= $∑_s$ $α_s$ $**h**_s$", anchor="start", size=SMALL, color=MUTED)
    f.text(290, c.bottom + 44, "a one-hot $α$ selects a row,", anchor="start", size=SMALL, color=MUTED)
    f.text(290, c.bottom + 60, "a spread one blends rows", anchor="start", size=SMALL, color=MUTED)
    # 2: the weights from the decoder's state
    y0 = 200
    f.rect(12, y0, 516, 1, fill=CARD_EDGE, stroke="none")
    f.panel(18, y0 + 30, "2  Compute the weights from the decoder state")
    q = f.tensor(100, y0 + 70, 1, 4, cell, role="query")
    f.text(q.x - 8, q.y + 15, "$**h**$", anchor="end")
    f.text(q.x, q.y - 9, "query: the decoder state", anchor="start", size=SMALL, color=ROLES["query"].stroke)
    keys = f.tensor(100, y0 + 108, 5, 4, cell)
    f.text(keys.x - 8, keys.cy + 5, "$hs$", anchor="end")
    dots = f.op(236, keys.cy, "·", r=12)
    f.arrow(q.east, (dots.cx, q.y + cell / 2), (dots.cx, dots.y), role="query")
    f.arrow(keys.east, dots.west, role="key")
    f.text(keys.x, keys.bottom + 20, "keys: the rows of $hs$", anchor="start", size=SMALL, color=ROLES["key"].stroke)
    scores = f.tensor(272, keys.y, 5, 1, 38, cell_h=cell, role="state")
    f.text(scores.cx, scores.y - 8, "scores", size=SMALL)
    f.arrow(dots.east, scores.west)
    soft = f.op(374, keys.cy, "softmax", size=SMALL)
    f.arrow(scores.east, soft.west)
    weights = f.tensor(440, keys.y, 5, 1, 38, cell_h=cell, values=shades)
    for i, a in enumerate(ALPHA):
        f.label(weights.cx, weights.y + (i + 0.5) * cell, f"{a:.2f}".lstrip("0"), size=SMALL, color=on_viridis(a / top))
    f.arrow(soft.east, weights.west, role="weight")
    f.text(weights.cx, weights.y - 8, "$α$")
    f.text(weights.cx, weights.bottom + 20, "sums to 1", size=SMALL, color=MUTED)
    # 3: the Attention layer inside the decoder
    y0 = 440
    f.rect(12, y0, 516, 1, fill=CARD_EDGE, stroke="none")
    f.panel(18, y0 + 30, "3  Give the context to the decoder")
    row = y0 + 112
    f.label(32, row, "$y_{t-1}$", size=SMALL)
    rnn = f.layer(66, row - 18, 58, 36, "LSTM", size=SMALL)
    f.arrow((54, row), rnn.west)
    att = f.layer(176, row - 28, 136, 56, "Attention", note="weights, then sum")
    f.arrow(rnn.east, att.west)
    f.text(150, row - 7, "$**h**_t$", size=SMALL)
    mem = f.tensor(204, y0 + 46, 1, 5, 16)
    f.text(mem.right + 8, mem.y + 13, "$hs$", anchor="start", size=SMALL)
    f.arrow((mem.cx, mem.bottom), att.top)
    cat = f.op(360, row, "[ ; ]", size=SMALL)
    f.arrow(att.east, cat.west, role="value")
    f.text(327, row - 9, "$**c**_t$", size=SMALL)
    f.arrow((150, row), (150, row + 42), (cat.cx, row + 42), cat.base)
    aff = f.layer(406, row - 18, 66, 36, "Affine", size=SMALL)
    f.arrow(cat.east, aff.west)
    f.arrow(aff.east, (500, row))
    f.text(506, row + 5, "$y_t$", anchor="start", size=SMALL)
    f.text(176, row + 64, "the output layer reads [$**c**_t$; $**h**_t$]", anchor="start", size=SMALL, color=MUTED)
    return f


@figure("bahdanau-luong")
def bahdanau_luong() -> Figure:
    """Chapter 2: one step of ``BahdanauDecoder`` and of ``LuongDecoder``, read bottom to top."""
    f = Figure(540, 660, "One decoder step of Bahdanau's and of Luong's attention",
               "Bahdanau: the previous state s_(t-1) scores hs additively; softmax gives alpha_t; the "
               "weighted sum of hs is the context c_t, which joins y_(t-1) at the input of the GRU; the "
               "output layer reads [s_t; c_t]. Luong: the GRU runs first; its new state h_t scores hs "
               "(general or dot); the context c_t and h_t are concatenated and passed through "
               "tanh(W_c [c_t; h_t]) before the output layer W_s.")
    f.rect(270, 16, 1, 628, fill=CARD_EDGE, stroke="none")
    f.text(135, 34, "Bahdanau", bold=True)
    f.text(135, 52, "attend, then step", size=SMALL, color=MUTED)
    f.text(405, 34, "Luong", bold=True)
    f.text(405, 52, "step, then attend", size=SMALL, color=MUTED)

    def vec(cx: float, cy: float, role: str, name: str, side: str = "east") -> Box:
        t = f.tensor(cx - 22, cy - 5.5, 1, 4, 11, role=role)
        if side == "east":
            f.text(t.right + 7, cy + 5, name, anchor="start", size=SMALL)
        else:
            f.text(t.x - 7, cy + 5, name, anchor="end", size=SMALL)
        return t

    def attend(cx: float, y_score: float, score: str, note: str, mem_x: float) -> tuple[Box, Box]:
        """Score layer (centred on y_score), softmax, alpha_t, weighted sum, c_t, bottom to top."""
        box = f.layer(cx - 99, y_score - 19, 198, 38, score, note=note, size=SMALL)
        soft = f.op(cx, y_score - 63, "softmax", size=SMALL)
        f.arrow(box.top, soft.base)
        weights = f.tensor(cx - 30, y_score - 119, 1, 5, 12, values=[[a / max(ALPHA) for a in ALPHA]])
        f.arrow(soft.top, (cx, weights.bottom + 1), role="weight")
        f.text(weights.right + 7, weights.cy + 5, "$α_t$", anchor="start", size=SMALL)
        total = f.op(cx, y_score - 145, "∑")
        f.arrow((cx, weights.y), total.base, role="weight")
        mem = f.tensor(mem_x - 6, y_score - 158, 6, 1, 12, cell_h=19)
        f.text(mem.cx, mem.y - 8, "$hs$", size=SMALL)
        side = box.right if mem_x > cx else box.x
        f.arrow((mem.cx, mem.bottom), (mem.cx, y_score), (side, y_score), role="key")
        f.arrow((mem.x if mem_x > cx else mem.right, total.cy), total.east if mem_x > cx else total.west,
                role="value")
        c = vec(cx, y_score - 178.5, "value", "$**c**_t$")
        f.arrow(total.top, (cx, c.bottom + 1), role="value")
        return box, c

    # Bahdanau: s_{t-1} -> additive score -> alpha -> c_t; [y_{t-1}; c_t] -> GRU -> s_t; [s_t; c_t] -> out
    cx = 120
    prev = vec(cx, 622, "query", "$**s**_{t-1}$")
    score, c = attend(cx, 576, "additive score", "$**v**$^⊤tanh($W_q **s**_{t-1}$ + $W_k **h**_s$)", 238)
    f.arrow((cx, prev.y), score.base, role="query")
    cat1 = f.op(cx, 344, "[ ; ]", size=SMALL)
    f.arrow((cx, c.y), cat1.base, role="value")
    f.text(cat1.right + 36, cat1.cy + 5, "$y_{t-1}$", size=SMALL)
    f.arrow((cat1.right + 18, cat1.cy), cat1.east)
    gru = f.layer(cx - 40, 268, 80, 34, "GRU", size=SMALL)
    f.arrow(cat1.top, gru.base)
    f.arrow((prev.x, prev.cy), (13, prev.cy), (13, gru.cy), gru.west, role="query")
    state = vec(cx, 236, "state", "$**s**_t$", side="west")
    f.arrow(gru.top, (cx, state.bottom + 1))
    cat2 = f.op(cx, 190, "[ ; ]", size=SMALL)
    f.arrow((cx, state.y), cat2.base)
    f.arrow((c.right, c.cy), (226, c.cy), (226, cat2.cy), cat2.east, role="value")
    out = f.layer(cx - 54, 114, 108, 34, "output layer", size=SMALL)
    f.arrow(cat2.top, out.base)
    f.arrow(out.top, (cx, 86))
    f.text(cx, 80, "$p$($y_t$)", size=SMALL)

    # Luong: y_{t-1} -> GRU -> h_t -> general score -> alpha -> c_t; tanh(W_c [c_t; h_t]) -> W_s -> out
    cx = 420
    f.text(cx, 648, "$y_{t-1}$", size=SMALL)
    gru = f.layer(cx - 40, 590, 80, 34, "GRU", size=SMALL)
    f.arrow((cx, 636), gru.base)
    f.text(290, gru.cy + 5, "$**h**_{t-1}$", anchor="start", size=SMALL)
    f.arrow((326, gru.cy), gru.west)
    h = vec(cx, 564, "query", "$**h**_t$")
    f.arrow(gru.top, (cx, h.bottom + 1), role="query")
    score, c = attend(cx, 520, "general score", "$**h**_t$^⊤$W **h**_s$ (or dot: $**h**_t$^⊤$**h**_s$)", 302)
    f.arrow((cx, h.y), score.base, role="query")
    cat = f.op(cx, 290, "[ ; ]", size=SMALL)
    f.arrow((cx, c.y), cat.base, role="value")
    f.arrow((h.right, h.cy), (526, h.cy), (526, cat.cy), cat.east, role="query")
    comb = f.layer(cx - 70, 218, 140, 34, "tanh($W_c$[$**c**_t$; $**h**_t$])", size=SMALL)
    f.arrow(cat.top, comb.base)
    tilde = vec(cx, 186, "state", "$**h**_t$", side="west")
    # the tilde of h~_t, drawn apart (a combining tilde lands beside an italic h in some fonts)
    f.text(tilde.x - 7 - text_width("$**h**_t$", SMALL) + text_width("$**h**$", SMALL) / 2 + 1, 178, "~", size=SMALL)
    f.arrow(comb.top, (cx, tilde.bottom + 1))
    out = f.layer(cx - 54, 114, 108, 34, "$W_s$", size=SMALL)
    f.arrow((cx, tilde.y), out.base)
    f.arrow(out.top, (cx, 86))
    f.text(cx, 80, "$p$($y_t$)", size=SMALL)
    return f


# chapter 3 ----------------------------------------------------------------------------------
# The memory of chapter 3's first cells: keys are two features ("is an animal", "has wheels").
MEMORY = [("cat", (1.0, 0.0), 1.0), ("dog", (0.9, 0.1), 2.0), ("car", (0.0, 1.0), 10.0)]
COW = (0.95, 0.05)


def soft_read(query: Sequence[float], temperature: float = 1.0) -> tuple[list[float], list[float], float]:
    """Scores, softmax weights and the value read from ``MEMORY``, as chapter 3 computes them."""
    scores = [sum(q * k for q, k in zip(query, key)) / temperature for _, key, _ in MEMORY]
    top = max(scores)
    exps = [math.exp(e - top) for e in scores]
    weights = [e / sum(exps) for e in exps]
    return scores, weights, sum(w * v for w, (_, _, v) in zip(weights, MEMORY))


def _num(x: float) -> str:
    """A number as the figures print it: at most two decimals, no leading zero."""
    text = f"{x:.2f}".rstrip("0").rstrip(".")
    return text[1:] if text.startswith("0.") else text


@figure("soft-addressing")
def soft_addressing() -> Figure:
    """Chapter 3: hard lookup in a dictionary against soft addressing over the same memory."""
    scores, weights, read = soft_read(COW)
    f = Figure(540, 436, "Hard lookup and soft addressing over the same key/value memory",
               "Hard lookup: the query dog equals a key and gets its value 2; the query cow equals no "
               "key and gets a KeyError. Soft addressing: the query vector of cow is compared with "
               f"every key vector; a softmax turns the scores into weights {', '.join(_num(w) for w in weights)}; "
               f"the answer is the weighted sum of all values, {read:.2f}.")
    f.panel(18, 30, "Hard lookup: a Python dictionary")
    f.text(180, 58, "key", size=SMALL, color=ROLES["key"].stroke)
    f.text(250, 58, "value", size=SMALL, color=ROLES["value"].stroke)
    rows = {}
    for i, (name, _, value) in enumerate(MEMORY):
        y = 66 + i * 28
        k = f.rect(145, y, 70, 24, fill=ROLES["key"].fill, stroke=ROLES["key"].stroke)
        f.label(k.cx, k.cy, f"`{name}`", size=SMALL)
        v = f.rect(215, y, 70, 24, fill=ROLES["value"].fill, stroke=ROLES["value"].stroke)
        f.label(v.cx, v.cy, _num(value), size=SMALL)
        rows[name] = (k, v)
    dog_k, dog_v = rows["dog"]
    q1 = f.rect(30, dog_k.y, 66, 24, fill=ROLES["query"].fill, stroke=ROLES["query"].stroke)
    f.label(q1.cx, q1.cy, "`dog`", size=SMALL)
    f.arrow(q1.east, dog_k.west, role="query")
    f.label(120, dog_k.cy - 10, "=", size=SMALL)
    f.arrow(dog_v.east, (318, dog_v.cy), role="value")
    f.label(332, dog_v.cy, "2", size=SMALL)
    q2 = f.rect(30, 160, 66, 24, fill=ROLES["query"].fill, stroke=ROLES["query"].stroke)
    f.label(q2.cx, q2.cy, "`cow`", size=SMALL)
    f.arrow(q2.east, (140, q2.cy), role="query", dash="5 4")
    f.text(150, q2.cy + 5, "no key equals it: `KeyError`", anchor="start", size=SMALL)

    y0 = 200
    f.rect(12, y0, 516, 1, fill=CARD_EDGE, stroke="none")
    f.panel(18, y0 + 30, "Soft addressing: read every value, in proportion")
    f.text(88, y0 + 58, "key $**k**$", size=SMALL, color=ROLES["key"].stroke)
    f.text(172, y0 + 58, "$**q**$ · $**k**$", size=SMALL)
    f.text(244, y0 + 58, "weight", size=SMALL)
    f.text(316, y0 + 58, "value", size=SMALL, color=ROLES["value"].stroke)
    total = f.op(400, y0 + 112, "∑")
    for i, ((name, key, value), e, w) in enumerate(zip(MEMORY, scores, weights)):
        y = y0 + 70 + i * 28
        f.text(28, y + 17, f"`{name}`", anchor="start", size=SMALL)
        f.tensor(62, y, 1, 2, 26, cell_h=24, role="key")
        for j, x in enumerate(key):
            f.label(75 + 26 * j, y + 12, _num(x), size=SMALL)
        f.label(172, y + 12, _num(e), size=SMALL)
        f.arrow((192, y + 12), (217, y + 12))
        f.tensor(219, y, 1, 1, 50, cell_h=24, values=[[w / max(weights)]])
        f.label(244, y + 12, _num(w), size=SMALL, color=on_viridis(w / max(weights)))
        f.tensor(291, y, 1, 1, 50, cell_h=24, role="value")
        f.label(316, y + 12, _num(value), size=SMALL)
        f.arrow((342, y + 12), (366, y + 12), (total.x + 3, total.cy - 6 + 6 * i), role="value")
    q = f.tensor(62, y0 + 170, 1, 2, 26, cell_h=24, role="query")
    for j, x in enumerate(COW):
        f.label(75 + 26 * j, y0 + 182, _num(x), size=SMALL)
    f.text(28, y0 + 187, "`cow`", anchor="start", size=SMALL)
    f.arrow(q.east, (172, q.cy), (172, y0 + 156), role="query")
    f.text(186, y0 + 187, "the query: an animal, not stored", anchor="start", size=SMALL,
           color=ROLES["query"].stroke)
    out = f.tensor(438, total.cy - 12, 1, 1, 50, cell_h=24, role="value")
    f.label(out.cx, out.cy, f"{read:.2f}", size=SMALL)
    f.arrow(total.east, out.west, role="value")
    f.text(out.cx, out.y - 10, "the answer", size=SMALL)
    f.text(out.cx, out.bottom + 18, "∑ weight × value", size=SMALL, color=MUTED)
    f.text(28, y0 + 222, "weights: the softmax of the scores ($T$ = 1); as $T$ → 0, an argmax lookup",
           anchor="start", size=SMALL, color=MUTED)
    return f


WEIGHTS = [[0.1, 0.2, 0.6, 0.1], [0.5, 0.2, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]]  # L = 3, S = 4


def _shade(rows: Sequence[Sequence[float]]) -> list[list[float]]:
    """Weights scaled by their largest, as ``plot_attention`` colours them (vmax = the largest)."""
    top = max(max(r) for r in rows)
    return [[w / top for w in r] for r in rows]


@figure("three-stages")
def three_stages() -> Figure:
    """Chapter 3: score, softmax, weighted sum, with every tensor's shape (``attention``)."""
    f = Figure(540, 344, "The three stages of attention, with the shape of every tensor",
               "Stage 1: the queries Q of shape (B, H, L, E) times the transposed keys K of shape "
               "(B, H, S, E), divided by the square root of E, give scores of shape (B, H, L, S). "
               "Stage 2: a softmax over the last axis, the keys, turns each row into weights that sum "
               "to one, same shape. Stage 3: the weights times the values V of shape (B, H, S, Ev) "
               "give the output, of shape (B, H, L, Ev).")
    c = 18
    top = 156
    heads = [(20, "1  score", "$QK$^⊤ / √$E$"), (206, "2  normalise", "softmax over $S$"),
             (370, "3  weighted sum", "weights · $V$")]
    for x, name, formula in heads:
        f.text(x, 30, name, anchor="start", bold=True)
        f.text(x, 50, formula, anchor="start", size=SMALL, color=MUTED)
    f.rect(194, 16, 1, 312, fill=CARD_EDGE, stroke="none")
    f.rect(358, 16, 1, 312, fill=CARD_EDGE, stroke="none")
    q = f.tensor(34, top, 3, 2, c, role="query")
    f.text(q.cx, q.y - 10, "$Q$")
    kt = f.tensor(94, top - 16 - 2 * c, 2, 4, c, role="key")
    f.text(kt.cx, kt.y - 26, "$K$^⊤", size=SIZE)
    f.text(kt.cx, kt.y - 8, "$K$: ($B$, $H$, $S$, $E$)", size=SMALL, color=MUTED)
    scores = f.tensor(94, top, 3, 4, c)
    f.arrow(q.east, (scores.x - 2, q.cy), role="query")
    f.arrow(kt.base, (kt.cx, scores.y - 2), role="key")
    f.text(q.cx + 4, q.bottom + 22, "($B$, $H$, $L$, $E$)", size=SMALL, color=MUTED)
    f.text(scores.cx + 2, scores.bottom + 40, "scores ($B$, $H$, $L$, $S$)", size=SMALL, color=MUTED)
    soft = f.op(230, scores.cy, "softmax", size=SMALL)
    f.arrow(scores.east, soft.west)
    w = f.tensor(278, top, 3, 4, c, values=_shade(WEIGHTS))
    f.arrow(soft.east, (w.x - 2, w.cy), role="weight")
    f.text(w.cx, w.bottom + 22, "($B$, $H$, $L$, $S$)", size=SMALL, color=MUTED)
    f.text(w.cx, w.y - 10, "weights")
    for i, line in enumerate(["row $i$: query $i$'s", "weights over the $S$", "keys, summing to 1;",
                              "a mask removes keys", "before the softmax"]):
        f.text(206, w.bottom + 56 + 16 * i, line, anchor="start", size=SMALL, color=MUTED)
    v = f.tensor(448, top - 16 - 4 * c, 4, 3, c, role="value")
    f.text(v.x - 8, v.cy - 2, "$V$", anchor="end")
    f.text(v.x - 8, v.cy + 16, "($B$, $H$, $S$, $E_v$)", anchor="end", size=SMALL, color=MUTED)
    out = f.tensor(448, top, 3, 3, c, role="value")
    f.arrow(v.base, (v.cx, out.y - 2), role="value")
    f.arrow(w.east, (out.x - 2, w.cy), role="weight")
    f.text(out.cx - 8, out.bottom + 22, "output", size=SMALL)
    f.text(out.cx - 12, out.bottom + 40, "($B$, $H$, $L$, $E_v$)", size=SMALL, color=MUTED)
    return f


# The scene of the visual-attention analogy: 3 x 3 regions, row by row; the gaze looks for a face.
SCENE = [["sun", "cloud", "bird"], ["tree", "face", "house"], ["grass", "body", "flower"]]
GAZE = [[0.02, 0.04, 0.02], [0.05, 0.62, 0.06], [0.03, 0.12, 0.04]]  # sums to 1; the face gets most


def _scene(f: Figure, x: float, y: float, r: float) -> Box:
    """The little picture of ``SCENE``, 3 x 3 regions of ``r`` px: sky, ground and a person."""
    f.rect(x, y, 3 * r, 2 * r, fill="#deebf7", stroke="none")
    f.rect(x, y + 2 * r, 3 * r, r, fill="#e0efd2", stroke="none")
    for k in (1, 2):
        f.path(f"M{fmt(x + k * r)} {fmt(y)} L{fmt(x + k * r)} {fmt(y + 3 * r)} "
               f"M{fmt(x)} {fmt(y + k * r)} L{fmt(x + 3 * r)} {fmt(y + k * r)}", stroke="#ffffff", width=1.5)
    u = r / 40  # the shapes are drawn for regions of 40 px

    def at(i: int, j: int, dx: float, dy: float) -> tuple[str, str]:
        return fmt(x + j * r + dx * u), fmt(y + i * r + dy * u)

    def circle(i: int, j: int, dx: float, dy: float, radius: float, fill: str) -> None:
        cx, cy = at(i, j, dx, dy)
        f.add(f'<circle cx="{cx}" cy="{cy}" r="{fmt(radius * u)}" fill="{fill}"/>')

    def poly(i: int, j: int, points: Sequence[tuple[float, float]], fill: str) -> None:
        f.add(f'<polygon points="{" ".join(",".join(at(i, j, px, py)) for px, py in points)}" fill="{fill}"/>')

    circle(0, 0, 20, 20, 9, "#f2b01e")  # the sun
    for dx, dy, rad in ((14, 23, 7), (22, 18, 9), (29, 23, 7)):  # a cloud
        circle(0, 1, dx, dy, rad, "#ffffff")
    bx, by = at(0, 2, 12, 18)
    f.path(f"M{bx} {by} q{fmt(4 * u)} {fmt(-5 * u)} {fmt(8 * u)} 0 q{fmt(4 * u)} {fmt(-5 * u)} {fmt(8 * u)} 0",
           stroke="#4d5d74", width=1.6)  # a bird
    poly(1, 0, [(17, 30), (23, 30), (23, 40), (17, 40)], "#8a5a2b")  # a tree
    circle(1, 0, 20, 20, 12, "#3a9a3a")
    circle(1, 1, 20, 24, 12, "#f1c9a5")  # the face
    poly(1, 1, [(8, 22), (11, 11), (20, 8), (29, 11), (32, 22), (28, 16), (12, 16)], "#6b4226")  # hair
    circle(1, 1, 16, 24, 1.6, INK)
    circle(1, 1, 24, 24, 1.6, INK)
    fx, fy = at(1, 1, 16, 29)
    f.path(f"M{fx} {fy} q{fmt(4 * u)} {fmt(3 * u)} {fmt(8 * u)} 0", stroke="#b0573f", width=1.2)
    poly(1, 2, [(9, 20), (20, 10), (31, 20)], "#c2453a")  # a house
    f.rect(x + 2 * r + 11 * u, y + r + 20 * u, 18 * u, 16 * u, fill="#f4e3c1", stroke="none")
    poly(2, 1, [(9, 40), (11, 6), (20, 2), (29, 6), (31, 40)], "#2f6fd3")  # the body
    poly(2, 1, [(18, 2), (22, 2), (20, 7)], "#f1c9a5")
    for dx in (10, 17, 24, 31):  # grass
        poly(2, 0, [(dx - 3, 30), (dx, 18), (dx + 3, 30)], "#5aa84a")
    poly(2, 2, [(19, 22), (21, 22), (21, 34), (19, 34)], "#3a9a3a")  # a flower
    circle(2, 2, 20, 18, 6, "#d33c2f")
    circle(2, 2, 20, 18, 2.5, "#f2b01e")
    return f.rect(x, y, 3 * r, 3 * r, stroke=LINE, width=1.2)


@figure("visual-attention")
def visual_attention() -> Figure:
    """Chapter 3's opening: human visual attention, the analogy both sets of lecture notes start from."""
    top = max(max(row) for row in GAZE)
    f = Figure(540, 420, "Visual attention: glance at everything, then focus on one region",
               f"A small picture of nine regions, three rows of three ({'; '.join(', '.join(row) for row in SCENE)}): "
               "sky above, a person in the middle column, grass below. First, a quick glance over the whole picture. "
               "Then the focus: the face is sharp and the other regions are dimmed, the more so the less "
               "weight they get. Third, the weights of the nine regions in the viridis colours of the "
               f"book's heatmaps: {_num(top)} on the face, {_num(GAZE[2][1])} on the body, little elsewhere; "
               "they sum to 1. Below, the mapping to the book's terms: the query is what we look for (a face), "
               "the keys are what each region offers, the weights are where attention goes, and the values "
               "are what we take in, mostly the face.")
    r, y = 40, 60
    xs = (20, 196, 372)
    for x, head, sub in zip(xs, ("1  glance", "2  focus", "3  weights"),
                            ("over the whole scene", "on one region", "where attention goes")):
        f.text(x, 30, head, anchor="start", bold=True)
        f.text(x, 48, sub, anchor="start", size=SMALL, color=MUTED)
    # 1: a quick glance over all of it
    a = _scene(f, xs[0], y, r)
    scan = [(xs[0] + 12, y + 14), (xs[0] + 108, y + 22), (xs[0] + 14, y + 56), (xs[0] + 106, y + 66),
            (xs[0] + 12, y + 100), (xs[0] + 104, y + 108)]
    d = "M" + " L".join(f"{fmt(px)} {fmt(py)}" for px, py in scan)
    f.path(d, stroke="#ffffff", width=4.5)
    f.arrow(*scan, color=INK, width=1.6, dash="4 3")
    f.arrow((a.right + 8, a.cy), (xs[1] - 8, a.cy))
    # 2: the focus: the face sharp, the rest dimmed by how little weight it gets
    b = _scene(f, xs[1], y, r)
    for i in range(3):
        for j in range(3):
            fade = 0.8 * (1 - GAZE[i][j] / top)
            if fade > 0:
                f.rect(xs[1] + j * r, y + i * r, r, r, fill=CARD, stroke="none", opacity=fade)
    f.rect(xs[1] + r, y + r, r, r, stroke=INK, width=2.4)
    f.arrow((b.right + 8, b.cy), (xs[2] - 8, b.cy), role="weight")
    # 3: the weights
    g = f.tensor(xs[2], y, 3, 3, r, values=_shade(GAZE))
    for i in range(3):
        for j in range(3):
            w = GAZE[i][j]
            f.label(xs[2] + (j + 0.5) * r, y + (i + 0.5) * r, _num(w), size=SMALL, color=on_viridis(w / top))
    f.text(g.cx, g.bottom + 20, "they sum to 1", size=SMALL, color=MUTED)
    # the mapping to the book's terms
    y0 = 222
    f.rect(12, y0, 516, 1, fill=CARD_EDGE, stroke="none")
    f.panel(20, y0 + 28, "In the book's terms")
    rows = [
        ("query", "query $**q**$", "what we look for: here, a face"),
        ("key", "keys $**k**_i$", "what each region offers: sky, a tree, a face …"),
        ("weight", "weights $α_i$", "where attention goes: softmax of score($**q**$, $**k**_i$)"),
        ("value", "values $**v**_i$", "what we take in: $∑_i$ $α_i$ $**v**_i$, mostly the face"),
    ]
    for k, (role, term, what) in enumerate(rows):
        yy = y0 + 48 + 36 * k
        if role == "weight":
            f.tensor(20, yy, 1, 3, 16, values=[[0.1, 1.0, 0.2]])
        else:
            f.tensor(20, yy, 1, 3, 16, role=role)
        f.text(80, yy + 13, term, anchor="start", color=ROLES[role].stroke)
        f.text(190, yy + 13, what, anchor="start", size=SMALL)
    return f


# chapter 4 ----------------------------------------------------------------------------------
SOFT = [0.02, 0.04, 0.08, 0.17, 0.3, 0.2, 0.1, 0.05, 0.04]  # alpha over L = 9 parts (sums to 1)
HARD_PICK = 5  # a location drawn from SOFT (1-based, as the figure numbers the parts)
CENTRE, HALF = 5.4, 2  # local attention's p_t and w (window of 2w + 1 = 5 positions)


def local_p_factors() -> tuple[list[float | None], list[float | None]]:
    """The two factors of ``local_weights``: the align weights (``SOFT``'s softmax renormalised
    over the window) and the Gaussian of sigma = w / 2 around p_t; ``None`` outside the window."""
    centre = round(CENTRE)
    window = [i for i in range(1, len(SOFT) + 1) if abs(i - centre) <= HALF]
    inside = sum(SOFT[i - 1] for i in window)
    sigma = HALF / 2
    align = [SOFT[i - 1] / inside if i in window else None for i in range(1, len(SOFT) + 1)]
    bump = [math.exp(-((i - CENTRE) ** 2) / (2 * sigma**2)) if i in window else None
            for i in range(1, len(SOFT) + 1)]
    return align, bump


def local_weights() -> list[float | None]:
    """Local-p's weights over the parts: the softmax of the scores inside the window times a
    Gaussian of sigma = D / 2 around p_t, not renormalised; ``None`` outside the window."""
    return [None if a is None else a * g for a, g in zip(*local_p_factors())]


@figure("soft-hard-local")
def soft_hard_local() -> Figure:
    """Chapter 4: soft, hard and local attention over the same nine parts of a source."""
    f = Figure(540, 482, "Soft, hard and local attention over the same source",
               "The same nine parts a_1 to a_9 of a source, three ways; the bars are the weights. Soft: "
               "every part gets a weight and the context is the weighted sum of all of them. Hard: one "
               "part is sampled from the weights and is the context. Local: a window of 2w + 1 = 5 "
               "parts around the position p_t, weighted softly inside and by a Gaussian; the parts "
               "outside take no part.")
    n = len(SOFT)
    x0, step, bar_h = 186, 36, 74
    local = local_weights()
    rows = [
        ("soft", "weighs every part", SOFT, "$∑_i$ $α_i$ $**a**_i$"),
        ("hard", "samples one part", [1.0 if i == HARD_PICK else 0.0 for i in range(1, n + 1)],
         "$**a**_s$, $s$ ~ $α$"),
        ("local", "a window of parts,", local, "∑ over the window"),
    ]
    for r, (name, how, weights, context) in enumerate(rows):
        y = 28 + r * 152
        if r:
            f.rect(12, y - 14, 516, 1, fill=CARD_EDGE, stroke="none")
        f.text(20, y + 14, name, anchor="start", bold=True)
        f.text(20, y + 34, how, anchor="start", size=SMALL, color=MUTED)
        if name == "local":
            f.text(20, y + 50, "soft inside", anchor="start", size=SMALL, color=MUTED)
        f.text(20, y + 80, "context:", anchor="start", size=SMALL, color=MUTED)
        f.text(20, y + 98, context, anchor="start", size=SMALL, color=ROLES["value"].stroke)
        top = max(w for w in weights if w is not None)
        base = y + 96
        for i, w in enumerate(weights):
            x = x0 + i * step
            if w is None:
                f.rect(x + 3, base - 2, step - 6, 2, fill=FAINT, stroke="none")
            else:
                h = max(2.0, bar_h * w / top)
                f.rect(x + 3, base - h, step - 6, h, fill=viridis(w / top), stroke="none")
            part = f.tensor(x + 6, base + 6, 1, 1, step - 12, cell_h=18, faint=w is None)
            f.label(part.cx, part.bottom + 13, f"$**a**_{{{i + 1}}}$", size=SMALL,
                    color=MUTED if w is None else INK)
        f.rect(x0, base, n * step, 1, fill=LINE, stroke="none")
        if name == "hard":
            f.text(x0 + HARD_PICK * step + 2, base - bar_h + 12, "drawn: $s$ = 5", anchor="start", size=SMALL)
        if name == "local":
            lo, hi = round(CENTRE) - HALF, round(CENTRE) + HALF
            f.rect(x0 + (lo - 1) * step + 1, base - bar_h - 8, (hi - lo + 1) * step - 2, bar_h + 33,
                   stroke=INK, width=1.4, rx=6, dash="5 4")
            px = x0 + (CENTRE - 0.5) * step
            f.path(f"M{fmt(px)} {fmt(base - bar_h - 8)} L{fmt(px)} {fmt(base)}", stroke=INK, width=1.2, dash="2 3")
            f.text(px, base - bar_h - 19, "$p_t$", size=SMALL)
            f.text(x0 + hi * step + 6, base - bar_h + 8, "window", anchor="start", size=SMALL)
            f.text(x0 + hi * step + 6, base - bar_h + 26, "$p_t$ ± $w$", anchor="start", size=SMALL)
    return f


@figure("show-attend-tell")
def show_attend_tell() -> Figure:
    """Chapter 4.1: the captioner of ``models.captioning``, one step, as a loop."""
    f = Figure(540, 480, "Show, attend and tell: one step of the captioner",
               "An image of 48 by 48 pixels goes through a small CNN (two 3 by 3 convolutions, then a "
               "max-pool over a 4 by 4 grid, plus a position embedding) to 16 annotation vectors a_1 to "
               "a_S. At step t the attention MLP f_att scores every annotation against the LSTM's "
               "previous state h_(t-1); a softmax gives the weights alpha_t over the 16 regions; soft "
               "attention takes their weighted sum, hard attention one sampled annotation, as z_t. The "
               "LSTM reads the previous word and z_t; the deep output layer turns y_(t-1), h_t and z_t "
               "into the next word y_t, and h_t is the query of the next step.")
    # the image: a 4 x 4 layout of cells with three shapes
    img = f.rect(20, 40, 96, 96, fill="#ffffff", stroke=LINE, width=1.2)
    for k in (1, 2, 3):
        f.path(f"M{20 + 24 * k} 40 L{20 + 24 * k} 136 M20 {40 + 24 * k} L116 {40 + 24 * k}", stroke="#e3e7ee", width=1)
    f.add('<circle cx="44" cy="64" r="8" fill="#d33c2f"/>')
    f.add('<rect x="77" y="89" width="14" height="14" fill="#2f6fd3"/>')
    f.add('<polygon points="104,44 112,58 96,58" fill="#3a9a3a"/>')
    f.text(img.cx, 156, "image", size=SMALL)
    f.text(img.cx, 172, "(3, 48, 48)", size=SMALL, color=MUTED)
    cnn = f.layer(146, 60, 150, 56, "CNN", note="conv, conv, max-pool")
    f.text(cnn.cx, cnn.bottom + 18, "+ a position embedding", size=SMALL, color=MUTED)
    f.arrow(img.east, cnn.west)
    ann = f.tensor(316, 40, 4, 4, 24)
    f.arrow(cnn.east, (ann.x - 2, cnn.cy))
    f.text(424, 60, "$**a**_1$ … $**a**_S$", anchor="start", size=SMALL)
    f.text(424, 78, "$S$ = 16 regions,", anchor="start", size=SMALL, color=MUTED)
    f.text(424, 94, "$D$ = 32 numbers", anchor="start", size=SMALL, color=MUTED)
    f.text(424, 110, "each", anchor="start", size=SMALL, color=MUTED)
    # attention: f_att -> softmax -> alpha_t -> soft sum or hard pick -> z_t
    att = f.layer(304, 164, 120, 44, "$f$_{att}", note="additive score")
    f.arrow(ann.base, att.top, role="key")
    soft = f.op(364, 244, "softmax", size=SMALL)
    f.arrow(att.base, soft.top)
    alpha = [[0.02, 0.05, 0.02, 0.01], [0.04, 0.1, 0.06, 0.02], [0.03, 0.08, 0.5, 0.04], [0.01, 0.02, 0.05, 0.0]]
    grid = f.tensor(324, 290, 4, 4, 20, values=_shade(alpha))
    f.arrow(soft.base, (364, grid.y - 2), role="weight")
    f.text(grid.right + 10, grid.y + 14, "$α_t$: one weight", anchor="start", size=SMALL)
    f.text(grid.right + 10, grid.y + 30, "per region", anchor="start", size=SMALL)
    pick = f.op(364, 408, "∑")
    f.arrow(grid.base, pick.top, role="weight")
    f.arrow((ann.right, 124), (504, 124), (504, pick.cy), pick.east, role="value")
    f.text(394, 444, "soft: $∑_i$ $α_{ti}$ $**a**_i$", anchor="start", size=SMALL, color=ROLES["value"].stroke)
    f.text(394, 462, "hard: $**a**_{s_t}$, $s_t$ ~ $α_t$", anchor="start", size=SMALL, color=ROLES["value"].stroke)
    z = f.tensor(292, 402.5, 1, 4, 11, role="value")
    f.arrow(pick.west, (z.right + 1, pick.cy), role="value")
    f.text(z.cx, z.y - 8, "$**ẑ**_t$", size=SMALL)
    # decoder: LSTM reads [E y_{t-1}; z_t]; deep output; h_t back to f_att
    lstm = f.layer(150, 388, 118, 40, "LSTM", note="[$E y_{t-1}$; $**ẑ**_t$]", size=SMALL)
    f.arrow((z.x, pick.cy), lstm.east, role="value")
    f.arrow((209, 462), lstm.base)
    f.text(209, 474, "$y_{t-1}$", size=SMALL)
    out = f.layer(20, 388, 108, 40, "deep output", size=SMALL)
    f.arrow(lstm.west, out.east)
    f.arrow(out.top, (out.cx, 350))
    f.text(out.cx, 342, "$y_t$, the next word", size=SMALL)
    f.text(20, 448, "$L_o$($E y_{t-1}$ + $L_h$ $**h**_t$", anchor="start", size=SMALL, color=MUTED)
    f.text(20, 464, "+ $L_z$ $**ẑ**_t$)", anchor="start", size=SMALL, color=MUTED)
    f.arrow((209, lstm.y), (209, att.cy), att.west, role="query")
    f.text(216, 300, "$**h**_t$: the query", anchor="start", size=SMALL, color=ROLES["query"].stroke)
    f.text(216, 316, "of the next step", anchor="start", size=SMALL, color=ROLES["query"].stroke)
    f.text(290, att.cy - 8, "$**h**_{t-1}$", anchor="end", size=SMALL, color=ROLES["query"].stroke)
    return f


# Hierarchical attention over three sentences of four words; as in chapter 4.2's task, one
# sentence (the second) holds the evidence, and its word weights peak on one word.
WORD_W = [[0.15, 0.45, 0.25, 0.15], [0.05, 0.15, 0.7, 0.1], [0.4, 0.2, 0.25, 0.15]]
SENT_W = [0.08, 0.86, 0.06]


@figure("local-hierarchical")
def local_hierarchical() -> Figure:
    """Chapter 4.2: local-p (a predicted centre, a window, a Gaussian) and hierarchical attention."""
    align, bump = local_p_factors()
    weights = local_weights()
    n = len(SOFT)
    lo, hi = round(CENTRE) - HALF, round(CENTRE) + HALF
    f = Figure(540, 714, "Local-p attention and hierarchical attention",
               f"(a) Local-p: the decoder state h_t goes through a small layer that predicts the centre "
               f"p_t = S sigmoid(v_p^T tanh(W_p h_t)), here {CENTRE} among S = {n} source states. Only the "
               f"window [p_t - w, p_t + w], {2 * HALF + 1} states for w = {HALF}, is scored: the align weights "
               f"are a softmax over the window; each is multiplied by a Gaussian of sigma = w/2 centred on "
               f"p_t, and the products are the weights a_t(s). The states outside the window get no weight. "
               f"(b) Hierarchical attention: in each of three sentences, a word-level GRU and attention "
               f"against the word context u_w give weights over the words and pool them into a sentence "
               f"vector s_i; a sentence-level GRU and attention against the sentence context u_s give "
               f"weights over the sentences and pool them into the document vector v, which a classifier "
               f"turns into a label.")
    # (a) local-p: h_t -> p_t; align over the window, times a Gaussian, on the source states
    f.panel(18, 30, "(a)  local-p: predict where to look")
    x0, step = 190, 36  # column i (1-based) spans x0 + (i - 1) * step ... x0 + i * step
    px = x0 + (CENTRE - 0.5) * step
    q = f.tensor(20, 62, 1, 4, 14, role="query")
    f.text(q.cx, q.y - 9, "$**h**_t$", color=ROLES["query"].stroke)
    f.text(q.cx, q.bottom + 18, "decoder", size=SMALL, color=ROLES["query"].stroke)
    f.text(q.cx, q.bottom + 34, "state", size=SMALL, color=ROLES["query"].stroke)
    pred = f.rect(100, 44, 210, 52, fill=ROLES["layer"].fill, stroke=ROLES["layer"].stroke, width=1.4, rx=7)
    f.label(pred.cx, pred.cy - 10, "predict $p_t$", size=SMALL)
    f.label(pred.cx, pred.cy + 11, "$S$ · σ($**v**_p$^⊤ tanh($W_p **h**_t$))", size=SMALL, color=MUTED)
    f.arrow(q.east, pred.west, role="query")
    f.text(pred.x, pred.bottom + 18, "local-m predicts nothing: $p_t$ = $t$", anchor="start", size=SMALL,
           color=MUTED)
    top_row, cell_h = 132, 24
    f.arrow(pred.east, (px, pred.cy), (px, top_row - 14))
    f.text(px + 8, top_row - 22, f"$p_t$ = {CENTRE}", anchor="start", size=SMALL)
    # the window, around the rows it concerns
    base = 276  # the weights' baseline, on top of the states
    f.rect(x0 + (lo - 1) * step + 1, top_row - 10, (hi - lo + 1) * step - 2, base + 34 - top_row,
           stroke=INK, width=1.4, rx=6, dash="5 4")
    f.path(f"M{fmt(px)} {fmt(top_row - 10)} L{fmt(px)} {fmt(base)}", stroke=INK, width=1.2, dash="2 3")
    f.text(x0 + hi * step + 8, 184, "window", anchor="start", size=SMALL)
    f.text(x0 + hi * step + 8, 200, "$p_t$ ± $w$", anchor="start", size=SMALL)
    # 1. align: a softmax over the window only
    top = max(a for a in align if a is not None)
    for i, a in enumerate(align):  # one cell per state: weights inside the window, greyed out outside
        x = x0 + i * step + 3
        if a is None:
            f.tensor(x, top_row, 1, 1, step - 6, cell_h=cell_h, faint=True)
        else:
            f.tensor(x, top_row, 1, 1, step - 6, cell_h=cell_h, values=[[a / top]])
            f.label(x + step / 2 - 3, top_row + cell_h / 2, f"{a:.2f}".lstrip("0"), size=SMALL,
                    color=on_viridis(a / top))
    f.text(20, top_row + 9, "align($**h**_t$, $**h̄**_s$):", anchor="start", size=SMALL)
    f.text(20, top_row + 26, "softmax in the window", anchor="start", size=SMALL, color=MUTED)
    # 2. times a Gaussian of sigma = w / 2 around p_t
    g_base, g_h, sigma = 222, 48, HALF / 2
    pts = []
    for k in range(49):
        s = lo - 0.5 + k * (hi - lo + 1) / 48
        pts.append((x0 + (s - 0.5) * step, g_base - g_h * math.exp(-((s - CENTRE) ** 2) / (2 * sigma**2))))
    f.rect(x0 + (lo - 1) * step + 6, g_base, (hi - lo + 1) * step - 12, 1, fill=FAINT, stroke="none")
    f.path("M" + " L".join(f"{fmt(x)} {fmt(y)}" for x, y in pts), stroke=INK, width=1.8)
    for i, g in enumerate(bump):  # the factor that each state's weight is multiplied by
        if g is not None:
            f.add(f'<circle cx="{fmt(x0 + (i + 0.5) * step)}" cy="{fmt(g_base - g_h * g)}" r="3" fill="{INK}"/>')
    f.text(20, g_base - 22, "× a Gaussian around $p_t$,", anchor="start", size=SMALL)
    f.text(20, g_base - 5, "σ = $w$/2", anchor="start", size=SMALL, color=MUTED)
    # 3. the weights a_t(s), drawn on the states they weigh
    bar_h = 38
    wtop = max(w for w in weights if w is not None)
    for i, w in enumerate(weights):
        x = x0 + i * step
        if w is None:
            f.rect(x + 5, base - 2, step - 10, 2, fill=FAINT, stroke="none")
        else:
            hh = max(2.0, bar_h * w / wtop)
            f.rect(x + 5, base - hh, step - 10, hh, fill=viridis(w / wtop), stroke="none")
        f.tensor(x + 6, base + 4, 1, 1, step - 12, cell_h=18, faint=w is None)
        f.label(x + step / 2, base + 36, f"$**h̄**_{{{i + 1}}}$", size=SMALL, color=MUTED if w is None else INK)
    f.rect(x0 + 2, base, n * step - 4, 1, fill=LINE, stroke="none")
    f.text(20, base - 14, "= the weights $a_t$($s$),", anchor="start", size=SMALL)
    f.text(20, base + 3, "summing to less than 1", anchor="start", size=SMALL, color=MUTED)
    f.text(20, base + 28, "source states; outside", anchor="start", size=SMALL)
    f.text(20, base + 45, "the window: no weight", anchor="start", size=SMALL, color=MUTED)

    # (b) hierarchical: words -> sentence vectors -> document vector -> label
    y0 = 338
    f.rect(12, y0, 516, 1, fill=CARD_EDGE, stroke="none")
    f.panel(18, y0 + 28, "(b)  hierarchical: words, then sentences")
    xs = [84, 214, 344]  # the centres of the three sentences
    c = 22
    words_y, layer_y, alpha_y, sum_y, s_y = y0 + 58, y0 + 94, y0 + 158, y0 + 198, y0 + 224
    right = 412  # the column of row labels
    wtop = max(max(r) for r in WORD_W)
    for i, cx in enumerate(xs):
        f.text(cx, words_y - 8, f"sentence {i + 1}", size=SMALL)
        words = f.tensor(cx - 2 * c, words_y, 1, 4, c, cell_h=18)
        f.arrow(words.base, (cx, layer_y))
    wl = f.layer(20, layer_y, 386, 46, "word GRU + attention",
                 note="scores $**u**_{it}$^⊤$**u**_w$, the same layer for every sentence", size=SMALL)
    f.text(right + 4, words_y + 13, "words", anchor="start", size=SMALL)
    for i, cx in enumerate(xs):
        f.arrow((cx, wl.bottom), (cx, alpha_y - 1), role="weight")
        a = f.tensor(cx - 2 * c, alpha_y, 1, 4, c, cell_h=16, values=[[w / wtop for w in WORD_W[i]]])
        total = f.op(cx, sum_y, "∑", r=11)
        f.arrow(a.base, total.top, role="weight")
        f.arrow((cx + 2 * c + 12, wl.bottom), (cx + 2 * c + 12, sum_y), total.east, role="value")
        s = f.tensor(cx - 18, s_y, 1, 3, 12, role="value")
        f.arrow(total.base, (cx, s.y - 1), role="value")
        f.text(s.right + 6, s.bottom, f"$**s**$_{i + 1}", anchor="start", size=SMALL)
    f.text(right + 4, alpha_y + 12, "$α_{it}$: over", anchor="start", size=SMALL)
    f.text(right + 4, alpha_y + 28, "the words", anchor="start", size=SMALL)
    f.text(right + 4, s_y + 10, "$**s**_i$ = $∑_t$ $α_{it}$ $**h**_{it}$", anchor="start", size=SMALL,
           color=ROLES["value"].stroke)
    sl_y = y0 + 256
    sl = f.layer(20, sl_y, 386, 46, "sentence GRU + attention",
                 note="scores $**u**_i$^⊤$**u**_s$, over the sentences", size=SMALL)
    for cx in xs:
        f.arrow((cx, s_y + 12), (cx, sl.y), role="value")
    row = sl.bottom + 34
    sw = f.tensor(58, row - 12, 1, 3, 36, cell_h=24, values=[[w / max(SENT_W) for w in SENT_W]])
    for i, w in enumerate(SENT_W):
        f.label(sw.x + (i + 0.5) * 36, sw.cy, _num(w), size=SMALL, color=on_viridis(w / max(SENT_W)))
    f.arrow((sw.cx, sl.bottom), (sw.cx, sw.y - 1), role="weight")
    f.text(sw.x - 8, row + 5, "$α_i$", anchor="end", size=SMALL)
    total = f.op(194, row, "∑", r=11)
    f.arrow(sw.east, total.west, role="weight")
    f.arrow((total.cx, sl.bottom), total.top, role="value")
    v = f.tensor(222, row - 6, 1, 4, 12, role="value")
    f.arrow(total.east, (v.x - 1, row), role="value")
    f.text(v.cx, v.y - 8, "$**v**$", size=SMALL)
    cls = f.layer(310, row - 17, 96, 34, "classifier", size=SMALL)
    f.arrow(v.east, cls.west, role="value")
    f.arrow(cls.east, (cls.right + 20, row))
    f.text(cls.right + 26, row + 5, "label", anchor="start", size=SMALL)
    f.text(v.cx, v.bottom + 18, "document vector", size=SMALL, color=ROLES["value"].stroke)
    return f


# chapter 5 ----------------------------------------------------------------------------------
@figure("self-cross")
def self_cross() -> Figure:
    """Chapter 5: where Q, K and V come from in self-attention and in cross-attention."""
    f = Figure(540, 400, "Self-attention and cross-attention",
               "Self-attention: the queries, keys and values are three projections of the same "
               "sequence X, so L = S = N. Cross-attention: the queries are projected from the decoder's "
               "sequence (L positions) and the keys and values from the encoder's output (S positions). "
               "The attention itself is the same computation; the output has one vector per query.")
    f.rect(270, 16, 1, 368, fill=CARD_EDGE, stroke="none")
    c = 12

    def project(xs: Sequence[float], y: float) -> list[Box]:
        return [f.layer(x - 26, y, 52, 28, name, size=SMALL)
                for x, name in zip(xs, ["$W^Q$", "$W^K$", "$W^V$"])]

    def qkv(xs: Sequence[float], y: float, rows: Sequence[int]) -> list[Box]:
        out = []
        for x, role, n, name in zip(xs, ("query", "key", "value"), rows, ("$Q$", "$K$", "$V$")):
            t = f.tensor(x - 1.5 * c, y, n, 3, c, role=role)
            f.text(x + 1.5 * c + 6, y + 14, name, anchor="start", size=SMALL)
            out.append(t)
        return out

    def finish(cx: float, tensors: list[Box], rows: int, note: str) -> None:
        att = f.op(cx, 300, "attention", size=SMALL)
        for t, role in zip(tensors, ("query", "key", "value")):
            bend = (t.cx, 268) if t.cx != cx else (t.cx, t.bottom + 4)
            f.arrow(t.base, bend, att.rim(*bend), role=role)
        out = f.tensor(cx - 1.5 * c, 344, rows, 3, c, role="value")
        f.arrow(att.base, (cx, out.y - 2), role="value")
        f.text(out.right + 8, out.y + 14, "output", anchor="start", size=SMALL)
        f.text(out.right + 8, out.y + 32, note, anchor="start", size=SMALL, color=MUTED)

    # self-attention: one sequence
    f.text(135, 32, "self-attention", bold=True)
    f.text(135, 50, "$Q$, $K$, $V$ from one sequence", size=SMALL, color=MUTED)
    xs = [65, 135, 205]
    x_in = f.tensor(135 - 1.5 * c, 70, 4, 3, c)
    f.text(x_in.right + 8, x_in.y + 14, "$X$", anchor="start", size=SMALL)
    f.text(x_in.right + 8, x_in.y + 32, "$N$ tokens", anchor="start", size=SMALL, color=MUTED)
    boxes = project(xs, 150)
    for b in boxes:
        f.arrow((135, x_in.bottom), (135, 132), (b.cx, 132), b.top)
    ts = qkv(xs, 196, [4, 4, 4])
    for b, t in zip(boxes, ts):
        f.arrow(b.base, (b.cx, t.y - 1))
    finish(135, ts, 4, "$L$ = $S$ = $N$")

    # cross-attention: queries from the decoder, keys and values from the encoder
    f.text(405, 32, "cross-attention", bold=True)
    f.text(405, 50, "$Q$ from one, $K$, $V$ from another", size=SMALL, color=MUTED)
    xs = [325, 405, 475]
    dec = f.tensor(325 - 1.5 * c, 70, 3, 3, c)
    f.text(dec.cx, dec.bottom + 16, "decoder", size=SMALL, color=MUTED)
    enc = f.tensor(440 - 1.5 * c, 70, 5, 3, c)
    f.text(enc.right + 6, enc.y + 14, "encoder", anchor="start", size=SMALL, color=MUTED)
    f.text(enc.right + 6, enc.y + 30, "output", anchor="start", size=SMALL, color=MUTED)
    boxes = project(xs, 150)
    f.arrow((dec.cx, dec.bottom + 22), boxes[0].top)
    f.arrow((enc.cx, enc.bottom), (enc.cx, 132), (boxes[1].cx, 132), boxes[1].top)
    f.arrow((enc.cx, 132), (boxes[2].cx, 132), boxes[2].top)
    ts = qkv(xs, 196, [3, 5, 5])
    for b, t in zip(boxes, ts):
        f.arrow(b.base, (b.cx, t.y - 1))
    finish(405, ts, 3, "$L$ rows")
    return f


@figure("multihead")
def multihead() -> Figure:
    """Chapter 5: MultiHeadAttention's split, attend and merge, with shapes (``attention.multihead``).

    Each projection reads all D features of its input; the split into heads is made on what the
    projection returns, so the thick line is drawn there, not on the input."""
    dy = 64  # room for the projected tensors between the projections and the split
    f = Figure(540, 570 + dy, "Multi-head attention: project, split into heads, attend, merge",
               "The query (B, L, D) and the key and value (B, S, D) are projected by q_proj, k_proj and "
               "v_proj, each D to D and each reading all D features; a view and a transpose split the D "
               "features of each projection into H heads of E = D / H, giving (B, H, L, E) and (B, H, S, E). "
               "Every head attends on its own, with weights of its own: (B, L, S) per head, (B, H, L, S) for "
               "all heads, output (B, L, E) per head. A transpose and a reshape put the heads side by side "
               "again, (B, L, D), and out_proj mixes them. Drawn with L = 3, S = 4, D = 4 and H = 2 heads "
               "of E = 2.")
    c = 13
    L, S, D, H = 3, 4, 4, 2
    E = D // H
    xs = {"query": 120, "key": 270, "value": 420}
    head_weights = (WEIGHTS, [[0.6, 0.2, 0.1, 0.1], [0.1, 0.1, 0.2, 0.6], [0.1, 0.6, 0.2, 0.1]])

    def split_line(t: Box, rows: int) -> None:
        x = t.x + E * c
        f.path(f"M{fmt(x)} {fmt(t.y)} L{fmt(x)} {fmt(t.y + rows * c)}", stroke=INK, width=2.2)

    projected = {}
    for role, x in xs.items():
        rows = L if role == "query" else S
        shape = "($B$, $L$, $D$)" if role == "query" else "($B$, $S$, $D$)"
        t = f.tensor(x - D * c / 2, 40, rows, D, c, role=role)
        f.text(x, 32, role, size=SMALL, color=ROLES[role].stroke)
        f.text(t.right + 8, t.y + 14, shape, anchor="start", size=SMALL, color=MUTED)
        b = f.layer(x - 34, 116, 68, 28, f"`{role[0]}_proj`", size=SMALL)
        f.arrow((x, t.bottom), b.top, role=role)
        p = f.tensor(x - D * c / 2, 164, rows, D, c, role=role)
        f.arrow(b.base, (x, p.y - 1), role=role)
        split_line(p, rows)
        f.text(p.right + 8, p.y + 14, shape, anchor="start", size=SMALL, color=MUTED)
        projected[role] = p
    # split: view and transpose
    y_split = 176 + dy
    for role, p in projected.items():
        f.path(f"M{fmt(p.cx)} {fmt(p.bottom)} L{fmt(p.cx)} {fmt(y_split - 12)}", stroke=ROLES[role].stroke, width=1.6)
    f.path(f"M{fmt(projected['query'].cx)} {fmt(y_split - 12)} L{fmt(projected['value'].cx)} {fmt(y_split - 12)}",
           stroke=LINE, width=1.6)
    f.text(270, y_split + 4, "view and transpose: ($B$, $L$, $D$) → ($B$, $L$, $H$, $E$) → ($B$, $H$, $L$, $E$)",
           size=SMALL)
    # one container per head
    outs = []
    for h in range(H):
        x0, y0 = 20 + h * 256, 204 + dy
        f.rect(x0, y0, 244, 200, fill="#eef2f8", stroke="none", rx=9)
        f.arrow((x0 + 122, y_split + 10), (x0 + 122, y0))
        f.text(x0 + 10, y0 + 20, f"head {h + 1}", anchor="start", bold=True, size=SMALL)
        q = f.tensor(x0 + 30, y0 + 48, L, E, c, role="query")
        k = f.tensor(x0 + 84, y0 + 48, S, E, c, role="key")
        v = f.tensor(x0 + 176, y0 + 48, S, E, c, role="value")
        for t, name in ((q, "$q$"), (k, "$k$"), (v, "$v$")):
            f.text(t.cx, t.y - 6, name, size=SMALL)
        w = f.tensor(x0 + 44, y0 + 126, L, S, c, values=_shade(head_weights[h]))
        o = f.tensor(x0 + 176, y0 + 126, L, E, c, role="value")
        f.arrow(q.base, (q.cx, w.y - 1), role="query")
        f.arrow(k.base, (k.cx, w.y - 1), role="key")
        f.arrow(v.base, (v.cx, o.y - 1), role="value")
        f.arrow(w.east, (o.x - 1, w.cy), role="weight")
        f.text(w.cx, w.bottom + 16, "weights", size=SMALL)
        f.text(w.cx, w.bottom + 32, "($B$, $L$, $S$)", size=SMALL, color=MUTED)
        f.text(o.cx, o.bottom + 16, "output", size=SMALL)
        f.text(o.cx, o.bottom + 32, "($B$, $L$, $E$)", size=SMALL, color=MUTED)
        outs.append(o)
    # merge: transpose and reshape, then out_proj
    merged = f.tensor(40, 486 + dy, L, D, c, role="value")
    split_line(merged, L)
    for h, (o, y) in enumerate(zip(outs, (426 + dy, 436 + dy))):
        x = merged.x + (h + 0.5) * E * c
        f.arrow(o.east, (o.right + 38, o.cy), (o.right + 38, y), (x, y), (x, merged.y - 1), role="value")
    f.text(110, 462 + dy, "transpose and reshape: ($B$, $H$, $L$, $E$) → ($B$, $L$, $H$, $E$) → ($B$, $L$, $D$)",
           anchor="start", size=SMALL)
    out_proj = f.layer(merged.right + 40, 492 + dy, 80, 28, "`out_proj`", size=SMALL)
    f.arrow(merged.east, out_proj.west, role="value")
    final = f.tensor(out_proj.right + 40, 486 + dy, L, D, c)
    f.arrow(out_proj.east, (final.x - 1, out_proj.cy))
    f.text(final.right + 8, final.y + 14, "($B$, $L$, $D$)", anchor="start", size=SMALL, color=MUTED)
    f.text(merged.cx, merged.bottom + 20, "heads side by side", size=SMALL, color=MUTED)
    f.text(final.right + 8, final.y + 30, "`out_proj` mixes", anchor="start", size=SMALL, color=MUTED)
    f.text(final.right + 8, final.y + 46, "the heads", anchor="start", size=SMALL, color=MUTED)
    return f


@figure("masks")
def masks() -> Figure:
    """Chapter 5: a padding mask, a causal mask and both, as grids of (query, key); True takes part."""
    n, length = 6, 4
    f = Figure(540, 300, "The padding mask, the causal mask, and both",
               "Grids of 6 queries (rows) by 6 keys (columns) for a sentence of length 4 in a batch padded "
               "to 6. Dark cells are True: the key takes part; light cells are False: the key is removed "
               "before the softmax. Padding: the last two keys are removed for every query; it is stored "
               "as one row of shape (B, 1, 1, S) and broadcast over the queries. Causal: query i sees keys "
               "0 to i, shape (L, S). Both: the cells where both are True, shape (B, 1, L, S).")
    c = 18
    on, off = ROLES["layer"].stroke, "#ffffff"

    def grid(x: float, y: float, keep: Callable[[int, int], bool], rows: int = n) -> Box:
        for i in range(rows):
            for j in range(n):
                f.rect(x + j * c, y + i * c, c, c, fill=on if keep(i, j) else off, stroke=FAINT, width=0.8)
        return f.rect(x, y, n * c, rows * c, stroke=LINE, width=1.4)

    y = 92
    pad = grid(62, y, lambda i, j: j < length)
    row = grid(62, 40, lambda i, j: j < length, rows=1)
    f.arrow((pad.cx, row.bottom + 2), (pad.cx, pad.y - 2))
    f.text(pad.right + 6, 54, "($B$, 1, 1, $S$)", anchor="start", size=SMALL, color=MUTED)
    f.text(pad.cx + 8, 78, "broadcast", anchor="start", size=SMALL, color=MUTED)
    causal = grid(236, y, lambda i, j: j <= i)
    both = grid(410, y, lambda i, j: j <= i and j < length)
    f.label((pad.right + causal.x) / 2, pad.cy, "&", size=20)
    f.label((causal.right + both.x) / 2, pad.cy, "=", size=20)
    for box, title, shape in ((pad, "padding (length 4)", "($B$, 1, 1, $S$)"), (causal, "causal", "($L$, $S$)"),
                              (both, "both", "($B$, 1, $L$, $S$)")):
        f.text(box.cx, box.bottom + 22, title)
        f.text(box.cx, box.bottom + 40, shape, size=SMALL, color=MUTED)
    f.text(pad.x - 6, pad.y + 12, "query", anchor="end", size=SMALL, color=MUTED)
    f.text(pad.x - 24, pad.y + 30, "↓", size=SMALL, color=MUTED)
    f.text(causal.x, 82, "key →", anchor="start", size=SMALL, color=MUTED)  # the columns
    f.rect(62, 262, 14, 14, fill=on, stroke=FAINT)
    f.text(82, 274, "True: the key takes part", anchor="start", size=SMALL)
    f.rect(280, 262, 14, 14, fill=off, stroke=FAINT)
    f.text(300, 274, "False: removed before the softmax", anchor="start", size=SMALL)
    return f


# chapter 6 ----------------------------------------------------------------------------------
SUBLAYER_H = 129  # the height of one sub-layer with its residual connection and LayerNorm


def _sublayers(f: Figure, cx: float, bottom: float, names: Sequence[str], norm_first: bool = False,
               lane: float = 92) -> list[Box]:
    """Sub-layers stacked upwards from ``bottom``, each inside a residual connection and a
    LayerNorm, as ``transformer._sublayer`` wraps them; returns the sub-layer boxes."""
    boxes = []
    y = bottom
    for name in names:
        split = y - 14
        f.add(f'<circle cx="{fmt(cx)}" cy="{fmt(split)}" r="2.6" fill="{LINE}"/>')
        if norm_first:  # x + Sublayer(LayerNorm(x))
            norm = f.layer(cx - 50, split - 38, 100, 24, "LayerNorm", size=SMALL)
            f.arrow((cx, y), norm.base)
            box = f.layer(cx - 75, norm.y - 46, 150, 32, name, size=SMALL)
            f.arrow(norm.top, box.base)
            add = f.op(cx, box.y - 22, "+", r=9)
            f.arrow(box.top, add.base)
            top = add.y
        else:  # LayerNorm(x + Sublayer(x))
            box = f.layer(cx - 75, split - 46, 150, 32, name, size=SMALL)
            f.arrow((cx, y), box.base)
            add = f.op(cx, box.y - 22, "+", r=9)
            f.arrow(box.top, add.base)
            norm = f.layer(cx - 50, add.y - 38, 100, 24, "LayerNorm", size=SMALL)
            f.arrow(add.top, norm.base)
            top = norm.y
        f.arrow((cx, split), (cx + lane, split), (cx + lane, add.cy), add.east)
        boxes.append(box)
        y = top
    return boxes


@figure("transformer")
def transformer() -> Figure:
    """Chapter 6: the encoder-decoder Transformer of ``models.transformer`` (post-LN, as the paper)."""
    f = Figure(540, 716, "The Transformer, as the package builds it",
               "Source tokens (B, S) are embedded, scaled by the square root of D and added to sinusoidal "
               "positions, then pass through the encoder layers: self-attention and a feed-forward network, "
               "each inside a residual connection followed by a LayerNorm. The result, the memory (B, S, D), "
               "gives the keys and values of the cross-attention in every decoder layer. Target tokens "
               "(B, L), shifted right, are embedded the same way and pass through the decoder layers: causal "
               "self-attention, cross-attention and a feed-forward network. A final linear layer gives the "
               "logits (B, L, V). A final LayerNorm after each stack, drawn dashed, is optional: pre-LN models have it, "
               "post-LN ones only when asked for (PyTorch's stacks always have it).")
    enc_x, dec_x, base = 136, 404, 604
    stacks = ((enc_x, ["self-attention", "feed-forward"], "`num_encoder_layers`"),
              (dec_x, ["causal self-attention", "cross-attention", "feed-forward"], "`num_decoder_layers`"))
    built, tops = [], []
    for cx, names, count in stacks:
        top = base - SUBLAYER_H * len(names) - 12
        f.rect(cx - 112, top, 224, base - top, fill="#eef2f8", stroke=LINE, width=1.2, rx=10)
        # the repetition, written up the container's left edge, clear of the arrows
        mid = (top + base) / 2 if len(names) == 2 else top + 84  # the decoder's: above the memory's arrow
        f.add(f'<g transform="translate({fmt(cx - 96)} {fmt(mid)}) rotate(-90)">'
              f'<text text-anchor="middle" font-size="{SMALL}">{_tspans("× " + count, SMALL)}</text></g>')
        built.append(_sublayers(f, cx, base, names))
        tops.append(top)
    for cx, label in ((enc_x, "source tokens ($B$, $S$)"), (dec_x, "target tokens, shifted ($B$, $L$)")):
        emb = f.layer(cx - 100, base + 22, 200, 38, "embedding × √$D$", note="+ sinusoidal positions", size=SMALL)
        f.arrow(emb.top, (cx, base))
        f.arrow((cx, emb.bottom + 20), emb.base)
        f.text(cx, emb.bottom + 36, label, size=SMALL)
    # the encoder's output: the final norm (pre-LN), then the memory to every cross-attention
    enc_top, dec_top = tops
    fin = f.layer(enc_x - 50, enc_top - 40, 100, 24, "LayerNorm", size=SMALL, dash="4 3")
    f.arrow((enc_x, enc_top + 12), fin.base)
    f.text(enc_x + 56, fin.cy + 5, "optional", anchor="start", size=SMALL, color=MUTED)
    knot = fin.y - 22
    f.text(enc_x, knot - 14, "memory ($B$, $S$, $D$)", size=SMALL)
    cross = built[1][1]
    f.arrow(fin.top, (enc_x, knot), (268, knot), (268, cross.cy), cross.west, role="key")
    f.add(f'<circle cx="{fmt(enc_x)}" cy="{fmt(knot)}" r="2.6" fill="{ROLES["key"].stroke}"/>')
    f.text(274, cross.y - 8, "$K$, $V$", anchor="start", size=SMALL, color=ROLES["key"].stroke)
    f.text(cross.x + 4, cross.bottom + 16, "$Q$", anchor="start", size=SMALL, color=ROLES["query"].stroke)
    # the decoder's output
    fin = f.layer(dec_x - 50, dec_top - 40, 100, 24, "LayerNorm", size=SMALL, dash="4 3")
    f.arrow((dec_x, dec_top + 12), fin.base)
    f.text(dec_x - 56, fin.cy + 5, "optional", anchor="end", size=SMALL, color=MUTED)
    gen = f.layer(dec_x - 50, fin.y - 50, 100, 30, "Linear", size=SMALL)
    f.arrow(fin.top, gen.base)
    f.arrow(gen.top, (dec_x, gen.y - 22))
    f.text(dec_x, gen.y - 28, "logits ($B$, $L$, $V$)", size=SMALL)
    f.text(gen.x - 10, gen.cy - 3, "`generator`; the softmax", anchor="end", size=SMALL, color=MUTED)
    f.text(gen.x - 10, gen.cy + 13, "is in the loss", anchor="end", size=SMALL, color=MUTED)
    f.text(20, 32, "post-LN, the paper's order:", anchor="start", size=SMALL, color=MUTED)
    f.text(20, 48, "LayerNorm($x$ + Sublayer($x$))", anchor="start", size=SMALL, color=MUTED)
    return f


@figure("post-pre-ln")
def post_pre_ln() -> Figure:
    """Chapter 6: ``_sublayer`` with ``norm_first`` False (post-LN) and True (pre-LN)."""
    f = Figure(520, 280, "Post-LN and pre-LN sub-layers",
               "Post-LN, the paper's order: the sub-layer reads x, its output is added to x, and the sum "
               "is normalised: LayerNorm(x + Sublayer(x)). Pre-LN: x is normalised first, the sub-layer "
               "reads the normalised x, and its output is added to x itself, which is never normalised "
               "on the residual path: x + Sublayer(LayerNorm(x)).")
    f.rect(260, 16, 1, 248, fill=CARD_EDGE, stroke="none")
    for cx, name, formula, first in ((130, "post-LN", "LayerNorm($x$ + Sublayer($x$))", False),
                                     (390, "pre-LN", "$x$ + Sublayer(LayerNorm($x$))", True)):
        f.text(cx, 32, name, bold=True)
        f.text(cx, 52, formula, size=SMALL, color=MUTED)
        bottom = 240
        _sublayers(f, cx, bottom, ["Sublayer"], norm_first=first, lane=80)
        f.arrow((cx, 262), (cx, bottom))
        f.text(cx - 8, 258, "$x$", anchor="end", size=SMALL)
        top = bottom - SUBLAYER_H
        f.arrow((cx, top), (cx, 76))
        f.text(cx + 40, bottom + 6, "residual", size=SMALL, color=MUTED)
    return f


@figure("kv-cache")
def kv_cache() -> Figure:
    """Chapter 6: greedy decoding with ``KVCache``: one new key and value per step and layer."""
    steps = 4
    f = Figure(540, 486, "The decoder's key/value cache over the steps of greedy decoding",
               "At every step the decoder feeds only the newest token. In each layer's self-attention it "
               "projects that token's query, key and value, appends the key and the value to the cache "
               "(B, H, t, E), and the query attends to all t cached positions. The cross-attention's keys "
               "and values, projected from the encoder's memory (B, H, S, E), are computed at the first "
               "step and reused at every later one.")
    c = 22
    f.text(160, 30, "self-attention", anchor="start", bold=True)
    f.text(160, 48, "`self_k`, `self_v`", anchor="start", size=SMALL, color=MUTED)
    f.text(160, 64, "($B$, $H$, $t$, $E$)", anchor="start", size=SMALL, color=MUTED)
    f.text(340, 30, "cross-attention", anchor="start", bold=True)
    f.text(340, 48, "`cross_k`, `cross_v`", anchor="start", size=SMALL, color=MUTED)
    f.text(340, 64, "($B$, $H$, $S$, $E$)", anchor="start", size=SMALL, color=MUTED)
    inputs = ["<s>", "$y$_1", "$y$_2", "$y$_3"]
    for t in range(1, steps + 1):
        y = 86 + (t - 1) * 88
        if t > 1:
            f.rect(12, y - 8, 516, 1, fill=CARD_EDGE, stroke="none")
        f.text(20, y + 20, f"$t$ = {t}", anchor="start", bold=True, size=SMALL)
        f.text(20, y + 38, "feeds " + inputs[t - 1], anchor="start", size=SMALL, color=MUTED)
        q = f.tensor(96, y + 8, 1, 1, c, role="query")
        f.text(q.cx, q.bottom + 16, "$q$", size=SMALL)
        k = f.tensor(160, y, 1, t, c, role="key", highlight=[(0, t - 1)])
        v = f.tensor(160, y + c + 6, 1, t, c, role="value", highlight=[(0, t - 1)])
        f.arrow(q.east, (k.x - 2, q.cy), role="query")
        f.text(k.right + 8, k.cy + 5, "$k$", anchor="start", size=SMALL, color=ROLES["key"].stroke)
        f.text(v.right + 8, v.cy + 5, "$v$", anchor="start", size=SMALL, color=ROLES["value"].stroke)
        # cross-attention: projected from the memory once, then read from the cache
        new = [(0, j) for j in range(5)] if t == 1 else []  # projected from the memory at step 1 only
        ck = f.tensor(340, y, 1, 5, c * 0.8, role="key", cell_h=c, highlight=new)
        cv = f.tensor(340, y + c + 6, 1, 5, c * 0.8, role="value", cell_h=c, highlight=new)
        f.text(ck.right + 8, y + 24, "projected" if t == 1 else "read from", anchor="start", size=SMALL,
               color=INK if t == 1 else MUTED)
        f.text(ck.right + 8, y + 40, "once" if t == 1 else "the cache", anchor="start", size=SMALL,
               color=INK if t == 1 else MUTED)
    y = 86 + 3 * 88 + 64
    f.rect(20, y, c, c, fill="#ffffff", stroke=INK, width=2.2)
    for i, line in enumerate(["computed at this step: for the self-attention, the newest",
                              "token's key and value, appended; its query sees all $t$.",
                              "Without the cache, step $t$ would project all $t$ again."]):
        f.text(52, y + 16 + 18 * i, line, anchor="start", size=SMALL)
    return f


# chapter 7 ----------------------------------------------------------------------------------
N_PATH, K_CONV, R_BAND = 8, 2, 2  # the figure's sequence length, kernel width and window radius


def path_lengths(n: int = N_PATH, k: int = K_CONV, r: int = R_BAND) -> dict[str, int]:
    """Layers (or steps) between the two most distant positions, as the figure draws them;
    tests/book/test_figure_sources.py checks them against ``attnlab.complexity.table_row``."""
    return {"recurrent": n - 1, "convolutional": math.ceil(math.log(n, k) - 1e-9), "self-attention": 1,
            "restricted": math.ceil((n - 1) / r)}


@figure("path-length")
def path_length() -> Figure:
    """Chapter 7: how many steps separate the first input from the last output, four ways."""
    counts = path_lengths()
    f = Figure(540, 520, "Maximum path length of four layer types",
               f"Eight positions. Recurrent: the first input reaches the last output through "
               f"{counts['recurrent']} recurrent steps. Convolutional, width {K_CONV} with dilations 1, 2, 4: "
               f"{counts['convolutional']} layers. Self-attention: one layer connects every pair. Restricted "
               f"self-attention with a window of {R_BAND} on each side: {counts['restricted']} layers.")
    n, gap, cell = N_PATH, 27, 10
    f.rect(270, 16, 1, 488, fill=CARD_EDGE, stroke="none")
    f.rect(12, 232, 516, 1, fill=CARD_EDGE, stroke="none")
    HOT = INK

    def nodes(x0: float, y: float, hot: Sequence[int] = ()) -> list[tuple[float, float]]:
        pts = []
        for i in range(n):
            cx = x0 + i * gap
            on = i in hot
            f.rect(cx - cell / 2, y - cell / 2, cell, cell, fill=HOT if on else ROLES["state"].fill,
                   stroke=HOT if on else ROLES["state"].stroke, width=1)
            pts.append((cx, y))
        return pts

    def edge(a: tuple[float, float], b: tuple[float, float], hot: bool = False) -> None:
        f.path(f"M{fmt(a[0])} {fmt(a[1] - cell / 2)} L{fmt(b[0])} {fmt(b[1] + cell / 2)}",
               stroke=HOT if hot else FAINT, width=2.4 if hot else 1)

    def panel(x: float, y: float, name: str, note: str, count: str) -> None:
        f.text(x, y, name, anchor="start", bold=True)
        f.text(x, y + 18, note, anchor="start", size=SMALL, color=MUTED)
        f.text(x + 234, y, count, anchor="end", size=SMALL)

    # recurrent: x_i -> h_i -> y_i, h_i -> h_{i+1}
    x0 = 34
    panel(20, 34, "recurrent", "one layer, $n$ steps in time", f"{counts['recurrent']} steps")
    xs = nodes(x0, 200)
    hs = nodes(x0, 150, hot=range(n))
    ys = nodes(x0, 100, hot=[n - 1])
    f.rect(xs[0][0] - cell / 2, 195, cell, cell, fill=HOT, stroke=HOT, width=1)
    for i in range(n):
        edge(xs[i], hs[i], hot=i == 0)
        edge(hs[i], ys[i], hot=i == n - 1)
        if i:
            f.path(f"M{fmt(hs[i - 1][0] + cell / 2)} 150 L{fmt(hs[i][0] - cell / 2)} 150", stroke=HOT, width=2.4)
    # convolutional: dilations 1, 2, 4 (width 2)
    x0 = 304
    panel(290, 34, "convolutional", f"width {K_CONV}, dilations 1, 2, 4", f"{counts['convolutional']} layers")
    levels = [nodes(x0, 200, hot=[0])]
    path = [0, 1, 3, 7]
    for level in range(1, 4):
        y = 200 - level * 34
        levels.append(nodes(x0, y, hot=[path[level]]))
        d = K_CONV ** (level - 1)
        for i in range(n):
            for j in (i - d, i):
                if j >= 0:
                    edge(levels[level - 1][j], levels[level][i], hot=(j, i) == (path[level - 1], path[level]))
    # self-attention: every pair, one layer
    x0 = 34
    panel(20, 264, "self-attention", "one layer, every pair", f"{counts['self-attention']} layer")
    bottom, top = nodes(x0, 470, hot=[0]), nodes(x0, 330, hot=[n - 1])
    for i in range(n):
        for j in range(n):
            if (i, j) != (0, n - 1):
                edge(bottom[i], top[j])
    edge(bottom[0], top[n - 1], hot=True)
    # restricted: a window of R_BAND on each side
    x0 = 304
    panel(290, 264, "restricted", f"window $r$ = {R_BAND} on each side", f"{counts['restricted']} layers")
    layers = counts["restricted"]
    rows = [nodes(x0, 470, hot=[0])]
    path = [0]
    for level in range(1, layers + 1):
        path.append(min(n - 1, path[-1] + R_BAND))
    for level in range(1, layers + 1):
        y = 470 - level * 35
        rows.append(nodes(x0, y, hot=[path[level]]))
        for i in range(n):
            for j in range(max(0, i - R_BAND), min(n, i + R_BAND + 1)):
                edge(rows[level - 1][j], rows[level][i], hot=(j, i) == (path[level - 1], path[level]))
    f.text(20, 508, "dark: the path from the first input to the last output", anchor="start", size=SMALL,
           color=MUTED)
    return f


@figure("online-softmax")
def online_softmax() -> Figure:
    """Chapter 7: ``blockwise_attention``'s loop over blocks of keys, with its running m, l, acc."""
    f = Figure(540, 494, "Exact attention in blocks of keys, with an online softmax",
               "The keys and values are cut into blocks of b positions. For the current block, the scores "
               "of all L queries against its b keys form an L by b tile; the rest of the L by S score matrix "
               "is never held. Each query keeps three running quantities: the largest score so far m, the "
               "sum of exponentials l relative to m, and the weighted sum of values acc. A block that raises "
               "the maximum rescales the earlier sums by exp(m - m'). After the last block the output is "
               "acc / l.")
    c = 18
    L, b, blocks, E, Ev = 4, 3, 4, 2, 3
    current = 1  # the block being processed (0-based): block 1 is done, blocks 3 and 4 are to come
    x0, pitch = 132, b * c + 8
    f.text(20, 30, "the loop runs over blocks of $b$ keys", anchor="start", bold=True)
    for j in range(blocks):
        kt = f.tensor(x0 + j * pitch, 66, E, b, c, role="key", faint=j != current)
        f.text(kt.cx, kt.y - 7, f"block {j + 1}", size=SMALL, color=INK if j == current else MUTED)
        if j == current:
            kblock = kt
    f.text(x0 - 10, 90, "$K$^⊤", anchor="end")
    q = f.tensor(40, 126, L, E, c, role="query")
    f.text(q.cx, q.y - 8, "$Q$")
    f.text(q.cx, q.bottom + 18, "($L$, $E$)", size=SMALL, color=MUTED)
    width = blocks * pitch - 8
    f.rect(x0, 126, width, L * c, stroke=FAINT, width=1.4, dash="5 4")
    tile = f.tensor(x0 + current * pitch, 126, L, b, c)
    f.arrow(q.east, (tile.x - 2, q.cy), role="query")
    f.arrow(kblock.base, (kblock.cx, tile.y - 2), role="key")
    for i, line in enumerate(["tile $s$: ($L$, $b$)", "dashed: the rest of", "the ($L$, $S$) scores,",
                              "never held"]):
        f.text(x0 + width + 10, 140 + 17 * i, line, anchor="start", size=SMALL, color=INK if i == 0 else MUTED)
    # the running state per query, updated from the tile and the block's values
    y = 262
    f.text(20, y + 16, "carried from", anchor="start", size=SMALL)
    f.text(20, y + 32, "block to block,", anchor="start", size=SMALL)
    f.text(20, y + 48, "per query", anchor="start", size=SMALL)
    m = f.tensor(150, y, L, 1, c)
    ell = f.tensor(186, y, L, 1, c)
    acc = f.tensor(222, y, L, Ev, c, role="value")
    bus = y - 24
    f.path(f"M{fmt(tile.cx)} {fmt(tile.bottom)} L{fmt(tile.cx)} {fmt(bus)} M{fmt(m.cx)} {fmt(bus)} "
           f"L{fmt(acc.cx)} {fmt(bus)}", stroke=LINE, width=1.6)
    for t in (m, ell, acc):
        f.arrow((t.cx, bus), (t.cx, t.y - 1))
    f.text(m.cx, m.bottom + 18, "$m$", size=SMALL)
    f.text(ell.cx, ell.bottom + 18, "$ℓ$", size=SMALL)
    f.text(acc.cx, acc.bottom + 18, "$**a**$ (`acc`)", size=SMALL)
    f.text(150, acc.bottom + 36, "$m$, $ℓ$: ($L$, 1);  $**a**$: ($L$, $E_v$)", anchor="start", size=SMALL,
           color=MUTED)
    v = f.tensor(340, y, b, Ev, c, role="value")
    f.arrow(v.west, (acc.right + 2, v.cy), role="value")
    f.text(v.right + 8, v.y + 14, "$**v**$, block 2", anchor="start", size=SMALL)
    f.text(v.right + 8, v.y + 30, "($b$, $E_v$)", anchor="start", size=SMALL, color=MUTED)
    lines = [
        "$m$′ = max($m$, max_{$j$} $s_j$)",
        "$ℓ$′ = $ℓ$ e^{$m$ − $m$′} + $∑_j$ e^{$s_j$ − $m$′}",
        "$**a**$′ = $**a**$ e^{$m$ − $m$′} + $∑_j$ e^{$s_j$ − $m$′} $**v**_j$",
        "after the last block: output = $**a**$ / $ℓ$",
    ]
    for i, line in enumerate(lines):
        f.text(40, 408 + 22 * i, line, anchor="start", size=SIZE if i < 3 else SMALL, color=INK if i < 3 else MUTED)
    return f


# chapter 8 ----------------------------------------------------------------------------------
@figure("position-lineage")
def position_lineage() -> Figure:
    """Chapter 8: the ways of giving positions, as a lineage from the Transformer's to today's."""
    f = Figure(540, 470, "Positions in attention, as a lineage",
               "Three families. Added to the token: the sinusoidal encoding (Vaswani et al. 2017), then "
               "the learned table of BERT and GPT (2018). A bias on the scores: relative vectors (Shaw et "
               "al. 2018), T5's bucketed bias (Raffel et al. 2020), ALiBi's linear penalty (Press et al. "
               "2022). A rotation of queries and keys: RoPE (Su et al. 2021), which uses the rotation of "
               "the sinusoidal encoding directly, and its stretches past the trained length: position "
               "interpolation, NTK-aware scaling and YaRN (2023).")
    w, h, step = 160, 46, 70
    cols = [16, 190, 364]
    heads = [("added to the token", "chapter 5"), ("a bias on the scores", "this chapter"),
             ("a rotation of $q$ and $k$", "this chapter")]
    for x, (head, note) in zip(cols, heads, strict=True):
        f.text(x, 30, head, anchor="start", bold=True, size=SMALL)
        f.text(x, 47, note, anchor="start", size=SMALL, color=MUTED)

    def node(col: int, row: int, name: str, source: str) -> Box:
        x, y = cols[col], 62 + row * step
        box = f.rect(x, y, w, h, fill="#ffffff", stroke=LINE, width=1.3, rx=5)
        assert text_width(name, SMALL) < w - 8 and text_width(source, SMALL) < w - 8, name
        f.label(box.cx, y + 15, name, size=SMALL, bold=True)
        f.label(box.cx, y + 33, source, size=SMALL, color=MUTED)
        return box

    sinusoidal = node(0, 0, "sinusoidal", "Vaswani et al. 2017")
    learned = node(0, 1, "learned table", "BERT, GPT 2018")
    shaw = node(1, 0, "relative vectors", "Shaw et al. 2018")
    t5 = node(1, 1, "bucketed bias", "T5, Raffel et al. 2020")
    alibi = node(1, 2, "ALiBi", "Press et al. 2022")
    rope = node(2, 1, "RoPE", "Su et al. 2021")
    stretches = [node(2, 2, "interpolation", "Chen et al. 2023"), node(2, 3, "NTK-aware scaling", "bloc97 2023"),
                 node(2, 4, "YaRN", "Peng et al. 2023")]
    f.arrow(sinusoidal.base, learned.top)
    f.arrow(shaw.base, t5.top)
    f.arrow(t5.base, alibi.top)
    turn = rope.x + 24  # over the relative vectors, then down the empty top of the third column
    f.arrow((sinusoidal.right - 24, sinusoidal.y), (sinusoidal.right - 24, 55), (turn, 55), (turn, rope.y))
    f.text(turn + 8, sinusoidal.cy - 2, "its rotation,", anchor="start", size=SMALL, color=MUTED)
    f.text(turn + 8, sinusoidal.cy + 16, "used directly", anchor="start", size=SMALL, color=MUTED)
    trunk = rope.x - 10
    f.path(f"M{fmt(rope.x + 12)} {fmt(rope.bottom)} L{fmt(rope.x + 12)} {fmt(rope.bottom + 6)} "
           f"L{fmt(trunk)} {fmt(rope.bottom + 6)} L{fmt(trunk)} {fmt(stretches[-1].cy)}", width=1.6)
    for box in stretches:
        f.arrow((trunk, box.cy), box.west)
    f.text(rope.x - 160, stretches[1].cy - 8, "stretched past the", anchor="start", size=SMALL, color=MUTED)
    f.text(rope.x - 160, stretches[1].cy + 10, "trained length, no", anchor="start", size=SMALL, color=MUTED)
    f.text(rope.x - 160, stretches[1].cy + 28, "new weights", anchor="start", size=SMALL, color=MUTED)
    y = 62 + 5 * step - 6
    f.rect(12, y - 16, 516, 1, fill=CARD_EDGE, stroke="none")
    for i, line in enumerate(["Left: a score sees where each token sits. Middle and right: a score",
                              "depends on the offset $n$ − $m$ between query and key (T5 and Shaw et al.",
                              "clip it), so shifting a sequence changes nothing."]):
        f.text(20, y + 6 + 18 * i, line, anchor="start", size=SMALL)
    return f


# chapter 9 ----------------------------------------------------------------------------------
BLOCK = 4  # token slots per block in the paged cache's figure
PAGED = {"A": (7, [1, 4]), "B": (10, [0, 6, 3]), "C": (2, [7])}  # request: (tokens, its block table)
POOL = 8  # physical blocks in the pool


def _slots(f: Figure, x: float, y: float, filled: int, *, cell: float = 16, half: float = 10,
           faint: bool = False) -> Box:
    """A block of the paged cache: BLOCK slots, each a token's key (top) over its value (bottom)."""
    for j in range(BLOCK):
        for k, role in enumerate(("key", "value")):
            r = ROLES[role]
            if faint:
                fill, stroke = "#eef1f5", FAINT
            else:
                fill, stroke = (r.fill if j < filled else "#ffffff"), r.stroke
            f.rect(x + j * cell, y + k * half, cell, half, fill=fill, stroke=stroke, width=0.9)
    return f.rect(x, y, BLOCK * cell, 2 * half, stroke=FAINT if faint else LINE, width=1.4)


@figure("paged-kv-cache")
def paged_kv_cache() -> Figure:
    """Chapter 9: PagedAttention's block tables map each request's logical blocks into one shared pool."""
    used = {p: (name, i) for name, (_, table) in PAGED.items() for i, p in enumerate(table)}
    empty = sum(len(table) * BLOCK - n for n, table in PAGED.values())
    slots = sum(len(table) * BLOCK for _, table in PAGED.values())
    f = Figure(540, 450, "A paged key/value cache: logical blocks, block tables, one pool of physical blocks",
               f"Three requests of {', '.join(str(n) for n, _ in PAGED.values())} tokens hold their keys and "
               f"values in blocks of {BLOCK} token slots; only each request's last block is partly filled. Each "
               f"request's block table maps its logical blocks 0, 1, 2 to physical block numbers: A to "
               f"{', '.join(map(str, PAGED['A'][1]))}, B to {', '.join(map(str, PAGED['B'][1]))}, C to "
               f"{', '.join(map(str, PAGED['C'][1]))}. The physical blocks lie scattered, not contiguous, in one "
               f"shared pool of {POOL}; blocks {', '.join(str(p) for p in range(POOL) if p not in used)} are free. "
               f"The waste is only the empty slots of the last blocks: {empty} of {slots}.")
    f.text(20, 30, "logical blocks", anchor="start", bold=True)
    f.text(20, 48, "per request", anchor="start", size=SMALL, color=MUTED)
    f.text(156, 30, "block tables", anchor="start", bold=True)
    f.text(156, 48, "logical → physical", anchor="start", size=SMALL, color=MUTED)
    f.text(318, 30, "physical blocks", anchor="start", bold=True)
    f.text(318, 48, f"one pool of {POOL}, shared", anchor="start", size=SMALL, color=MUTED)
    pitch, bx, tx, tw = 28, 40, 156, 26
    y, rows = 68, {}
    for name, (n, table) in PAGED.items():
        f.text(20, y + 14, f"request {name}: {n} tokens", anchor="start", size=SMALL)
        y += 22
        for i, p in enumerate(table):
            filled = min(BLOCK, n - i * BLOCK)
            f.label(bx - 10, y + 10, str(i), size=SMALL, color=MUTED)
            block = _slots(f, bx, y, filled)
            f.arrow(block.east, (tx - 1, y + 10))
            f.rect(tx, y, tw, 20, fill="#ffffff", stroke=LINE, width=1)
            f.rect(tx + tw, y, tw, 20, fill=ROLES["state"].fill, stroke=LINE, width=1)
            f.label(tx + tw / 2, y + 10, str(i), size=SMALL, color=MUTED)
            f.label(tx + 1.5 * tw, y + 10, str(p), size=SMALL, bold=True)
            rows[p] = y + 10
            y += pitch
        y += 10
    # the pool: physical block p at one row each, its number in a cell, then its slots
    first, last = 90, y - 10 - pitch  # the tops of the first and the last logical block
    px, ppitch = 318, (last - first) / (POOL - 1)
    for p in range(POOL):
        py = first + p * ppitch
        f.rect(px, py, 22, 20, fill=ROLES["state"].fill if p in used else "#eef1f5",
               stroke=LINE if p in used else FAINT, width=1)
        f.label(px + 11, py + 10, str(p), size=SMALL, bold=p in used, color=INK if p in used else MUTED)
        if p in used:
            name, i = used[p]
            n = PAGED[name][0]
            _slots(f, px + 28, py, min(BLOCK, n - i * BLOCK))
            f.text(px + 28 + BLOCK * 16 + 8, py + 15, f"{name}, block {i}", anchor="start", size=SMALL)
            f.arrow((tx + 2 * tw, rows[p]), (px - 1, py + 10), width=1.2)
        else:
            _slots(f, px + 28, py, 0, faint=True)
            f.text(px + 28 + BLOCK * 16 + 8, py + 15, "free", anchor="start", size=SMALL, color=MUTED)
    # what a slot is, and where the waste is
    y = 360
    f.rect(12, y - 14, 516, 1, fill=CARD_EDGE, stroke="none")
    _slots(f, 20, y, 1)
    f.text(96, y + 7, f"a block: {BLOCK} token slots, each holding one token's key",
           anchor="start", size=SMALL)
    f.text(96, y + 24, "(top) and value (bottom); white: an empty slot", anchor="start", size=SMALL)
    f.text(20, y + 54, f"waste: only the last block of each request ({empty} empty slots of {slots})",
           anchor="start", size=SMALL)
    f.text(20, y + 72, "a request takes a free block only when its last block is full", anchor="start",
           size=SMALL, color=MUTED)
    return f


SPLIT_C = 4  # chunks of the cache in the split-KV figure


@figure("split-kv")
def split_kv() -> Figure:
    """Chapter 9: split-KV decoding: one query against C chunks of the cache at once, then a merge."""
    f = Figure(540, 508, "Split-KV decoding: one query, the cache in chunks, partial results merged",
               f"At a decoding step there is one query per head, too little work to keep a GPU busy. The "
               f"cached keys and values of S positions are cut into C = {SPLIT_C} chunks of S/C positions. Side "
               f"by side, in parallel, each chunk attends the same query to its own keys and values and gives a "
               f"partial output o_i, normalised within the chunk, and the log-sum-exp l_i of its scores. A "
               f"merge then combines them exactly: l = log sum_i exp(l_i), o = sum_i exp(l_i - l) o_i.")
    f.text(20, 30, f"one query, the cache cut into $C$ = {SPLIT_C} chunks", anchor="start", bold=True)
    f.text(20, 48, "the chunks run side by side: parallel work, even for one query", anchor="start",
           size=SMALL, color=MUTED)
    q = f.tensor(242, 64, 1, 4, 14, role="query")
    f.text(q.right + 10, q.bottom - 2, "$**q**$: (1, $E$)", anchor="start", size=SMALL,
           color=ROLES["query"].stroke)
    lane_w, gap, x_first = 118, 10, 19
    centres = [x_first + i * (lane_w + gap) + lane_w / 2 for i in range(SPLIT_C)]
    bus = 94
    f.path(f"M{fmt(q.cx)} {fmt(q.bottom)} L{fmt(q.cx)} {fmt(bus)} M{fmt(centres[0])} {fmt(bus)} "
           f"L{fmt(centres[-1])} {fmt(bus)}", stroke=ROLES["query"].stroke, width=1.6)
    top, cell, n = 104, 12, 5
    merge_y = 386
    merge = f.op(270, merge_y, "merge", size=SMALL)
    for i, cx in enumerate(centres):
        x0 = cx - lane_w / 2
        f.rect(x0, top, lane_w, 238, fill="#eef2f8", stroke="none", rx=9)
        k = f.tensor(cx - 37, top + 34, n, 1, cell + 2, cell_h=cell, role="key")
        v = f.tensor(cx + 23, top + 34, n, 1, cell + 2, cell_h=cell, role="value")
        f.text(k.cx, k.y - 8, f"$K$_{i + 1}", size=SMALL, color=ROLES["key"].stroke)
        f.text(v.cx, v.y - 8, f"$V$_{i + 1}", size=SMALL, color=ROLES["value"].stroke)
        op = f.op(cx, top + 136, "attend", size=SMALL)
        f.arrow((cx, bus), op.top, role="query")
        f.arrow(k.base, op.rim(k.cx, k.bottom), role="key")
        f.arrow(v.base, op.rim(v.cx, v.bottom), role="value")
        o = f.tensor(cx - 40, top + 190, 1, 3, cell, role="value")
        ell = f.tensor(cx + 22, top + 190, 1, 1, cell)
        f.arrow(op.rim(o.cx, o.y), (o.cx, o.y - 1), role="value")
        f.arrow(op.rim(ell.cx, ell.y), (ell.cx, ell.y - 1))
        f.text(o.cx, o.bottom + 18, f"$**o**$_{i + 1}", size=SMALL, color=ROLES["value"].stroke)
        f.text(ell.cx, ell.bottom + 18, f"$ℓ$_{i + 1}", size=SMALL)
        f.arrow((cx, top + 240), merge.rim(cx, top + 240))
    out = f.tensor(merge.right + 30, merge_y - 7, 1, 4, 14, role="value")
    f.arrow(merge.east, (out.x - 1, merge_y), role="value")
    f.text(out.right + 10, merge_y + 5, "$**o**$: (1, $E_v$)", anchor="start", size=SMALL,
           color=ROLES["value"].stroke)
    f.text(20, merge_y - 6, "$K_i$, $V_i$: $S$/$C$ positions", anchor="start", size=SMALL, color=MUTED)
    f.text(20, merge_y + 12, "$**o**_i$: (1, $E_v$);  $ℓ_i$: one number", anchor="start", size=SMALL,
           color=MUTED)
    lines = [
        ("chunk $i$:  $ℓ_i$ = log $∑_j$ e^{$s_j$},  $**o**_i$ = $∑_j$ e^{$s_j$ − $ℓ_i$} $**v**_j$", INK),
        ("over the $S$/$C$ positions $j$ of chunk $i$, with $s_j$ = $**q**$ · $**k**_j$ / √$E$", MUTED),
        ("merge:  $ℓ$ = log $∑_i$ exp $ℓ_i$,  $**o**$ = $∑_i$ exp($ℓ_i$ − $ℓ$) $**o**_i$", INK),
    ]
    for i, (line, color) in enumerate(lines):
        f.text(20, 444 + 22 * i, line, anchor="start", size=SMALL if color == MUTED else SIZE, color=color)
    return f


@figure("latent-attention")
def latent_attention() -> Figure:
    """Chapter 9: multi-head latent attention caches a small latent and one rotary key per token."""
    f = Figure(540, 490, "Multi-head latent attention: what one token caches",
               "The token's state h_t (D numbers) is projected down by W^DKV to a small latent c_t of d_c "
               "numbers, and separately by W^KR, followed by RoPE, to a decoupled rotary key k^R_t of d_R "
               "numbers. Only c_t and k^R_t are cached per token: d_c + d_R numbers, against 2HE for multi-head "
               "attention. From c_t, the up-projections W^UK and W^UV give the content keys k^C and the values "
               "v of the H heads, (H, E) each; every head's key is [k^C; k^R], with k^R_t shared by all heads. "
               "The query, through a latent of its own, splits into a content part q^C and a rotary part q^R. "
               "W^UK folds into the query and W^UV into the output projection W^O, so at decoding the keys "
               "are never formed.")
    c, H, E, R = 12, 4, 3, 2
    f.text(20, 30, "what one token caches, and what the heads see", anchor="start", bold=True)
    yq, yk, yv, yc, yr = 92, 172, 252, 212, 322
    # the token's state, projected three ways
    h = f.tensor(20, yc - 4 * 14, 8, 1, 14)
    f.text(h.cx, h.y - 8, "$**h**_t$")
    f.text(h.cx, h.bottom + 17, "$D$", size=SMALL, color=MUTED)
    bus = 40
    f.path(f"M{fmt(h.right)} {fmt(yc)} L{fmt(bus)} {fmt(yc)} M{fmt(bus)} {fmt(yq)} L{fmt(bus)} {fmt(yr)}",
           stroke=LINE, width=1.6)
    lx, lw = 50, 64
    wq = f.layer(lx, yq - 15, lw, 30, "$W^Q$", size=SMALL)
    wd = f.layer(lx, yc - 15, lw, 30, "$W^{DKV}$", size=SMALL)
    wr = f.layer(lx, yr - 15, lw, 30, "$W^{KR}$", size=SMALL)
    for layer in (wq, wd, wr):
        f.arrow((bus, layer.cy), layer.west)
    # what is cached: the latent and the rotary key
    tx = 194
    ct = f.tensor(tx, yc - 21, 3, 1, 14)
    f.arrow(wd.east, (ct.x - 1, yc))
    f.text(ct.cx, ct.y - 8, "$**c**_t$", size=SMALL)
    f.text(ct.cx, ct.bottom + 17, "$d_c$", size=SMALL, color=MUTED)
    rope = f.op(156, yr, "RoPE", size=SMALL)
    f.arrow(wr.east, rope.west)
    kr = f.tensor(tx, yr - 14, 2, 1, 14, role="key")
    f.arrow(rope.east, (kr.x - 1, yr), role="key")
    f.text(kr.cx, kr.y - 8, "$**k**^R_t$", size=SMALL, color=ROLES["key"].stroke)
    f.text(kr.cx, kr.bottom + 17, "$d_R$", size=SMALL, color=MUTED)
    box = f.rect(tx - 16, ct.y - 30, 46, kr.bottom + 30 - (ct.y - 30), stroke=INK, width=1.4, rx=6,
                 dash="5 4")
    for i, (line, color) in enumerate([("cached per token:", INK), ("$**c**_t$ and $**k**^R_t$", INK),
                                       ("$d_c$ + $d_R$ numbers", INK), ("(multi-head: 2$HE$)", MUTED)]):
        f.text(box.right + 12, box.bottom - 18 + 17 * i, line, anchor="start", size=SMALL, color=color)
    # the heads: content keys and values from the latent, the rotary key shared
    gx = 336
    up = 240
    f.path(f"M{fmt(ct.right)} {fmt(yc)} L{fmt(up)} {fmt(yc)} M{fmt(up)} {fmt(yk)} L{fmt(up)} {fmt(yv)}",
           stroke=LINE, width=1.6)
    wk = f.layer(up + 10, yk - 15, 60, 30, "$W^{UK}$", size=SMALL)
    wv = f.layer(up + 10, yv - 15, 60, 30, "$W^{UV}$", size=SMALL)
    for layer in (wk, wv):
        f.arrow((up, layer.cy), layer.west)
    rows = {}
    for name, y, role, parts in (("q", yq, "query", 2), ("k", yk, "key", 2), ("v", yv, "value", 1)):
        content = f.tensor(gx, y - H * c / 2, H, E, c, role=role)
        rows[name] = [content]
        if parts == 2:
            rows[name].append(f.tensor(content.right + 4, y - H * c / 2, H, R, c, role=role))
    f.arrow(wq.east, (gx - 1, yq), role="query")
    f.text(wq.right + 12, yq + 20, "through a latent $**c**^Q_t$ of its own", anchor="start", size=SMALL,
           color=MUTED)
    f.arrow(wk.east, (gx - 1, yk), role="key")
    f.arrow(wv.east, (gx - 1, yv), role="value")
    for name, role in (("q", "query"), ("k", "key")):
        a, b = rows[name]
        f.text(a.cx, a.y - 7, f"$**{name}**^C$", size=SMALL, color=ROLES[role].stroke)
        f.text(b.cx, b.y - 7, f"$**{name}**^R$", size=SMALL, color=ROLES[role].stroke)
    f.text(rows["v"][0].cx, rows["v"][0].y - 7, "$**v**$", size=SMALL, color=ROLES["value"].stroke)
    f.arrow(kr.east, (rows["k"][1].cx, yr), (rows["k"][1].cx, rows["k"][1].bottom + 1), role="key")
    rx = rows["k"][1].right + 10
    for y, lines in ((yq, ["($H$, $E$ + $d_R$)", "RoPE on $**q**^R$"]),
                     (yk, ["($H$, $E$ + $d_R$)", "$**k**^R_t$: the same", "in every head"]),
                     (yv, ["($H$, $E$)"])):
        for i, line in enumerate(lines):
            f.text(rx, y - 12 + 5 + 17 * i, line, anchor="start", size=SMALL, color=INK if i == 0 else MUTED)
    # absorption
    y = 444
    f.rect(12, y - 22, 516, 1, fill=CARD_EDGE, stroke="none")
    f.text(20, y, "$W^{UK}$ folds into the query, $W^{UV}$ into $W^O$:", anchor="start", size=SMALL)
    f.text(20, y + 18, "the keys are never formed at decoding: the heads read the cached latents",
           anchor="start", size=SMALL)
    return f


# the legend, for book/notation.md ----------------------------------------------------------
GATED_N, GATED_C, GATED_DECAY = 8, 4, 0.8  # positions, chunk, the decay drawn


def _decayed(rows: range, cols: range) -> list[list[float | None]]:
    """The decay ``a^(t - s)`` of key ``s`` for query ``t`` (``None`` above the diagonal)."""
    return [[GATED_DECAY ** (t - s) if s <= t else None for s in cols] for t in rows]


@figure("gated-forms")
def gated_forms() -> Figure:
    """Chapter 10: one gated linear attention layer computed in its parallel, recurrent and chunked forms."""
    n, c, cell = GATED_N, GATED_C, 16
    f = Figure(540, 330, "One gated layer, three forms that compute the same outputs",
               f"Left, the parallel form: all {n} by {n} decayed scores at once, a lower-triangular matrix whose "
               f"weights fade away from the diagonal, times the values. Middle, the recurrent form: a state S_t "
               f"updated once per position, S_t = a_t S_(t-1) + k_t v_t^T, read by each query. Right, the chunked "
               f"form with chunks of {c}: the parallel form inside each chunk (the triangles on the diagonal) and "
               f"the state carried from one chunk to the next for everything earlier (the block below them).")
    f.text(20, 28, "one gated layer, three forms: the same outputs", anchor="start", bold=True)
    tops, left = 78, (24, 206, 388)
    for x, title in zip(left, ("parallel", "recurrent", "chunked"), strict=True):
        f.text(x + n * cell / 2, tops - 22, title, bold=True)
    grid = f.tensor(left[0], tops, n, n, cell, values=_decayed(range(n), range(n)))
    f.text(grid.cx, grid.bottom + 22, f"$n$ × $n$ scores at once", size=SMALL, color=MUTED)
    f.text(grid.cx, grid.bottom + 40, "work $n^2$, 1 step", size=SMALL, color=MUTED)
    # recurrent: a column of states, each fed k_t v_t^T and read by q_t
    cx, step, states = left[1] + n * cell / 2, 34, 4
    previous = None
    for t in range(states):
        y = tops + t * step
        box = f.tensor(cx - 12, y, 2, 2, 12, role="state")
        f.text(box.right + 8, box.cy + 5, f"$S$_{t + 1}", anchor="start", size=SMALL)
        f.arrow((box.x - 26, box.cy), (box.x - 1, box.cy), role="key")
        if t == 0:
            f.text(box.x - 30, box.cy + 5, "$**k**_t$ $**v**_t^⊤$", anchor="end", size=SMALL,
                   color=ROLES["key"].stroke)
        if previous is not None:
            f.arrow(previous.base, (box.cx, box.y - 1), role="state")
        previous = box
    f.text(cx, grid.bottom + 22, f"one state, $n$ updates", size=SMALL, color=MUTED)
    f.text(cx, grid.bottom + 40, "work $n$, $n$ steps", size=SMALL, color=MUTED)
    # chunked: triangles on the diagonal, the earlier chunks through the state
    values = _decayed(range(n), range(n))
    for t in range(n):
        for s in range(n):
            if t // c != s // c:
                values[t][s] = None
    chunked = f.tensor(left[2], tops, n, n, cell, values=values)
    below = f.rect(left[2], tops + c * cell, c * cell, c * cell, fill=ROLES["state"].fill,
                   stroke=ROLES["state"].stroke, width=1.6)
    f.label(below.cx, below.cy, "via $S$", size=SMALL)
    f.text(chunked.cx, grid.bottom + 22, f"chunks of $C$ = {c}", size=SMALL, color=MUTED)
    f.text(chunked.cx, grid.bottom + 40, "work $nC$, $n$/$C$ steps", size=SMALL, color=MUTED)
    lines = [
        "$S_t$ = $a_t$ $S_{t-1}$ + $**k**_t$ $**v**_t^⊤$,   $**o**_t$ = $S_t^⊤$ $**q**_t$",
        f"the weight of key $s$ for query $t$: $a_{{s+1}}$ ⋯ $a_t$ (drawn: $a$ = {GATED_DECAY} at every step)",
    ]
    for i, line in enumerate(lines):
        f.text(20, 282 + 24 * i, line, anchor="start", size=SIZE if i == 0 else SMALL,
               color=INK if i == 0 else MUTED)
    return f


@figure("legend")
def legend() -> Figure:
    """The visual language of every figure: the colours of the roles and the three shapes."""
    f = Figure(540, 312, "How the book's figures are drawn",
               "Colours by role: queries orange, keys blue, values and what is made of them (contexts, "
               "attention outputs) reddish purple, attention weights in the viridis colour map of the "
               "chapters' heatmaps, from dark purple for a weight near zero to yellow for the largest, and "
               "other tensors blue-grey. Shapes: rounded rectangles are layers with learned parameters, "
               "plain grids are tensors, circles are operations without parameters. An arrow takes the "
               "colour of what it carries; a greyed-out tensor is present but unused.")
    f.panel(20, 30, "colours: the role of a tensor")
    roles = [("query", "queries"), ("key", "keys"), ("value", "values, contexts, outputs"), ("state", "other tensors")]
    for i, (role, text) in enumerate(roles):
        x, y = 20 + (i % 2) * 282, 50 + (i // 2) * 34
        f.tensor(x, y, 1, 3, 16, role=role)
        f.arrow((x + 54, y + 8), (x + 84, y + 8), role=role)
        f.text(x + 94, y + 13, text, anchor="start", size=SMALL)
    y = 124
    ramp = [[i / 8 for i in range(9)]]
    f.tensor(20, y, 1, 9, 16, values=ramp)
    f.text(20, y + 34, "0", anchor="start", size=SMALL, color=MUTED)
    f.text(164, y + 34, "largest", anchor="end", size=SMALL, color=MUTED)
    f.arrow((174, y + 8), (204, y + 8), role="weight")
    f.text(214, y + 6, "attention weights: viridis, as in", anchor="start", size=SMALL)
    f.text(214, y + 22, "the chapters' heatmaps", anchor="start", size=SMALL)
    y = 188
    f.rect(12, y - 16, 516, 1, fill=CARD_EDGE, stroke="none")
    f.panel(20, y + 8, "shapes: what a thing is")
    f.layer(20, y + 24, 84, 30, "GRU", size=SMALL)
    f.text(62, y + 84, "a layer: learned", size=SMALL)
    f.text(62, y + 100, "parameters", size=SMALL)
    f.tensor(160, y + 23, 2, 4, 14)
    f.text(188, y + 84, "a tensor: its", size=SMALL)
    f.text(188, y + 100, "shape beside it", size=SMALL)
    for x, op in ((290, "+"), (326, "∑"), (378, "softmax"), (446, "[ ; ]")):
        f.op(x, y + 38, op, size=SMALL)
    f.text(368, y + 84, "operations, no parameters: add,", size=SMALL)
    f.text(368, y + 100, "weighted sum, softmax, concatenate", size=SMALL)
    return f


def render(name: str) -> str:
    """The SVG text of the figure ``name``, as this source draws it."""
    return FIGURES[name]().svg()


def main(argv: Sequence[str]) -> int:
    check = "--check" in argv
    stale = []
    for name in FIGURES:
        path = HERE / f"{name}.svg"
        text = render(name)
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path.name)
        if not check:
            path.write_text(text, encoding="utf-8")
    if check and stale:
        print("differ from draw.py:", ", ".join(stale))
        return 1
    print(("would rewrite: " if check else "wrote: ") + (", ".join(stale) or "nothing"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
