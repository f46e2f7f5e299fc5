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
    with pytest.raises(TypeError, match="weights must be a torch.Tensor, a numpy.ndarray or a nested list, got str"):
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
    wanted = {"source": ["IPY_MODEL_" + slider.model_id, "index"], "target": ["IPY_MODEL_" + stack.model_id, "selected_index"]}
    assert any(all(l[k] == v for k, v in wanted.items()) for l in links)
    assert plt.get_fignums() == []  # every rendered figure was closed


def test_figure_slider_is_deterministic():
    first = [bytes(i.value) for i in figure_slider(_bars, [1, 2]).children[1].children]
    second = [bytes(i.value) for i in figure_slider(_bars, [1, 2]).children[1].children]
    assert first == second


def test_figure_slider_errors_name_the_argument():
    with pytest.raises(TypeError, match="draw must be a function"):
        figure_slider("not callable", [1])
    with pytest.raises(ValueError, match="values must hold at least one value"):
        figure_slider(_bars, [])
    with pytest.raises(ValueError, match=r"value must be one of values \[1, 2\], got 5"):
        figure_slider(_bars, [1, 2], value=5)
    with pytest.raises(TypeError, match=r"draw\(1\) must return a matplotlib Figure, got Axes"):
        figure_slider(lambda v: plt.subplots()[1], [1])


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
    assert bytes(outer.children[0].children[1].value) == bytes(figure_grid(_bars2, [1], [0.5]).children[1].children[0].children[0].value)
    states = widgets.Widget.get_manager_state()["state"].values()
    links = [(s["state"]["source"], s["state"]["target"]) for s in states if s["model_name"] == "LinkModel"]
    assert (["IPY_MODEL_" + row_slider.model_id, "index"], ["IPY_MODEL_" + outer.model_id, "selected_index"]) in links
    for stack in outer.children:
        assert (["IPY_MODEL_" + col_slider.model_id, "index"], ["IPY_MODEL_" + stack.model_id, "selected_index"]) in links
    assert plt.get_fignums() == []


def test_figure_grid_errors_name_the_argument():
    with pytest.raises(TypeError, match="draw must be a function"):
        figure_grid(None, [1], [1])
    with pytest.raises(ValueError, match="cols must hold at least one value"):
        figure_grid(_bars2, [1], [])
    with pytest.raises(ValueError, match=r"value must be a pair \(row, col\)"):
        figure_grid(_bars2, [1], [0.5], value=(1, 0.9))
    with pytest.raises(TypeError, match=r"draw\(1, 0.5\) must return a matplotlib Figure, got NoneType"):
        figure_grid(lambda r, c: None, [1], [0.5])


# ipywidgets 7 (Colab ships 7.7.1) has no Stack: the sliders then swap one picture through the
# kernel. Removing Stack from ipywidgets here is what importing version 7 looks like to viz.py;
# tests/book/test_colab_env.py runs the same helpers under a real ipywidgets 7.


def test_figure_slider_without_stack_swaps_one_picture_through_the_kernel(monkeypatch):
    import ipywidgets as widgets

    reference = [bytes(i.value) for i in figure_slider(_bars, [1, 2, 3]).children[1].children]
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

    outer = figure_grid(_bars2, [1, 2], [0.2, 0.5, 0.8]).children[1]
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
