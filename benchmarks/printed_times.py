"""The training times a chapter prints ("... trained in 33.0 s"), read from its outputs.

A chapter reports how long each of its training runs took, and those seconds are published.
They must come from a quiet machine: on a loaded one, code made of many small operations runs
several times slower, and the published times would say so. ``bench_chapters.py`` records the
times the chapters print when it executes them (section 6 of ``results.md``), and
``tests/book/test_benchmarks.py`` checks that every time printed in a committed chapter agrees
with that run within ``TOLERANCE``. Between two quiet runs on this machine, the same training
run's time was seen to differ by up to a factor of 1.6 (the shortest runs, of about ten
seconds, vary most); on a loaded machine, code like this runs from twice to a hundred times
slower, which breaks the bound.
"""

from __future__ import annotations

import re

import nbformat

TOLERANCE = 2.0  # committed / benchmark must lie in [1 / TOLERANCE, TOLERANCE]
_TIME = re.compile(r"trained in (\d+(?:\.\d+)?) s")


def printed_times(nb: nbformat.NotebookNode) -> dict[str, float]:
    """``line with the time blanked`` -> seconds, for every printed line of the form "... trained in X s".

    The key is the whole line with its number replaced by ``#``, so two runs of the same chapter
    give the same keys. A key printed twice in one chapter gets a ``[2]`` suffix, and so on.
    """
    times: dict[str, float] = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") != "stream" or output.get("name") != "stdout":
                continue
            for line in output["text"].splitlines():
                match = _TIME.search(line)
                if not match:
                    continue
                key = _TIME.sub("trained in # s", line).strip()
                base, n = key, 1
                while key in times:
                    n += 1
                    key = f"{base} [{n}]"
                times[key] = float(match.group(1))
    return times
