"""Numbers in a chapter's text come from its code: ``glue`` a computed value, cite it in Markdown.

Used by the chapters whose text quotes a computed number (chapter 4 first). A chapter computes a number
in a code cell and calls ``glue("name", value)``; its Markdown then writes
``{glue:text}`name:.3f``` where the number belongs, and the website shows the value stored with
the executed notebook. Re-executing a chapter therefore updates its prose together with its
outputs: no number in the text is typed by hand.

This is MyST-NB's ``glue`` (Jupyter Book's mechanism), written out so that a chapter does not
need MyST-NB to run (it is not installed on Colab): the same display message, with the value's
representations under the ``application/papermill.record/`` prefix that MyST-NB reads.
"""

from __future__ import annotations

from typing import Any

__all__ = ["glue"]

GLUE_PREFIX = "application/papermill.record/"


def glue(name: str, value: Any, display: bool = False) -> None:
    """Store ``value`` under ``name`` in the cell's output, for ``{glue:text}`name``` in the text.

    Used from chapter 4 on. Numbers are stored as Python numbers (a NumPy or
    0-d torch scalar is converted), so that the text can format them (``{glue:text}`acc:.3f```).

    Args:
        name: the key the Markdown uses; unique within the chapter.
        value: the value; its plain-text form is what the text shows.
        display: also show the value in the cell's output (hidden by default).

    Raises:
        TypeError: ``name`` is not a non-empty string.
    """
    from IPython.core.formatters import format_display_data
    from IPython.display import display as ipy_display

    if not isinstance(name, str) or not name:
        raise TypeError(f"glue: name must be a non-empty string, got {name!r}")
    if hasattr(value, "item") and getattr(value, "shape", None) == ():  # NumPy / torch scalars
        value = value.item()
    bundle, metadata = format_display_data(value)
    prefix = "" if display else GLUE_PREFIX
    metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
    ipy_display({prefix + key: data for key, data in bundle.items()}, raw=True, metadata=metadata)
