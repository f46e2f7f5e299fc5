"""Shared by the benchmark scripts: interleaved A/B timing and the machine's description.

Machines are noisy, so every benchmark times ours and PyTorch's counterpart in the same run,
alternating them (A, B, A, B, ...), and reports the median and the range of the per-pair ratio
ours / theirs. A ratio below 1 means ours is faster.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils import benchmark

RESULTS = Path(__file__).resolve().parent / "results"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], *, min_run_time: float = 0.1) -> float:
    """Seconds per call of ``fn``: torch.utils.benchmark's Timer, in blocks of at least
    ``min_run_time`` seconds (its timer waits for CUDA's queued work), the median block."""
    return benchmark.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=min_run_time).median


def interleaved(
    ours: Callable[[], object],
    theirs: Callable[[], object],
    *,
    device: torch.device,
    repeats: int = 9,
    warmup: int = 2,
    min_run_time: float = 0.1,
) -> dict:
    """Time both functions alternately, ``repeats`` pairs of ``timed`` measurements; return the
    medians and the ratio's median and range. ``device`` is where they compute (synchronised
    around the warm-up; the Timer synchronises CUDA itself)."""
    for _ in range(warmup):
        ours()
        theirs()
    sync(device)
    t_ours, t_theirs = [], []
    for i in range(repeats):
        pair = [(ours, t_ours), (theirs, t_theirs)]
        if i % 2:
            pair.reverse()  # alternate which one runs first
        for fn, times in pair:
            times.append(timed(fn, min_run_time=min_run_time))
    ratios = [a / b for a, b in zip(t_ours, t_theirs, strict=True)]
    return {
        "ours_ms": 1000 * statistics.median(t_ours),
        "theirs_ms": 1000 * statistics.median(t_theirs),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    device = "cpu"
    if torch.cuda.is_available():
        device = torch.cuda.get_device_name(0)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": device,
    }


def save(name: str, rows: list[dict], device: torch.device) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}-{device.type}.json"
    path.write_text(json.dumps({"benchmark": name, "machine": machine(), "rows": rows}, indent=2))
    return path


def verdict(value: float, target: float) -> str:
    return "meets" if value <= target else "MISSES"
