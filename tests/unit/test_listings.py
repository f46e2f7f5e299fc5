"""Listings: every chapter's listing resolves to marked code, and the helper refuses what it should."""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import io
import pkgutil
import sys
from pathlib import Path

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

import attnlab
from attnlab import listing
from attnlab.listings import regions

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))


def _chapter_listings(path: Path) -> list[str]:
    """The code cells of a chapter that print a listing (they do nothing else)."""
    cells = nbformat.read(path, as_version=4).cells
    return [c.source for c in cells if c.cell_type == "code" and "listing(" in c.source]


def _namespace(path: Path) -> dict:
    """The names a chapter's setup cell imports (its import statements, run on their own)."""
    first = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
    tree = ast.parse(TransformerManager().transform_cell(first.source))
    namespace: dict = {}
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    exec(compile(ast.Module(body=imports, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


def test_chapters_show_code_through_the_helper():
    calls = sum(source.count("listing(") for path in CHAPTERS for source in _chapter_listings(path))
    assert calls >= 15, "the chapters' listings were not found"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_listing_of_the_chapter_resolves(path):
    """Run each listing cell after the chapter's imports: a listing that lost its code raises."""
    namespace = _namespace(path)
    for source in _chapter_listings(path):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(TransformerManager().transform_cell(source), namespace)
        assert printed.getvalue().strip(), f"{path.name}: a listing cell prints nothing:\n{source}"
        assert "# listing:" not in printed.getvalue() and "# end listing:" not in printed.getvalue()


def test_no_chapter_uses_text_positions_or_private_imports():
    for path in CHAPTERS:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                assert "getsource" not in cell.source, f"{path.name}: print code with attnlab.listing"
                for line in cell.source.splitlines():
                    if line.startswith(("from attnlab", "import attnlab")):
                        names = line.split(" import ", 1)[-1]
                        assert not any(n.strip().startswith("_") for n in names.split(",")), (
                            f"{path.name} imports a private name: {line}"
                        )


def test_every_marked_region_in_the_package_is_well_formed():
    """Each module's markers pair up and each name is marked once per module (regions() raises otherwise)."""
    package = Path(attnlab.__file__).parent
    marked = 0
    for info in pkgutil.walk_packages([str(package)], prefix="attnlab."):
        module = importlib.import_module(info.name)
        source = Path(module.__file__).read_text(encoding="utf-8")
        if "# listing:" in source:
            marked += len(regions(source))
    assert marked >= 15


def test_a_region_is_the_code_between_its_markers():
    source = (
        "def f():\n    a = 1\n    # listing: core\n    b = 2\n    # listing: inner\n    c = 3\n"
        "    # end listing: inner\n    # end listing: core\n    return a\n"
    )
    found = regions(source)
    assert found == {"core": "    b = 2\n    c = 3\n", "inner": "    c = 3\n"}


def test_a_region_leaves_out_blank_lines_before_its_end_marker():
    source = "def f():\n    # listing: g\n    def g():\n        return 1\n\n    # end listing: g\n    return g\n"
    assert regions(source) == {"g": "    def g():\n        return 1\n"}


@pytest.mark.parametrize(
    "source, message",
    [
        ("# listing: a\nx = 1\n", "never ended"),
        ("x = 1\n# end listing: a\n", "without"),
        ("# listing: a\n# end listing: a\n# listing: a\n# end listing: a\n", "marked twice"),
    ],
)
def test_malformed_markers_are_refused(source, message):
    with pytest.raises(ValueError, match=message):
        regions(source)


def test_the_helper_names_what_is_wrong():
    with pytest.raises(
        ValueError, match="no region 'nothing' is marked in the source of masked_softmax; marked: \\['mask'\\]"
    ):
        listing(attnlab.masked_softmax, "nothing")
    with pytest.raises(ValueError, match="names nothing"):
        listing("attnlab.train._no_such_loop")
    with pytest.raises(ValueError, match=r"must start with 'attnlab\.'"):
        listing("torch.nn.functional.softmax")
    with pytest.raises(TypeError, match="part must be a region name"):
        listing(attnlab.masked_softmax, 3)
    with pytest.raises(TypeError, match="with Python source, got int"):
        listing(3)


def test_a_whole_object_is_shown_without_its_markers():
    whole = listing(attnlab.masked_softmax)
    assert whole.startswith("def masked_softmax(") and "# listing" not in whole
    assert listing(attnlab.masked_softmax, "mask") in whole
    assert listing("attnlab.train._train_loop", "step").lstrip().startswith("loss = loss_of(")


def test_a_listing_prints_where_its_module_lacks_an_optional_dependency(monkeypatch):
    # Triton has no build for macOS: the kernel's listing is then read from the file, not imported.
    path = "attnlab.kernels.flash_triton.flash_forward_kernel"
    if importlib.util.find_spec("triton") is not None:
        expected = listing(path, "forward")
        assert expected.lstrip().startswith("n = tl.program_id(0)")
    else:  # pragma: no cover
        expected = None
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton now raises ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "attnlab.kernels.flash_triton", raising=False)
    read = listing(path, "forward")
    assert "tl.dot(q, tl.trans(k)" in read and "# listing:" not in read
    if expected is not None:
        assert read == expected
    with pytest.raises(ValueError, match="names nothing in the package"):
        listing("attnlab.kernels.flash_triton.no_such_kernel")
