"""The project's front door: a short README, a CONTRIBUTING.md, a CHANGELOG.md, and no run logs.

README.md is what a visitor reads first: what the book is, the two commands, the targets and a
map of the repository. What a contributor needs lives in CONTRIBUTING.md, and what changed in
each version in CHANGELOG.md (Keep a Changelog 1.1.0). The history of the work is git's: no
committed Markdown page keeps a log of test runs (counts of passed tests, wall times of a run),
except the benchmark results, which hold the latest figures and are rewritten by their scripts.
"""

from __future__ import annotations

import datetime
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
CHANGELOG = ROOT / "CHANGELOG.md"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
README_MAX_BYTES = 6144

# A run log: pytest's counts ("1776 passed, 1 skipped"), the wall time of a run ("15 min 6 s"),
# or a run tied to the commit it ran at ("(at 266bf80)").
RUN_LOG = [
    re.compile(r"\b\d+ (?:tests )?passed\b"),
    re.compile(r"\b\d+ min \d+ s\b"),
    re.compile(r"\(at (?=[0-9a-f]*\d)[0-9a-f]{7,40}\)"),
]
# The benchmark results hold the latest figures of `make bench` and `make test-gpu`, which
# rewrite them; the GPU one includes the test counts of its run.
RESULTS = {ROOT / "benchmarks" / "results.md", ROOT / "benchmarks" / "results-gpu.md"}
CHANGE_TYPES = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
VERSION_HEADING = re.compile(r"## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2})")


def _markdown_pages() -> list[Path]:
    pages = [*ROOT.glob("*.md"), *(ROOT / "book").rglob("*.md"), *(ROOT / "benchmarks").glob("*.md")]
    return sorted(p for p in pages if p not in RESULTS)


def _run_log_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if any(p.search(line) for p in RUN_LOG)]


def _headings(text: str, level: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(level + " ")]


def test_the_readme_is_short():
    """README.md fits in 6 KB: details belong in CONTRIBUTING.md."""
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, (
        f"README.md is {size} bytes; keep it within {README_MAX_BYTES} (move details to CONTRIBUTING.md)"
    )


def test_the_readme_gives_the_two_commands_in_its_first_code_block():
    """README.md's first fenced block holds `make book` and `make test`."""
    first_block = README.read_text(encoding="utf-8").split("```")[1]
    assert "make book" in first_block and "make test" in first_block, first_block


def test_the_readme_links_the_contributing_guide_the_changelog_and_the_benchmarks():
    """README.md links CONTRIBUTING.md, CHANGELOG.md and benchmarks/results.md, which all exist."""
    readme = README.read_text(encoding="utf-8")
    for target in ("CONTRIBUTING.md", "CHANGELOG.md", "benchmarks/results.md"):
        assert f"]({target})" in readme, f"README.md does not link {target}"
        assert (ROOT / target).is_file(), f"README.md links {target}, which does not exist"


def test_the_changelog_follows_keep_a_changelog():
    """CHANGELOG.md names its format and Semantic Versioning and starts with an Unreleased section."""
    text = CHANGELOG.read_text(encoding="utf-8")
    assert text.startswith("# Changelog\n"), "CHANGELOG.md must start with '# Changelog'"
    assert "[Keep a Changelog](https://keepachangelog.com/en/1.1.0/)" in text
    assert "[Semantic Versioning](https://semver.org/spec/v2.0.0.html)" in text
    sections = _headings(text, "##")
    assert sections and sections[0] == "## [Unreleased]", (
        f"the first section must be '## [Unreleased]', found {sections[:1]}"
    )
    kinds = {line.removeprefix("### ") for line in _headings(text, "###")}
    assert kinds <= CHANGE_TYPES, f"change types must be among {sorted(CHANGE_TYPES)}: {sorted(kinds - CHANGE_TYPES)}"


