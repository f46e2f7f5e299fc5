"""The benchmark scripts run, and the Performance appendix shows a complete, current table.

Nothing here is timed: the scripts report times; these tests check that they run, that the
table they write has every section, that the part the appendix shows carries no targets or
verdicts (those are for maintainers, after it) while every target has a verdict, and that the
committed table covers every chapter that exists (so it is regenerated when chapters change).
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
END_MARKER = "<!-- the book's Performance appendix includes everything above this line -->"
sys.path.insert(0, str(ROOT / "benchmarks"))
SECTIONS = [
    "1. `scaled_dot_product_attention",
    "2. `MultiHeadAttention`",
    "3. `blockwise_attention`",
    "4. Training time to 99.5%",
    "5. Executing each chapter",
]
VERDICTS = ("meets", "MISSES", "MISSES (never reached)", "for comparison")


def _sections(text: str, level: str = "## ") -> dict[str, list[list[str]]]:
    """Heading (at ``level``) -> the rows of its tables as cells, each table's header row left out."""
    tables: dict[str, list[list[str]]] = {}
    title, in_table = None, False
    for line in text.splitlines():
        if line.startswith(level):
            title, in_table = line[len(level) :], False
            tables[title] = []
        elif title and line.startswith("|"):
            if in_table and not re.match(r"^\|\s*-", line):  # the first row of a table is its header
                tables[title].append([c.strip() for c in line.strip("|").split("|")])
            in_table = True
        else:
            in_table = False
    return tables


def _check_table(text: str) -> dict[str, list[list[str]]]:
    assert MARKER in text and END_MARKER in text
    shown, targets = text.split(MARKER, 1)[1].split(END_MARKER, 1)
    assert re.search(r"Machine: .+, \d+ cores, \d+ PyTorch threads, torch [\d.]+", shown), "machine not described"
    tables = _sections(shown)
    for prefix in SECTIONS:
        title = next((t for t in tables if t.startswith(prefix)), None)
        assert title is not None, f"section {prefix!r} missing from the benchmark table"
        assert tables[title], f"section {prefix!r} has no rows"
    for title, rows in tables.items():
        for row in rows:
            assert not set(row) & set(VERDICTS), f"a verdict in the appendix's {title!r}: {row}"
    goals = _sections(targets).get("Targets", [])
    for number in "12345":  # every section has a target, and every target a verdict
        assert any(r[0] == number for r in goals), f"section {number} has no target"
    for row in goals:
        assert row[-1] in VERDICTS, f"row without a verdict in the targets: {row}"
    return tables


def test_committed_table_is_complete_and_covers_every_chapter():
    tables = _check_table(RESULTS.read_text(encoding="utf-8"))
    chapters = next(rows for t, rows in tables.items() if t.startswith(SECTIONS[4]))
    listed = {row[0].strip("`") for row in chapters}
    on_disk = {p.stem for p in (ROOT / "chapters").glob("*.ipynb")}
    assert listed == on_disk, f"rerun `make bench`: chapters timed {sorted(listed)}, on disk {sorted(on_disk)}"


def _layer_norm_rows(text: str) -> dict[str, list[int | None]]:
    """Steps to 99.5% of chapter 6's post-LN and pre-LN runs at its own schedule, by order."""
    training = next(rows for t, rows in _sections(text).items() if t.startswith(SECTIONS[3]))
    steps: dict[str, list[int | None]] = {"post-LN": [], "pre-LN": []}
    for row in training:
        for order in steps:
            if row[0].startswith(f"Transformer 2+2, {order}"):
                steps[order].append(int(row[3]) if row[3] else None)
    return steps


def _layer_norm_claim(steps: dict[str, list[int | None]]) -> list[str]:
    """Chapter 6: 'both orders reach 99.5% in every one of three seeds, after about the same
    number of steps' (the medians within 25% of each other)."""
    problems = []
    for order, runs in steps.items():
        if len(runs) != 3:
            problems.append(f"{order}: {len(runs)} runs in the table, chapter 6 says three seeds")
        if any(r is None for r in runs):
            problems.append(f"{order}: a seed did not reach 99.5%, chapter 6 says every one does")
    if not problems:
        post, pre = (sorted(steps[o])[1] for o in ("post-LN", "pre-LN"))
        if not max(post, pre) <= 1.25 * min(post, pre):
            problems.append(f"median steps post-LN {post}, pre-LN {pre}: not 'about the same'")
    return problems


