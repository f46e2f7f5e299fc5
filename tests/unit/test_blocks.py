"""Chapter 8's modern block: RMSNorm, SwiGLU, QK-norm, and a block's parameters and FLOPs by formula."""

from __future__ import annotations

import hashlib
import itertools

import pytest
import torch
from torch import nn

from attnlab.attention import rotary_embedding
from attnlab.complexity import count_flops
from attnlab.models import (
    LMConfig,
    QKNorm,
    RMSNorm,
    SwiGLU,
    TransformerLM,
    block_flops,
    block_parameters,
)
from attnlab.models.lm import LMBlock
from attnlab.models.position_wise import FeedForward

V = 13


def lm_config(**options) -> LMConfig:
    return LMConfig(V, d_model=16, num_heads=4, num_layers=2, dim_feedforward=32, max_len=64, **options)


def lm(seed: int = 0, **options) -> TransformerLM:
    torch.manual_seed(seed)
    return TransformerLM(lm_config(**options)).eval()


MODERN = dict(norm="rms", feedforward="swiglu", qk_norm=True)


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


def test_qk_norm_comes_before_the_rotation():
    """Gemma 3's and Qwen3's order. With weights of ones the two orders agree (a rotation keeps
    the RMS); with learned weights they do not, and the block follows the first."""
    torch.manual_seed(7)
    block = LMBlock(lm_config(qk_norm=True)).double()
    assert block.qk_norm is not None
    nn.init.normal_(block.qk_norm.q_norm.weight)
    nn.init.normal_(block.qk_norm.k_norm.weight)
    h = torch.randn(2, 6, 16, dtype=torch.float64)
    q, k, v = block.attn.project(h)  # (B, H, N, E)
    positions = torch.arange(6)

    def rotate(t: torch.Tensor) -> torch.Tensor:
        return rotary_embedding(t, positions)

    def attend(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, N, E)
        return block.attn.out_proj(out.transpose(1, 2).reshape(2, 6, 16))

    qn, kn = block.qk_norm.q_norm, block.qk_norm.k_norm
    norm_first = attend(rotate(qn(q)), rotate(kn(k)))
    torch.testing.assert_close(block.attend(h), norm_first)
    assert not torch.allclose(attend(qn(rotate(q)), kn(rotate(k))), norm_first, atol=1e-3)


def scores(block: LMBlock, x: torch.Tensor) -> torch.Tensor:
    """A block's logits ``q k^T (B, H, N, N)`` as its attention sees them (normalised, rotated)."""
    q, k, _ = block.attn.project(block.norm1(x))
    if block.qk_norm is not None:
        q, k = block.qk_norm(q, k)
    positions = torch.arange(x.shape[1])
    return rotary_embedding(q, positions) @ rotary_embedding(k, positions).transpose(-2, -1)


def test_qk_norm_bounds_the_logits_whatever_the_projections():
    """Scaling W_Q and W_K by 100 multiplies the logits by 10^4 without QK-norm and leaves them
    unchanged with it; and with it |q . k| <= E max|w_q| max|w_k|."""
    torch.manual_seed(6)
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    for qk_norm in (False, True):
        block = LMBlock(lm_config(qk_norm=qk_norm)).double()
        if block.qk_norm is not None:  # eps aside, the equality is exact
            block.qk_norm.q_norm.eps = block.qk_norm.k_norm.eps = 1e-30
        before = scores(block, x)
        with torch.no_grad():
            for layer in (block.attn.q_proj, block.attn.k_proj):
                layer.weight.mul_(100)
                layer.bias.mul_(100)
        after = scores(block, x)
        if qk_norm:
            torch.testing.assert_close(after, before, rtol=1e-9, atol=1e-9)
            assert block.qk_norm is not None
            bound = 4 * block.qk_norm.q_norm.weight.abs().max() * block.qk_norm.k_norm.weight.abs().max()
            assert after.abs().max() <= bound
        else:
            torch.testing.assert_close(after, before * 1e4)
            assert after.abs().max() > 1000


def test_scaling_the_query_and_key_projections_leaves_a_qk_normed_model_unchanged():
    """The same through TransformerLM: the block applies QK-norm to what its attention uses."""
    tokens = torch.randint(0, V, (2, 8))
    for qk_norm, unchanged in ((False, False), (True, True)):
        model = lm(**{**MODERN, "qk_norm": qk_norm}).double()
        for module in model.modules():
            if isinstance(module, QKNorm):  # eps aside, the equality is exact
                module.q_norm.eps = module.k_norm.eps = 1e-30
        with torch.no_grad():
            before = model(tokens)
            for block in model.blocks:
                block.attn.q_proj.weight.mul_(100)
                block.attn.k_proj.weight.mul_(0.01)
                block.attn.q_proj.bias.mul_(100)
                block.attn.k_proj.bias.mul_(0.01)
                block.attn.k_proj.weight[:4].mul_(50)  # the first key head only
                block.attn.k_proj.bias[:4].mul_(50)
            after = model(tokens)
        assert torch.allclose(after, before, rtol=1e-8, atol=1e-8) == unchanged


