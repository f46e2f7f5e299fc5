"""Benchmark 6 (CUDA only): blockwise attention against PyTorch's flash kernel in half precision.

B = 1, H = 8, E = 64, n = 1024 .. 16384, float16 and bfloat16, forward and forward+backward:
the ratio blockwise / torch's fused kernel restricted to the flash backend, timed interleaved
in the same run, and each kernel's largest error against a float64 reference (n = 1024). Then
`MultiHeadAttention` against `nn.MultiheadAttention` (bench_mha.py) on the same GPU.
Run by ``scripts/test_gpu.sh`` (``make test-gpu``); ``python benchmarks/bench_gpu.py [--quick]``.
Writes ``results/gpu-cuda.json`` and prints a Markdown table for the Performance appendix.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

import torch
import torch.nn.functional as F

from _common import interleaved, machine, save
from attnlab.attention import blockwise_attention


def _flash():
    """Restrict torch's fused attention to the flash backend (when this torch can)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # older torch: let it choose
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION])


def _errors(device: torch.device, dtype: torch.dtype, n: int = 1024) -> tuple[float, float]:
    gen = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(1, 8, n, 64, generator=gen, dtype=torch.float64) for _ in range(3))
    reference = F.scaled_dot_product_attention(q, k, v)
    q, k, v = (t.to(device, dtype) for t in (q, k, v))
    with _flash():
        theirs = F.scaled_dot_product_attention(q, k, v)
    ours = blockwise_attention(q, k, v, block_size=256)
    return ((ours.double().cpu() - reference).abs().max().item(),
            (theirs.double().cpu() - reference).abs().max().item())


def main(quick: bool = False) -> list[dict]:
    if not torch.cuda.is_available():
        print("bench_gpu: no CUDA device; nothing to measure", file=sys.stderr)
        return []
    device = torch.device("cuda")
    rows = []
    sizes = [1024, 4096] if quick else [1024, 2048, 4096, 8192, 16384]
    for dtype in (torch.float16, torch.bfloat16):
        ours_err, theirs_err = _errors(device, dtype)
        rows.append({"mode": "max error vs float64 (n = 1024)", "dtype": str(dtype).removeprefix("torch."),
                     "ours": ours_err, "theirs": theirs_err})
        for n in sizes:
            q, k, v = (torch.randn(1, 8, n, 64, device=device, dtype=dtype, requires_grad=True) for _ in range(3))

            def fused(backward: bool) -> None:
                with _flash():
                    out = F.scaled_dot_product_attention(q, k, v)
                if backward:
                    out.sum().backward()

            def blockwise(backward: bool) -> None:
                out = blockwise_attention(q, k, v, block_size=256)
                if backward:
                    out.sum().backward()

            for mode, backward in (("forward", False), ("forward+backward", True)):
                ours = (lambda b=backward: blockwise(b)) if backward else torch.no_grad()(lambda: blockwise(False))
                theirs = (lambda b=backward: fused(b)) if backward else torch.no_grad()(lambda: fused(False))
                r = interleaved(ours, theirs, device=device, repeats=3 if quick else 9)
                rows.append({"n": n, "mode": mode, "dtype": str(dtype).removeprefix("torch."), **r})
    save("gpu" + ("-quick" if quick else ""), rows, device)
    print(f"\nGPU: {machine()['device']}, torch {torch.__version__}\n")
    print("| dtype | n | mode | blockwise (ms) | flash (ms) | ratio [range] |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        if "n" in row:
            print(f"| {row['dtype']} | {row['n']} | {row['mode']} | {row['ours_ms']:.2f} | {row['theirs_ms']:.2f} | "
                  f"{row['ratio']:.2f} [{row['ratio_min']:.2f}, {row['ratio_max']:.2f}] |")
    for row in rows:
        if "n" not in row:
            print(f"\n{row['dtype']}: largest error against float64 at n = 1024: blockwise {row['ours']:.2e}, "
                  f"torch's flash kernel {row['theirs']:.2e}")
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="two sizes, few repeats (a smoke test)")
    main(parser.parse_args().quick)