def test_chapter_6s_long_runs_of_both_orders_are_as_it_says():
    steps = _layer_norm_rows(RESULTS.read_text(encoding="utf-8"))
    assert not _layer_norm_claim(steps), _layer_norm_claim(steps)
    page = (ROOT / "chapters" / "06_transformer.ipynb").read_text(encoding="utf-8")
    assert "both orders reach 99.5% held-out exact match in every one of three seeds" in page


def test_the_layer_norm_check_catches_a_failed_seed_and_a_gap():
    steps = _layer_norm_rows(RESULTS.read_text(encoding="utf-8"))
    failed = {o: ([None, *r[1:]] if o == "pre-LN" else r) for o, r in steps.items()}
    assert any("did not reach" in p for p in _layer_norm_claim(failed))
    slow = {o: ([2 * x for x in r] if o == "pre-LN" else r) for o, r in steps.items()}
    assert any("not 'about the same'" in p for p in _layer_norm_claim(slow))


def test_performance_page_includes_the_table():
    page = (ROOT / "book" / "performance.md").read_text(encoding="utf-8")
    assert "{include} ../benchmarks/results.md" in page
    assert f':start-after: "{MARKER}"' in page and f':end-before: "{END_MARKER}"' in page
    assert "book/performance" in (ROOT / "_toc.yml").read_text(encoding="utf-8")


def test_quick_run_of_every_script_writes_the_table(tmp_path):
    out = tmp_path / "results.md"
    done = subprocess.run(
        [sys.executable, "run_all.py", "--quick", "--out", str(out)],
        cwd=ROOT / "benchmarks",
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    tables = _check_table(out.read_text(encoding="utf-8"))
    training = next(rows for t, rows in tables.items() if t.startswith(SECTIONS[3]))
    assert len(training) == 4 and all(int(r[1].replace(",", "")) > 100_000 for r in training)  # one row per recipe
    _check_causal_row(out.read_text(encoding="utf-8"))


def _check_causal_row(text: str) -> None:
    """Section 3's causal row says that the fused kernel it is timed against has no mask."""
    import run_all

    blockwise = next(rows for t, rows in _sections(text).items() if t.startswith(SECTIONS[2]))
    causal = [r for r in blockwise if "causal" in r[1]]
    assert causal and all(r[1] == run_all.CAUSAL_LABEL for r in causal), causal
    assert run_all.CAUSAL_NOTE in text, "the note under section 3 on what the causal row compares is missing"


def test_the_committed_causal_row_says_what_it_compares():
    _check_causal_row(RESULTS.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda t: t.replace(
                "| 1 | n = 256, forward | 1.03 | <= 1.05 | meets |", "| 1 | n = 256, forward | 1.03 | <= 1.05 | |"
            ),
            "without a verdict",
        ),
        (
            lambda t: t.replace(
                "| 256 | forward | 2.08 | 2.05 | 1.03 [0.92, 1.05] |",
                "| 256 | forward | 2.08 | 2.05 | 1.03 [0.92, 1.05] | <= 1.05 | meets |",
            ),
            "a verdict in the appendix",
        ),
        (lambda t: re.sub(r"^\| 4 \|.*\n", "", t, flags=re.M), "section 4 has no target"),
    ],
)
def test_the_check_catches(change, message):
    text = RESULTS.read_text(encoding="utf-8")
    assert change(text) != text
    with pytest.raises(AssertionError, match=message):
        _check_table(change(text))


# --- the GPU section: benchmarks/results-gpu.md, written by `make test-gpu` on a CUDA machine ----
GPU_RESULTS = ROOT / "benchmarks" / "results-gpu.md"
GPU_SIZES = {1024, 2048, 4096, 8192, 16384}


