"""Figures shared by the chapters: attention weights as a labelled heatmap, and a slider over
figures rendered in advance (or two sliders over a grid of them), which works on the static
website without a running kernel.

Introduced in the chapter "Preliminaries"; used for alignments (chapter 2), self-attention
heads (chapter 5) and the Transformer's layers (chapter 6).

The sliders need ipywidgets 8 for the static website (its ``Stack`` widget, linked to the slider
in the browser). With ipywidgets 7, which Colab ships (7.7.1) and which has no ``Stack``, they
fall back to one picture that the running kernel swaps when the slider moves: the same figures,
the same sliders, but only where a kernel runs, which on Colab it always does.

Accessibility: every slider needs a ``description``, its visible label, which the website's
script (book/_ext/static/attnlab-widgets-a11y.js) also makes the slider's accessible name, since
the widget manager does not. Every picture carries an alternative text in its ``tooltip``: by
default a description read from the figure itself (the kind of each plot, its title, its axes).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import torch
import traitlets
from matplotlib.axes import Axes
from matplotlib.container import BarContainer
from matplotlib.figure import Figure

__all__ = ["figure_grid", "figure_slider", "plot_attention"]

Labels = Sequence[str] | str | None


def _as_matrix(weights: Any) -> np.ndarray:
    """Weights as a float64 NumPy matrix of shape (L, S), whatever array type came in."""
    if isinstance(weights, torch.Tensor):
        array = weights.detach().to("cpu", torch.float64).numpy()
    elif isinstance(weights, np.ndarray):
        array = weights
    elif isinstance(weights, (list, tuple)):
        array = np.asarray(weights)
    else:
        raise TypeError(
            "plot_attention: weights must be a torch.Tensor, a numpy.ndarray or a nested list, "
            f"got {type(weights).__name__}"
        )
    if array.dtype.kind not in "biuf":
        raise TypeError(f"plot_attention: weights must hold real numbers, got dtype {array.dtype}")
    if array.ndim != 2:
        raise ValueError(
            "plot_attention: weights must have shape (L, S) (queries x keys), got shape "
            f"{tuple(array.shape)}; select one example and head first, e.g. weights[0, h]"
        )
    if 0 in array.shape:
        raise ValueError(f"plot_attention: weights must not be empty, got shape {tuple(array.shape)}")
    return array.astype(np.float64)


def _as_labels(labels: Labels, expected: int, name: str, axis: str) -> list[str] | None:
    """Token labels as a list of strings; a plain string is split into its characters."""
    if labels is None:
        return None
    if isinstance(labels, str):
        labels = list(labels)
    elif not isinstance(labels, Sequence) or not all(isinstance(t, str) for t in labels):
        raise TypeError(f"plot_attention: {name} must be a string or a sequence of strings, got {labels!r}")
    if len(labels) != expected:
        raise ValueError(
            f"plot_attention: {name} has {len(labels)} labels, but weights has {expected} {axis} "
            f"(weights is (L, S): rows are queries, columns are keys)"
        )
    return list(labels)


def plot_attention(
    weights: Any,
    queries: Labels = None,
    keys: Labels = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    xlabel: str = "key",
    ylabel: str = "query",
    cmap: str = "viridis",
    vmin: float | None = 0.0,
    vmax: float | None = None,
    annotate: bool = False,
    colorbar: bool = True,
) -> Axes:
    """Draw attention weights as a heatmap with token labels on both axes.

    Defined in the chapter "Preliminaries". Row ``i`` shows how query ``i`` spreads its
    attention over the keys, so for a softmax over keys every row sums to one.

    Shapes:
        weights: ``(L, S)``: L queries (rows, y axis) by S keys (columns, x axis).
        queries: L labels; keys: S labels. A plain string stands for its characters, so
        ``keys="27/09/94"`` labels eight columns.

    Args:
        weights: a tensor (any device, any float dtype, gradients allowed), an ndarray or a
            nested list.
        queries, keys: token labels, or ``None`` for index numbers.
        ax: axes to draw into; a new figure is made when ``None``.
        title: the figure's title; state the finding, not just the content.
        xlabel, ylabel: axis titles.
        cmap: a Matplotlib colour map name.
        vmin, vmax: colour limits; ``vmin=0`` and ``vmax=None`` (the largest weight) by
            default, so that the lightest cell is the most attended one.
        annotate: write each weight (two decimals) into its cell; for small matrices.
        colorbar: add a colour bar labelled "weight".

    Returns:
        The Matplotlib axes that were drawn into.

    Raises:
        TypeError: weights is not an array of real numbers, or labels are not strings.
        ValueError: weights is not 2-D or is empty, or the label counts do not match its shape.
    """
    matrix = _as_matrix(weights)
    n_queries, n_keys = matrix.shape
    row_labels = _as_labels(queries, n_queries, "queries", "rows")
    col_labels = _as_labels(keys, n_keys, "keys", "columns")

    if ax is None:
        width = min(12.0, 2.0 + 0.35 * n_keys)
        height = min(10.0, 1.5 + 0.35 * n_queries)
        _, ax = plt.subplots(figsize=(max(width, 3.5), max(height, 2.5)), layout="constrained")
    image = ax.imshow(matrix, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")

    ax.set_xticks(range(n_keys), col_labels if col_labels is not None else [str(j) for j in range(n_keys)])
    ax.set_yticks(range(n_queries), row_labels if row_labels is not None else [str(i) for i in range(n_queries)])
    if col_labels is not None and max(len(t) for t in col_labels) > 2:
        ax.tick_params(axis="x", labelrotation=90)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title)

    if annotate:
        low, high = image.get_clim()
        threshold = (low + high) / 2
        for i in range(n_queries):
            for j in range(n_keys):
                value = matrix[i, j]
                colour = "black" if value > threshold else "white"
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", color=colour, fontsize=8)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, label="weight")
    return ax


def _png(figure: Figure, dpi: int) -> bytes:
    buffer = io.BytesIO()
    # Fixed metadata: the bytes depend on the picture alone, not on the date or the backend.
    figure.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    return buffer.getvalue()


def _plot_kind(ax: Axes) -> str:
    if ax.images:
        array = ax.images[0].get_array()
        return "image" if array is not None and array.ndim == 3 else "heatmap"  # RGB(A) or values
    if any(isinstance(c, BarContainer) for c in ax.containers):
        return "bar chart"
    if ax.lines:
        return "line plot"
    return "scatter plot" if ax.collections else "plot"


def _describe_axes(ax: Axes) -> str:
    x, y = ax.get_xlabel().strip(), ax.get_ylabel().strip()
    text = _plot_kind(ax)
    if y and x:
        text += f" of {y} against {x}"
    elif y or x:
        text += f" of {y}" if y else f" over {x}"
    if ax.get_title().strip():
        text += f", titled '{ax.get_title().strip()}'"
    return text


def _describe_figure(figure: Figure) -> str:
    """A short alternative text for a figure, read from the figure: the kind of each plot (a
    heatmap, an image, a bar chart, a line plot), its axis labels and its title, then the
    figure's own title and the label of its colour scale. Used for the pictures of
    ``figure_slider`` and ``figure_grid``; it says what the figure shows, never more.
    """
    # Colour bars are axes too (matplotlib labels them "<colorbar>"): a scale, not a plot.
    scales = [a for a in figure.axes if a.get_label() == "<colorbar>"]
    panels = [_describe_axes(a) for a in figure.axes if a not in scales]
    if not panels:
        text = "An empty figure"
    elif len(panels) == 1:
        text = panels[0][:1].upper() + panels[0][1:]
    else:
        text = f"{len(panels)} panels: " + "; ".join(f"({i}) {p}" for i, p in enumerate(panels, 1))
    # Figure.get_suptitle is matplotlib 3.8's; the package allows 3.7.
    title = getattr(figure, "_suptitle", None)
    suptitle = title.get_text().strip() if title else ""
    if suptitle:
        text = f"Figure '{suptitle}', {text[0].lower() + text[1:]}"
    labels = [(a.get_ylabel() or a.get_xlabel()).strip() for a in scales]
    if any(labels):
        text += "; colour scale: " + ", ".join(label for label in labels if label)
    return text + "."


def _alt_text(function: str, alt: str | Callable[..., str] | None, figure: Figure, args: tuple) -> str:
    """The alternative text of the picture that ``draw(*args)`` made: ``alt`` (a string, or a
    function of ``args``), else a description of its figure."""
    text = _describe_figure(figure) if alt is None else alt(*args) if callable(alt) else alt
    shown = ", ".join(repr(a) for a in args)
    if not isinstance(text, str):
        raise TypeError(f"{function}: alt must give a string for {shown}, got {type(text).__name__} {text!r}")
    if not text.strip():
        raise ValueError(f"{function}: alt must give a non-empty string for {shown}, got {text!r}")
    return text


class _Picture(widgets.Image):
    """An ``Image`` whose ``tooltip``, here its alternative text, reaches the browser.

    The widget manager of ipywidgets 8 (@jupyter-widgets/base 6) writes the tooltip as the
    element's ``title`` only when ``description`` is empty, and reads ``description.length`` to
    know, which an Image model does not have: a plain ``Image(tooltip=...)`` fails to render
    there (TypeError). A synced empty ``description`` gives that check a string.

    Its class is named ``Image``, as the widget it stands for: a chapter's output shows the
    widget's repr (cut at 110 characters), which nbval compares, and chapter 4.2's reaches the
    pictures' class name ("Stack(children=(Im…").
    """

    description = traitlets.Unicode("").tag(sync=True)


_Picture.__name__ = _Picture.__qualname__ = "Image"


def _check_description(function: str, name: str, text: Any) -> None:
    if not isinstance(text, str):
        raise TypeError(f"{function}: {name} must be a string, got {type(text).__name__}")
    if not text.strip():
        raise ValueError(
            f"{function}: {name} must name what the slider chooses (it is the slider's label, "
            f"and what a screen reader announces), got {text!r}"
        )


def _browser_links_available() -> bool:
    """Whether this ipywidgets has ``Stack`` (version 8 on), which a slider can select from in
    the browser. ipywidgets 7 (Colab's 7.7.1) has not."""
    return hasattr(widgets, "Stack")


def _picture_for(pictures: Callable[[], bytes], sliders: Sequence[widgets.Widget]) -> widgets.Image:
    """ipywidgets 7's stand-in for a Stack: one Image whose picture the kernel swaps.

    ``pictures()`` returns the PNG for the sliders' current positions; it is called again
    whenever one of ``sliders`` moves (through the running kernel, as ``interact`` does).
    """
    image = widgets.Image(value=pictures(), format="png")

    def show(_change: Any) -> None:
        image.value = pictures()

    for slider in sliders:
        slider.observe(show, names="index")
    return image


def figure_slider(
    draw: Callable[[Any], Figure],
    values: Sequence[Any],
    *,
    description: str,
    value: Any = None,
    dpi: int = 80,
    alt: str | Callable[[Any], str] | None = None,
) -> widgets.VBox:
    """A slider over ``values`` that shows the figure ``draw(v)`` for the chosen value.

    Defined in the chapter "Preliminaries". Every figure is drawn now, saved as a PNG and
    closed; the slider selects among them in the browser (``ipywidgets.jslink``), so the
    widget also works on the static website, where no kernel runs. Use it for a handful of
    values (a temperature, a head, a layer); use ``ipywidgets.interact`` when the reader should
    type arbitrary input. With ipywidgets 7 (Colab's), which has no ``Stack``, the slider
    swaps one picture through the running kernel instead (see the module's docstring).

    Args:
        draw: a function of one value that returns a Matplotlib figure.
        values: the values to offer, in slider order (at least one; shown with ``str``).
        description: the slider's label, required: it also names the slider for a screen
            reader (on the website; see the module's docstring).
        value: the value selected at first; the first one when ``None``.
        dpi: resolution of the rendered figures.
        alt: each picture's alternative text, a string or a function of the value; by default
            a description read from the figure (the kind of plot, its axes, its title).

    Returns:
        A ``VBox`` holding the slider and a ``Stack`` of ``Image`` widgets (ipywidgets 8), or
        the slider and one ``Image`` (ipywidgets 7, where an Image has no tooltip).

    Raises:
        TypeError: ``draw`` is not callable or does not return a figure, or ``description``
            is not a string.
        ValueError: ``values`` is empty, ``value`` is not one of them, ``description`` is
            empty, or ``alt`` gives an empty text.
    """
    if not callable(draw):
        raise TypeError(f"figure_slider: draw must be a function of one value, got {type(draw).__name__}")
    _check_description("figure_slider", "description", description)
    values = list(values)
    if not values:
        raise ValueError("figure_slider: values must hold at least one value, got none")
    if value is None:
        value = values[0]
    if value not in values:
        raise ValueError(f"figure_slider: value must be one of values {values}, got {value!r}")
    pictures, texts = [], []
    for v in values:
        figure = draw(v)
        if not isinstance(figure, Figure):
            raise TypeError(f"figure_slider: draw({v!r}) must return a matplotlib Figure, got {type(figure).__name__}")
        try:
            pictures.append(_png(figure, dpi))
            texts.append(_alt_text("figure_slider", alt, figure, (v,)))
        finally:
            plt.close(figure)
    slider = widgets.SelectionSlider(options=values, value=value, description=description, continuous_update=True)
    if not _browser_links_available():
        return widgets.VBox([slider, _picture_for(lambda: pictures[slider.index], [slider])])
    stack = widgets.Stack(
        [_Picture(value=p, format="png", tooltip=t) for p, t in zip(pictures, texts, strict=True)],
        selected_index=values.index(value),
    )
    widgets.jslink((slider, "index"), (stack, "selected_index"))
    return widgets.VBox([slider, stack])


def figure_grid(
    draw: Callable[[Any, Any], Figure],
    rows: Sequence[Any],
    cols: Sequence[Any],
    *,
    descriptions: tuple[str, str],
    value: tuple[Any, Any] | None = None,
    dpi: int = 80,
    alt: str | Callable[[Any, Any], str] | None = None,
) -> widgets.VBox:
    """Two sliders over a grid of figures ``draw(row, col)``, rendered in advance.

    Defined in chapter 5 (choose a head and a query token). Like ``figure_slider``, it works on
    the static website: the figures form a ``Stack`` (one per row) of ``Stack``s (one per
    column); the first slider is linked in the browser to the outer stack, the second to every
    inner stack. It draws ``len(rows) * len(cols)`` figures, so keep both short. With
    ipywidgets 7 (Colab's), the two sliders swap one picture through the running kernel.

    Args:
        draw: a function of ``(row, col)`` that returns a Matplotlib figure.
        rows, cols: the values offered by the first and the second slider.
        descriptions: the two sliders' labels, required (they name the sliders, as in
            ``figure_slider``).
        value: the ``(row, col)`` selected at first; the first of each when ``None``.
        dpi: resolution of the rendered figures.
        alt: each picture's alternative text, a string or a function of ``(row, col)``; by
            default a description read from the figure.

    Returns:
        ``VBox([HBox([row_slider, col_slider]), Stack of Stacks of Image])`` (ipywidgets 8), or
        ``VBox([HBox([row_slider, col_slider]), Image])`` (ipywidgets 7).

    Raises:
        TypeError: ``draw`` is not callable or does not return a figure, or a description is
            not a string.
        ValueError: ``rows`` or ``cols`` is empty, ``value`` is not in the grid, a description
            is empty, or ``alt`` gives an empty text.
    """
    if not callable(draw):
        raise TypeError(f"figure_grid: draw must be a function of (row, col), got {type(draw).__name__}")
    rows, cols = list(rows), list(cols)
    for name, values in (("rows", rows), ("cols", cols)):
        if not values:
            raise ValueError(f"figure_grid: {name} must hold at least one value, got none")
    if not (isinstance(descriptions, tuple) and len(descriptions) == 2):
        raise ValueError(f"figure_grid: descriptions must be a pair of strings, got {descriptions!r}")
    for i, text in enumerate(descriptions):
        _check_description("figure_grid", f"descriptions[{i}]", text)
    if value is None:
        value = (rows[0], cols[0])
    if not (isinstance(value, tuple) and len(value) == 2 and value[0] in rows and value[1] in cols):
        raise ValueError(
            f"figure_grid: value must be a pair (row, col) from rows {rows} and cols {cols}, got {value!r}"
        )
    # pictures[i][j] is draw(rows[i], cols[j]) as PNG bytes; texts[i][j] its alt text
    pictures: list[list[bytes]] = []
    texts: list[list[str]] = []
    for r in rows:
        pictures.append([])
        texts.append([])
        for c in cols:
            figure = draw(r, c)
            if not isinstance(figure, Figure):
                raise TypeError(
                    f"figure_grid: draw({r!r}, {c!r}) must return a matplotlib Figure, got {type(figure).__name__}"
                )
            try:
                pictures[-1].append(_png(figure, dpi))
                texts[-1].append(_alt_text("figure_grid", alt, figure, (r, c)))
            finally:
                plt.close(figure)
    row_slider = widgets.SelectionSlider(
        options=rows, value=value[0], description=descriptions[0], continuous_update=True
    )
    col_slider = widgets.SelectionSlider(
        options=cols, value=value[1], description=descriptions[1], continuous_update=True
    )
    sliders = widgets.HBox([row_slider, col_slider])
    if not _browser_links_available():
        image = _picture_for(lambda: pictures[row_slider.index][col_slider.index], [row_slider, col_slider])
        return widgets.VBox([sliders, image])
    inner = [
        widgets.Stack(
            [_Picture(value=p, format="png", tooltip=t) for p, t in zip(row, row_texts, strict=True)],
            selected_index=cols.index(value[1]),
        )
        for row, row_texts in zip(pictures, texts, strict=True)
    ]
    outer = widgets.Stack(inner, selected_index=rows.index(value[0]))
    widgets.jslink((row_slider, "index"), (outer, "selected_index"))
    for stack in inner:
        widgets.jslink((col_slider, "index"), (stack, "selected_index"))
    return widgets.VBox([sliders, outer])
