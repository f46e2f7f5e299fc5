"""attnlab.glue writes what MyST-NB's glue writes, without needing MyST-NB (absent on Colab)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnlab
from attnlab import prose


def _captured(monkeypatch, fn, *args, **kwargs) -> list[tuple]:
    calls = []
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: calls.append((a, k)))
    fn(*args, **kwargs)
    return calls


@pytest.mark.parametrize("display", [False, True])
@pytest.mark.parametrize("value", [0.5286, 3, "text"])
def test_glue_emits_myst_nbs_message(monkeypatch, value, display):
    myst_nb = pytest.importorskip("myst_nb.ext.glue")
    theirs = _captured(monkeypatch, myst_nb.glue, "name", value, display=display)
    monkeypatch.setattr(myst_nb, "ipy_display", lambda *a, **k: theirs.append((a, k)))
    myst_nb.glue("name", value, display=display)
    ours = _captured(monkeypatch, attnlab.glue, "name", value, display=display)
    assert ours == theirs[-1:], (ours, theirs)


def test_glued_numbers_are_python_numbers_that_the_text_can_format(monkeypatch):
    for value in (np.float64(0.5286), torch.tensor(0.5286, dtype=torch.float64)):
        ((bundle,), kwargs) = _captured(monkeypatch, attnlab.glue, "acc", value)[0]
        text = bundle[prose.GLUE_PREFIX + "text/plain"]
        assert text == "0.5286", text  # not "np.float64(0.5286)" or "tensor(0.5286, ...)"
        assert format(float(text), ".3f") == "0.529"
        assert kwargs["metadata"]["scrapbook"] == {"name": "acc", "mime_prefix": prose.GLUE_PREFIX}


@pytest.mark.parametrize("name", ["", None, 3])
def test_glue_rejects_a_bad_name(name):
    with pytest.raises(TypeError, match="glue: name must be a non-empty string"):
        attnlab.glue(name, 1.0)