def _check_gpu_report(text: str) -> dict[str, list[list[str]]]:
    """What issue 18 asks the appendix to show of a GPU run, and the claims its prose makes."""
    header = re.match(r"GPU: (.+?), torch (\S+);", text)
    assert header and header.group(1) != "cpu" and "+cu" in header.group(2), "the GPU and its CUDA torch not named"
    tables = _sections(text, "### ")
    chapters = next(rows for t, rows in tables.items() if t.startswith("Executing each chapter"))
    on_disk = {p.name for p in (ROOT / "chapters").glob("*.ipynb")}
    assert {r[0] for r in chapters} == on_disk, "a chapter's GPU time is missing"
    for name, seconds in ((r[0], r[1]) for r in chapters):  # a time, or said plainly that it has none
        assert seconds.isdigit() or seconds.startswith("not run ("), f"{name}: {seconds!r} is not a GPU time"
    counts = re.search(r"tests: (?:(\d+) errors, )?(?:(\d+) failed, )?(\d+) passed", text)
    assert counts and int(counts.group(3)) > 0, "the GPU run's test counts are missing"
    broken = int(counts.group(1) or 0) + int(counts.group(2) or 0)
    listed = re.findall(r"^- `[^`]+`$", text.split("Failed:", 1)[1], flags=re.M) if "Failed:" in text else []
    assert len(listed) == broken, f"{broken} tests failed on the GPU but {len(listed)} are listed"
    blockwise = next(rows for t, rows in tables.items() if t.startswith("`blockwise_attention`"))
    timed = {(r[0], int(r[1]), r[2]) for r in blockwise}
    wanted = {(d, n, m) for d in ("float16", "bfloat16") for n in GPU_SIZES for m in ("forward", "forward+backward")}
    assert timed == wanted, f"blockwise rows missing: {sorted(wanted - timed)}"
    # the appendix says the blockwise loop is slower than the flash kernel at every size ...
    assert all(float(r[5].split()[0]) > 1 for r in blockwise)
    # ... and matches its error against float64 in both half-precision types (within 10%)
    errors = next(rows for t, rows in tables.items() if t.startswith("Largest error"))
    assert {r[0] for r in errors} == {"float16", "bfloat16"}
    assert all(float(r[1]) <= 1.1 * float(r[2]) for r in errors), errors
    mha = next(rows for t, rows in tables.items() if t.startswith("`MultiHeadAttention`"))
    assert len(mha) == 3 and not any(r[-1] in VERDICTS for r in mha), "a verdict in the appendix's table"
    assert END_MARKER in text and text.index(END_MARKER) > text.index(MARKER)
    goals = tables.get("Targets", [])
    assert len(goals) == 3 and all(r[-1] in VERDICTS for r in goals), "the MHA rows' targets are missing"
    return tables


def test_committed_gpu_results_are_complete():
    _check_gpu_report(GPU_RESULTS.read_text(encoding="utf-8"))


def test_performance_page_includes_the_gpu_results():
    page = (ROOT / "book" / "performance.md").read_text(encoding="utf-8")
    assert "{include} ../benchmarks/results-gpu.md" in page
    assert page.count(f':end-before: "{END_MARKER}"') == 2


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda t: t.replace("| float16 | 16384 | forward |", "| float16 | 8192 | forward |", 1),
            "blockwise rows missing",
        ),
        (
            lambda t: re.sub(r"tests: (\d+ failed, )?(\d+) passed", r"tests: 3 failed, \2 passed", t, count=1),
            "but 1 are listed",
        ),
        (lambda t: re.sub(r"\| 05_self_attention.ipynb \| \d+ \|\n", "", t), "GPU time is missing"),
        (lambda t: re.sub(r"^GPU: [^,]+", "GPU: cpu", t), "not named"),
        (
            lambda t: re.sub(r"\| 05_self_attention.ipynb \| \d+ \|", "| 05_self_attention.ipynb | fast |", t),
            "not a GPU time",
        ),
    ],
)
def test_the_gpu_check_catches(change, message):
    text = change(GPU_RESULTS.read_text(encoding="utf-8"))
    with pytest.raises(AssertionError, match=message):
        _check_gpu_report(text)


