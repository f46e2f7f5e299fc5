"""Summarise a pytest JUnit XML file: test counts, and the time of each chapter (sum of its cells).

Used by scripts/test_gpu.sh to report what ran on the GPU: ``python scripts/junit_times.py FILE...``.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def summarise(*paths: str) -> str:
    """Counts and chapter times over one or more JUnit files (make test-gpu writes two)."""
    cases = [case for path in paths for case in ET.parse(path).getroot().iter("testcase")]
    outcomes: dict[str, int] = defaultdict(int)
    chapters: dict[str, float] = defaultdict(float)
    failures: list[str] = []
    for case in cases:
        kind = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                kind = {"failure": "failed", "error": "errors", "skipped": "skipped"}[child.tag]
        outcomes[kind] += 1
        if kind in ("failed", "errors"):
            failures.append(f"{case.get('classname', '')}::{case.get('name', '')}")
        classname = case.get("classname", "")  # a notebook's cells: "chapters.NN_name.ipynb"
        if classname.endswith(".ipynb"):
            chapters[classname.removeprefix("chapters.")] += float(case.get("time", 0))
    lines = ["tests: " + ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items())), "",
             "| chapter | executed in (s) |", "| --- | --- |"]
    lines += [f"| {name} | {seconds:.0f} |" for name, seconds in sorted(chapters.items())]
    if failures:
        lines += ["", "Failed:", ""] + [f"- `{name}`" for name in failures]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarise(*sys.argv[1:]))
