"""set_seed and get_device: the two calls of every chapter's setup cell."""

import os
import random

import numpy as np
import pytest
import torch

import attnlab


def _draw() -> tuple[float, float, list[float]]:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_set_seed_makes_python_numpy_and_torch_reproducible():
    attnlab.set_seed(123)
    first = _draw()
    attnlab.set_seed(123)
    assert _draw() == first
    attnlab.set_seed(124)
    assert _draw() != first


def test_set_seed_accepts_numpy_integers():
    attnlab.set_seed(np.int64(5))
    a = torch.rand(2)
    attnlab.set_seed(5)
    assert torch.equal(a, torch.rand(2))


@pytest.mark.parametrize("bad", [1.5, "0", None, True])
def test_set_seed_rejects_non_integers(bad):
    with pytest.raises(TypeError, match="seed must be an int"):
        attnlab.set_seed(bad)


@pytest.mark.parametrize("bad", [-1, 2**32])
def test_set_seed_rejects_out_of_range(bad):
    with pytest.raises(ValueError, match=r"seed must be an int in \[0, 4294967295\], got -?[0-9]+"):
        attnlab.set_seed(bad)


@pytest.fixture
def torch_determinism(monkeypatch):
    """Restores PyTorch's global determinism settings (and the cuBLAS variable) after a test."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[2], saved[3]


def test_set_seed_deterministic_turns_on_deterministic_algorithms(torch_determinism):
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = False, True
    attnlab.set_seed(7, deterministic=True)
    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    # and it still seeds
    a = torch.rand(3)
    attnlab.set_seed(7, deterministic=True)
    assert torch.equal(a, torch.rand(3))


def test_set_seed_deterministic_keeps_a_cublas_setting_already_made(torch_determinism, monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    attnlab.set_seed(0, deterministic=True)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_deterministic_mode_on_a_gpu_runs_matmuls_and_refuses_nondeterministic_ops(torch_determinism):
    # What book/how-to-use.md warns about: in deterministic mode a CUDA matmul runs (the cuBLAS
    # variable is set) and gives the same bits twice, and an op without a deterministic CUDA
    # kernel raises instead of silently giving different digits.
    attnlab.set_seed(0, deterministic=True)
    a = torch.randn(256, 256, device="cuda")
    assert torch.equal(a @ a, a @ a)
    with pytest.raises(RuntimeError, match="does not have a deterministic implementation"):
        torch.histc(a, bins=10)


@pytest.mark.parametrize("flags", [(False, False, True), (True, True, False)])
def test_set_seed_by_default_leaves_the_determinism_settings_alone(torch_determinism, flags):
    algorithms, cudnn_deterministic, cudnn_benchmark = flags
    torch.use_deterministic_algorithms(algorithms)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn_deterministic, cudnn_benchmark
    attnlab.set_seed(3)
    assert torch.are_deterministic_algorithms_enabled() == algorithms
    assert (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark) == (
        cudnn_deterministic,
        cudnn_benchmark,
    )
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


def test_set_seed_rejects_a_non_bool_deterministic():
    with pytest.raises(TypeError, match="deterministic must be a bool, got int"):
        attnlab.set_seed(0, deterministic=1)


def test_get_device_prefers_cuda_then_mps_then_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert attnlab.get_device() == torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(attnlab.utils, "_mps_available", lambda: True)
    assert attnlab.get_device() == torch.device("mps")
    monkeypatch.setattr(attnlab.utils, "_mps_available", lambda: False)
    assert attnlab.get_device() == torch.device("cpu")


def test_get_device_returns_a_usable_device():
    device = attnlab.get_device()
    assert isinstance(device, torch.device)
    assert torch.ones(2, device=device).sum().item() == 2.0


def test_get_device_can_force_the_cpu():
    assert attnlab.get_device("cpu") == torch.device("cpu")


def test_get_device_rejects_unknown_names():
    with pytest.raises(ValueError, match=r"prefer must be one of \(.cuda., .mps., .cpu.\), got .tpu."):
        attnlab.get_device("tpu")


def test_get_device_fails_clearly_when_the_device_is_missing(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="'cuda' was asked for but is not available"):
        attnlab.get_device("cuda")


def test_check_shape_passes_and_returns_the_shape():
    x = torch.zeros(2, 3, 4)
    assert attnlab.check_shape(x, (2, 3, 4)) == torch.Size([2, 3, 4])
    assert attnlab.check_shape(x, (2, None, 4)) == torch.Size([2, 3, 4])


@pytest.mark.parametrize("expected", [(2, 3), (2, 3, 5), (2, 3, 4, 1)])
def test_check_shape_names_both_shapes(expected):
    with pytest.raises(ValueError, match=r"the shape of weights is \(2, 3, 4\), but should be"):
        attnlab.check_shape(torch.zeros(2, 3, 4), expected, name="weights")


def test_check_shape_rejects_bad_arguments():
    with pytest.raises(TypeError, match=r"tensor must be a tensor, got list \(\[1, 2\]\)"):
        attnlab.check_shape([1, 2], (2,))
    with pytest.raises(TypeError, match="expected must"):
        attnlab.check_shape(torch.zeros(2), "2")
    with pytest.raises(TypeError, match=r"each size in expected must be an int, got float \(2.0\)"):
        attnlab.check_shape(torch.zeros(2), (2.0,))
    with pytest.raises(ValueError, match="each size in expected must be an int >= 0, got -1"):
        attnlab.check_shape(torch.zeros(2), (-1,))
