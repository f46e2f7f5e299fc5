"""The benchmark scripts run, and the Performance appendix shows a complete, current table.

Nothing here is timed: the scripts report times; these tests check that they run, that the
table they write has every section and a verdict on every row, and that the committed table
covers every chapter that exists (so it is regenerated when chapters change).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results.md"
MARKER = "<!-- the book's Performance appendix includes everything below this line -->"
SECTIONS = ["1. `scaled_dot_product_attention", "2. `MultiHeadAttention`", "3. `blockwise_attention`",
            "4. Training time to 99.5%", "5. Executing each chapter"]
VERDICTS = ("meets", "MISSES", "MISSES (never reached)", "for comparison")


def _sections(text: str) -> dict[str, list[list[str]]]:
    """Section title -> table rows (cells), header and separator rows left out."""
    tables: dict[str, list[list[str]]] = {}
    title = None
    for line in text.splitlines():
        if line.startswith("## "):
            title = line[3:]
            tables[title] = []
        elif title and line.startswith("|") and not line.startswith("|---"):
            tables[title].append([c.strip() for c in line.strip("|").split("|")])
    for rows in tables.values():  # drop each table's header rows
        rows[:] = [r for r in rows if not r[0] in ("n", "model", "chapter")]
    return tables


def _check_table(text: str) -> dict[str, list[list[str]]]:
    assert MARKER in text
    assert re.search(r"Machine: .+, \d+ cores, \d+ PyTorch threads, torch [\d.]+", text), "machine not described"
    tables = _sections(text)
    for prefix in SECTIONS:
        title = next((t for t in tables if t.startswith(prefix)), None)
        assert title is not None, f"section {prefix!r} missing from the benchmark table"
        timed = [r for r in tables[title] if len(r) > 2 and "MB" not in title]
        assert timed, f"section {prefix!r} has no rows"
    for title, rows in tables.items():
        for row in rows:
            if len(row) > 2:  # the memory table has two columns and no verdict
                assert row[-1] in VERDICTS, f"row without a verdict in {title!r}: {row}"
    return tables


def test_committed_table_is_complete_and_covers_every_chapter():
    tables = _check_table(RESULTS.read_text(encoding="utf-8"))
    chapters = next(rows for t, rows in tables.items() if t.startswith(SECTIONS[4]))
    listed = {row[0].strip("`") for row in chapters}
    on_disk = {p.stem for p in (ROOT / "chapters").glob("*.ipynb")}
    assert listed == on_disk, f"rerun `make bench`: chapters timed {sorted(listed)}, on disk {sorted(on_disk)}"


def test_performance_page_includes_the_table():
    page = (ROOT / "book" / "performance.md").read_text(encoding="utf-8")
    assert "{include} ../benchmarks/results.md" in page
    assert f":start-after: \"{MARKER}\"" in page
    assert "book/performance" in (ROOT / "_toc.yml").read_text(encoding="utf-8")


def test_quick_run_of_every_script_writes_the_table(tmp_path):
    out = tmp_path / "results.md"
    done = subprocess.run([sys.executable, "run_all.py", "--quick", "--out", str(out)], cwd=ROOT / "benchmarks",
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    tables = _check_table(out.read_text(encoding="utf-8"))
    training = next(rows for t, rows in tables.items() if t.startswith(SECTIONS[3]))
    assert len(training) == 3 and all(int(r[1].replace(",", "")) > 100_000 for r in training)


@pytest.mark.parametrize("bad", ["| 256 | forward | 1.0 | 1.0 | 1.00 [1.00, 1.00] | <= 1.05 | |"])
def test_the_check_catches_a_row_without_verdict(bad):
    text = RESULTS.read_text(encoding="utf-8").replace("| 256 | forward | ", bad + "\n| 256 | forward | ", 1)
    with pytest.raises(AssertionError, match="without a verdict"):
        _check_table(text)
