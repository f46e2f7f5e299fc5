"""Benchmark 7 (CUDA only): the book's Triton FlashAttention-2 kernel against PyTorch's flash kernel.

``attnlab.kernels.flash_attention`` and ``torch.nn.functional.scaled_dot_product_attention``
restricted to its flash backend, timed interleaved in the same run: B = 1, H = 16, n from 1024 to
16384, head sizes 64 and 128, float16 and bfloat16, causal and not, forward and forward+backward.
Throughput in TFLOPS counts 4 n^2 E FLOPs per head forward (half of them under the causal mask)
and 2.5 times that backward, as the FlashAttention papers do. Also: each kernel's peak memory
for forward+backward against n, and its largest error against a float64 reference.

The issue's targets (H100 or H200): forward at least 0.9 of torch's flash throughput, forward and
backward at least 0.75, memory linear in n. Run by ``bench_gpu.py`` (``make bench-gpu``,
``make test-gpu``); ``python benchmarks/bench_triton.py [--quick]`` prints its tables alone.
"""

from __future__ import annotations

import argparse
import functools
import sys

import torch
import torch.nn.functional as F
from _common import interleaved, save

from attnlab.kernels import flash_attention, triton_available

TARGETS = {"forward": 0.9, "forward+backward": 0.75}  # our throughput / torch's flash, at least


def flops(n: int, head_dim: int, *, heads: int, causal: bool, backward: bool) -> float:
    """FLOPs of one call: 4 n^2 E per head forward, halved under the causal mask; x3.5 with backward."""
    forward = 4 * n * n * head_dim * heads / (2 if causal else 1)
    return forward * (3.5 if backward else 1.0)


def _torch_flash(q, k, v, causal: bool, backward: bool) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    if backward:
        out.backward(torch.ones_like(out))


def _ours(q, k, v, causal: bool, backward: bool) -> None:
    out = flash_attention(q, k, v, causal=causal)
    if backward:
        out.backward(torch.ones_like(out))


def case(n: int, head_dim: int, dtype: torch.dtype, causal: bool, mode: str, *, device, heads=16, repeats=9) -> dict:
    """One row: both kernels timed interleaved, their TFLOPS and our share of torch's throughput."""
    backward = mode == "forward+backward"
    q, k, v = (torch.randn(1, heads, n, head_dim, device=device, dtype=dtype, requires_grad=backward) for _ in range(3))
    ours = functools.partial(_ours, q, k, v, causal, backward)
    theirs = functools.partial(_torch_flash, q, k, v, causal, backward)
    r = interleaved(ours, theirs, device=device, repeats=repeats)
    work = flops(n, head_dim, heads=heads, causal=causal, backward=backward)
    return {
        "n": n,
        "E": head_dim,
        "dtype": str(dtype).removeprefix("torch."),
        "causal": causal,
        "mode": mode,
        "ours_tflops": work / (r["ours_ms"] / 1000) / 1e12,
        "theirs_tflops": work / (r["theirs_ms"] / 1000) / 1e12,
        "share": 1 / r["ratio"],  # our throughput / theirs, median over the pairs
        "share_min": 1 / r["ratio_max"],
        "share_max": 1 / r["ratio_min"],
    }


def peak_memory(n: int, fn, *, device, head_dim: int = 64, heads: int = 16) -> int:
    """Bytes allocated at the peak of one forward+backward, beyond the inputs (float16)."""
    q, k, v = (
        torch.randn(1, heads, n, head_dim, device=device, dtype=torch.float16, requires_grad=True) for _ in range(3)
    )
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    fn(q, k, v, False, True)
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - base


