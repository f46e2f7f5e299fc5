"""Run every benchmark and write ``benchmarks/results.md``: ``make bench`` (or ``--quick``).

Each script times ours against PyTorch's counterpart in the same run, interleaved, and reports
the median ratio and its range; this collects them into one table with the machine described.
The Performance appendix shows the tables between the two markers, for readers; the section
after them, "Targets", holds each row's target and whether the run meets it, for maintainers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_blockwise
import bench_chapters
import bench_mha
import bench_sdpa
import bench_training
from _common import machine, verdict

MARKER = "<!-- the book's Performance appendix includes everything below this line -->"
END_MARKER = "<!-- the book's Performance appendix includes everything above this line -->"
RESULTS = Path(__file__).resolve().parent / "results.md"
CHAPTERS_TITLE = "5. Executing each chapter in a fresh kernel"
TARGETS_TITLE = "Targets"
TARGETS_HEADER = ["| section | row | measured | target | |", "|---|---|---|---|---|"]
# Section 3's causal row: causal blockwise attention against the fused kernel without a mask.
CAUSAL_LABEL = "causal forward (fused: no mask)"
CAUSAL_NOTE = (
    "The causal row times causal blockwise attention, which skips the blocks above the diagonal, "
    "against the fused kernel *without* a mask: it measures what skipping saves, not a race "
    "between two causal kernels."
)
MEMORY_TARGET_N = 16384  # blockwise's peak memory at this length has a target (target_mb_at_16384)


def _ratio(row: dict) -> str:
    return f"{row['ratio']:.2f} [{row['ratio_min']:.2f}, {row['ratio_max']:.2f}]"


def _target(section: int, label: str, measured: str, target: str, outcome: str) -> str:
    return f"| {section} | {label} | {measured} | {target} | {outcome} |"


def _chapter_rows(r: dict) -> tuple[str, str]:
    """A chapter's row in section 5 and its row in the targets table."""
    table = f"| `{r['chapter']}` | {r['title']} | {r['seconds']:.0f} |"
    target = _target(5, f"`{r['chapter']}`", f"{r['seconds']:.0f} s", f"<= {r['target']:.0f} s", r["verdict"])
    return table, target


