"""Benchmark 6 (CUDA only): blockwise attention against PyTorch's flash kernel in half precision.

B = 1, H = 8, E = 64, n = 1024 .. 16384, float16 and bfloat16, forward and forward+backward:
the ratio blockwise / torch's fused kernel restricted to the flash backend, timed interleaved
in the same run, and each kernel's largest error against a float64 reference (n = 1024). Then
`MultiHeadAttention` against `nn.MultiheadAttention` (bench_mha.py) and the book's Triton kernel
against the flash kernel (bench_triton.py) on the same GPU.
Run by ``scripts/test_gpu.sh`` (``make test-gpu``); ``python benchmarks/bench_gpu.py [--quick]
[--times FILE] [--out FILE]``. Writes ``results/gpu-cuda.json`` and prints the Markdown of the
Performance appendix's GPU section (``benchmarks/results-gpu.md`` is that of the last GPU run).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
from datetime import date
from pathlib import Path

import bench_triton
import torch
import torch.nn.functional as F
from _common import interleaved, machine, save

from attnlab.attention import blockwise_attention

MARKER = "<!-- the book's Performance appendix includes everything below this line -->"
END_MARKER = "<!-- the book's Performance appendix includes everything above this line -->"


def _flash():
    """Restrict torch's fused attention to the flash backend (when this torch can)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # older torch: let it choose
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION])


def _fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backward: bool) -> None:
    with _flash():
        out = F.scaled_dot_product_attention(q, k, v)
    if backward:
        out.sum().backward()


def _blockwise(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backward: bool) -> None:
    out = blockwise_attention(q, k, v, block_size=256)
    if backward:
        out.sum().backward()


def _errors(device: torch.device, dtype: torch.dtype, n: int = 1024) -> tuple[float, float]:
    gen = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(1, 8, n, 64, generator=gen, dtype=torch.float64) for _ in range(3))
    reference = F.scaled_dot_product_attention(q, k, v)
    q, k, v = (t.to(device, dtype) for t in (q, k, v))
    with _flash():
        theirs = F.scaled_dot_product_attention(q, k, v)
    ours = blockwise_attention(q, k, v, block_size=256)
    return (
        (ours.double().cpu() - reference).abs().max().item(),
        (theirs.double().cpu() - reference).abs().max().item(),
    )


def main(quick: bool = False) -> list[dict]:
    if not torch.cuda.is_available():
        print("bench_gpu: no CUDA device; nothing to measure", file=sys.stderr)
        return []
    device = torch.device("cuda")
    rows = []
    sizes = [1024, 4096] if quick else [1024, 2048, 4096, 8192, 16384]
    for dtype in (torch.float16, torch.bfloat16):
        ours_err, theirs_err = _errors(device, dtype)
        rows.append(
            {
                "mode": "max error vs float64 (n = 1024)",
                "dtype": str(dtype).removeprefix("torch."),
                "ours": ours_err,
                "theirs": theirs_err,
            }
        )
        for n in sizes:
            q, k, v = (torch.randn(1, 8, n, 64, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
            for mode, backward in (("forward", False), ("forward+backward", True)):
                ours = functools.partial(_blockwise, q, k, v, backward)
                theirs = functools.partial(_fused, q, k, v, backward)
                if not backward:
                    ours, theirs = torch.no_grad()(ours), torch.no_grad()(theirs)
                r = interleaved(ours, theirs, device=device, repeats=3 if quick else 9)
                rows.append({"n": n, "mode": mode, "dtype": str(dtype).removeprefix("torch."), **r})
    save("gpu" + ("-quick" if quick else ""), rows, device)
    return rows


def report(
    rows: list[dict],
    mha_rows: list[dict],
    times: str = "",
    *,
    measured: dict | None = None,
    when: str | None = None,
    notes: str = "",
    triton: dict | None = None,
) -> str:
    """The Markdown of the Performance appendix's GPU section: the machine, then each table.

    ``measured`` is the machine the rows come from (``machine()`` of that run, as saved in
    ``results/gpu-cuda.json``; this machine's by default), ``when`` its date, ``notes`` any
    paragraph to print under the header (where the figures of one section came from another run),
    ``triton`` what ``bench_triton.main`` measured (its tables and targets are added when given).
    """
    m = measured or machine()
    text = [
        f"GPU: {m['device']}, torch {m['torch']}; {m['cpu']}, {m['cores']} cores; measured {when or date.today()}.",
        "",
    ]
    if notes:
        text += [notes.strip(), ""]
    if times:
        text += [
            "### Executing each chapter on the GPU (`make test-gpu`, nbval in portable mode)",
            "",
            "Chapters that time something ran alone; the others ran side by side with the unit tests,",
            "so their times are upper bounds.",
            "",
            times.strip(),
            "",
        ]
    text += [  # the Performance appendix shows the tables from here on, the run's notes above stay here
        MARKER,
        "",
        f"Measured on an {m['device']} with torch {m['torch']}, {when or date.today()}.",
        "",
        "### `blockwise_attention` / PyTorch's flash kernel (B=1, H=8, E=64, block 256)",
        "",
        "| dtype | n | pass | blockwise (ms) | flash (ms) | ratio [range] |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    text += [
        f"| {r['dtype']} | {r['n']} | {r['mode']} | {r['ours_ms']:.2f} | {r['theirs_ms']:.2f} | {_ratio(r)} |"
        for r in rows
        if "n" in r
    ]
    text += [
        "",
        "### Largest error against a float64 reference (n = 1024)",
        "",
        "| dtype | blockwise | flash |",
        "| --- | --- | --- |",
    ]
    text += [f"| {r['dtype']} | {r['ours']:.2e} | {r['theirs']:.2e} |" for r in rows if "n" not in r]
    text += [
        "",
        "### `MultiHeadAttention`, training step (batch 64, embed 256, 8 heads), float32",
        "",
        "| n | comparison | ours (ms) | reference (ms) | ratio [range] |",
        "| --- | --- | --- | --- | --- |",
    ]
    text += [
        f"| {r['n']} | {r['compare']} | {r['ours_ms']:.2f} | {r['theirs_ms']:.2f} | {_ratio(r)} |" for r in mha_rows
    ]
    if triton:
        text += ["", bench_triton.render(triton).rstrip("\n")]
    text += ["", END_MARKER, "", "### Targets", "", "| row | measured | target | |", "| --- | --- | --- | --- |"]
    text += [
        f"| n = {r['n']}, {r['compare']} | {r['ratio']:.2f} | <= {r['target']} | {r['verdict']} |" for r in mha_rows
    ]
    if triton:
        text += bench_triton.targets(triton)
    return "\n".join(text) + "\n"


def _ratio(row: dict) -> str:
    return f"{row['ratio']:.2f} [{row['ratio_min']:.2f}, {row['ratio_max']:.2f}]"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="two sizes, few repeats (a smoke test)")
    parser.add_argument(
        "--times", type=Path, help="a Markdown table of chapter times to include (scripts/junit_times.py)"
    )
    parser.add_argument("--out", type=Path, help="write the Markdown here as well as printing it")
    args = parser.parse_args()
    found = main(args.quick)
    if found:
        import bench_mha

        times = args.times.read_text() if args.times else ""
        text = report(found, bench_mha.main(args.quick), times, triton=bench_triton.main(args.quick))
        print(text)
        if args.out:
            args.out.write_text(text)