# --- the modern block in TransformerLM -----------------------------------------------------------


def test_the_options_choose_the_blocks_parts():
    model = lm(**MODERN)
    for block in model.blocks:
        assert isinstance(block.norm1, RMSNorm) and isinstance(block.norm2, RMSNorm)
        assert isinstance(block.ff, SwiGLU) and isinstance(block.qk_norm, QKNorm)
        assert block.qk_norm.q_norm.dim == 4 and block.ff.w1.out_features == 32  # E = 16 / 4; F as given
    assert isinstance(model.norm, RMSNorm)
    assert "blocks.1.qk_norm.k_norm.weight" in model.state_dict()
    default = lm()
    for block in default.blocks:
        assert isinstance(block.norm1, nn.LayerNorm) and isinstance(block.ff, FeedForward) and block.qk_norm is None
    assert isinstance(default.norm, nn.LayerNorm)
    assert not any("qk_norm" in name for name in default.state_dict())


# Computed with the code before the modern options existed (commit aa615c0): the layout of each
# state_dict (names and shapes, hashed), two order-sensitive sums of its values, two sums of the
# logits of tokens drawn after construction, and the next number the generator draws. The
# chapters' stored outputs depend on all of them.
BEFORE_OPTIONS = {
    "rope-softmax": {},
    "learned-softmax-encoder": dict(positions="learned", causal=False),
    "alibi-window-G2": dict(positions="alibi", num_kv_heads=2, window=(None, 2), sinks=1),
    "none-linear": dict(positions="none", attention="linear"),
    "rope-latent": dict(attention="latent", latent_dim=8, rope_dim=2),
}
BEFORE = {
    "rope-softmax": ("beab789dd15c2c95", 972.48949104, 176.76715686, -6.5846961569, -81.698378459, 0.35892183),
    "learned-softmax-encoder": ("abdc591758cca6c8", 1274.8101349, 175.28471965, 37.924425058, 156.38480478, 0.39192349),
    "alibi-window-G2": ("1e6e1d5ba9075459", 931.22361652, 165.71441793, 8.8707578555, 36.664761432, 0.99285686),
    "none-linear": ("beab789dd15c2c95", 972.48949104, 176.76715686, -9.4150169343, -107.33552013, 0.35892183),
    "rope-latent": ("8c85b620b512f47a", 1146.4775561, 188.21684817, -7.8646910507, -54.382146390, 0.91239476),
}


@pytest.mark.parametrize("kind", sorted(BEFORE))
def test_the_default_options_build_the_models_of_before(kind):
    """Same parameters, made in the same order from the same draws, the same logits, and the
    generator left where it was: so chapter 8's outputs do not move."""
    expected = BEFORE[kind]
    model = lm(**BEFORE_OPTIONS[kind])
    state = model.state_dict()
    layout = hashlib.sha256(";".join(f"{k}{tuple(v.shape)}" for k, v in state.items()).encode()).hexdigest()[:16]
    weighted = sum((i + 1) * v.double().sum().item() for i, v in enumerate(state.values()))
    squares = sum(v.double().pow(2).sum().item() for v in state.values())
    tokens = torch.randint(0, V, (2, 9))
    with torch.no_grad():
        logits = model(tokens).double()
    found = (layout, weighted, squares, logits.sum().item(), (logits * torch.arange(V)).sum().item())
    assert found[0] == expected[0]
    assert found[1:] == pytest.approx(expected[1:5], rel=1e-6, abs=1e-5)
    assert torch.rand(()).item() == pytest.approx(expected[5], abs=1e-7)


# --- parameters and FLOPs by formula -------------------------------------------------------------

BLOCKS = [
    dict(attention=attention, num_kv_heads=groups, norm=norm, feedforward=feedforward, qk_norm=qk_norm)
    for attention, groups, norm, feedforward, qk_norm in itertools.product(
        ("softmax", "linear", "latent"), (None, 2, 1), ("layer", "rms"), ("gelu", "swiglu"), (False, True)
    )
    if not (attention == "latent" and (groups is not None or qk_norm))
]
GATED = [
    dict(attention="gated", gate=gate, norm=norm, qk_norm=qk_norm, conv_size=conv)
    for gate in ("scalar", "vector", "fixed")
    for norm in ("layer", "rms")
    for qk_norm in (False, True)
    for conv in (0, 4)
]