def test_the_junit_summary_adds_up_each_folder(tmp_path):
    """`make test` prints where the suite's time goes (scripts/junit_times.py --folders)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from junit_times import summarise

    xml = tmp_path / "results.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.unit.test_core" name="a" time="1.5"/>'
        '<testcase classname="tests.unit.test_masking" name="b" time="2.0"><skipped/></testcase>'
        '<testcase classname="tests.site.test_site" name="c" time="4.0"><failure message="x"/></testcase>'
        '<testcase classname="chapters.00_preliminaries.ipynb" name="Cell 0" time="10.0"/>'
        '<testcase classname="chapters.00_preliminaries.ipynb" name="Cell 1" time="5.0"/>'
        "</testsuite></testsuites>"
    )
    text = summarise(str(xml), folders=True)
    assert "tests: 1 failed, 3 passed, 1 skipped" in text
    assert "| 00_preliminaries.ipynb | 15 |" in text
    assert "| tests/unit | 4 |" in text and "| tests/site | 4 |" in text and "| chapters | 15 |" in text
    assert "| everything but the chapters | 8 |" in text
    assert "| folder |" not in summarise(str(xml))  # the GPU report's table stays as it was
    assert "- `tests.site.test_site::c`" in text
    # two runs (make test runs the site's checks with two workers, then the rest): their tests are
    # added up, and each run's own wall-clock time is listed
    site = tmp_path / "site.xml"
    site.write_text(
        '<testsuites><testsuite name="pytest" time="3.2">'
        '<testcase classname="tests.site.test_figures" name="d" time="6.0"/></testsuite></testsuites>'
    )
    both = summarise(str(site), str(xml), folders=True)
    assert "tests: 1 failed, 4 passed, 1 skipped" in both and "| tests/site | 10 |" in both
    assert f"| {site} | 1 | 3 |" in both and f"| {xml} | 5 | 0 |" in both
    # the wall-clock time of what is not a chapter: the site's run whole, and of a run that took
    # 46 s the share of its 7.5 s of tests outside the chapters in its 22.5 s
    timed = tmp_path / "timed.xml"
    timed.write_text(xml.read_text().replace('<testsuite name="pytest">', '<testsuite name="pytest" time="46">'))
    assert "| the tests outside the chapters (each run's time in proportion) | | 19 |" in summarise(
        str(site), str(timed), folders=True
    )  # 3.2 + 46 * 7.5 / 22.5 = 18.5


def _triton_found(share: float = 1.0, memory_growth: float = 1.0) -> dict:
    """What bench_triton.main returns, made up: every row at ``share`` of flash's throughput."""
    rows = [
        {"n": n, "E": e, "dtype": d, "causal": c, "mode": m, "ours_tflops": 300 * share, "theirs_tflops": 300.0,
         "share": share, "share_min": share * 0.95, "share_max": share * 1.05}
        for d in ("float16", "bfloat16") for e in (64, 128) for c in (False, True)
        for m in ("forward", "forward+backward") for n in (1024, 4096)
    ]  # fmt: skip
    memory = [{"n": 1024, "ours": 2**20, "theirs": 2**20}, {"n": 4096, "ours": 4 * memory_growth * 2**20, "theirs": 0}]
    errors = [{"dtype": "float16", "ours": 1e-3, "theirs": 1e-3}, {"dtype": "bfloat16", "ours": 8e-3, "theirs": 8e-3}]
    return {"rows": rows, "memory": memory, "errors": errors}


def test_the_triton_flop_count_is_the_papers():
    import bench_triton

    # 4 n^2 E per head forward; causal halves it; forward+backward is 3.5 times the forward
    assert bench_triton.flops(1024, 64, heads=1, causal=False, backward=False) == 4 * 1024**2 * 64
    assert bench_triton.flops(1024, 64, heads=2, causal=True, backward=True) == 3.5 * 4 * 1024**2 * 64


def test_the_triton_tables_go_before_the_end_marker_and_their_targets_after():
    import bench_gpu

    found = _triton_found()
    mha = [{"n": 64, "compare": "c", "ours_ms": 1.0, "theirs_ms": 1.0, "ratio": 1.0, "ratio_min": 1.0,
            "ratio_max": 1.0, "target": 1.2, "verdict": "meets"}]  # fmt: skip
    measured = {"device": "NVIDIA H100", "torch": "2.13.0+cu128", "cpu": "x", "cores": 16}
    text = bench_gpu.report([], mha, measured=measured, when="2026-12-07", triton=found)
    shown, after = text.split(END_MARKER)
    assert "### The book's Triton kernel / PyTorch's flash kernel" in shown and "| float16 | 128 | yes |" in shown
    assert "Triton kernel, forward, worst share | 1.00 | >= 0.9 | meets |" in after
    assert not any(v in shown for v in ("meets", "MISSES"))
    assert "Triton kernel" not in bench_gpu.report([], mha, measured=measured, when="2026-12-07")


@pytest.mark.parametrize(
    ("found", "missed"),
    [
        (_triton_found(share=0.8), "forward, worst share | 0.80 | >= 0.9 | MISSES"),
        (_triton_found(share=0.7), "forward+backward, worst share | 0.70 | >= 0.75 | MISSES"),
        (_triton_found(memory_growth=1.5), "| 1.50 | <= 1.1 (linear) | MISSES"),
    ],
)
def test_the_triton_targets_say_when_they_are_missed(found, missed):
    import bench_triton

    assert any(missed in line for line in bench_triton.targets(found))
