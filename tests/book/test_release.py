"""A release: one version, one tag, one repository address, and everything that names them.

- The version is written once, in pyproject.toml; the package reports it as
  ``attnlab.__version__`` (from the installed metadata). A release is the git tag
  ``v<version>``; the publish workflow refuses a tag that does not match.
- The repository address is written once, in _config.yml's ``repository.url``, because Jupyter
  Book builds the repository button and the Colab links from it.
- What cannot read either (a notebook's Colab install line runs before anything is installed;
  Jupyter Book reads only _config.yml) names them again, and is checked here: every chapter's
  setup cell installs exactly that tag from exactly that address, and the Colab links open
  the notebooks at that tag. CONTRIBUTING.md, "Releases and publishing", says how to cut a release.
"""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
VERSION = PROJECT["version"]
TAG = f"v{VERSION}"
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
REPO_URL = CONFIG["repository"]["url"]
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
# The one line of every setup cell that installs the book's package on Colab (and only there).
INSTALL_LINE = f'    %pip install -q "attnlab @ git+{REPO_URL}@{TAG}"'


def test_the_version_is_a_release_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION), f"pyproject.toml: version {VERSION!r} is not MAJOR.MINOR.PATCH"
    assert "version" not in PROJECT.get("dynamic", [])


def test_the_package_reports_the_version_of_pyproject():
    import attnlab

    assert attnlab.__version__ == VERSION, (
        f"attnlab.__version__ is {attnlab.__version__}, pyproject.toml says {VERSION}: reinstall (make install)"
    )


def test_the_package_has_no_second_copy_of_the_version():
    # __init__.py reads the installed metadata; a literal there would drift from pyproject.toml.
    init = (ROOT / "src" / "attnlab" / "__init__.py").read_text(encoding="utf-8")
    assert not re.search(r"__version__\s*=\s*['\"]", init), "__init__.py must not write the version itself"


def test_the_repository_address_is_a_github_repository():
    # Jupyter Book's Colab links need github.com/<org>/<repo>, with no trailing slash or .git.
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", REPO_URL) and not REPO_URL.endswith(".git"), REPO_URL


def test_pyproject_urls_use_the_repository_address():
    urls = PROJECT["urls"]
    assert urls and all(url == REPO_URL or url.startswith(REPO_URL + "/") for url in urls.values()), (
        f"pyproject.toml's [project.urls] {urls} must point into _config.yml's repository.url {REPO_URL}"
    )


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_setup_cell_installs_this_release_from_this_repository(path):
    nb = nbformat.read(path, as_version=4)
    setup = next(c for c in nb.cells if c.cell_type == "code").source
    installs = [line for line in setup.splitlines() if "pip install" in line]
    assert installs == [INSTALL_LINE], (
        f"{path.name}: the setup cell's install line must be\n{INSTALL_LINE}\n(the tag of pyproject.toml's "
        f"version, from _config.yml's repository.url), found {installs}"
    )


ASSIGNMENTS = sorted((ROOT / "assignments").glob("a[0-9]_*.ipynb"))
ASSIGNMENT_INSTALL = f'    %pip install -q otter-grader==7.0.0 "attnlab @ git+{REPO_URL}@{TAG}"'


@pytest.mark.parametrize("path", ASSIGNMENTS, ids=lambda p: p.stem)
def test_an_assignment_installs_this_release_on_colab(path):
    """A student's notebook on Colab installs the release the book was tested with, not the moving head."""
    setup = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code").source
    installs = [line for line in setup.splitlines() if "pip install" in line]
    assert installs == [ASSIGNMENT_INSTALL], (
        f"{path.name}: the install line must be\n{ASSIGNMENT_INSTALL}\nfound {installs}"
    )


@pytest.mark.parametrize("name", ["book/how-to-use.md", "CONTRIBUTING.md"])
def test_the_docs_show_the_same_install_line_and_tag(name):
    text = (ROOT / name).read_text(encoding="utf-8")
    assert INSTALL_LINE in text, f"{name} must show the setup cell's install line:\n{INSTALL_LINE}"
    stale = sorted(set(re.findall(r"\bv\d+\.\d+\.\d+\b", text)) - {TAG})
    assert not stale, f"{name} names the tags {stale}; the current release is {TAG}"


