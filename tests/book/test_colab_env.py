"""Colab's environment: the built wheel installed into Colab's package versions, then a chapter.

On Colab a chapter's setup cell pip-installs the book's package into an environment that already
has torch, numpy, matplotlib, ipywidgets 7.7.1 and tqdm. That install must change none of them
(an upgraded ipywidgets needs a runtime restart; a replaced torch loses Colab's CUDA build), and
the package must then work with those versions. Here, in a fresh virtual environment:

1. torch==2.13.0 first and alone (the build this machine has; Colab's own is listed in
   colab_versions.txt), then Colab's versions of everything else in that file;
2. the wheel built from this tree, installed with its declared dependencies (not --no-deps), and
   pip's list of installed packages compared before and after: attnlab is the only change;
3. in one kernel of that environment (ipykernel 6.17.1, Colab's), started from a folder outside
   the repository: every module of attnlab imported, chapters/00_preliminaries.ipynb executed,
   and the slider helpers driven under ipywidgets 7.

Marked `colab` (select with `-m colab`, skip with `-m "not colab"`); it runs in `make test`. It
needs PyPI, or a pip cache that already holds these versions. On a machine whose PyPI torch is a CUDA build (any Linux
without a local CPU wheel), point pip at PyTorch's CPU index first, as the CI workflow does
(PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.colab

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = ROOT / "chapters" / "00_preliminaries.ipynb"
COLAB_VERSIONS = Path(__file__).with_name("colab_versions.txt")
TORCH = "torch==2.13.0"  # the build on the book's machines; install it first and alone
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
KERNEL = "attnlab-colab-env"


def _env() -> dict[str, str]:
    """The caller's environment without what would leak the book's own environment in."""
    # PYTHONDONTWRITEBYTECODE too: torch is installed without .pyc files (--no-compile, below), so
    # that the first import compiles only what it uses; where the variable is set, every later
    # start compiled all of it again (import torch: 3.7 s, against 1.7 s from the written files).
    leaks = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE"}
    env = {k: v for k, v in os.environ.items() if k not in leaks}
    env.update(PYTHONNOUSERSITE="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PIP_PROGRESS_BAR="off")
    return env


def _run(command: list, *, env: dict[str, str] | None = None, timeout: int = 900, **kwargs) -> str:
    result = subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, timeout=timeout, env=env or _env(), **kwargs
    )
    assert result.returncode == 0, f"{' '.join(map(str, command))}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result.stdout


def _colab_pins() -> list[str]:
    lines = COLAB_VERSIONS.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _installed(python: Path) -> dict[str, str]:
    listing = json.loads(_run([python, "-m", "pip", "list", "--format=json"]))
    return {p["name"].lower().replace("_", "-"): p["version"] for p in listing}


class ColabEnv:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.venv = root / "venv"
        self.python = self.venv / "bin" / "python"
        self.before: dict[str, str] = {}
        self.after: dict[str, str] = {}


@pytest.fixture(scope="module")
def colab(tmp_path_factory) -> ColabEnv:
    env = ColabEnv(tmp_path_factory.mktemp("colab"))
    # The wheel, built from a copy of the tree (no build/ or egg-info left in the repository).
    source = env.root / "source"
    shutil.copytree(
        ROOT, source, ignore=shutil.ignore_patterns(".venv", "node_modules", "_build", ".git", "*.egg-info")
    )
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", env.root, source])
    (wheel,) = env.root.glob(f"attnlab-{VERSION}-*.whl")

    # A fresh environment, --without-pip: works also where the interpreter has no ensurepip
    # (Debian's python3 without python3-venv). Colab's packages are put in by this environment's
    # pip (the book's: it resolved them in 8.6 s here, Colab's pip in 11.9 s); Colab's own pip is
    # then put in too, and installs the wheel, as the setup cell's %pip does on Colab.
    _run([sys.executable, "-m", "venv", "--without-pip", env.venv])
    pins = _colab_pins()
    setup = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        env.python,
        "install",
        "-q",
        "--no-compile",
    ]  # no .pyc for torch's thousands of files
    _run([*setup, TORCH])  # first and alone
    others = [p for p in pins if not p.startswith(("torch==", "pip=="))]
    _run(setup + others)
    colab_pip = next(p for p in pins if p.startswith("pip=="))
    _run([*setup, colab_pip])
    pip = [env.python, "-m", "pip", "install", "-q", "--no-compile"]
    env.before = _installed(env.python)
    for pin in [TORCH, *others, colab_pip]:
        name, version = pin.split("==")
        got = env.before.get(name.lower().replace("_", "-"), "")
        assert got.split("+")[0] == version, f"{pin} did not install ({got or 'missing'})"  # 2.13.0+cpu is 2.13.0

    # What the setup cell does on Colab: install the package with its dependencies resolved.
    _run([*pip, wheel])
    env.after = _installed(env.python)
    return env


def test_installing_the_wheel_changes_none_of_colabs_packages(colab):
    assert colab.after.get("attnlab") == VERSION
    changed = {
        name: (colab.before.get(name), colab.after.get(name))
        for name in set(colab.before) | set(colab.after)
        if name != "attnlab" and colab.before.get(name) != colab.after.get(name)
    }
    assert not changed, f"installing the wheel changed Colab's packages (before, after): {changed}"


def test_pip_finds_no_broken_requirements(colab):
    _run([colab.python, "-m", "pip", "check"])


# What the kernel of the Colab environment runs before the chapter, in a fresh process: every module
# of the package imported (the chapter imports only some of them), but attnlab.grading, which runs
# where the assignments are graded (the `grading` extra: otter-grader), not on a reader's Colab,
# and attnlab.kernels.flash_triton, which imports Triton (the `triton` extra): Colab's Triton comes
# with its CUDA build of torch, and this environment has the CPU wheel in its place.
IMPORTS = textwrap.dedent("""
    import importlib, json, pkgutil
    import attnlab, ipywidgets, matplotlib, numpy, torch, tqdm

    names = [m.name for m in pkgutil.walk_packages(attnlab.__path__, "attnlab.")
             if not m.name.startswith("attnlab.grading") and m.name != "attnlab.kernels.flash_triton"]
    for name in names:
        importlib.import_module(name)
    print("IMPORTS", json.dumps({"modules": names, "file": attnlab.__file__, "version": attnlab.__version__,
                                 "ipywidgets": ipywidgets.__version__}))
