"""The shared memory of the Triton kernel's default tiles, compiled for GPUs ahead of time on the CPU.

    python scripts/kernel_memory.py [--archs 75,80,86,90] [--dtypes fp16,bf16,fp32] [--heads 64,128]

Triton refuses a launch whose kernel needs more shared memory per block than the GPU has
(OutOfResources), which no CPU test would see: this compiles ``attnlab.kernels.flash_triton``'s
three kernels for each GPU architecture with the tiles ``tiles()`` picks, prints the bytes each
needs against the architecture's limit, and exits 1 when one does not fit. No GPU is needed (the
Triton wheel carries the CUDA compiler); float32 is the slowest to compile.
"""

from __future__ import annotations

import argparse
import os
import sys

# Compile for the GPU even on a machine without one: the interpreter must stay off here.
os.environ["TRITON_INTERPRET"] = "0"

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from attnlab.kernels import flash_triton as ft

# Shared memory per block a kernel may use (the opt-in maximum), by compute capability, in bytes:
# CUDA C++ Programming Guide, "Technical Specifications per Compute Capability".
LIMITS = {75: 64 * 1024, 80: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024, 90: 227 * 1024}
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
KERNELS = {"forward": ft.flash_forward_kernel, "backward dK dV": ft.flash_backward_kv_kernel,
           "backward dQ": ft.flash_backward_q_kernel}  # fmt: skip


def shared_bytes(kernel, arch: int, dtype: str, head_dim: int, causal: bool = True) -> int:
    """Bytes of shared memory ``kernel`` needs per block, compiled for ``sm_<arch>`` with the default tiles."""
    backward = kernel is not ft.flash_forward_kernel
    block_l, block_s, warps, stages = ft.tiles(DTYPES[dtype], head_dim, backward, (arch // 10, arch % 10))
    signature = {}
    for name in kernel.arg_names:
        if name in ("L", "S"):
            signature[name] = "i32"
        elif name == "scale":
            signature[name] = "fp32"
        elif name in ("LSE", "DELTA"):
            signature[name] = "*fp32"
        elif name == "KEEP":
            signature[name] = "*i8"
        elif name in ("Q", "K", "V", "O", "DO", "DQ", "DK", "DV"):
            signature[name] = "*" + dtype
        else:
            signature[name] = "constexpr"
    constants = dict(E=head_dim, EV=head_dim, BLOCK_E=head_dim, BLOCK_EV=head_dim, BLOCK_L=block_l,
                     BLOCK_S=block_s, CAUSAL=causal, HAS_KEEP=True)  # fmt: skip
    compiled = triton.compile(
        ASTSource(kernel, signature, constants),
        target=GPUTarget("cuda", arch, 32),
        options={"num_warps": warps, "num_stages": stages},
    )
    return int(compiled.metadata.shared)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archs", default="75,80,86,90")
    parser.add_argument("--dtypes", default="fp16,bf16,fp32")
    parser.add_argument("--heads", default="64,128")
    args = parser.parse_args()
    too_big = 0
    print(f"{'arch':>5} {'dtype':>5} {'E':>4}  {'kernel':<15} {'shared':>8} {'limit':>8}")
    for arch in map(int, args.archs.split(",")):
        for dtype in args.dtypes.split(","):
            if dtype == "bf16" and arch < 80:
                continue  # no bfloat16 matrix units before Ampere
            for head_dim in map(int, args.heads.split(",")):
                for name, kernel in KERNELS.items():
                    used = shared_bytes(kernel, arch, dtype, head_dim)
                    fits = used <= LIMITS[arch]
                    too_big += not fits
                    print(f"{arch:>5} {dtype:>5} {head_dim:>4}  {name:<15} {used:>8} {LIMITS[arch]:>8}"
                          f"{'' if fits else '  TOO BIG'}", flush=True)  # fmt: skip
    return 1 if too_big else 0


if __name__ == "__main__":
    sys.exit(main())
