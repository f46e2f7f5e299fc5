"""Chapters are committed executed, in order, with their outputs, and follow the book's rules."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest
import yaml
from IPython.core.inputtransformer2 import TransformerManager

import attnlab

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
REPO_URL = CONFIG["repository"]["url"].rstrip("/")
MAX_LINE = 79  # wider lines overflow the code boxes of the website


def _code_cells(path: Path) -> list:
    nb = nbformat.read(path, as_version=4)
    return [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]


def _tags(cell) -> set[str]:
    return set(cell.metadata.get("tags", []))


def test_there_are_chapters():
    assert CHAPTERS, "no chapters in chapters/"


def test_toc_lists_exactly_the_chapters():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    entries = [ch for part in toc["parts"] for ch in part["chapters"]]
    entries += [section for ch in entries for section in ch.get("sections", [])]
    files = [entry["file"] for entry in entries]
    # A chapter in parts has a Markdown overview page (chapters/NN_*.md) with the parts as sections.
    listed = {f for f in files if f.startswith("chapters/") and not (ROOT / f).with_suffix(".md").exists()}
    on_disk = {f"chapters/{p.stem}" for p in CHAPTERS}
    assert listed == on_disk, f"in _toc.yml but not on disk: {listed - on_disk}; on disk only: {on_disk - listed}"
    for f in files:
        assert any((ROOT / f).with_suffix(s).exists() for s in (".md", ".ipynb")), f"_toc.yml names missing {f}"


def test_the_site_never_executes_and_never_allows_errors():
    assert CONFIG["execute"]["execute_notebooks"] == "off"
    text = (ROOT / "_config.yml").read_text(encoding="utf-8")
    assert "allow_errors" not in text


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_was_executed_top_to_bottom(path):
    cells = _code_cells(path)
    counts = [c.execution_count for c in cells]
    assert counts == list(range(1, len(cells) + 1)), (
        f"{path.name}: execution counts {counts} are not 1..{len(cells)}: run `make execute`"
    )
    assert sum(len(c.outputs) for c in cells) > 0, f"{path.name} has no stored outputs"
    for i, cell in enumerate(cells, 1):
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if errors and "raises-exception" not in _tags(cell):
            pytest.fail(f"{path.name}, cell [{i}]: stored error {errors[0].ename}: {errors[0].evalue}")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_starts_with_the_setup_cell(path):
    setup = _code_cells(path)[0].source
    assert '"google.colab" in sys.modules' in setup, "the setup cell must install on Colab only"
    install = re.search(r'%pip install -q "attnlab @ git\+(\S+?)"', setup)
    assert install, "the setup cell must pip-install attnlab from the repository on Colab"
    address = install.group(1).split("@v")[0]  # the release tag is checked by test_release.py
    assert address.rstrip("/") == REPO_URL, f"installs from {install.group(1)}, _config.yml says {REPO_URL}"
    for line in ("attnlab.set_seed(0)", "device = attnlab.get_device()", 'print("device:", device)'):
        assert line in setup, f"the setup cell lacks `{line}`"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_outputs_are_compared_not_hidden(path):
    for i, cell in enumerate(_code_cells(path), 1):
        tags = _tags(cell)
        assert "nbval-skip" not in tags, f"{path.name}, cell [{i}]: nbval-skip hides a cell from the tests"
        if "nbval-ignore-output" in tags:
            # Only for ipywidgets.interact, whose clear_output messages strict nbval cannot compare.
            assert "interact(" in cell.source, f"{path.name}, cell [{i}]: nbval-ignore-output on a non-widget cell"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_widget_state_is_saved_for_the_website(path):
    nb = nbformat.read(path, as_version=4)
    shows_widgets = any(
        "application/vnd.jupyter.widget-view+json" in o.get("data", {}) for c in _code_cells(path) for o in c.outputs
    )
    if shows_widgets:
        state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
        assert state.get("state"), f"{path.name} shows widgets but saved no widget state: run `make execute`"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_code_fits_the_page(path):
    long = [
        f"cell [{i}]: {len(line)} chars: {line[:60]}..."
        for i, cell in enumerate(_code_cells(path), 1)
        for line in cell.source.splitlines()
        if len(line) > MAX_LINE
    ]
    assert not long, f"{path.name} has code lines over {MAX_LINE} characters:\n" + "\n".join(long)


def _library_definitions() -> dict[str, str]:
    """Every function and class the package defines at the top of a module (public or private),
    with the module that defines it: ``{"MultiHeadAttention": "attnlab.attention.multihead", ...}``."""
    package = Path(attnlab.__file__).parent
    names = {}
    for module in sorted(package.rglob("*.py")):
        dotted = ".".join(("attnlab", *module.relative_to(package).with_suffix("").parts))
        for node in ast.parse(module.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.setdefault(node.name, dotted)
    return names


LIBRARY = _library_definitions()


def test_the_library_definitions_cover_the_package():
    """Not only the ten top-level names: submodules' classes, functions and internals count too."""
    assert LIBRARY["MultiHeadAttention"] == "attnlab.attention.multihead"
    assert LIBRARY["train_seq2seq"] == "attnlab.train.trainers"
    assert LIBRARY["_naive"] == "attnlab.attention.core"
    assert LIBRARY["check_int"] == "attnlab.validation"
    assert len(LIBRARY) > 150


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_does_not_redefine_library_code(path):
    for i, cell in enumerate(_code_cells(path), 1):
        source = TransformerManager().transform_cell(cell.source)  # %magics -> Python
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in LIBRARY:
                pytest.fail(f"{path.name}, cell [{i}] redefines {LIBRARY[node.name]}.{node.name}: import it instead")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_has_exercises_with_hidden_solutions(path):
    nb = nbformat.read(path, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    exercises = re.findall(r"^:::\{exercise\}\n:label: (\S+)", text, flags=re.M)
    assert len(exercises) >= 4, f"{path.name} has {len(exercises)} exercises; every chapter ends with at least 4"
    for label in exercises:
        solution = re.search(r"^:::\{solution(?:-start)?\} " + re.escape(label) + r"\n:class: dropdown", text, re.M)
        assert solution, f"{path.name}: exercise {label} has no solution hidden in a dropdown"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_has_an_executed_coding_solution(path):
    """At least one solution is code between solution-start and solution-end, run with the chapter."""
    nb = nbformat.read(path, as_version=4)
    inside, executed = False, 0
    for cell in nb.cells:
        if cell.cell_type == "markdown" and re.search(r"^:::\{solution-start\}", cell.source, re.M):
            inside = True
        if inside and cell.cell_type == "code" and cell.execution_count and cell.outputs is not None:
            executed += 1
        if cell.cell_type == "markdown" and re.search(r"^:::\{solution-end\}", cell.source, re.M):
            inside = False
    assert executed >= 1, f"{path.name}: no coding exercise whose solution runs with the chapter"


# --- prose numbers: a number computed in a chapter reaches its text through glue, never typed ---
# A number typed into Markdown is checked by nobody when the computation changes (a new CPU, a new
# seed, a new torch). The text is searched for decimals (0.934), percentages (98%) and ratios
# (124 times, 3x) outside math, code literals, glue and citations; each one found must be a
# constant of the text itself, listed here with the reason it cannot drift.
CONSTANTS = {
    ("01_bottleneck", "3.3"): "a section number of Sutskever et al. (2014), where reversing the source is explained",
    ("02_alignment", "8.4"): "a section number of Saitoh (2018), the book the lecture notes follow",
    ("02_alignment", "3.2"): "a section number of Bahdanau et al. (2015), where their encoder is bidirectional",
    ("04_soft_hard", "0.5"): "the probability of the expected context in Xu et al.'s trick, a hyperparameter",
    ("06_transformer", "3.4"): "a section number of Vaswani et al. (2017), where the embeddings' scaling is stated",
    ("06_transformer", "6.1"): "a section number of Vaswani et al. (2017), where the checkpoint averaging is stated",
    ("06_transformer", "99.5%"): "the performance appendix's bar, which test_benchmarks checks this sentence against",
    ("08_modern_attention", "18times"): "the lecture notes' count, quoted; the next cell counts it on the model",
    (
        "08_modern_attention",
        "15%",
    ): "BERT's masking rate (Devlin et al. 2019), the default of attnlab.train.mask_tokens",
    (
        "08_modern_attention",
        "80%",
    ): "BERT's share of masked positions replaced by the mask token, mask_tokens' constant",
    ("08_modern_attention", "10%"): "BERT's share replaced by a random token, mask_tokens' constant",
    ("01_bottleneck", "8.3"): "a section number of Saitoh (2018), where the date task evaluates attention",
    ("08_modern_attention", "0.2"): "a version number of Mistral 7B, the first without a sliding window",
    ("09_inference", "3.35"): "the H100's memory bandwidth in TB/s, from NVIDIA's datasheet, cited",
}
PROSE_NUMBER = re.compile(
    r"(?<![\w.,/-])\d+(?:\.\d+)+(?:\s?%)?(?![\w.]*\d)|(?<![\w.,/-])\d+\s?(?:%|x\b(?!\s?\d)|times\b)"
)
NOT_PROSE = re.compile(
    r"\$\$.*?\$\$|\$[^$\n]*\$|\{(?:glue|cite|ref|doc|numref|eq)[^}]*\}`[^`]*`|`[^`]*`|\]\([^)]*\)", re.S
)


def _prose_numbers(text: str) -> list[str]:
    """The numbers of ``text`` (Markdown) that look computed: decimals, percentages and ratios."""
    found = []
    for match in PROSE_NUMBER.finditer(NOT_PROSE.sub(" ", text)):
        token = re.sub(r"\s+", " ", match.group())
        if token.count(".") <= 1:  # 8.1.2 is a section number
            found.append(token)
    return found


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_numbers_in_the_text_are_glued(path):
    nb = nbformat.read(path, as_version=4)
    typed = [
        (token, cell.source[:60])
        for cell in nb.cells
        if cell.cell_type == "markdown"
        for token in _prose_numbers(cell.source)
        if (path.stem, token.replace(" ", "")) not in CONSTANTS
    ]
    assert not typed, (
        f"{path.name}: numbers typed into the text; glue them from the cell that computes "
        f"them (attnlab.glue), or list a true constant in CONSTANTS: {typed}"
    )


@pytest.mark.parametrize(
    "text, found",
    [
        ("exact match 0.934 against 0.947", ["0.934", "0.947"]),
        ("stalled at 38% after 90 steps, 124 times less, 3x faster", ["38%", "124 times", "3x"]),
        ("section 8.1.2 of the book; 45,000 pairs; 2017; 48 x 48 pixels", []),
        ("$p = 0.5$ and `lr=5e-3, eps=0.1` and {glue:text}`acc:.3f` and [v1.2](http://x/1.5)", []),
        ("{cite:t}`a2015` ({cite:p}`b`, 8.4)", ["8.4"]),
    ],
)
def test_prose_number_finder(text, found):
    assert _prose_numbers(text) == found
