"""Formulas and measuring helpers of the complexity comparison (chapter 7)."""

from __future__ import annotations

import functools
import math

import pytest
import torch
from torch import nn

from attnlab.attention import scaled_dot_product_attention
from attnlab.complexity import (
    attention_memory,
    count_flops,
    decoder_pass_cost,
    fit_slope,
    layer_flops,
    measure,
    table_row,
)


@pytest.mark.parametrize("n,d", [(16, 8), (64, 32), (100, 24)])
def test_flop_formulas_match_the_flop_counter(n, d):
    q, k, v = (torch.randn(2, 3, n, d) for _ in range(3))
    counted = count_flops(lambda: scaled_dot_product_attention(q, k, v, backend="naive"))
    assert counted == 2 * 3 * layer_flops("self-attention", n, d)
    conv = nn.Conv1d(d, d, 5, padding=2, bias=False)
    assert count_flops(lambda: conv(torch.randn(1, d, n))) == layer_flops("convolutional", n, d, k=5)
    x = torch.randn(1, n, d)
    for cell, module in (("gru", nn.GRU(d, d, batch_first=True)), ("rnn", nn.RNN(d, d, batch_first=True))):
        assert count_flops(functools.partial(module, x)) == layer_flops("recurrent", n, d, cell=cell)


def test_orders_of_growth():
    assert layer_flops("self-attention", 200, 64) == 4 * layer_flops("self-attention", 100, 64)
    assert layer_flops("recurrent", 200, 64) == 2 * layer_flops("recurrent", 100, 64)
    assert layer_flops("restricted", 2000, 64, r=8) == 2 * layer_flops("restricted", 1000, 64, r=8)
    # self-attention is cheaper than an LSTM layer while 4 n^2 d < 16 n d^2, i.e. n < 4 d
    d = 64
    assert layer_flops("self-attention", 4 * d - 1, d) < layer_flops("recurrent", 4 * d - 1, d)
    assert layer_flops("self-attention", 4 * d + 1, d) > layer_flops("recurrent", 4 * d + 1, d)


