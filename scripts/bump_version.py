"""Set the book's version everywhere it is written: ``python scripts/bump_version.py 0.3.0``.

The version lives in pyproject.toml. What cannot read it names the release tag ``v<version>``
again: the Colab install line of every chapter, student chapter and assignment (it runs before
the package is installed), the Colab links of the published assignments, _config.yml's branch
(Jupyter Book builds the Colab buttons from it), and the pages that quote the install line. This
script rewrites all of them and CITATION.cff's version and release date, and adds the new
version's heading to CHANGELOG.md (the entries under Unreleased move below it). ``--dry-run``
prints the files it would change.

``tests/book/test_release.py`` checks that every file naming the current tag is one this script
rewrites, so a new file that names the tag cannot be forgotten at the next release.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Files that name the release tag v<version>, as globs from the repository's root.
TAGGED = [
    "_config.yml",
    "book/how-to-use.md",
    "book/instructor-guide.md",
    "CONTRIBUTING.md",
    "chapters/*.ipynb",
    "student/chapters/*.ipynb",
    "assignments/a[0-9]_*.ipynb",
    "assignments/public/*/*.ipynb",
]
VERSION = re.compile(r"\d+\.\d+\.\d+")


def current_version(root: Path = ROOT) -> str:
    return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def tagged_files(root: Path = ROOT) -> list[Path]:
    return sorted({path for pattern in TAGGED for path in root.glob(pattern)})


def bump(new: str, root: Path = ROOT, *, today: datetime.date | None = None, dry_run: bool = False) -> list[Path]:
    """Rewrite every place that names the version to ``new``; return the files changed."""
    if not isinstance(new, str) or not VERSION.fullmatch(new):
        raise ValueError(f"bump: new must be a version MAJOR.MINOR.PATCH, got {new!r}")
    old = current_version(root)
    if new == old:
        raise ValueError(f"bump: the version is already {old}")
    changed = []
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    updated = re.sub(rf'(?m)^version = "{re.escape(old)}"$', f'version = "{new}"', text, count=1)
    if updated == text:
        raise ValueError(f'bump: pyproject.toml has no line version = "{old}"')
    changed.append((pyproject, updated))
    # "@v1.2.3" in install lines, "/blob/v1.2.3/" in Colab links, "branch: v1.2.3", "`v1.2.3`"
    tag = re.compile(rf"(?<![\w.])v{re.escape(old)}(?![\w.]*\d)")
    for path in tagged_files(root):
        text = path.read_text(encoding="utf-8")
        updated = tag.sub(f"v{new}", text)
        if updated != text:
            changed.append((path, updated))
    date = (today or datetime.date.today()).isoformat()
    citation = root / "CITATION.cff"  # its version and release date (scripts/check_citation.py)
    if citation.exists():
        text = citation.read_text(encoding="utf-8")
        updated = re.sub(rf"(?m)^version: {re.escape(old)}$", f"version: {new}", text, count=1)
        updated = re.sub(r'(?m)^date-released: "[0-9-]+"$', f'date-released: "{date}"', updated, count=1)
        if updated != text:
            changed.append((citation, updated))
    changelog = root / "CHANGELOG.md"
    if changelog.exists():
        text = changelog.read_text(encoding="utf-8")
        updated = text.replace("## [Unreleased]\n", f"## [Unreleased]\n\n## [{new}] - {date}\n", 1)
        if updated != text:
            changed.append((changelog, updated))
    if not dry_run:
        for path, text in changed:
            path.write_text(text, encoding="utf-8")
    return [path for path, _ in changed]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("version", help="the new version, MAJOR.MINOR.PATCH")
    parser.add_argument("--dry-run", action="store_true", help="print the files it would change, change nothing")
    args = parser.parse_args(argv)
    try:
        paths = bump(args.version, dry_run=args.dry_run)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    for path in paths:
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
