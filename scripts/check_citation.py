"""Check CITATION.cff: valid Citation File Format 1.2.0, and in step with the rest of the book.

``make lint`` runs it. It fails, naming what is wrong, when:

- CITATION.cff does not validate against the format's JSON schema (``cff-schema-1.2.0.json``
  beside this script: the schema of citation-file-format 1.2.0, CC BY 4.0, as shipped in
  cffconvert 2.0.0; cffconvert itself needs jsonschema < 4, which the book's Jupyter stack
  cannot have, so the schema is checked here with jsonschema 4);
- its version, release date, title, repository or address differ from pyproject.toml's version,
  CHANGELOG.md's date for that version, _config.yml's title, repository and html.baseurl;
- the BibTeX in the "How to cite" sections of README.md and book/intro.md is not exactly the one
  made from its preferred citation (``--bibtex`` prints it), or does not parse.

``python scripts/check_citation.py --bibtex`` prints that BibTeX.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = Path(__file__).with_name("cff-schema-1.2.0.json")
CITING_PAGES = ("README.md", "book/intro.md")


def _strings(data: Any) -> Any:
    """YAML reads an unquoted 2026-11-30 as a date; the schema (like the format) wants text."""
    if isinstance(data, dict):
        return {k: _strings(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_strings(v) for v in data]
    if isinstance(data, datetime.date):
        return data.isoformat()
    return data


def bibtex(cff: dict) -> str:
    """The BibTeX entry of the preferred citation (a book), as the "How to cite" sections show it.

    It names no version, so that a release does not change it: CITATION.cff's own ``version``
    (which scripts/bump_version.py rewrites) says which release a reader used."""
    cited = cff["preferred-citation"]
    authors = " and ".join(
        "{" + a["name"] + "}" if "name" in a else f"{a['family-names']}, {a['given-names']}" for a in cited["authors"]
    )
    key = "attnlab" + str(cited["year"])
    fields = [
        ("title", "{" + cited["title"] + "}"),
        ("author", authors),
        ("year", str(cited["year"])),
        ("url", cited["url"]),
    ]
    body = ",\n".join(f"  {name} = {{{value}}}" for name, value in fields)
    return f"@book{{{key},\n{body}\n}}"


def problems(root: Path = ROOT) -> list[str]:
    """What is wrong with root's CITATION.cff, as sentences (empty: nothing)."""
    path = root / "CITATION.cff"
    if not path.is_file():
        return [f"{path} is missing"]
    cff = _strings(yaml.safe_load(path.read_text(encoding="utf-8")))
    if not isinstance(cff, dict):
        return [f"{path}: expected a YAML mapping, got {type(cff).__name__}"]
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
    found = [
        f"CITATION.cff: {'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
        for e in sorted(validator.iter_errors(cff), key=lambda e: list(map(str, e.absolute_path)))
    ]
    if found:
        return found  # the checks below read fields the schema guarantees
    version = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    expected = {
        "version": version,
        "title": config["title"],
        "repository-code": config["repository"]["url"],
        "url": config["html"]["baseurl"],
    }
    released = re.search(
        rf"^## \[{re.escape(version)}\] - (\S+)$", (root / "CHANGELOG.md").read_text(encoding="utf-8"), re.MULTILINE
    )
    expected["date-released"] = released.group(1) if released else "(CHANGELOG.md has no heading for this version)"
    for field, value in expected.items():
        if str(cff.get(field)) != value:
            found.append(f"CITATION.cff: {field} is {cff.get(field)!r}, expected {value!r}")
    cited = cff.get("preferred-citation", {})
    found.extend(
        f"CITATION.cff: preferred-citation's {field} {cited.get(field)!r} differs from {cff[field]!r}"
        for field in ("title", "url")
        if cited.get(field) != cff[field]
    )
    if found:
        return found
    entry = bibtex(cff)
    try:
        from pybtex.database import parse_string

        parse_string(entry, "bibtex")
    except Exception as error:  # pybtex's errors have no common base worth naming here
        found.append(f"the BibTeX made from CITATION.cff does not parse: {error}")
    for page in CITING_PAGES:
        text = (root / page).read_text(encoding="utf-8")
        blocks = re.findall(r"```bibtex\n(.*?)\n```", text, re.DOTALL)
        if blocks != [entry]:
            found.append(
                f"{page}: its How to cite section must hold exactly one ```bibtex block, "
                f"this one (python scripts/check_citation.py --bibtex):\n{entry}\nfound: {blocks}"
            )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bibtex", action="store_true", help="print the BibTeX of CITATION.cff and exit")
    args = parser.parse_args(argv)
    if args.bibtex:
        print(bibtex(_strings(yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8")))))
        return 0
    found = problems()
    for problem in found:
        print(problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
