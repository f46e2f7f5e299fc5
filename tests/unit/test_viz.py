"""The attention heatmap helper."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from attnlab import figure_grid, figure_slider, plot_attention


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_heatmap_shows_the_weights_and_the_labels():
    weights = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]], requires_grad=True)
    ax = plot_attention(weights, queries=["I", "am"], keys=["je", "suis", "."], title="t")
    image = ax.get_images()[0]
    np.testing.assert_allclose(image.get_array(), weights.detach().numpy(), rtol=1e-6)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["je", "suis", "."]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["I", "am"]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("key", "query", "t")
    assert len(ax.figure.axes) == 2  # the heatmap and its colour bar


def test_a_string_labels_each_character():
    ax = plot_attention(np.full((3, 4), 0.25), queries="abc", keys="wxyz", colorbar=False)
    assert [t.get_text() for t in ax.get_xticklabels()] == list("wxyz")
    assert len(ax.figure.axes) == 1


def test_annotate_writes_every_weight():
    ax = plot_attention([[0.25, 0.75], [1.0, 0.0]], annotate=True)
    assert sorted(t.get_text() for t in ax.texts) == ["0.00", "0.25", "0.75", "1.00"]


def test_draws_into_given_axes():
    _, axes = plt.subplots(1, 2)
    out = plot_attention(np.eye(2), ax=axes[1])
    assert out is axes[1]
    assert axes[1].get_images() and not axes[0].get_images()


def test_bad_shapes_are_explained():
    with pytest.raises(ValueError, match=r"weights must have shape \(L, S\).*got shape \(1, 2, 3\); select one"):
        plot_attention(torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match="must not be empty"):
        plot_attention(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="keys has 2 labels, but weights has 3 columns"):
        plot_attention(np.zeros((2, 3)), keys=["a", "b"])
    with pytest.raises(ValueError, match="queries has 3 labels, but weights has 2 rows"):
        plot_attention(np.zeros((2, 3)), queries="abc")


def test_bad_types_are_explained():
    with pytest.raises(TypeError, match=r"weights must be a torch\.Tensor, a numpy\.ndarray or a nested list, got str"):
        plot_attention("weights")
    with pytest.raises(TypeError, match="must hold real numbers"):
        plot_attention(np.array([["a", "b"]]))
    with pytest.raises(TypeError, match="keys must be a string or a sequence of strings"):
        plot_attention(np.zeros((1, 2)), keys=[1, 2])


def _bars(height):
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.bar([0], [height])
    return fig


def test_figure_slider_renders_one_picture_per_value_and_links_them():
    import ipywidgets as widgets

    box = figure_slider(_bars, [1, 2, 3], description="h", value=2)
    slider, stack = box.children
    assert isinstance(slider, widgets.SelectionSlider) and isinstance(stack, widgets.Stack)
    assert list(slider.options) == [1, 2, 3] and slider.value == 2 and slider.description == "h"
    assert stack.selected_index == 1
    pictures = [bytes(image.value) for image in stack.children]
    assert all(p.startswith(b"\x89PNG") for p in pictures)
    assert len(set(pictures)) == 3  # different values, different pictures
    # The link lives in the browser: look for it in the state that is embedded into the web page.
    states = widgets.Widget.get_manager_state()["state"].values()
    links = [s["state"] for s in states if s["model_name"] == "LinkModel"]
    wanted = {
        "source": ["IPY_MODEL_" + slider.model_id, "index"],
        "target": ["IPY_MODEL_" + stack.model_id, "selected_index"],
    }
    assert any(all(link[k] == v for k, v in wanted.items()) for link in links)
    assert plt.get_fignums() == []  # every rendered figure was closed


def test_figure_slider_is_deterministic():
    first = [bytes(i.value) for i in figure_slider(_bars, [1, 2], description="h").children[1].children]
    second = [bytes(i.value) for i in figure_slider(_bars, [1, 2], description="h").children[1].children]
    assert first == second


def test_figure_slider_errors_name_the_argument():
    with pytest.raises(TypeError, match="draw must be a function"):
        figure_slider("not callable", [1], description="h")
    with pytest.raises(ValueError, match="values must hold at least one value"):
        figure_slider(_bars, [], description="h")
    with pytest.raises(ValueError, match=r"value must be one of values \[1, 2\], got 5"):
        figure_slider(_bars, [1, 2], description="h", value=5)
    with pytest.raises(TypeError, match=r"draw\(1\) must return a matplotlib Figure, got Axes"):
        figure_slider(lambda v: plt.subplots()[1], [1], description="h")


def _bars2(height, width):
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.bar([0], [height], width=width)
    return fig


def test_figure_grid_links_two_sliders_to_nested_stacks():
    import ipywidgets as widgets

    box = figure_grid(_bars2, [1, 2], [0.2, 0.5, 0.8], descriptions=("h", "w"), value=(2, 0.8))
    (row_slider, col_slider), outer = box.children[0].children, box.children[1]
    assert list(row_slider.options) == [1, 2] and row_slider.value == 2 and row_slider.description == "h"
    assert list(col_slider.options) == [0.2, 0.5, 0.8] and col_slider.value == 0.8
    assert outer.selected_index == 1 and len(outer.children) == 2
    assert all(isinstance(s, widgets.Stack) and s.selected_index == 2 for s in outer.children)
    pictures = [bytes(i.value) for s in outer.children for i in s.children]
    assert len(pictures) == 6 and len(set(pictures)) == 6
    # outer stack i, inner picture j is draw(rows[i], cols[j])
    assert bytes(outer.children[0].children[1].value) == bytes(
        figure_grid(_bars2, [1], [0.5], descriptions=("h", "w")).children[1].children[0].children[0].value
    )
    states = widgets.Widget.get_manager_state()["state"].values()
    links = [(s["state"]["source"], s["state"]["target"]) for s in states if s["model_name"] == "LinkModel"]
    assert (["IPY_MODEL_" + row_slider.model_id, "index"], ["IPY_MODEL_" + outer.model_id, "selected_index"]) in links
    for stack in outer.children:
        assert (
            ["IPY_MODEL_" + col_slider.model_id, "index"],
            ["IPY_MODEL_" + stack.model_id, "selected_index"],
        ) in links
    assert plt.get_fignums() == []


def test_figure_grid_errors_name_the_argument():
    with pytest.raises(TypeError, match="draw must be a function"):
        figure_grid(None, [1], [1], descriptions=("h", "w"))
    with pytest.raises(ValueError, match="cols must hold at least one value"):
        figure_grid(_bars2, [1], [], descriptions=("h", "w"))
    with pytest.raises(ValueError, match=r"value must be a pair \(row, col\)"):
        figure_grid(_bars2, [1], [0.5], descriptions=("h", "w"), value=(1, 0.9))
    with pytest.raises(TypeError, match=r"draw\(1, 0.5\) must return a matplotlib Figure, got NoneType"):
        figure_grid(lambda r, c: None, [1], [0.5], descriptions=("h", "w"))


# ipywidgets 7 (Colab ships 7.7.1) has no Stack: the sliders then swap one picture through the
# kernel. Removing Stack from ipywidgets here is what importing version 7 looks like to viz.py;
# tests/book/test_colab_env.py runs the same helpers under a real ipywidgets 7.


def test_figure_slider_without_stack_swaps_one_picture_through_the_kernel(monkeypatch):
    import ipywidgets as widgets

    reference = [bytes(i.value) for i in figure_slider(_bars, [1, 2, 3], description="h").children[1].children]
    monkeypatch.delattr(widgets, "Stack")
    box = figure_slider(_bars, [1, 2, 3], description="h", value=2)
    slider, image = box.children
    assert isinstance(slider, widgets.SelectionSlider) and isinstance(image, widgets.Image)
    assert slider.value == 2 and bytes(image.value) == reference[1]
    slider.value = 3
    assert bytes(image.value) == reference[2]
    slider.value = 1
    assert bytes(image.value) == reference[0]
    assert plt.get_fignums() == []


def test_figure_grid_without_stack_swaps_one_picture_through_the_kernel(monkeypatch):
    import ipywidgets as widgets

    outer = figure_grid(_bars2, [1, 2], [0.2, 0.5, 0.8], descriptions=("h", "w")).children[1]
    reference = [[bytes(i.value) for i in inner.children] for inner in outer.children]
    monkeypatch.delattr(widgets, "Stack")
    box = figure_grid(_bars2, [1, 2], [0.2, 0.5, 0.8], descriptions=("h", "w"), value=(2, 0.8))
    (row_slider, col_slider), image = box.children[0].children, box.children[1]
    assert isinstance(image, widgets.Image) and bytes(image.value) == reference[1][2]
    col_slider.value = 0.2
    assert bytes(image.value) == reference[1][0]
    row_slider.value = 1
    assert bytes(image.value) == reference[0][0]
    col_slider.value = 0.5
    assert bytes(image.value) == reference[0][1]
    assert plt.get_fignums() == []


# Accessibility: every slider is named, every picture carries an alternative text (tooltip).


def test_sliders_must_be_named():
    with pytest.raises(TypeError, match="description"):
        figure_slider(_bars, [1, 2])  # no description at all
    with pytest.raises(ValueError, match=r"figure_slider: description must name what the slider chooses.*got ' '"):
        figure_slider(_bars, [1, 2], description=" ")
    with pytest.raises(TypeError, match="figure_slider: description must be a string, got NoneType"):
        figure_slider(_bars, [1, 2], description=None)
    with pytest.raises(TypeError, match="descriptions"):
        figure_grid(_bars2, [1], [0.5])
    with pytest.raises(ValueError, match=r"figure_grid: descriptions\[1\] must name what the slider chooses"):
        figure_grid(_bars2, [1], [0.5], descriptions=("h", ""))


def _titled_bars(height):
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.bar([0], [height])
    ax.set_xlabel("key")
    ax.set_ylabel("weight")
    ax.set_title(f"height {height}")
    return fig


def test_each_picture_is_described_from_its_figure():
    pictures = figure_slider(_titled_bars, [1, 2], description="h").children[1].children
    assert [p.tooltip for p in pictures] == [
        "Bar chart of weight against key, titled 'height 1'.",
        "Bar chart of weight against key, titled 'height 2'.",
    ]
    # The state the web page embeds: the tooltip, and the empty description without which
    # ipywidgets 8's front end throws on an Image that has a tooltip (see viz._Picture).
    state = pictures[0].get_state()
    assert state["tooltip"] == pictures[0].tooltip and state["description"] == ""
    assert state["_model_name"] == "ImageModel"
    # The repr, which the chapters' outputs show and nbval compares, names an Image as before.
    assert repr(pictures[0]).startswith("Image(")


def test_described_figures_name_their_kind_panels_and_colour_scale():
    def heatmap(_):
        fig, ax = plt.subplots(figsize=(3, 3))
        plot_attention(torch.softmax(torch.randn(3, 4), -1), "abc", "wxyz", ax=ax, title="one head")
        return fig

    def panels(_):
        fig, (left, right) = plt.subplots(1, 2, figsize=(4, 2))
        left.plot([0, 1], [1, 0])
        left.set_xlabel("step")
        right.imshow(np.zeros((4, 4, 3)))
        right.set_title("scene")
        fig.suptitle("Two views")
        return fig

    assert figure_slider(heatmap, [0], description="h").children[1].children[0].tooltip == (
        "Heatmap of query against key, titled 'one head'; colour scale: weight."
    )
    assert figure_slider(panels, [0], description="h").children[1].children[0].tooltip == (
        "Figure 'Two views', 2 panels: (1) line plot over step; (2) image, titled 'scene'."
    )


def test_alt_text_can_be_given():
    pictures = (
        figure_slider(_bars, [1, 2], description="h", alt=lambda v: f"one bar of height {v}").children[1].children
    )
    assert [p.tooltip for p in pictures] == ["one bar of height 1", "one bar of height 2"]
    outer = figure_grid(_bars2, [1, 2], [0.2], descriptions=("h", "w"), alt=lambda r, c: f"{r} by {c}").children[1]
    assert [s.children[0].tooltip for s in outer.children] == ["1 by 0.2", "2 by 0.2"]
    assert (
        figure_grid(_bars2, [1], [0.2], descriptions=("h", "w"), alt="a bar")
        .children[1]
        .children[0]
        .children[0]
        .tooltip
        == "a bar"
    )
    with pytest.raises(ValueError, match=r"figure_slider: alt must give a non-empty string for 2, got ''"):
        figure_slider(_bars, [1, 2], description="h", alt=lambda v: "" if v == 2 else "bar")
    assert plt.get_fignums() == []  # closed even when the alt text is refused
    with pytest.raises(TypeError, match=r"figure_slider: alt must give a string for 1, got int 3"):
        figure_slider(_bars, [1, 2], description="h", alt=lambda v: 3)
    assert plt.get_fignums() == []


def test_importing_the_package_leaves_the_plotting_libraries_until_a_plot_is_asked_for():
    """Code that never plots (the assignments' graders, a training script) does not pay for
    importing matplotlib and ipywidgets (about a second): ``attnlab.figure_slider`` and the other
    plotting names are imported on first use, and are still listed and importable."""
    import subprocess
    import sys

    code = """
import sys
import attnlab, attnlab.data, attnlab.models, attnlab.train
loaded = sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'ipywidgets', 'IPython'})
print(loaded)
assert {'figure_grid', 'figure_slider', 'plot_attention'} <= set(dir(attnlab)) & set(attnlab.__all__)
from attnlab import plot_attention
assert plot_attention is attnlab.viz.plot_attention and attnlab.figure_grid is attnlab.viz.figure_grid
try:
    attnlab.no_such_name
except AttributeError as error:
    assert "no attribute 'no_such_name'" in str(error), error
else:
    raise AssertionError("attnlab.no_such_name did not raise AttributeError")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", f"import attnlab imported {done.stdout.strip()}"