def render(machine_line: str, rows: dict[str, list[dict]], quick: bool = False) -> str:
    """The Markdown of ``results.md`` from the benchmarks' rows (``sdpa``, ``mha``, ``blockwise``,
    ``training``, ``chapters``: the lists their ``main`` returns)."""
    sections, targets = [], []
    lines = ["| n | pass | ours (ms) | torch (ms) | ratio [range] |", "|---|---|---|---|---|"]
    for r in rows["sdpa"]:
        lines.append(f"| {r['n']} | {r['mode']} | {r['ours_ms']:.2f} | {r['theirs_ms']:.2f} | {_ratio(r)} |")
        targets.append(_target(1, f"n = {r['n']}, {r['mode']}", f"{r['ratio']:.2f}", f"<= {r['target']}", r["verdict"]))
    sections.append(('1. `scaled_dot_product_attention(backend="fast")` / PyTorch\'s (B=1, H=8, E=64)', lines))
    lines = ["| n | comparison | ours (ms) | reference (ms) | ratio [range] |", "|---|---|---|---|---|"]
    for r in rows["mha"]:
        lines.append(f"| {r['n']} | {r['compare']} | {r['ours_ms']:.2f} | {r['theirs_ms']:.2f} | {_ratio(r)} |")
        targets.append(
            _target(2, f"n = {r['n']}, {r['compare']}", f"{r['ratio']:.2f}", f"<= {r['target']}", r["verdict"])
        )
    sections.append(("2. `MultiHeadAttention`, training step (batch 64, embed 256, 8 heads)", lines))
    timed = [r for r in rows["blockwise"] if "ratio" in r]
    lines = ["| n | pass | blockwise (ms) | fused (ms) | ratio [range] |", "|---|---|---|---|---|"]
    for r in timed:
        mode = CAUSAL_LABEL if r["mode"] == "causal forward" else r["mode"]
        lines.append(f"| {r['n']} | {mode} | {r['ours_ms']:.2f} | {r['theirs_ms']:.2f} | {_ratio(r)} |")
        targets.append(_target(3, f"n = {r['n']}, {mode}", f"{r['ratio']:.2f}", f"<= {r['target']}", r["verdict"]))
    if any(r["mode"] == "causal forward" for r in timed):
        lines += ["", CAUSAL_NOTE]
    lines += ["", "| n | MB allocated at the peak, forward+backward (block 64) |", "|---|---|"]
    for r in rows["blockwise"]:
        if "extra_mb" in r:
            lines.append(f"| {r['n']} | {r['extra_mb']:.1f} |")
            if r["n"] == MEMORY_TARGET_N:
                limit = r["target_mb_at_16384"]
                outcome = verdict(round(r["extra_mb"], 1), limit)
                measured = f"{r['extra_mb']:.1f} MB"
                targets.append(_target(3, f"peak memory, n = {r['n']}", measured, f"<= {limit} MB", outcome))
    sections.append(("3. `blockwise_attention` / PyTorch's fused kernel (B=1, H=8, E=64, block 256)", lines))
    held_out = bench_training.held_out(quick)
    lines = [
        f"| model | parameters | seconds of training to 99.5% | steps | epochs | exact match, {held_out} |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows["training"]:
        if r["seconds"] is None:
            reached = f"not reached in {r['steps_run']} steps"
            lines.append(f"| {r['model']} | {r['parameters']:,} | {reached} | | | {r['final_exact']:.4f} |")
        else:
            reached = f"{r['seconds']:.1f} s"
            lines.append(
                f"| {r['model']} | {r['parameters']:,} | {r['seconds']:.1f} | {r['steps']} | "
                f"{r['epochs']:.2f} | {r['exact']:.4f} |"
            )
        if r["target"]:
            targets.append(_target(4, r["model"], reached, f"<= {r['target']:.0f} s", r["verdict"]))
    sections.append(
        (
            "4. Training time to 99.5% held-out exact match on dates (batch 128, evaluated every "
            f"{bench_training.every(quick)} steps on {held_out} unseen dates)",
            lines,
        )
    )
    lines = ["| chapter | title | seconds |", "|---|---|---|"]
    for r in rows["chapters"]:
        table, target = _chapter_rows(r)
        lines.append(table)
        targets.append(target)
    sections.append((CHAPTERS_TITLE, lines))
    text = ["# Benchmarks", "", MARKER, "", machine_line]
    text += ["Ratios are ours / PyTorch's, the median over interleaved repeats, with their range.", ""]
    for title, lines in sections:
        text += [f"## {title}", "", *lines, ""]
    text += [END_MARKER, "", f"## {TARGETS_TITLE}", ""]
    text += ["What the package aims for, row by row, and whether this run meets it.", ""]
    text += [*TARGETS_HEADER, *targets, ""]
    return "\n".join(text)


def retime_chapters(names: list[str], out: Path = RESULTS) -> None:
    """Time only the chapters ``names`` again and replace their rows in section 5 and in the
    targets of an existing ``results.md`` (after a change to those chapters alone). Every other
    row, and the machine line, are kept: run it on the machine that wrote them."""
    torch.set_num_threads(2)
    rows = {r["chapter"]: _chapter_rows(r) for r in bench_chapters.main(only=names)}
    missing = sorted(set(names) - set(rows))
    if missing:
        raise SystemExit(f"no such chapter: {', '.join(missing)}")
    out.write_text(replace_chapter_rows(out.read_text(encoding="utf-8"), rows))
    print(f"updated {out} for {sorted(rows)}")


def replace_chapter_rows(text: str, rows: dict[str, tuple[str, str]]) -> str:
    """``text`` with the chapters' rows of section 5 and of the targets replaced by ``rows``
    (chapter -> (its row in section 5, its row in the targets)); new chapters are added, and
    the chapters of each table kept in order."""

    def chapter_of(line: str, section: str) -> str | None:
        if section == CHAPTERS_TITLE and line.startswith("| `"):
            return line.split("`")[1]
        if section == TARGETS_TITLE and line.startswith("| 5 | `"):
            return line.split("`")[1]
        return None

    which = {CHAPTERS_TITLE: 0, TARGETS_TITLE: 1}
    result: list[str] = []
    section, held = "", {}

    def flush() -> None:
        nonlocal held
        if held:
            held.update({n: r[which[section]] for n, r in rows.items() if n not in held})
            result.extend(held[n] for n in sorted(held))
            held = {}

    for line in text.splitlines():
        if line.startswith("## "):
            flush()
            section = line[3:]
        name = chapter_of(line, section)
        if name is not None:
            held[name] = rows[name][which[section]] if name in rows else line
            continue
        if held and not line.startswith("|"):
            flush()
        result.append(line)
    flush()
    return "\n".join(result) + "\n"


def main(quick: bool, out: Path = RESULTS) -> None:
    torch.set_num_threads(2)
    rows = {
        "sdpa": bench_sdpa.main(quick),
        "mha": bench_mha.main(quick),
        "blockwise": bench_blockwise.main(quick),
        "training": bench_training.main(quick),
        "chapters": bench_chapters.main(quick),
    }
    m = machine()
    machine_line = (
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['threads']} PyTorch threads, torch {m['torch']}, "
        f"device {m['device']}." + (" Quick run (smaller sizes, 3 repeats)." if quick else "")
    )
    out.write_text(render(machine_line, rows, quick))
    print(f"wrote {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats (a smoke test)")
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS,
        help="where to write the markdown (default: benchmarks/results.md)",
    )
    parser.add_argument(
        "--chapters",
        nargs="+",
        metavar="NAME",
        help="only re-time these chapters (file stems) and update their rows in --out",
    )
    args = parser.parse_args()
    if args.chapters:
        retime_chapters(args.chapters, args.out)
    else:
        main(args.quick, args.out)
