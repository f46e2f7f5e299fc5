"""Benchmark 2: attnlab's MultiHeadAttention against torch.nn.MultiheadAttention.

Training step (forward + backward), batch 64, embed 256, 8 heads, n = 32 and 256, same weights
(``copy_from_torch``). Targets: fast path / torch at most 0.90 (ours faster); naive path / fast
path at most 2.0 at n = 256. Run: ``python benchmarks/bench_mha.py [--quick]``.
"""

from __future__ import annotations

import argparse

import torch
from _common import interleaved, save, verdict
from torch import nn

from attnlab.attention import MultiHeadAttention, copy_from_torch

TARGET_TORCH, TARGET_NAIVE = 0.90, 2.0


def _step(module, x, ours: bool):
    def call():
        out = module(x, x, x)[0] if ours else module(x, x, x, need_weights=False)[0]
        out.sum().backward()

    return call


def main(quick: bool = False) -> list[dict]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows = []
    batch = 16 if quick else 64
    for n in (32, 256):
        torch.manual_seed(0)
        theirs = nn.MultiheadAttention(256, 8, batch_first=True).to(device)
        fast = copy_from_torch(MultiHeadAttention(256, 8, backend="fast"), theirs).to(device)
        naive = copy_from_torch(MultiHeadAttention(256, 8, backend="naive"), theirs).to(device)
        x = torch.randn(batch, n, 256, device=device)
        r = interleaved(_step(fast, x, True), _step(theirs, x, False), device=device, repeats=3 if quick else 9)
        rows.append(
            {
                "n": n,
                "compare": "fast / torch.nn.MultiheadAttention",
                **r,
                "target": TARGET_TORCH,
                "verdict": verdict(r["ratio"], TARGET_TORCH),
            }
        )
        print(
            f"n={n:4} fast vs torch: {r['ours_ms']:8.2f} / {r['theirs_ms']:8.2f} ms  ratio {r['ratio']:.3f} "
            f"[{r['ratio_min']:.3f}, {r['ratio_max']:.3f}]  {rows[-1]['verdict']}"
        )
        if n == 256:
            r = interleaved(_step(naive, x, True), _step(fast, x, True), device=device, repeats=3 if quick else 9)
            rows.append(
                {
                    "n": n,
                    "compare": "naive / fast",
                    **r,
                    "target": TARGET_NAIVE,
                    "verdict": verdict(r["ratio"], TARGET_NAIVE),
                }
            )
            print(
                f"n={n:4} naive vs fast:  {r['ours_ms']:8.2f} / {r['theirs_ms']:8.2f} ms  ratio {r['ratio']:.3f} "
                f"[{r['ratio_min']:.3f}, {r['ratio_max']:.3f}]  {rows[-1]['verdict']}"
            )
    save("mha" + ("-quick" if quick else ""), rows, device)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="batch 16, few repeats (a smoke test)")
    main(parser.parse_args().quick)
