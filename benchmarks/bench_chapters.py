"""Benchmark 5: how long each chapter takes to execute.

Every notebook in ``chapters/`` is executed top to bottom in a fresh kernel (as nbval does,
from the ``chapters/`` folder), without writing anything back; the wall time of each is
reported against the budget of 3 minutes on 2 CPU cores. Run the benchmarks on a quiet
machine: a second busy process on 2 cores slows the chapters' many small operations by far
more than 2x. Run: ``python benchmarks/bench_chapters.py [--quick]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import nbformat
import torch
from _common import save, verdict
from nbclient import NotebookClient

CHAPTERS = Path(__file__).resolve().parent.parent / "chapters"
TARGET = 180.0


def main(quick: bool = False, only: list[str] | None = None) -> list[dict]:
    rows = []
    notebooks = sorted(CHAPTERS.glob("*.ipynb"))
    if quick:
        notebooks = notebooks[:1]
    if only:
        notebooks = [p for p in notebooks if p.stem in only]
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(CHAPTERS)}})
        # one execution of a whole chapter, seconds to minutes: a wall clock, not a Timer's blocks
        start = time.perf_counter()
        client.execute()
        seconds = time.perf_counter() - start
        title = next(
            (
                line.lstrip("# ").strip()
                for c in nb.cells
                if c.cell_type == "markdown"
                for line in c.source.splitlines()
                if line.startswith("# ")
            ),
            path.stem,
        )
        rows.append(
            {
                "chapter": path.stem,
                "title": title,
                "seconds": seconds,
                "target": TARGET,
                "verdict": verdict(seconds, TARGET),
            }
        )
        print(f"{path.stem:22} {seconds:7.1f} s  {rows[-1]['verdict']}", flush=True)
    save("chapters" + ("-quick" if quick else ""), rows, torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="only the first chapter")
    parser.add_argument("--only", nargs="+", help="only these chapters (file stems)")
    args = parser.parse_args()
    main(args.quick, args.only)
