"""CITATION.cff and the "How to cite" sections: scripts/check_citation.py (run by `make lint`)
passes on the repository and fails, saying why, on each kind of mistake."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import check_citation  # noqa: E402

FILES = ["CITATION.cff", "pyproject.toml", "_config.yml", "CHANGELOG.md", "README.md", "book/intro.md"]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name in FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def test_the_repository_passes():
    assert check_citation.problems() == []


def test_the_bibtex_parses_and_names_the_book():
    from pybtex.database import parse_string

    entry = parse_string(check_citation.bibtex(check_citation._strings(_cff(ROOT))), "bibtex").entries["attnlab2026"]
    assert entry.type == "book" and entry.fields["url"] == "https://attnlab.github.io/attnlab/"


def _cff(root: Path) -> dict:
    import yaml

    return yaml.safe_load((root / "CITATION.cff").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "old, new, finding",
    [
        ('message: "If you use', 'massage: "If you use', "'message' is a required property"),
        ("cff-version: 1.2.0", "cff-version: 1.9.9", "cff-version"),
        ("  - CC-BY-4.0", "  - CC-BY-4", "license"),
        ("version: 0.2.0", "version: 0.1.0", "version is '0.1.0', expected"),
        ('date-released: "2026-11-30"', 'date-released: "2026-11-29"', "date-released"),
        ('url: "https://attnlab.github.io/attnlab/"\nkeywords', 'url: "https://attnlab.example/"\nkeywords', "url is"),
        ("  year: 2026", "  year: 2025", "README.md: its How to cite section"),
    ],
    ids=["no-message", "format-version", "licence-id", "version", "release-date", "address", "bibtex-stale"],
)
def test_a_mistake_in_citation_cff_is_found(tree, old, new, finding):
    path = tree / "CITATION.cff"
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    found = check_citation.problems(tree)
    assert any(finding in problem for problem in found), found


def test_a_page_without_the_bibtex_is_found(tree):
    readme = tree / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8").replace("```bibtex", "```text"), encoding="utf-8")
    assert any(p.startswith("README.md:") for p in check_citation.problems(tree))
