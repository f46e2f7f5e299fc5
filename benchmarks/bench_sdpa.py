"""Benchmark 1: attnlab's scaled_dot_product_attention (fast backend) against PyTorch's.

Target: median ratio at most 1.05, forward and forward+backward, n = 256 .. 4096
(B = 1, H = 8, E = 64). Run: ``python benchmarks/bench_sdpa.py [--quick]``.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from _common import interleaved, save, verdict

from attnlab.attention import scaled_dot_product_attention

TARGET = 1.05


def _timed(fn, q, k, v, mode):
    """A call of ``fn`` without gradients (forward) or followed by a backward pass."""

    def forward():
        with torch.no_grad():
            fn(q, k, v)

    def forward_backward():
        fn(q, k, v).sum().backward()

    return forward if mode == "forward" else forward_backward


def main(quick: bool = False) -> list[dict]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows = []
    for n in [256, 1024] if quick else [256, 1024, 4096]:
        q, k, v = (torch.randn(1, 8, n, 64, device=device, requires_grad=True) for _ in range(3))
        for mode in ("forward", "forward+backward"):
            ours = _timed(lambda q, k, v: scaled_dot_product_attention(q, k, v, backend="fast"), q, k, v, mode)
            theirs = _timed(F.scaled_dot_product_attention, q, k, v, mode)
            r = interleaved(ours, theirs, device=device, repeats=3 if quick else 9)
            rows.append({"n": n, "mode": mode, **r, "target": TARGET, "verdict": verdict(r["ratio"], TARGET)})
            print(
                f"n={n:5} {mode:17} ours {r['ours_ms']:8.2f} ms  torch {r['theirs_ms']:8.2f} ms  "
                f"ratio {r['ratio']:.3f} [{r['ratio_min']:.3f}, {r['ratio_max']:.3f}]  {rows[-1]['verdict']}"
            )
    save("sdpa" + ("-quick" if quick else ""), rows, device)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats (a smoke test)")
    main(parser.parse_args().quick)
