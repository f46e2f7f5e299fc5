"""The licences: MIT for the code, CC BY 4.0 for the text and figures, the corpus's own kept.

An instructor must be able to tell what they may copy; these checks keep the files, the package's
metadata and the site's configuration saying the same thing (tests/site/test_site.py checks each
built page's footer, tests/book/test_wheel.py the wheel's licence files).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
HOLDER = "The attnlab authors"


def test_the_code_is_mit_licensed_by_its_holder():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n") and f"Copyright (c) 2026 {HOLDER}" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert project["authors"] == [{"name": HOLDER}]


def test_the_text_and_figures_are_cc_by_and_the_corpus_keeps_its_licence():
    text = (ROOT / "LICENSE-TEXT.md").read_text(encoding="utf-8")
    assert "Creative Commons Attribution 4.0 International" in text and f"Copyright (c) 2026 {HOLDER}" in text
    assert "https://creativecommons.org/licenses/by/4.0/legalcode" in text
    corpus = ROOT / "src" / "attnlab" / "data" / "corpus"
    assert "src/attnlab/data/corpus/LICENSE.txt" in text and (corpus / "LICENSE.txt").exists()
    assert "PSF License Agreement" in (corpus / "README.md").read_text(encoding="utf-8")


def test_the_site_footer_names_the_holder_and_both_licences():
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert config["copyright"] == f"2026 {HOLDER}"
    footer = config["html"]["extra_footer"]
    assert 'href="https://creativecommons.org/licenses/by/4.0/"' in footer
    assert f'href="{config["repository"]["url"]}/blob/main/LICENSE"' in footer


def test_contributing_says_why_cc_by():
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    assert "## Licences" in text and "CC BY 4.0" in text and "CC BY-SA" in text