@pytest.mark.parametrize("options", BLOCKS + GATED, ids=lambda o: "-".join(str(v) for v in o.values()))
def test_block_parameters_counts_the_blocks_parameters(options):
    config = LMConfig(V, d_model=24, num_heads=4, dim_feedforward=40, latent_dim=6, rope_dim=4, **options)
    block = LMBlock(config)
    assert block_parameters(config) == sum(p.numel() for p in block.parameters())


def test_block_parameters_counts_each_layer_of_a_hybrid():
    config = LMConfig(V, d_model=24, num_heads=4, num_layers=3, attention=("gated", "softmax", "linear"), qk_norm=True)
    model = TransformerLM(config)
    for layer, block in enumerate(model.blocks):
        assert block_parameters(config, layer) == sum(p.numel() for p in block.parameters())
    with pytest.raises(ValueError, match=r"block_parameters: layer must be an int in \[0, 2\], got 3"):
        block_parameters(config, 3)
    with pytest.raises(ValueError, match=r"^block_flops: config.attention must be 'softmax', got \('gated'"):
        block_flops(config, 4)


def test_block_parameters_by_hand():
    """D = 64, H = G = 4, F = 256, the defaults: LayerNorm and GELU, then each modern part."""
    D, F, E = 64, 256, 16
    base = 4 * (D * D + D) + 4 * D + (2 * D * F + F + D)
    assert block_parameters(LMConfig(V)) == base == 49_984
    assert block_parameters(LMConfig(V, norm="rms")) == base - 2 * D
    assert block_parameters(LMConfig(V, feedforward="swiglu")) == base - (2 * D * F + F + D) + 3 * D * F
    assert block_parameters(LMConfig(V, qk_norm=True)) == base + 2 * E
    # SwiGLU at 2/3 of the hidden size has the GELU network's weights, less its biases (Shazeer 2020)
    gelu, swiglu = LMConfig(V, dim_feedforward=192), LMConfig(V, dim_feedforward=128, feedforward="swiglu")
    assert block_parameters(swiglu) == block_parameters(gelu) - (192 + D)


@pytest.mark.parametrize("length", [1, 6, 13])
@pytest.mark.parametrize(
    "options",
    [{}, MODERN, dict(num_kv_heads=2, **MODERN), dict(num_kv_heads=1, feedforward="swiglu"), dict(window=3)],
    ids=["default", "modern", "modern-G2", "swiglu-G1", "window"],
)
def test_block_flops_is_what_the_flop_counter_counts(options, length):
    config = LMConfig(V, d_model=24, num_heads=4, dim_feedforward=40, **options)
    block = LMBlock(config, config.layer_windows[0])
    block.attn.backend = "naive"  # the counter does not see PyTorch's fused CPU kernel
    x = torch.randn(2, length, 24)
    assert count_flops(lambda: block(x)) == 2 * block_flops(config, length)
    D, F = 24, 40
    weights = 4 * D * D + (3 if config.feedforward == "swiglu" else 2) * D * F
    if config.kv_heads == 4:  # per position: twice the weights, and 4 H E n for the attention
        assert block_flops(config, length) == length * (2 * weights + 4 * D * length)


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
    with pytest.raises(ValueError, match=r"^LMConfig: norm must be one of \('layer', 'rms'\), got 'batch'$"):
        lm_config(norm="batch")
    with pytest.raises(ValueError, match=r"^LMConfig: feedforward must be one of \('gelu', 'swiglu'\), got 'relu'$"):
        lm_config(feedforward="relu")
    with pytest.raises(TypeError, match=r"^LMConfig: qk_norm must be a bool, got int \(1\)$"):
        lm_config(qk_norm=1)
    with pytest.raises(ValueError, match=r"^LMConfig: qk_norm normalises each head's queries and keys, .*latent"):
        lm_config(qk_norm=True, attention="latent", latent_dim=8, rope_dim=2)
    with pytest.raises(TypeError, match=r"^block_parameters: config must be an LMConfig, got dict$"):
        block_parameters({"d_model": 16})
    with pytest.raises(TypeError, match=r"^block_flops: config must be an LMConfig, got NoneType$"):
        block_flops(None, 4)
    with pytest.raises(ValueError, match=r"^block_flops: length must be an int >= 1, got 0$"):
        block_flops(lm_config(), 0)
    with pytest.raises(ValueError, match=r"^block_flops: config.attention must be 'softmax', got 'linear'$"):
        block_flops(lm_config(attention="linear"), 4)
