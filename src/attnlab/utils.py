"""Reproducibility and device selection: the two calls in every chapter's setup cell.

Introduced in the chapter "Preliminaries". No hidden globals: every other function of the
package takes its device and its random generator as arguments.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from attnlab.validation import check_choice, check_int

__all__ = ["get_device", "set_seed"]

_DEVICE_NAMES = ("cuda", "mps", "cpu")


# cuBLAS gives the same bits twice only with a fixed workspace per stream; PyTorch reads this
# variable and, in deterministic mode, raises on a CUDA matmul when it is unset (see PyTorch's
# "Reproducibility" notes). ":4096:8" is the larger of the two documented values (8 buffers of
# 4 MiB, about 32 MiB of GPU memory per stream); ":16:8" saves memory and may cost speed.
_CUBLAS_WORKSPACE_CONFIG = ":4096:8"


def set_seed(seed: int, *, deterministic: bool = False) -> None:
    """Seed Python's, NumPy's and PyTorch's random generators (CPU and every CUDA device).

    Defined in the chapter "Preliminaries". Calling it with the same seed makes everything
    that follows in a chapter reproducible on the same machine and library versions. On a CPU
    that is all it takes; on a GPU some kernels (atomic adds in scatter and index_add, some
    cuDNN and cuBLAS algorithms) may still add in a different order from run to run, so the
    last digits can differ. ``deterministic=True`` rules those out.

    Args:
        seed: a non-negative integer below 2**32 (NumPy's limit).
        deterministic: also make PyTorch choose deterministic algorithms:
            ``torch.use_deterministic_algorithms(True)``, ``cudnn.deterministic = True``,
            ``cudnn.benchmark = False``, and ``CUBLAS_WORKSPACE_CONFIG=":4096:8"`` in the
            environment unless it is already set (cuBLAS needs it, and it must be set before
            the first CUDA matmul: call this first, as the setup cell does). It is slower on a
            GPU, and an operation that has no deterministic implementation then raises a
            ``RuntimeError`` naming it. ``False`` (the default) leaves these settings as they are.

    Raises:
        TypeError: ``seed`` is not an integer (``bool`` is refused too), or ``deterministic``
            is not a ``bool``.
        ValueError: ``seed`` is negative or not below 2**32.
    """
    if isinstance(seed, np.integer):  # numpy's integers are accepted too (bool still is not)
        seed = int(seed)
    check_int("set_seed", "seed", seed, low=0, high=2**32 - 1)
    if not isinstance(deterministic, bool):
        raise TypeError(f"set_seed: deterministic must be a bool, got {type(deterministic).__name__}")
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", _CUBLAS_WORKSPACE_CONFIG)
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def get_device(prefer: str | None = None) -> torch.device:
    """Return the best available device: CUDA, then Apple's MPS, then the CPU.

    Defined in the chapter "Preliminaries".

    Args:
        prefer: ``None`` picks automatically; ``"cuda"``, ``"mps"`` or ``"cpu"`` asks for that
            device and fails if it is not available (useful to force the CPU on a GPU machine).

    Raises:
        ValueError: ``prefer`` is not one of ``None``, ``"cuda"``, ``"mps"``, ``"cpu"``.
        RuntimeError: the preferred device is not available on this machine.
    """
    if prefer is None:
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    check_choice("get_device", "prefer", prefer, _DEVICE_NAMES)  # or None, handled above
    available = {"cuda": torch.cuda.is_available(), "mps": _mps_available(), "cpu": True}
    if not available[prefer]:
        raise RuntimeError(f"get_device: device {prefer!r} was asked for but is not available here")
    return torch.device(prefer)
