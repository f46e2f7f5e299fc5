"""Build the assignments: ``make assignments`` (or ``python assignments/build.py [OUT]``).

For every source notebook ``assignments/aN_*.ipynb`` (solutions and hidden tests marked in
otter-grader's format), ``otter assign`` writes, under ``OUT/<name>/`` (default
``_build/assignments``):

- ``student/``: the notebook students get (solutions replaced by ``...``, outputs cleared) and
  its public tests in ``tests/``, zipped as ``<name>-student.zip`` to hand out (it unpacks into
  one folder, ``<name>/``);
- ``autograder/``: the solution notebook, every test (public and hidden) and
  ``<name>-autograder.zip``, which ``otter run`` (or Gradescope) grades submissions with.

``otter assign`` runs the solution notebook against all its tests first and stops if any fails.

With ``--publish``, each student version (its notebook and public tests, as in the zip) is also
copied to ``assignments/public/<name>/``, which is committed: on Colab, a student opens the
notebook from there, and its setup cell fetches the public tests from there, at the release tag
(tests/assignments/test_grading.py fails if the committed copies are older than the sources).

The grading environment (the autograder zip's ``environment.yml``, which Gradescope and ``otter
grade`` build): Python 3.11, otter-grader itself (``overwrite_requirements: false``), the CPU build
of torch pinned in ``requirements.txt``, and the book's package from a wheel built here and shipped
inside the zip (``files/dist/``): no git and no network at grading time beyond the package registries.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_OUT = ROOT / "_build" / "assignments"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
# Where Gradescope (and `otter grade`'s image) unpack the autograder zip: its files/ land here.
GRADER_FILES = "/autograder/source/files"
# The committed student versions (``--publish``), which Colab opens at the release tag.
PUBLIC = HERE / "public"


def sources() -> list[Path]:
    return sorted(HERE.glob("a[0-9]_*.ipynb"))


def otter() -> str:
    exe = Path(sys.executable).parent / "otter"
    return str(exe) if exe.exists() else "otter"


def workers() -> tuple[int, dict[str, str]]:
    """How many otter processes to run at once (one per core), and the environment for each: one
    kernel thread per process, so that they share the cores instead of fighting over them."""
    return max(1, os.cpu_count() or 1), {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def build_wheel(out: Path) -> Path:
    """The book's package as a wheel, into ``out/dist/`` (built from a copy of src/ and
    pyproject.toml, so that building leaves nothing behind in the repository)."""
    source = out / "wheel-source"
    if source.exists():
        shutil.rmtree(source)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    dist = out / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(source)],
        capture_output=True,
        text=True,
    )
    shutil.rmtree(source)
    if done.returncode != 0:
        raise RuntimeError(f"building the attnlab wheel failed:\n{done.stderr[-3000:]}")
    return dist / f"attnlab-{VERSION}-py3-none-any.whl"


def _stage(source: Path, wheel: Path, stage: Path) -> Path:
    """A folder for otter assign: the source notebook, the grading requirements with this version's
    wheel written in, and the wheel in dist/ (the notebook's config lists dist as autograder_files)."""
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    shutil.copy(source, stage / source.name)
    template = (HERE / "requirements.txt").read_text(encoding="utf-8")
    (stage / "requirements.txt").write_text(
        template.format(wheel=f"{GRADER_FILES}/dist/{wheel.name}"), encoding="utf-8"
    )
    (stage / "dist").mkdir()
    shutil.copy(wheel, stage / "dist" / wheel.name)
    return stage


def _stable_ids(notebook: Path) -> None:
    """Give the cells of ``notebook`` ids that depend only on their place (otter assign draws
    new ones on every run), so that the same source builds the same student notebook."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    for i, cell in enumerate(nb.cells):
        cell.id = hashlib.sha1(f"{notebook.stem}/{i}".encode()).hexdigest()[:8]
    nbformat.write(nb, notebook)


def build(
    source: Path, out: Path, env: dict[str, str] | None = None, wheel: Path | None = None, run_tests: bool = True
) -> Path:
    """Run otter assign on one source notebook; return the assignment's output folder. With
    ``run_tests=False`` otter assign does not grade the solution notebook first (the files it writes
    are the same; tests/assignments grades the solution with ``otter run`` instead)."""
    name = source.stem
    dest = out / name
    if dest.exists():
        shutil.rmtree(dest)
    stage = _stage(source, wheel or build_wheel(out), out / "stage" / name)
    flags = [] if run_tests else ["--no-run-tests"]
    done = subprocess.run(
        [otter(), "assign", *flags, source.name, str(dest)], cwd=stage, capture_output=True, text=True, env=env
    )
    shutil.rmtree(stage)
    if done.returncode != 0:
        raise RuntimeError(f"otter assign failed for {name}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    zips = list((dest / "autograder").glob(f"{name}-autograder_*.zip"))
    if len(zips) != 1:
        raise RuntimeError(f"{name}: expected one autograder zip, found {zips}")
    zips[0].rename(dest / "autograder" / f"{name}-autograder.zip")  # no timestamp in the name
    _stable_ids(dest / "student" / f"{name}.ipynb")
    # the student zip unpacks into one folder of its own, <name>/, so that two assignments unpacked
    # side by side do not mix their tests
    staging = dest / "staging"
    shutil.copytree(dest / "student", staging / name)
    shutil.make_archive(str(dest / f"{name}-student"), "zip", root_dir=staging, base_dir=name)
    shutil.rmtree(staging)
    return dest


def publish(dest: Path, public: Path = PUBLIC) -> Path:
    """Copy the student version of the assignment built in ``dest`` (its notebook and public
    tests) to ``public/<name>/``, replacing what was there."""
    target = public / dest.name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(dest / "student", target)
    return target


def main(out: Path = DEFAULT_OUT, publish_to: Path | None = None, run_tests: bool = True) -> list[Path]:
    """Build every assignment, several at once (``otter assign`` runs each solution notebook
    against its tests unless ``run_tests`` is false); with ``publish_to``, copy each student
    version there too."""
    out = out.resolve()  # otter assign runs in a staging folder: a relative path would land there
    out.mkdir(parents=True, exist_ok=True)
    wheel = build_wheel(out)
    n, env = workers()
    with ThreadPoolExecutor(n) as pool:
        built = list(pool.map(lambda source: build(source, out, env, wheel, run_tests), sources()))
    for dest in built:
        print(f"{dest.name}: student version and autograder in {dest}")
        if publish_to is not None:
            print(f"{dest.name}: student version published in {publish(dest, publish_to)}")
    return built


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--publish", action="store_true", help=f"also copy the student versions to {PUBLIC}")
    args = parser.parse_args()
    main(args.out, PUBLIC if args.publish else None)