def test_the_changelog_versions_are_dated_releases_newest_first():
    """Every version heading reads `## [X.Y.Z] - YYYY-MM-DD`, newest first, the newest being
    pyproject.toml's version."""
    sections = _headings(CHANGELOG.read_text(encoding="utf-8"), "##")[1:]
    assert sections, "CHANGELOG.md lists no released version"
    versions, dates = [], []
    for heading in sections:
        match = VERSION_HEADING.fullmatch(heading)
        assert match, f"CHANGELOG.md: {heading!r} is not '## [X.Y.Z] - YYYY-MM-DD'"
        versions.append(tuple(int(n) for n in match.group(1, 2, 3)))
        dates.append(datetime.date.fromisoformat(match.group(4)))
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions), versions
    assert dates == sorted(dates, reverse=True), dates
    newest = ".".join(map(str, versions[0]))
    assert newest == VERSION, f"CHANGELOG.md's newest release is {newest}, pyproject.toml's version is {VERSION}"


@pytest.mark.parametrize(
    "line, is_log",
    [
        ("- The same code (at 266bf80): 1776 passed, 1 skipped, 15 min 37 s: site 112 s", True),
        ("  stopped keeping a core busy (at 5d04514): 1775 passed, 1 skipped, 16 min 48 s: site 109 s (its", True),
        ("| `make test` | ... | about 15 to 30 minutes on a fresh clone (measured: 1776 tests passed |", True),
        ("- After the site's checks changed (at 9bd458e): site 103 s (its tests add up to 288 s)", True),
        ("The last run took 22 min 5 s on a slower day.", True),
        ("A test checks that the reference passed and the student version scores zero.", False),
        ("Every chapter must execute within 3 minutes on the machine that records the outputs.", False),
    ],
)
def test_the_run_log_patterns_tell_a_log_from_prose(line, is_log):
    """The run-log patterns catch a test run's counts and wall time, and not ordinary prose."""
    assert bool(_run_log_lines(line)) == is_log


def test_no_markdown_page_keeps_a_run_log():
    """No Markdown page at the top level, in book/ or in benchmarks/ (but the results) reports test runs."""
    pages = _markdown_pages()
    assert README in pages and CONTRIBUTING in pages and CHANGELOG in pages
    logs = {
        p.relative_to(ROOT).as_posix(): lines for p in pages if (lines := _run_log_lines(p.read_text(encoding="utf-8")))
    }
    assert not logs, f"run logs belong in commit messages (git log is the history), not in these pages: {logs}"


# A test's docstring says what the test checks; how long a run took belongs in a commit message.
TIMING_NOTE = re.compile(
    r"core-s(econds?)?\b|\bbusy core|\b\d+(\.\d+)? s (before|after|alone|now)\b|\bmeasured: \d|\btook \d+(\.\d+)? ?s\b"
)
# these two hold such lines on purpose, as the data of their own checks
TIMING_NOTE_DATA = {"test_front_door.py", "test_reader_pages.py"}


@pytest.mark.parametrize(
    "text, is_note",
    [
        ("129 s and 238 core-seconds before", True),
        ("(this test alone: 47 s before, 41 s now)", True),
        ("building another took 2.5 s", True),
        ("a page that does not load within 30 s fails", False),
        ("the grader stops a test after 30 s", False),
    ],
)
def test_the_timing_note_pattern_tells_a_note_from_a_rule(text, is_note):
    assert bool(TIMING_NOTE.search(text)) is is_note


def test_no_source_keeps_a_timing_note():
    """No test, module, script or Makefile comment records how long one run took: docstrings and
    comments say what the code checks or does, and why."""
    files = [*ROOT.joinpath("tests").rglob("*.py"), *ROOT.joinpath("src").rglob("*.py"), ROOT / "conftest.py"]
    files += [*ROOT.joinpath("scripts").glob("*.py"), *ROOT.joinpath("benchmarks").glob("*.py"), ROOT / "Makefile"]
    found = [
        f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
        for path in files
        if path.name not in TIMING_NOTE_DATA
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if TIMING_NOTE.search(line)
    ]
    assert not found, "timing notes of one run, in tests:\n" + "\n".join(found)