""")

# ... and after it: the slider helpers driven under ipywidgets 7, which has no Stack (the sliders
# swap one picture through the kernel, see viz.py); then where the kernel's code came from.
SLIDERS = textwrap.dedent("""
    import traceback
    try:
        import ipywidgets as widgets
        import matplotlib.pyplot as plt
        import attnlab

        assert not hasattr(widgets, "Stack")

        def bars(h, w=0.8):
            fig, ax = plt.subplots(figsize=(2, 2))
            ax.bar([0], [h], width=w)
            return fig

        slider, image = attnlab.figure_slider(bars, [1, 2, 3], description="h", value=2).children
        assert isinstance(image, widgets.Image), type(image)
        seen = [bytes(image.value)]
        slider.value = 3
        seen.append(bytes(image.value))
        assert len(set(seen)) == 2, "the picture did not change with the slider"
        box = attnlab.figure_grid(bars, [1, 2], [0.2, 0.8], descriptions=("h", "w"), value=(1, 0.2))
        (rows, cols), image = box.children[0].children, box.children[1]
        first = bytes(image.value)
        cols.value = 0.8
        assert bytes(image.value) != first, "the picture did not change with the second slider"
        print("SLIDERS ok")
    except Exception:
        print("SLIDERS", traceback.format_exc().replace("\\n", " | "))