def test_the_readme_names_no_stale_tag():
    """The README names no release tag but the current one (the install line is in CONTRIBUTING.md)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    stale = sorted(set(re.findall(r"\bv\d+\.\d+\.\d+\b", text)) - {TAG})
    assert not stale, f"README.md names the tags {stale}; the current release is {TAG}"


def test_the_colab_links_open_this_release():
    # What Jupyter Book 1 makes of _config.yml (jupyter_book.config.get_final_config, as
    # `jupyter-book build` calls it), and the Colab link sphinx-book-theme builds from it
    # (header_buttons/launch.py: {colab_url}/github/{org}/{repo}/blob/{branch}/{path}).
    from jupyter_book.config import get_final_config

    sphinx_config, _ = get_final_config(
        user_yaml=ROOT / "_config.yml", cli_config={"latex_individualpages": False}, sourcedir=ROOT
    )
    theme = sphinx_config["html_theme_options"]
    assert theme["repository_url"] == REPO_URL
    assert theme["repository_branch"] == TAG, (
        f"_config.yml: repository.branch is {theme['repository_branch']!r}; the Colab links must open the "
        f"release tag {TAG!r} (pyproject.toml's version)"
    )
    colab = theme["launch_buttons"]["colab_url"].strip("/")
    org_repo = REPO_URL.removeprefix("https://github.com/")
    link = f"{colab}/github/{org_repo}/blob/{theme['repository_branch']}/chapters/{CHAPTERS[0].name}"
    assert link == f"https://colab.research.google.com/github/{org_repo}/blob/{TAG}/chapters/{CHAPTERS[0].name}"


def test_contributing_explains_the_release():
    """CONTRIBUTING.md's release section names the version's place, the tag and the steps."""
    guide = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    assert "## Releases and publishing" in guide
    section = guide.split("## Releases and publishing", 1)[1].split("\n## ", 1)[0]
    for needed in ("pyproject.toml", "v<version>", "_config.yml", "git tag", "make test", "CHANGELOG.md"):
        assert needed in section, f"CONTRIBUTING.md's release section does not mention {needed!r}"


# --- the version in one place: scripts/bump_version.py rewrites every copy of the tag ----------
sys.path.insert(0, str(ROOT / "scripts"))
import bump_version  # noqa: E402
import check_citation  # noqa: E402


def _names_the_tag(text: str, version: str = VERSION) -> bool:
    return re.search(rf"(?<![\w.])v{re.escape(version)}(?![\w.]*\d)", text) is not None


def test_every_file_that_names_the_tag_is_bumped():
    """A file that names the release tag is one that bump_version.py rewrites (CHANGELOG aside)."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    naming = set()
    for name in tracked.stdout.splitlines():
        path = ROOT / name
        text_file = path.suffix in {".md", ".ipynb", ".yml", ".yaml", ".toml", ".py", ".txt", ".cfg"}
        if text_file and path.is_file() and _names_the_tag(path.read_text(encoding="utf-8", errors="replace")):
            naming.add(path)
    missing = naming - set(bump_version.tagged_files()) - {ROOT / "CHANGELOG.md"}
    assert not missing, f"these files name {TAG} but scripts/bump_version.py does not rewrite them: {sorted(missing)}"


def test_bump_version_rewrites_every_copy(tmp_path):
    """Bumped on a copy of the tree, no copy of the old tag is left and the new one is everywhere."""
    cited = [ROOT / "CITATION.cff", ROOT / "README.md", ROOT / "book" / "intro.md"]
    for path in [ROOT / "pyproject.toml", ROOT / "CHANGELOG.md", *cited, *bump_version.tagged_files()]:
        target = tmp_path / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    assert check_citation.problems(tmp_path) == []
    changed = bump_version.bump("9.9.9", tmp_path, today=datetime.date(2030, 1, 2))
    assert bump_version.current_version(tmp_path) == "9.9.9"
    assert len(changed) == 3 + len(bump_version.tagged_files(tmp_path))
    # CITATION.cff follows: its version and release date, checked as `make lint` checks them
    assert check_citation.problems(tmp_path) == []
    assert "version: 9.9.9\n" in (tmp_path / "CITATION.cff").read_text(encoding="utf-8")
    for path in bump_version.tagged_files(tmp_path):
        text = path.read_text(encoding="utf-8")
        assert not _names_the_tag(text) and _names_the_tag(text, "9.9.9"), path
    for path in (tmp_path / "chapters").glob("*.ipynb"):
        setup = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code").source
        assert INSTALL_LINE.replace(TAG, "v9.9.9") in setup.splitlines(), path.name
    assert "## [Unreleased]\n\n## [9.9.9] - 2030-01-02\n" in (tmp_path / "CHANGELOG.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("bad", ["1.2", "v1.2.3", VERSION, 3])
def test_bump_version_refuses_a_bad_version(bad, tmp_path):
    (tmp_path / "pyproject.toml").write_bytes((ROOT / "pyproject.toml").read_bytes())
    with pytest.raises(ValueError, match="bump"):
        bump_version.bump(bad, tmp_path, dry_run=True)
