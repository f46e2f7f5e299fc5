"""The complexity comparison of "Why self-attention", as formulas and as measurements.

Introduced in chapter 7. Vaswani et al. (2017, Table 1) compare layer types by three numbers,
for sequence length ``n``, model size ``d``, kernel width ``k`` and window ``r``:

=====================  ==================  ====================  ===================
layer                  cost per layer      sequential ops        maximum path length
=====================  ==================  ====================  ===================
self-attention         O(n^2 d)            O(1)                  O(1)
recurrent              O(n d^2)            O(n)                  O(n)
convolutional          O(k n d^2)          O(1)                  O(log_k n)
restricted attention   O(r n d)            O(1)                  O(n / r)
=====================  ==================  ====================  ===================

``layer_flops`` gives the exact forward FLOP counts behind those orders (a multiply-add counts
as two FLOPs, as in ``torch.utils.flop_counter``), ``table_row`` the other two columns, and
``attention_memory`` the bytes the attention kernels hold. ``measure`` times a function (median
of repeats) and records its peak memory: ``torch.cuda.max_memory_allocated`` on CUDA, and on
the CPU the largest total of live tensor bytes seen by the profiler. ``count_flops`` runs a
function under ``FlopCounterMode``; ``fit_slope`` fits the exponent of a power law.

Chapter 9 adds the cost of a decoder's forward pass while it serves (``decoder_pass_cost``):
the FLOPs of ``new_tokens`` tokens after a cache of ``cache_length``, the bytes of weights and
cache it reads, and their ratio, the arithmetic intensity that places prefill and decode on a
roofline.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch.utils.flop_counter import FlopCounterMode

from attnlab.validation import check_int, check_ints

__all__ = [
    "LAYERS",
    "Measurement",
    "PassCost",
    "attention_memory",
    "count_flops",
    "decoder_pass_cost",
    "fit_slope",
    "layer_flops",
    "measure",
    "table_row",
]

LAYERS = ("self-attention", "recurrent", "convolutional", "restricted")


def layer_flops(layer: str, n: int, d: int, *, k: int = 3, r: int = 16, cell: str = "lstm") -> int:
    """Forward FLOPs of one layer on one sequence of ``n`` vectors of size ``d`` (chapter 7).

    - ``"self-attention"``: the scores ``Q K^T`` and the weighted sum ``A V``, ``4 n^2 d``
      (the projections, ``8 n d^2``, are common to every attention layer and left out, as in
      the paper's table);
    - ``"restricted"``: the same over a window of ``2r + 1`` keys, ``4 n (2r + 1) d``;
    - ``"recurrent"``: an LSTM layer, four gates each with an input and a hidden matrix,
      ``16 n d^2`` (``cell="rnn"``: one gate, ``4 n d^2``);
    - ``"convolutional"``: a 1-D convolution of width ``k`` from ``d`` to ``d`` channels,
      ``2 k n d^2``.

    Biases, activations and the softmax are lower-order terms and are not counted.
    """
    check_ints("layer_flops", n=n, d=d, k=k, r=r)
    if layer == "self-attention":
        return 4 * n * n * d
    if layer == "restricted":
        return 4 * n * min(2 * r + 1, n) * d
    if layer == "recurrent":
        gates = {"lstm": 4, "gru": 3, "rnn": 1}
        if cell not in gates:
            raise ValueError(f"layer_flops: cell must be one of {sorted(gates)}, got {cell!r}")
        return 2 * 2 * gates[cell] * n * d * d
    if layer == "convolutional":
        return 2 * k * n * d * d
    raise ValueError(f"layer_flops: layer must be one of {LAYERS}, got {layer!r}")


def table_row(layer: str, n: int, *, k: int = 3, r: int = 16) -> tuple[int, int]:
    """``(sequential operations, maximum path length)`` of a layer type for length ``n`` (chapter 7).

    The path length is the number of layers a signal needs to travel between the two most
    distant positions: ``n - 1`` steps of a recurrence, ``ceil(log_k n)`` stacked convolutions
    (with dilations growing by ``k``; ``ceil((n - 1) / (k - 1))`` without), one attention layer,
    ``ceil((n - 1) / r)`` restricted layers.
    """
    check_ints("table_row", n=n, k=k, r=r)
    if layer == "self-attention":
        return 1, 1
    if layer == "recurrent":
        return n, max(n - 1, 1)
    if layer == "convolutional":
        return 1, max(1, math.ceil(math.log(n, k) - 1e-9)) if k > 1 else n
    if layer == "restricted":
        return 1, max(1, math.ceil((n - 1) / r))
    raise ValueError(f"table_row: layer must be one of {LAYERS}, got {layer!r}")


def attention_memory(
    n: int,
    *,
    batch: int = 1,
    heads: int = 1,
    kernel: str = "naive",
    block_size: int = 256,
    bytes_per: int = 4,
    backward: bool = False,
) -> int:
    """Bytes of attention weights a kernel holds at once for ``L = S = n`` (chapter 7).

    ``"naive"``: the scores and the weights, ``2 B H n^2`` numbers (forward); with ``backward``
    it keeps the weights for the gradient and creates gradients of the same size, ``3 B H n^2``.
    ``"blockwise"``: one block of scores and weights, ``2 B H n b``, plus two numbers per query.
    Inputs and outputs (``O(n d)``) are not counted.
    """
    check_ints("attention_memory", n=n, batch=batch, heads=heads, block_size=block_size, bytes_per=bytes_per)
    if kernel == "naive":
        return (3 if backward else 2) * batch * heads * n * n * bytes_per
    if kernel == "blockwise":
        return (2 * n * min(block_size, n) + 2 * n) * batch * heads * bytes_per
    raise ValueError(f"attention_memory: kernel must be 'naive' or 'blockwise', got {kernel!r}")


def count_flops(fn: Callable[[], object]) -> int:
    """FLOPs of ``fn()`` as counted by ``torch.utils.flop_counter.FlopCounterMode``.

    The counter sees matrix products and convolutions. It does not count PyTorch's fused CPU
    attention kernel or its fused LSTM (both report 0 with torch 2.13), so those rows of the
    table are checked through the naive kernel and a GRU/RNN instead.
    """
    if not callable(fn):
        raise TypeError(f"count_flops: fn must be callable, got {type(fn).__name__}")
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops()


@dataclass
class Measurement:
    """Timings of repeated calls (seconds) and the peak memory of one call (bytes)."""

    times: list[float] = field(default_factory=list)
    peak_bytes: int | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.times)


@contextlib.contextmanager
def _stderr_silenced():
    """Send the process's stderr (file descriptor 2) to /dev/null for a moment.

    PyTorch's profiler backend writes timestamped start/stop lines there from C++, which would
    make every notebook output that measures memory differ from run to run.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(devnull)
        os.close(saved)


def _cpu_peak_bytes(fn: Callable[[], object]) -> int:
    """Largest total of tensor bytes allocated and not yet freed while ``fn()`` runs, on the CPU."""
    from torch.profiler import ProfilerActivity, profile

    with _stderr_silenced(), warnings.catch_warnings():
        # Some PyTorch versions (2.11, on the GPU machine) warn on every first profile of a process
        # that the profiler "clears events at the end of each cycle": true and irrelevant here (one
        # cycle), and a notebook cell would show it as output.
        warnings.filterwarnings("ignore", message=".*Profiler clears events", category=UserWarning)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
    # The profiler's raw records, one per allocation (bytes > 0) and per free (bytes < 0), in the
    # order they happened. (Summing each operator's net memory at its start instead counts the
    # frees made inside an operator before its allocations: a kernel that allocates its buffers
    # and frees them before it returns then shows a fraction of its peak, or none.)
    results = getattr(prof.profiler, "kineto_results", None)
    if results is None:
        raise RuntimeError("measure: this PyTorch's profiler keeps no memory records (kineto_results)")
    # sorted is stable: records of one instant keep their order
    records = sorted(
        ((e.start_ns(), e.nbytes()) for e in results.events() if e.name() == "[memory]"), key=lambda record: record[0]
    )
    live = peak = 0
    for _, nbytes in records:
        live += nbytes
        peak = max(peak, live)
    return peak


def measure(
    fn: Callable[[], object],
    *,
    repeats: int = 5,
    warmup: int = 1,
    device: torch.device | str | None = None,
    memory: bool = True,
) -> Measurement:
    """Time ``fn()`` ``repeats`` times after ``warmup`` calls; record its peak memory (chapter 7).

        ``device`` is where ``fn`` computes (a function does not say where its tensors are, so
        ``None`` means the CPU). On CUDA (and MPS) the device is synchronised around each call; on
        CUDA the peak is ``torch.cuda.max_memory_allocated`` above what was allocated before the
        call. On the CPU the peak is the largest running sum of the profiler's allocation and free
    records, in the order they happened (one extra call). Report
        medians: single timings on a shared machine are noisy.
    """
    if not callable(fn):
        raise TypeError(f"measure: fn must be callable, got {type(fn).__name__}")
    check_ints("measure", repeats=repeats)
    check_int("measure", "warmup", warmup, low=0)
    device = torch.device("cpu" if device is None else device)
    cuda = device.type == "cuda"

    def sync() -> None:  # wait for the device's queued work, so that the clock sees it
        if cuda:
            torch.cuda.synchronize(device)
        elif device.type == "mps":
            torch.mps.synchronize()

    for _ in range(warmup):
        fn()
    result = Measurement()
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        result.times.append(time.perf_counter() - start)
    if memory:
        if cuda:
            sync()
            before = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            fn()
            sync()
            result.peak_bytes = torch.cuda.max_memory_allocated(device) - before
        else:
            result.peak_bytes = _cpu_peak_bytes(fn)
    return result


def fit_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ``log y`` against ``log x``: the exponent ``p`` of ``y ~ x^p``."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError(f"fit_slope: need two sequences of the same length >= 2, got {len(xs)} and {len(ys)}")
    if min(xs) <= 0 or min(ys) <= 0:
        raise ValueError("fit_slope: every x and y must be positive (logarithms)")
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum((a - mx) ** 2 for a in lx)


@dataclass(frozen=True)
class PassCost:
    """FLOPs and bytes of one forward pass (``decoder_pass_cost``); ``intensity`` = FLOPs per byte."""

    flops: int
    bytes: int

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes


def decoder_pass_cost(
    *,
    params: int,
    num_layers: int,
    d_model: int,
    kv_bytes_per_token: int,
    new_tokens: int,
    cache_length: int = 0,
    batch: int = 1,
    bytes_per_param: int = 2,
) -> PassCost:
    """The FLOPs and the bytes moved by one forward pass of a decoder-only model (chapter 9).

    ``batch`` sequences each feed ``new_tokens`` tokens after ``cache_length`` cached ones: prefill
    is ``cache_length = 0`` and ``new_tokens`` the prompt's length; a decoding step is
    ``new_tokens = 1``. FLOPs: ``2 * params`` per token for the matrix products (a multiply-add
    is two FLOPs; the embedding lookup is counted as a product, a slight overcount), and per
    layer ``4 * d_model`` for each (query, key) pair the causal mask lets through (``2 d`` for the
    scores, ``2 d`` for the weighted sum, over all heads). Bytes: the weights, read once per pass
    whatever the batch (``params * bytes_per_param``), and each sequence's cache, read and its
    new positions written (``kv_bytes_per_token`` per position, all layers). Activations are left
    out: a decoding step's are a few vectors per sequence, but a long prefill's can outgrow the
    chip's caches and add traffic of the order of the weights', so its intensity here is an upper
    bound. The ratio, ``intensity`` (Williams et al. 2009's operational intensity), says whether
    a pass is limited by arithmetic or by memory: the roofline model.
    """
    check_ints("decoder_pass_cost", params=params, num_layers=num_layers, d_model=d_model)
    check_ints("decoder_pass_cost", kv_bytes_per_token=kv_bytes_per_token, new_tokens=new_tokens, batch=batch)
    check_ints("decoder_pass_cost", bytes_per_param=bytes_per_param)
    check_int("decoder_pass_cost", "cache_length", cache_length, low=0)
    # listing: pass-cost
    pairs = new_tokens * cache_length + new_tokens * (new_tokens + 1) // 2  # causal (query, key) pairs
    flops = batch * (2 * params * new_tokens + 4 * num_layers * d_model * pairs)
    weights = params * bytes_per_param  # read once, shared by the batch
    cache = batch * kv_bytes_per_token * (cache_length + new_tokens)  # read, and the new positions written
    # end listing: pass-cost
    return PassCost(flops, weights + cache)
