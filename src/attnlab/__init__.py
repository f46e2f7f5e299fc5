"""attnlab: the shared code of the attnlab textbook on attention mechanisms.

Chapters import from here instead of redefining library code. Each public object says in
its docstring which chapter introduces it.
"""

from typing import TYPE_CHECKING

# First: before anything imports Triton (torch.utils.flop_counter does), attnlab.kernels chooses
# Triton's interpreter on a machine without a CUDA GPU (see that module).
import attnlab.kernels  # noqa: F401

# Subpackages and modules a chapter imports by name (attnlab.data, ...): public, so in __all__.
from attnlab import data, models, train
from attnlab.attention.masking import causal_mask, from_key_padding_mask, masked_softmax, padding_mask
from attnlab.listings import listing
from attnlab.prose import glue
from attnlab.shapes import check_shape
from attnlab.utils import get_device, set_seed

if TYPE_CHECKING:  # imported on first use (below): matplotlib and ipywidgets take a second to import
    from attnlab.viz import figure_grid, figure_slider, plot_attention

__all__ = [
    "causal_mask",
    "check_shape",
    "data",
    "figure_grid",
    "figure_slider",
    "from_key_padding_mask",
    "get_device",
    "glue",
    "listing",
    "masked_softmax",
    "models",
    "padding_mask",
    "plot_attention",
    "set_seed",
    "train",
]


_PLOTTING = ("figure_grid", "figure_slider", "plot_attention")  # from attnlab.viz


def __getattr__(name: str):
    """The plotting helpers, imported when first asked for: code that never plots (the graders,
    a training script) does not pay for importing matplotlib and ipywidgets."""
    if name in _PLOTTING:
        from attnlab import viz

        globals()[name] = value = getattr(viz, name)
        return value
    raise AttributeError(f"module 'attnlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PLOTTING))


def _installed_version() -> str:
    """The version in pyproject.toml, the one place it is written, as installed by pip."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attnlab")
    except PackageNotFoundError:  # imported from a source tree that pip never installed
        return "0+unknown"


__version__ = _installed_version()