""")
KERNEL_INFO = (
    "import json, sys, attnlab, ipywidgets, torch\n"
    "print('KERNEL', json.dumps([sys.executable, attnlab.__file__, ipywidgets.__version__, torch.__version__]))"
)


@pytest.fixture(scope="module")
def colab_kernel(colab, tmp_path_factory) -> dict[str, str]:
    """One kernel of the Colab environment (started from a folder outside the repository) runs
    the imports, chapters/00_preliminaries.ipynb and the sliders, in that order: one kernel instead
    of three processes that each imported torch and matplotlib (25 s of the tests here, 13 s in one kernel).
    -> what each part printed after its tag (IMPORTS, SLIDERS, KERNEL), or the run's error."""
    root = tmp_path_factory.mktemp("colab-kernel")
    # A kernel of the Colab environment under a name of its own, so that no python3 kernel
    # installed elsewhere on the machine (user or system Jupyter paths) can be picked instead.
    kernels = root / "jupyter" / "kernels" / KERNEL
    kernels.mkdir(parents=True)
    spec = {
        "argv": [str(colab.python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Colab versions",
        "language": "python",
    }
    (kernels / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    env = _env()
    env.update(JUPYTER_PATH=str(root / "jupyter"), JUPYTER_PLATFORM_DIRS="1")

    workdir = root / "reader"
    workdir.mkdir()
    notebook = workdir / CHAPTER.name
    shutil.copy(CHAPTER, notebook)
    parts = root / "parts.json"
    parts.write_text(json.dumps({"imports": IMPORTS, "sliders": SLIDERS, "kernel": KERNEL_INFO}), encoding="utf-8")
    script = textwrap.dedent(f"""
        import json
        import nbformat
        from nbclient import NotebookClient

        parts = json.loads(open({str(parts)!r}, encoding="utf-8").read())
        nb = nbformat.read({str(notebook)!r}, as_version=4)
        nb.cells = ([nbformat.v4.new_code_cell(parts["imports"])] + nb.cells
                    + [nbformat.v4.new_code_cell(parts["sliders"]), nbformat.v4.new_code_cell(parts["kernel"])])
        # Raises CellExecutionError on any error that a cell does not expect (raises-exception tag).
        NotebookClient(nb, kernel_name={KERNEL!r}, timeout=600,
                       resources={{"metadata": {{"path": {str(workdir)!r}}}}}).execute()
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                  if o.output_type == "error" and "raises-exception" not in c.metadata.get("tags", [])]
        assert not errors, errors
        for cell in (nb.cells[0], nb.cells[-2], nb.cells[-1]):
            print("".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream"))
    """)
    result = subprocess.run(
        [str(colab.python), "-c", script], capture_output=True, text=True, timeout=900, env=env, cwd=workdir
    )
    printed = {}
    for line in result.stdout.splitlines():
        tag, _, rest = line.partition(" ")
        if tag in ("IMPORTS", "SLIDERS", "KERNEL"):
            printed[tag] = rest
    printed["error"] = "" if result.returncode == 0 else (result.stdout[-3000:] + result.stderr[-4000:])
    return printed


def _part(colab_kernel: dict[str, str], tag: str) -> str:
    assert not colab_kernel["error"], f"the Colab kernel's run failed:\n{colab_kernel['error']}"
    assert tag in colab_kernel, f"the Colab kernel printed no {tag} line: {colab_kernel}"
    return colab_kernel[tag]


def test_every_module_imports_with_colabs_versions(colab, colab_kernel):
    out = json.loads(_part(colab_kernel, "IMPORTS"))
    assert out["file"].startswith(str(colab.venv)), f"attnlab came from {out['file']}, not the wheel"
    assert out["version"] == VERSION and out["ipywidgets"] == "7.7.1"
    expected = {
        "attnlab." + ".".join(p.relative_to(ROOT / "src" / "attnlab").with_suffix("").parts)
        for p in (ROOT / "src" / "attnlab").rglob("*.py")
        if p.name != "__init__.py" and "grading" not in p.parts and p.name != "flash_triton.py"
    }
    assert expected <= set(out["modules"]), f"not imported: {sorted(expected - set(out['modules']))}"


def test_the_sliders_work_with_ipywidgets_7(colab_kernel):
    assert _part(colab_kernel, "SLIDERS") == "ok", _part(colab_kernel, "SLIDERS")


def test_a_chapter_runs_with_colabs_versions(colab, colab_kernel):
    executable, attnlab_file, ipywidgets_version, torch_version = json.loads(_part(colab_kernel, "KERNEL"))
    assert executable.startswith(str(colab.venv)), f"the kernel ran {executable}, not the Colab environment"
    assert attnlab_file.startswith(str(colab.venv)), f"the chapter imported attnlab from {attnlab_file}"
    assert (ipywidgets_version, torch_version.split("+")[0]) == ("7.7.1", TORCH.split("==")[1])
