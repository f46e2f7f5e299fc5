"""Summarise a pytest JUnit XML file: test counts, and the time of each chapter (sum of its cells).

Used by scripts/test_gpu.sh to report what ran on the GPU: ``python scripts/junit_times.py FILE...``;
and by ``make test`` with ``--folders``, which adds the time of each folder of tests (setup,
call and teardown of every test: where the suite's minutes go), each run's wall-clock time, and
the part of it that the tests outside the chapters took (issue 23 asks for under 5 minutes).
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def summarise(*paths: str, folders: bool = False) -> str:
    """Counts and chapter times over one or more JUnit files (make test-gpu writes two); with
    ``folders``, also the seconds of each test folder (``tests/unit``, ..., ``chapters``)."""
    roots = [ET.parse(path).getroot() for path in paths]
    cases = [case for root in roots for case in root.iter("testcase")]
    outcomes: dict[str, int] = defaultdict(int)
    chapters: dict[str, float] = defaultdict(float)
    by_folder: dict[str, float] = defaultdict(float)
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
        by_folder["/".join(classname.split(".")[: 1 if classname.endswith(".ipynb") else 2])] += float(
            case.get("time", 0)
        )
    lines = [
        "tests: " + ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items())),
        "",
        "| chapter | executed in (s) |",
        "| --- | --- |",
    ]
    lines += [f"| {name} | {seconds:.0f} |" for name, seconds in sorted(chapters.items())]
    if folders:
        outside = sum(s for name, s in by_folder.items() if name != "chapters")
        lines += ["", "| folder | seconds |", "| --- | --- |"]
        lines += [f"| {name} | {seconds:.0f} |" for name, seconds in sorted(by_folder.items())]
        lines += [f"| everything but the chapters | {outside:.0f} |"]
        # a run with several workers (pytest -n) takes less wall-clock time than its tests add up to
        lines += ["", "| run | tests | wall-clock seconds |", "| --- | --- | --- |"]
        share = 0.0  # the wall-clock time of the tests outside the chapters, run by run
        for path, root in zip(paths, roots, strict=True):
            suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
            wall = sum(float(s.get("time", 0)) for s in suites)
            lines.append(f"| {path} | {sum(1 for _ in root.iter('testcase'))} | {wall:.0f} |")
            times = [
                (c.get("classname", "").endswith(".ipynb"), float(c.get("time", 0))) for c in root.iter("testcase")
            ]
            total = sum(t for _, t in times)
            share += wall * sum(t for chapter, t in times if not chapter) / total if total else 0.0
        # in a run that interleaves chapters and other tests, each has the run's time in proportion
        # to its tests' seconds (an estimate: the workers are taken to be busy throughout)
        lines.append(f"| the tests outside the chapters (each run's time in proportion) | | {share:.0f} |")
    if failures:
        lines += ["", "Failed:", ""] + [f"- `{name}`" for name in failures]
    return "\n".join(lines)


if __name__ == "__main__":
    args = sys.argv[1:]
    print(summarise(*[a for a in args if a != "--folders"], folders="--folders" in args))
