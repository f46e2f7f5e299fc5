"""Chapter 8's modern block: RMSNorm, SwiGLU and QK-norm."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab.models import QKNorm, RMSNorm, SwiGLU

# --- RMSNorm -------------------------------------------------------------------------------------


def rms_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Zhang and Sennrich's formula in float64, written out."""
    x, weight = x.double(), weight.double()
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * weight


def test_rmsnorm_is_its_formula_and_torchs():
    torch.manual_seed(0)
    norm = RMSNorm(8, eps=1e-5).double()
    nn.init.normal_(norm.weight)
    x = torch.randn(3, 5, 8, dtype=torch.float64) * 4 + 1
    expected = rms_reference(x, norm.weight, 1e-5)
    torch.testing.assert_close(norm(x), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(nn.functional.rms_norm(x, (8,), norm.weight, eps=1e-5), expected)
    # float32 in, float32 out, within float32's precision of the float64 formula
    out = norm.float()(x.float())
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_rmsnorm_subtracts_no_mean_and_ignores_the_scale():
    """RMSNorm(c x) = RMSNorm(x) for c > 0 (LayerNorm's first invariance); RMSNorm(x + 1) differs
    from RMSNorm(x) (LayerNorm's second, which RMSNorm drops with the mean)."""
    torch.manual_seed(1)
    norm = RMSNorm(6, eps=1e-30).double()
    nn.init.normal_(norm.weight)
    x = torch.randn(4, 6, dtype=torch.float64)
    for c in (1e-3, 0.5, 7.0, 1e4):
        torch.testing.assert_close(norm(c * x), norm(x), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(norm(-x), -norm(x))
    assert not torch.allclose(norm(x + 1), norm(x), atol=1e-2)
    layer = nn.LayerNorm(6, elementwise_affine=False).double()
    torch.testing.assert_close(layer(x + 1), layer(x))  # what RMSNorm gives up


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rmsnorm_computes_in_float32_and_returns_the_inputs_dtype(dtype):
    """Entries of 300 square to 90,000, past float16's largest number (65,504): computed in the
    input's half precision the mean of squares overflows and the output is 0."""
    x = torch.full((2, 16), 300.0)
    x[:, ::2] = -200.0
    norm = RMSNorm(16)
    out = norm(x.to(dtype))
    assert out.dtype == dtype and norm.weight.dtype == torch.float32
    torch.testing.assert_close(out.double(), rms_reference(x.to(dtype), norm.weight, 1e-6), rtol=1e-2, atol=1e-2)
    assert norm.to(dtype)(x.to(dtype)).dtype == dtype  # a half-precision weight too


def test_rmsnorm_gradients():
    torch.manual_seed(2)
    norm = RMSNorm(5).double()
    nn.init.normal_(norm.weight)
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(norm, (x,))
    norm(x).pow(2).sum().backward()
    assert norm.weight.grad is not None and norm.weight.grad.abs().sum() > 0


# --- SwiGLU --------------------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [False, True])
def test_swiglu_is_its_formula(bias):
    torch.manual_seed(3)
    ff = SwiGLU(6, 10, bias=bias).double()
    x = torch.randn(2, 4, 6, dtype=torch.float64)

    def linear(layer: nn.Linear, h: torch.Tensor) -> torch.Tensor:
        return h @ layer.weight.T + (layer.bias if bias else 0)

    a, b = linear(ff.w1, x), linear(ff.w3, x)
    expected = linear(ff.w2, a * torch.sigmoid(a) * b)  # W_2 (Swish_1(W_1 x) * W_3 x)
    torch.testing.assert_close(ff(x), expected, rtol=1e-12, atol=1e-12)
    assert sum(p.numel() for p in ff.parameters()) == 3 * 6 * 10 + (2 * 10 + 6 if bias else 0)
    assert torch.autograd.gradcheck(ff, (x.requires_grad_(),))


def test_swiglu_dropout_acts_on_the_gated_hidden_layer_only_in_training():
    torch.manual_seed(4)
    ff = SwiGLU(4, 64, dropout=0.5)
    x = torch.randn(3, 4)
    eval_out = ff.eval()(x)
    torch.testing.assert_close(eval_out, ff.w2(nn.functional.silu(ff.w1(x)) * ff.w3(x)))
    assert not torch.allclose(ff.train()(x), eval_out)


# --- QK-norm -------------------------------------------------------------------------------------


def test_qk_norm_is_rmsnorm_per_head_with_one_weight_for_all_heads():
    torch.manual_seed(5)
    qk = QKNorm(4).double()
    nn.init.normal_(qk.q_norm.weight)
    nn.init.normal_(qk.k_norm.weight)
    q, k = torch.randn(2, 6, 5, 4, dtype=torch.float64) * 9, torch.randn(2, 3, 7, 4, dtype=torch.float64)
    nq, nk = qk(q, k)
    assert nq.shape == q.shape and nk.shape == k.shape
    torch.testing.assert_close(nq, rms_reference(q, qk.q_norm.weight, 1e-6), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(nk, rms_reference(k, qk.k_norm.weight, 1e-6), rtol=1e-12, atol=1e-12)
    assert sum(p.numel() for p in qk.parameters()) == 2 * 4
    assert torch.autograd.gradcheck(qk, (q[:1, :2].requires_grad_(), k[:1, :1].requires_grad_()))


# --- bad input -----------------------------------------------------------------------------------


def test_bad_input_gets_named_errors():
    with pytest.raises(ValueError, match=r"^RMSNorm: dim must be an int >= 1, got 0$"):
        RMSNorm(0)
    with pytest.raises(TypeError, match=r"^RMSNorm: dim must be an int, got float \(4.0\)$"):
        RMSNorm(4.0)
    with pytest.raises(ValueError, match=r"^RMSNorm: eps must be a number > 0, got 0$"):
        RMSNorm(4, eps=0)
    with pytest.raises(TypeError, match=r"^RMSNorm: eps must be a number, got str"):
        RMSNorm(4, eps="1e-6")
    with pytest.raises(ValueError, match=r"^RMSNorm: x must have shape \(\.\.\., 4\), got \(2, 3\)$"):
        RMSNorm(4)(torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"^RMSNorm: x must have shape \(\.\.\., 4\), got \(\)$"):
        RMSNorm(4)(torch.tensor(1.0))
    with pytest.raises(TypeError, match=r"^RMSNorm: x must be a floating-point tensor, got torch.int64$"):
        RMSNorm(4)(torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^SwiGLU: hidden must be an int >= 1, got 0$"):
        SwiGLU(4, 0)
    with pytest.raises(TypeError, match=r"^SwiGLU: d_model must be an int, got bool"):
        SwiGLU(True, 4)
    with pytest.raises(TypeError, match=r"^SwiGLU: bias must be a bool, got int \(1\)$"):
        SwiGLU(4, 4, 1)
    with pytest.raises(ValueError, match=r"^SwiGLU: dropout must be a number in \[0, 1\), got 1.0$"):
        SwiGLU(4, 4, dropout=1.0)
    with pytest.raises(ValueError, match=r"^SwiGLU: x must have shape \(\.\.\., 4\), got \(2, 5\)$"):
        SwiGLU(4, 8)(torch.ones(2, 5))
    with pytest.raises(TypeError, match=r"^SwiGLU: x must be a floating-point tensor, got list"):
        SwiGLU(4, 8)([1.0, 2.0])
    with pytest.raises(ValueError, match=r"^QKNorm: head_dim must be an int >= 1, got -2$"):
        QKNorm(-2)
    with pytest.raises(ValueError, match=r"^QKNorm: q must have shape \(B, H, L, 4\), got \(1, 2, 3, 5\)$"):
        QKNorm(4)(torch.ones(1, 2, 3, 5), torch.ones(1, 2, 3, 4))
    with pytest.raises(ValueError, match=r"^QKNorm: k must have shape \(B, G, S, 4\), got \(2, 3, 4\)$"):
        QKNorm(4)(torch.ones(1, 2, 3, 4), torch.ones(2, 3, 4))