def errors(dtype: torch.dtype, *, device, n: int = 1024, head_dim: int = 64) -> dict:
    """Largest forward error of each kernel against float64, causal (8 heads, n = 1024)."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 8, n, head_dim, generator=gen, dtype=torch.float64) for _ in range(3))
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    q, k, v = (t.to(device, dtype) for t in (q, k, v))
    ours = flash_attention(q, k, v, causal=True).double().cpu()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True).double().cpu()
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "ours": (ours - reference).abs().max().item(),
        "theirs": (theirs - reference).abs().max().item(),
    }


def main(quick: bool = False) -> dict:
    """Every measurement on the CUDA device, saved to results/triton-cuda.json; {} without one."""
    if not torch.cuda.is_available() or not triton_available():
        print("bench_triton: needs a CUDA device and Triton; nothing to measure", file=sys.stderr)
        return {}
    device = torch.device("cuda")
    sizes = [1024, 4096] if quick else [1024, 2048, 4096, 8192, 16384]
    rows = [
        case(n, e, dtype, causal, mode, device=device, repeats=3 if quick else 9)
        for dtype in (torch.float16, torch.bfloat16)
        for e in (64, 128)
        for causal in (False, True)
        for mode in ("forward", "forward+backward")
        for n in sizes
    ]
    memory = [
        {"n": n, "ours": peak_memory(n, _ours, device=device), "theirs": peak_memory(n, _torch_flash, device=device)}
        for n in sizes
    ]
    errs = [errors(dtype, device=device) for dtype in (torch.float16, torch.bfloat16)]
    found = {"rows": rows, "memory": memory, "errors": errs}
    save("triton" + ("-quick" if quick else ""), [found], device)
    return found


def render(found: dict) -> str:
    """The Markdown tables of the Performance appendix: throughput, memory, error; then the targets."""
    text = [
        "### The book's Triton kernel / PyTorch's flash kernel (B=1, H=16)",
        "",
        "Throughput in TFLOPS; the share is ours / flash, the median over interleaved pairs [range].",
        "",
        "| dtype | E | causal | pass | n | Triton (TFLOPS) | flash (TFLOPS) | share [range] |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    text += [
        f"| {r['dtype']} | {r['E']} | {'yes' if r['causal'] else 'no'} | {r['mode']} | {r['n']} | "
        f"{r['ours_tflops']:.0f} | {r['theirs_tflops']:.0f} | "
        f"{r['share']:.2f} [{r['share_min']:.2f}, {r['share_max']:.2f}] |"
        for r in found["rows"]
    ]
    text += [
        "",
        "### Peak memory of forward+backward beyond the inputs (float16, E=64, H=16)",
        "",
        "| n | Triton (MiB) | flash (MiB) |",
        "| --- | --- | --- |",
    ]
    text += [f"| {m['n']} | {m['ours'] / 2**20:.1f} | {m['theirs'] / 2**20:.1f} |" for m in found["memory"]]
    text += ["", "### Largest error against float64 (causal, n = 1024)", "", "| dtype | Triton | flash |"]
    text += ["| --- | --- | --- |"]
    text += [f"| {e['dtype']} | {e['ours']:.2e} | {e['theirs']:.2e} |" for e in found["errors"]]
    return "\n".join(text) + "\n"


def targets(found: dict) -> list[str]:
    """Rows of the Targets table: the worst share per pass, and memory's growth from n to 4n or more."""
    lines = []
    for mode, target in TARGETS.items():
        worst = min(r["share"] for r in found["rows"] if r["mode"] == mode)
        lines.append(f"| Triton kernel, {mode}, worst share | {worst:.2f} | >= {target} | "
                     f"{'meets' if worst >= target else 'MISSES'} |")  # fmt: skip
    memory = sorted(found["memory"], key=lambda m: m["n"])
    first, last = memory[0], memory[-1]
    growth = (last["ours"] / first["ours"]) / (last["n"] / first["n"])
    lines.append(
        f"| Triton kernel, memory growth / length growth (n = {first['n']} to {last['n']}) | {growth:.2f} | "
        f"<= 1.1 (linear) | {'meets' if growth <= 1.1 else 'MISSES'} |"
    )
    return lines


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="two sizes, few repeats (a smoke test)")
    found = main(parser.parse_args().quick)
    if found:
        print(render(found))
        print("\n".join(targets(found)))
