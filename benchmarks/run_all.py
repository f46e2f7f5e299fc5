"""Run every benchmark and write ``benchmarks/results.md``: ``make bench`` (or ``--quick``).

Each script times ours against PyTorch's counterpart in the same run, interleaved, and reports
the median ratio and its range; this collects them into one table with the machine described.
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
from _common import machine


def _ratio(row: dict) -> str:
    return f"{row['ratio']:.2f} [{row['ratio_min']:.2f}, {row['ratio_max']:.2f}]"


RESULTS = Path(__file__).resolve().parent / "results.md"
CHAPTERS_TITLE = "5. Executing each chapter in a fresh kernel"
# Section 3's causal row: causal blockwise attention against the fused kernel without a mask.
CAUSAL_LABEL = "causal forward (fused: no mask)"
CAUSAL_NOTE = (
    "The causal row times causal blockwise attention, which skips the blocks above the diagonal, "
    "against the fused kernel *without* a mask: it measures what skipping saves, not a race "
    "between two causal kernels."
)


def retime_chapters(names: list[str], out: Path = RESULTS) -> None:
    """Time only the chapters ``names`` again and replace their rows in section 5 of an existing
    ``results.md`` (after a change to those chapters alone). Every other row, and the machine
    line, are kept: run it on the machine that wrote them."""
    torch.set_num_threads(2)
    rows = {r["chapter"]: r for r in bench_chapters.main(only=names)}
    missing = sorted(set(names) - set(rows))
    if missing:
        raise SystemExit(f"no such chapter: {', '.join(missing)}")

    def chapter_row(r: dict) -> str:
        return f"| `{r['chapter']}` | {r['title']} | {r['seconds']:.0f} | <= {r['target']:.0f} | {r['verdict']} |"

    result, section, chapter_rows = [], None, {}
    for line in out.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            section = line[3:]
        if section == CHAPTERS_TITLE and line.startswith("| `"):  # collected, written back in order below
            name = line.split("`")[1]
            chapter_rows[name] = chapter_row(rows[name]) if name in rows else line
            continue
        if section == CHAPTERS_TITLE and chapter_rows and not line.startswith("|"):  # the end of the table
            chapter_rows.update({n: chapter_row(r) for n, r in rows.items() if n not in chapter_rows})
            result += [chapter_rows[n] for n in sorted(chapter_rows)]
            chapter_rows = {}
        result.append(line)
    if chapter_rows:  # the table ended the file
        chapter_rows.update({n: chapter_row(r) for n, r in rows.items() if n not in chapter_rows})
        result += [chapter_rows[n] for n in sorted(chapter_rows)]
    out.write_text("\n".join(result) + "\n")
    print(f"updated {out} for {sorted(rows)}")


def main(quick: bool, out: Path = RESULTS) -> None:
    torch.set_num_threads(2)
    sections = []
    rows = bench_sdpa.main(quick)
    lines = ["| n | pass | ours (ms) | torch (ms) | ratio [range] | target | |", "|---|---|---|---|---|---|---|"]
    lines += [
        f"| {r['n']} | {r['mode']} | {r['ours_ms']:.2f} | {r['theirs_ms']:.2f} | {_ratio(r)} | "
        f"<= {r['target']} | {r['verdict']} |"
        for r in rows
    ]
    sections.append(('1. `scaled_dot_product_attention(backend="fast")` / PyTorch\'s (B=1, H=8, E=64)', lines))
    rows = bench_mha.main(quick)
    lines = [
        "| n | comparison | ours (ms) | reference (ms) | ratio [range] | target | |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['n']} | {r['compare']} | {r['ours_ms']:.2f} | {r['theirs_ms']:.2f} | {_ratio(r)} | "
        f"<= {r['target']} | {r['verdict']} |"
        for r in rows
    ]
    sections.append(("2. `MultiHeadAttention`, training step (batch 64, embed 256, 8 heads)", lines))
    rows = bench_blockwise.main(quick)
    timed = [r for r in rows if "ratio" in r]
    lines = ["| n | pass | blockwise (ms) | fused (ms) | ratio [range] | target | |", "|---|---|---|---|---|---|---|"]
    lines += [
        f"| {r['n']} | {CAUSAL_LABEL if r['mode'] == 'causal forward' else r['mode']} | {r['ours_ms']:.2f} | "
        f"{r['theirs_ms']:.2f} | {_ratio(r)} | <= {r['target']} | {r['verdict']} |"
        for r in timed
    ]
    if any(r["mode"] == "causal forward" for r in timed):
        lines += ["", CAUSAL_NOTE]
    lines += ["", "| n | MB allocated at the peak, forward+backward (block 64) |", "|---|---|"]
    lines += [f"| {r['n']} | {r['extra_mb']:.1f} |" for r in rows if "extra_mb" in r]
    sections.append(("3. `blockwise_attention` / PyTorch's fused kernel (B=1, H=8, E=64, block 256)", lines))
    rows = bench_training.main(quick)
    lines = [
        f"| model | parameters | seconds of training to 99.5% | steps | epochs | exact match, "
        f"{bench_training.held_out(quick)} | target | |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        target = f"<= {r['target']:.0f} s" if r["target"] else ""
        if r["seconds"] is None:
            lines.append(
                f"| {r['model']} | {r['parameters']:,} | not reached in {r['steps_run']} steps | | | "
                f"{r['final_exact']:.4f} | {target} | {r['verdict']} |"
            )
        else:
            lines.append(
                f"| {r['model']} | {r['parameters']:,} | {r['seconds']:.1f} | {r['steps']} | "
                f"{r['epochs']:.2f} | {r['exact']:.4f} | {target} | {r['verdict']} |"
            )
    sections.append(
        (
            "4. Training time to 99.5% held-out exact match on dates (batch 128, evaluated every "
            f"{bench_training.every(quick)} steps on {bench_training.held_out(quick)} unseen dates)",
            lines,
        )
    )
    rows = bench_chapters.main(quick)
    lines = ["| chapter | title | seconds | target | |", "|---|---|---|---|---|"]
    lines += [
        f"| `{r['chapter']}` | {r['title']} | {r['seconds']:.0f} | <= {r['target']:.0f} | {r['verdict']} |"
        for r in rows
    ]
    sections.append((CHAPTERS_TITLE, lines))
    m = machine()
    text = [
        "# Benchmarks",
        "",
        "<!-- the book's Performance appendix includes everything below this line -->",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['threads']} PyTorch threads, torch {m['torch']}, "
        f"device {m['device']}." + (" Quick run (smaller sizes, 3 repeats)." if quick else ""),
        "Ratios are ours / PyTorch's, the median over interleaved repeats, with their range.",
        "",
    ]
    for title, lines in sections:
        text += [f"## {title}", "", *lines, ""]
    out.write_text("\n".join(text))
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