def test_layer_flops_agree_with_pytorchs_flop_counter():
    """The chapter's counts, checked against PyTorch's own count of the layers' products."""
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode

    n, d, k = 50, 16, 3
    q, keys, v = (torch.randn(n, d) for _ in range(3))
    with FlopCounterMode(display=False) as counted:
        (q @ keys.T).softmax(-1) @ v  # scores and weighted sum: the projections are not counted
    assert counted.get_total_flops() == layer_flops("self-attention", n, d)
    conv = nn.Conv1d(d, d, k, padding=k // 2, bias=False)
    with FlopCounterMode(display=False) as counted:
        conv(torch.randn(1, d, n))
    assert counted.get_total_flops() == layer_flops("convolutional", n, d, k=k)
    cell, state = nn.LSTMCell(d, d), (torch.zeros(1, d), torch.zeros(1, d))
    with FlopCounterMode(display=False) as counted:  # nn.LSTM's fused kernel is not counted: unroll it
        for x in torch.randn(n, 1, d):
            state = cell(x, state)
    assert counted.get_total_flops() == layer_flops("recurrent", n, d)


def test_table_rows():
    assert table_row("self-attention", 1000) == (1, 1)
    assert table_row("recurrent", 1000) == (1000, 999)
    assert table_row("convolutional", 1000, k=3) == (1, math.ceil(math.log(1000, 3)))
    assert table_row("convolutional", 81, k=3) == (1, 4)
    assert table_row("restricted", 1000, r=100) == (1, 10)


def test_attention_memory():
    assert attention_memory(16384, heads=8) == 2 * 8 * 16384**2 * 4  # 17 GB: the failure seen at n = 16384
    assert attention_memory(1024, kernel="blockwise", block_size=128) == (2 * 1024 * 128 + 2 * 1024) * 4
    assert attention_memory(100, backward=True) == 3 * 100 * 100 * 4


def test_measure_times_and_peak_memory_on_cpu():
    def work():
        x = torch.ones(1000, 1000)  # 4 MB
        y = x * 2  # 4 MB more
        return y.sum()

    result = measure(work, repeats=3, warmup=1)
    assert len(result.times) == 3 and result.median > 0
    assert 8_000_000 <= result.peak_bytes < 9_000_000
    assert measure(work, repeats=1, memory=False).peak_bytes is None


def test_measure_on_cpu_prints_nothing(monkeypatch, capfd):
    """A chapter cell that measures must not show the profiler's warnings or C++ log lines. PyTorch
    2.11 (the GPU machine's) warns on a process's first profile; this torch may not, so the
    warning is made to happen here as it did there."""
    import warnings

    from torch.profiler import profiler

    start = profiler.profile.start

    def start_and_warn(self):
        warnings.warn(
            "Warning: Profiler clears events at the end of each cycle. Only events from the "
            "current cycle will be reported.",
            UserWarning,
            stacklevel=2,
        )
        start(self)

    monkeypatch.setattr(profiler.profile, "start", start_and_warn)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert measure(lambda: torch.ones(1000) * 2, repeats=1).peak_bytes > 0
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_naive_attention_memory_is_measured_quadratic_and_blockwise_linear():
    from attnlab.attention import blockwise_attention

    peaks = {}
    for n in (256, 512):
        q, k, v = (torch.randn(1, 2, n, 16) for _ in range(3))
        peaks[n] = (
            measure(
                functools.partial(scaled_dot_product_attention, q, k, v, backend="naive"), repeats=1, warmup=0
            ).peak_bytes,
            measure(functools.partial(blockwise_attention, q, k, v, block_size=64), repeats=1, warmup=0).peak_bytes,
        )
    assert 3.5 < peaks[512][0] / peaks[256][0] < 4.5
    assert 1.5 < peaks[512][1] / peaks[256][1] < 2.5
    assert peaks[512][0] >= attention_memory(512, heads=2)
    for n in (256, 512):  # the blockwise kernel holds a block of scores at least (2 x n x 64 numbers),
        # though it frees it before it returns: the peak is not what is left at the end of an operator
        tile = attention_memory(n, heads=2, kernel="blockwise", block_size=64) // 2
        assert peaks[n][1] >= tile, (n, peaks[n][1], tile)


def test_fit_slope():
    xs = [10, 20, 40, 80]
    assert fit_slope(xs, [3 * x**2 for x in xs]) == pytest.approx(2.0)
    assert fit_slope(xs, [x**0.5 for x in xs]) == pytest.approx(0.5)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="layer must be one of"):
        layer_flops("lstm", 10, 4)
    with pytest.raises(ValueError, match="n must be an int >= 1, got 0"):
        layer_flops("recurrent", 0, 4)
    with pytest.raises(ValueError, match="kernel must be 'naive' or 'blockwise'"):
        attention_memory(10, kernel="flash")
    with pytest.raises(TypeError, match="fn must be callable"):
        measure(3)
    with pytest.raises(ValueError, match="every x and y must be positive"):
        fit_slope([1, 2], [0, 1])


def test_the_pass_cost_counts_a_decoders_flops_and_bytes():
    """A hand count: 1000 parameters, 2 layers of d = 8, 16 bytes of cache per position."""
    shape = dict(params=1000, num_layers=2, d_model=8, kv_bytes_per_token=16)
    prefill = decoder_pass_cost(**shape, new_tokens=4)
    assert prefill.flops == 2 * 1000 * 4 + 4 * 2 * 8 * (1 + 2 + 3 + 4)  # causal pairs: 10
    assert prefill.bytes == 2 * 1000 + 16 * 4
    step = decoder_pass_cost(**shape, new_tokens=1, cache_length=4, batch=3)
    assert step.flops == 3 * (2 * 1000 + 4 * 2 * 8 * 5)
    assert step.bytes == 2 * 1000 + 3 * 16 * 5  # the weights once, each sequence's cache
    assert step.intensity == step.flops / step.bytes
    # decoding one token reads every weight for two FLOPs each: about one FLOP per byte of fp16
    big = dict(params=8_000_000_000, num_layers=32, d_model=4096, kv_bytes_per_token=131072)
    alone = decoder_pass_cost(**big, new_tokens=1, cache_length=100)
    assert 0.9 < alone.intensity < 1.1
    batched = decoder_pass_cost(**big, new_tokens=1, cache_length=100, batch=64)
    assert 50 < batched.intensity < 64  # the batch shares the weights
    assert decoder_pass_cost(**big, new_tokens=4096).intensity > 2000  # prefill
    with pytest.raises(ValueError, match="decoder_pass_cost: new_tokens must be an int >= 1, got 0"):
        decoder_pass_cost(**shape, new_tokens=0)
    with pytest.raises(ValueError, match="decoder_pass_cost: cache_length must be an int >= 0"):
        decoder_pass_cost(**shape, new_tokens=1, cache_length=-1)
    with pytest.raises(TypeError, match="decoder_pass_cost: params must be an int"):
        decoder_pass_cost(**{**shape, "params": 1.5}, new_tokens=1)
