"""Every figure a chapter shows has a short alternative text, written in its code cell's metadata.

MyST-NB gives a code cell's image outputs the options under the cell's metadata key
``mystnb: image:``, so ``alt`` there becomes the ``alt`` of the <img> on the website (without
it, docutils writes the image's file path, which a screen reader reads out). A figure inside a
widget (a picture of ``attnlab.figure_slider``, a plot drawn into an ``interact`` output) takes
the same text on the website through book/_ext/attnlab_sphinx.py. Edit the metadata only, e.g.
with nbformat: ``cell.metadata.setdefault("mystnb", {}).setdefault("image", {})["alt"] = "..."``.
The text says what the figure shows, in one sentence that matches its title and axes.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
MAX_CHARS = 250  # one sentence, read out at once by a screen reader
IMAGE_FILE = re.compile(r"\.(png|jpe?g|gif|svg|webp)$", re.IGNORECASE)


def _has_image(outputs: list) -> bool:
    return any(mime.startswith("image/") for o in outputs for mime in o.get("data", {}))


def _widget_shows_image(model_id: str, state: dict, seen: set[str] | None = None) -> bool:
    """Whether the widget, or one of the widgets it holds, shows a picture: an Image widget,
    or an Output widget holding an image output."""
    seen = set() if seen is None else seen
    if model_id in seen or model_id not in state:
        return False
    seen.add(model_id)
    model = state[model_id]
    if model["model_name"] == "ImageModel":
        return True
    if model["model_name"] == "OutputModel" and _has_image(model["state"].get("outputs", [])):
        return True
    held = re.findall(r"IPY_MODEL_([0-9a-f]+)", repr(model["state"]))
    return any(_widget_shows_image(m, state, seen) for m in held)


def figure_cells(path: Path) -> list[tuple[int, nbformat.NotebookNode]]:
    """The code cells of a chapter that show a figure, with their index in the notebook."""
    nb = nbformat.read(path, as_version=4)
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        views = [o["data"][WIDGET_VIEW]["model_id"] for o in cell.outputs if WIDGET_VIEW in o.get("data", {})]
        if _has_image(cell.outputs) or any(_widget_shows_image(v, state) for v in views):
            found.append((index, cell))
    return found


def _alt(cell) -> object:
    return cell.metadata.get("mystnb", {}).get("image", {}).get("alt")


def test_the_figures_are_found():
    # The chapters show dozens of Matplotlib figures and seven widgets with pictures (sliders in
    # chapters 0, 3, 4.1, 4.2, 5, 6 and the interactive alignment of chapter 2): a check that
    # found none would pass on anything.
    cells = {path.stem: figure_cells(path) for path in CHAPTERS}
    assert sum(map(len, cells.values())) >= 40, {k: len(v) for k, v in cells.items()}
    assert any(not _has_image(c.outputs) for _, c in cells["02_alignment"])  # the interact plot
    assert any("figure_slider(" in c.source for _, c in cells["00_preliminaries"])


def test_myst_nb_reads_the_alt_text_from_this_key():
    from myst_nb.core.config import NbParserConfig

    assert NbParserConfig().cell_metadata_key == "mystnb"
    assert NbParserConfig.__dataclass_fields__["render_image_options"].metadata["cell_key"] == "image"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_figure_has_an_alt_text(path):
    problems = []
    for index, cell in figure_cells(path):
        alt = _alt(cell)
        where = f"cell {index} ({cell.source.strip().splitlines()[-1][:50]!r})"
        if not isinstance(alt, str) or not alt.strip():
            problems.append(f"{where}: no alt text (metadata mystnb.image.alt)")
        elif len(alt) > MAX_CHARS:
            problems.append(f"{where}: alt text of {len(alt)} characters, over {MAX_CHARS}: {alt[:60]}...")
        elif len(alt.split()) < 4 or IMAGE_FILE.search(alt.strip()):
            problems.append(f"{where}: alt text does not say what the figure shows: {alt!r}")
    assert not problems, f"{path.name}:\n  " + "\n  ".join(problems)
