"""float16 and bfloat16: the book's kernels are at least as accurate as PyTorch's own.

Every kernel is run on the same half-precision inputs as ``F.scaled_dot_product_attention``,
and both are compared with a float64 reference computed from those very inputs (upcast, so the
reference sees exactly the numbers the kernels saw). A kernel passes when its root-mean-square
error is at most ``SLACK`` = 1.25 times PyTorch's and its largest error at most ``MAX_SLACK`` = 2
times PyTorch's largest, for the output and for each gradient.

Why these factors. The RMS error averages some 10^5 numbers: between seeds it moves by a few
percent. A kernel that keeps its sums in float32 and rounds once has 0.5 to 0.85 times PyTorch's
RMS error on CPU; one that keeps the running sums of the blocks in the input dtype has 2.2 to 6
times, and the naive formula, which rounds the ``(L, S)`` scores to the input dtype, 1.7 to 3.3
times (its output). 1.25 separates them with room on both sides. The largest error is luck: it
is about half a unit in the last place of whichever element rounds worst, and over 12 seeds
the float32 kernel's maximum was up to 1.6 times PyTorch's, so it gets 2, which still catches
a row or a block that is badly wrong.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnlab.attention import blockwise_attention, masked_softmax, scaled_dot_product_attention

HALF = [torch.float16, torch.bfloat16]
CASES = ["none", "causal", "bool", "float"]
SLACK, MAX_SLACK = 1.25, 2.0
B, H, L, S, E = 2, 4, 96, 128, 32  # L != S: the causal mask is top-left aligned, as PyTorch's


def _problem(dtype: torch.dtype, case: str, seed: int = 0):
    """Half-precision q, k, v, upstream gradient, mask and is_causal for one case."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, n, E, generator=g).to(dtype) for n in (L, S, S))
    upstream = torch.randn(B, H, L, E, generator=g).to(dtype)
    mask = None
    if case == "bool":
        mask = torch.rand(B, 1, L, S, generator=g) > 0.5  # True = takes part
        mask[:, :, :3] = False  # three queries with nothing to attend to
    elif case == "float":
        mask = torch.randn(L, S, generator=g).masked_fill(torch.rand(L, S, generator=g) < 0.3, float("-inf"))
        mask[:2] = float("-inf")  # two fully masked queries
        mask = mask.to(dtype)  # in the inputs' dtype, so that every kernel adds the same numbers
    return q, k, v, upstream, mask, case == "causal"


def _empty_rows(mask: torch.Tensor | None) -> torch.Tensor | None:
    """(..., L, 1) True where a query has no key: the book gives it zeros, PyTorch may not."""
    if mask is None:
        return None
    return ~mask.any(-1, keepdim=True) if mask.dtype == torch.bool else torch.isneginf(mask).all(-1, keepdim=True)


def _torch_kernel(q, k, v, mask, causal):
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    empty = _empty_rows(mask)
    return out if empty is None else out.masked_fill(empty, 0.0)  # the book's convention, to compare


KERNELS = {
    "blockwise": lambda q, k, v, mask, causal: blockwise_attention(q, k, v, mask, is_causal=causal, block_size=32),
    "naive": lambda q, k, v, mask, causal: scaled_dot_product_attention(
        q, k, v, mask, is_causal=causal, backend="naive"
    ),
    "fast": lambda q, k, v, mask, causal: scaled_dot_product_attention(q, k, v, mask, is_causal=causal, backend="fast"),
}


def _run(kernel, q, k, v, upstream, mask, causal, dtype):
    """Output and gradients of ``kernel`` on the inputs converted to ``dtype``."""
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    if mask is not None and mask.is_floating_point():
        mask = mask.to(dtype)
    out = kernel(q, k, v, mask, causal)
    return (out, *torch.autograd.grad(out, (q, k, v), upstream.to(dtype)))


def _errors(kernel, dtype, case, seed=0, grads=True):
    """Max abs errors of ``kernel`` and of PyTorch's kernel against float64, per tensor."""
    q, k, v, upstream, mask, causal = _problem(dtype, case, seed)
    reference = KERNELS["naive"]  # in float64 rounding is negligible; zeros for empty rows
    want = _run(reference, q, k, v, upstream, mask, causal, torch.float64)
    ours = _run(kernel, q, k, v, upstream, mask, causal, dtype)
    theirs = _run(_torch_kernel, q, k, v, upstream, mask, causal, dtype)
    names = ["output", "dq", "dk", "dv"][: 4 if grads else 1]
    for got in (ours, theirs):
        assert got[0].dtype == dtype
        assert all(torch.isfinite(t).all() for t in got)
    # without grads, the output alone: names is then shorter than the runs' results
    return {n: (_error(o, w), _error(t, w)) for n, o, t, w in zip(names, ours, theirs, want, strict=False)}


def _error(got: torch.Tensor, want: torch.Tensor) -> tuple[float, float]:
    """(RMS, max) of the absolute error against the float64 ``want``."""
    diff = (got.double() - want).abs()
    return diff.pow(2).mean().sqrt().item(), diff.max().item()


def _assert_as_accurate(errors):
    for name, ((rms, largest), (rms_torch, largest_torch)) in errors.items():
        assert rms <= SLACK * rms_torch, f"{name}: RMS error {rms:.3g}, PyTorch's {rms_torch:.3g}"
        assert largest <= MAX_SLACK * largest_torch, f"{name}: max error {largest:.3g}, PyTorch's {largest_torch:.3g}"


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_blockwise_is_as_accurate_as_torch(dtype, case):
    """Running max, sum, accumulator and log-sum-exp in float32, like FlashAttention."""
    for seed in range(2):
        _assert_as_accurate(_errors(KERNELS["blockwise"], dtype, case, seed))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_fast_backend_is_as_accurate_as_torch(dtype, case):
    _assert_as_accurate(_errors(KERNELS["fast"], dtype, case))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_naive_backend_is_as_accurate_as_torch(dtype, case):
    _assert_as_accurate(_errors(KERNELS["naive"], dtype, case, grads=False))


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_output_dtype_is_the_input_dtype(kernel, dtype):
    q, k, v, _, _, _ = _problem(dtype, "none")
    float32_mask = torch.zeros(L, S).masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    for mask in (None, float32_mask, float32_mask.to(dtype), float32_mask == 0):
        assert KERNELS[kernel](q, k, v, mask, False).dtype == dtype


@pytest.mark.parametrize("case", ["none", "bool", "float"])
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_masked_softmax_is_as_accurate_as_torch_softmax(dtype, case):
    q, k, _, _, mask, _ = _problem(dtype, case)
    scores = (q @ k.transpose(-2, -1)) * 4  # (B, H, L, S); large scores, where rounding shows
    got = masked_softmax(scores, mask)
    assert got.dtype == dtype
    want = masked_softmax(
        scores.double(), None if mask is None else (mask if mask.dtype == torch.bool else mask.double())
    )
    if mask is None:
        theirs = torch.softmax(scores, -1)
    elif mask.dtype == torch.bool:
        theirs = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
    else:
        theirs = torch.softmax(scores + mask, -1)
    keep = ~_empty_rows(mask).expand_as(scores) if mask is not None else torch.ones_like(scores, dtype=torch.bool)
    assert torch.equal(got[~keep], torch.zeros_like(got[~keep]))  # fully masked rows: zeros, PyTorch's NaN
    _assert_as_accurate({"weights": (_error(got[keep], want[keep]), _error(theirs[keep], want[keep]))})
