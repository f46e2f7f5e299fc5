"""Chapter 8's language models: the corpus, TransformerLM, its caches, sampling and the trainers."""

from __future__ import annotations

import dataclasses
import math
from importlib import resources

import pytest
import torch

from attnlab.attention import (
    ROPE_SCALINGS,
    RopeScaling,
    kv_cache_bytes_per_token,
    latent_cache_bytes_per_token,
    rotary_frequencies,
)
from attnlab.data import CharVocab, TextCorpus, python_corpus
from attnlab.models import (
    LMCache,
    LMConfig,
    Transformer,
    TransformerConfig,
    TransformerLM,
    block_parameters,
    generate,
    sample_next,
)
from attnlab.train import (
    evaluate_lm,
    lm_loss_by_position,
    lm_token_losses,
    mask_tokens,
    seq2seq_loss_by_position,
    train_lm,
    warmup_cosine,
)

V = 13
KINDS = {
    f"{p}-{a}": dict(positions=p, attention=a)
    for p in ("none", "sinusoidal", "learned", "rope", "alibi")
    for a in ("softmax", "linear")
    if not (p == "alibi" and a == "linear")
}
KINDS["rope-softmax-G1"] = dict(positions="rope", num_kv_heads=1)
KINDS["alibi-softmax-G2"] = dict(positions="alibi", num_kv_heads=2)
KINDS["rope-window-global"] = dict(positions="rope", window=(2, None))  # Gemma's interleaving
KINDS["rope-window-sinks"] = dict(positions="rope", window=3, sinks=2)  # StreamingLLM
KINDS["rope-latent"] = dict(positions="rope", attention="latent", latent_dim=8, rope_dim=2)  # DeepSeek's MLA
KINDS["alibi-window-sinks"] = dict(positions="alibi", window=(None, 2), sinks=1)
MODERN = dict(norm="rms", feedforward="swiglu", qk_norm=True)  # chapter 8's modern block
KINDS["rope-modern"] = dict(positions="rope", **MODERN)
KINDS["rope-modern-G2-window-sinks"] = dict(positions="rope", num_kv_heads=2, window=(3, None), sinks=1, **MODERN)
KINDS["alibi-modern-G1"] = dict(positions="alibi", num_kv_heads=1, **MODERN)
KINDS["rope-linear-modern"] = dict(positions="rope", attention="linear", **MODERN)
KINDS["rope-latent-rms-swiglu"] = dict(attention="latent", latent_dim=8, rope_dim=2, norm="rms", feedforward="swiglu")
for gate in ("scalar", "vector", "fixed"):  # Mamba-2's, GLA's and RetNet's gates
    KINDS[f"none-gated-{gate}"] = dict(positions="none", attention="gated", gate=gate)
KINDS["rope-hybrid"] = dict(positions="rope", attention=("gated", "softmax"))  # a softmax layer among gated ones
KINDS["none-gated-conv"] = dict(positions="none", attention="gated", conv_size=3)  # Mamba-2's short convolution
KINDS["rope-hybrid-conv"] = dict(positions="rope", attention=("gated", "softmax"), conv_size=2)
KINDS["rope-hybrid-linear-G2-window"] = dict(
    positions="rope", attention=("softmax", "linear"), num_kv_heads=2, window=(3, None)
)
for method in ROPE_SCALINGS:  # trained on 4 positions, run on 4 times as many (the tests use 8 to 16)
    KINDS[f"rope-scaled-{method}"] = dict(positions="rope", rope_scaling=RopeScaling(method, 4, original_length=4))


def lm(seed: int = 0, **options) -> TransformerLM:
    torch.manual_seed(seed)
    model = TransformerLM(LMConfig(V, d_model=16, num_heads=4, num_layers=2, dim_feedforward=32, max_len=64, **options))
    return model.eval()


# --- the corpus ----------------------------------------------------------------------------------


def test_the_corpus_is_shipped_with_its_licence_and_split_by_module():
    corpus = python_corpus()
    assert list(corpus.modules)[:3] == ["textwrap", "heapq", "bisect"] and len(corpus.modules) == 14
    assert corpus.validation == ("calendar",)
    assert "class TextWrapper" in corpus.modules["textwrap"] and "def monthrange" in corpus.modules["calendar"]
    folder = resources.files("attnlab.data").joinpath("corpus")
    licence = folder.joinpath("LICENSE.txt").read_text(encoding="utf-8")
    assert "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2" in licence
    assert "PSF" in folder.joinpath("README.md").read_text(encoding="utf-8")
    train, val = corpus.text("train"), corpus.text("validation")
    assert "def monthrange" not in train and val == corpus.modules["calendar"]
    assert len(corpus.ids("train")) == len(train) and len(corpus.ids("validation")) == len(val)
    raw = folder.joinpath("python_stdlib.txt").read_text(encoding="utf-8")
    assert corpus.chars == tuple(sorted(set(raw))) and corpus.vocab_size == len(set(raw)) + 1  # + MASK


def test_the_corpus_encodes_and_decodes_characters():
    corpus = python_corpus()
    text = "def f(x):\n    return x  # ok\n"
    ids = corpus.encode(text)
    assert ids.dtype == torch.long and int(ids.min()) >= 1 and corpus.decode(ids) == text
    assert corpus.decode(torch.tensor([TextCorpus.MASK, int(ids[0])])) == "_d"
    with pytest.raises(ValueError, match=r"characters not in the vocabulary: \['€'\]"):
        corpus.encode("€")
    with pytest.raises(TypeError, match="text must be a str, got int"):
        corpus.encode(3)
    with pytest.raises(ValueError, match=r"split must be one of \('train', 'validation'\), got 'test'"):
        corpus.text("test")


# --- the model -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_causal_model_never_looks_ahead(kind):
    model = lm(**KINDS[kind])
    tokens = torch.randint(0, V, (2, 9))
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % V
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    torch.testing.assert_close(a[:, :6], b[:, :6])
    assert not torch.allclose(a[:, 6:], b[:, 6:])


@pytest.mark.parametrize("kind", sorted(k for k in KINDS if not {"window", "gated", "hybrid"} & set(k.split("-"))))
def test_an_encoder_sees_both_sides(kind):
    model = lm(causal=False, **KINDS[kind])
    tokens = torch.randint(0, V, (2, 9))
    changed = tokens.clone()
    changed[:, 8] = (changed[:, 8] + 1) % V
    with torch.no_grad():
        assert not torch.allclose(model(tokens)[:, 0], model(changed)[:, 0])


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_decoding_with_caches_gives_the_logits_of_the_whole_sequence(kind):
    model = lm(**KINDS[kind])
    tokens = torch.randint(0, V, (2, 10))
    caches = model.new_caches()
    with torch.no_grad():
        whole = model(tokens)
        pieces = [model(tokens[:, :4], 0, caches)] + [model(tokens[:, t : t + 1], t, caches) for t in range(4, 10)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole, atol=1e-5, rtol=1e-5)
    assert all(c.length == 10 for c in caches)


def test_a_window_as_wide_as_the_sequence_changes_nothing_and_a_narrow_one_does():
    tokens = torch.randint(0, V, (2, 10))
    with torch.no_grad():
        full = lm()(tokens)
        torch.testing.assert_close(lm(window=9)(tokens), full, rtol=0, atol=0)
        torch.testing.assert_close(lm(window=(9, None), sinks=3)(tokens), full, rtol=0, atol=0)
        narrow = lm(window=2)(tokens)
    torch.testing.assert_close(narrow[:, :3], full[:, :3], rtol=0, atol=0)  # positions 0-2 see all they would
    assert not torch.allclose(narrow[:, 3:], full[:, 3:])


def test_a_windowed_layer_holds_its_window_and_sinks_while_a_global_one_grows():
    model = lm(window=(3, None), sinks=1)
    caches = model.new_caches()
    with torch.no_grad():
        model(torch.zeros(1, 12, dtype=torch.long), 0, caches)
    per_position = 4 * 4 * 2 * 4  # G heads x E x (key + value) x float32
    assert caches[0].cached_length == 1 + 3 and caches[0].nbytes == (1 + 3) * per_position
    assert caches[1].cached_length == 12 and caches[1].nbytes == 12 * per_position


@pytest.mark.parametrize(
    "kind, invariant",
    [
        ("rope-softmax", True),
        *((f"rope-scaled-{method}", True) for method in ROPE_SCALINGS),
        ("alibi-softmax", True),
        ("none-softmax", True),
        ("rope-linear", True),  # linear layers take no rotation
        ("rope-hybrid", True),
        ("none-gated-scalar", True),
        ("sinusoidal-softmax", False),
        ("learned-softmax", False),
    ],
)
def test_relative_positions_do_not_see_where_a_window_starts(kind, invariant):
    """RoPE and ALiBi scores depend on offsets only: the same tokens at positions 0.. or 20.. give
    the same logits. Added positions do. Linear and gated layers take no rotation."""
    model = lm(**KINDS[kind])
    tokens = torch.randint(0, V, (2, 8))
    with torch.no_grad():
        same = torch.allclose(model(tokens), model(tokens, start=20), atol=1e-5)
    assert same == invariant


def test_a_trained_model_takes_each_rope_scaling_without_new_weights():
    """Chapter 8 runs a trained model with another rope_scaling: the same weights load, a factor of
    1 changes nothing, a factor of 4 changes the logits."""
    trained = lm(positions="rope")
    tokens = torch.randint(0, V, (2, 12))
    with torch.no_grad():
        plain = trained(tokens)
        for method in ROPE_SCALINGS:
            for factor, same in ((1, True), (4, False)):
                scaling = RopeScaling(method, factor, original_length=4)
                model = TransformerLM(dataclasses.replace(trained.config, rope_scaling=scaling)).eval()
                model.load_state_dict(trained.state_dict())  # strict: no weight added or missing
                assert torch.allclose(model(tokens), plain, atol=1e-6) == same, (method, factor)


def test_the_block_rotates_by_the_scaled_frequencies_and_applies_yarns_temperature():
    """LMBlock's attention against softmax(rope'(q) . rope'(k) * a^2 / sqrt(E)) v in float64, with
    rope' the scaled rotation (as complex numbers) and a YaRN's attention_factor."""
    for method in ROPE_SCALINGS:
        scaling = RopeScaling(method, 4, original_length=4)
        block = lm(positions="rope", num_kv_heads=2, rope_scaling=scaling).double().blocks[0]
        h = torch.randn(2, 9, 16, dtype=torch.float64)
        start = 3
        q, k, v = block.attn.project(h)  # (B, 4, N, 4), (B, 2, N, 4), (B, 2, N, 4)
        w = rotary_frequencies(4, scaling=scaling, dtype=torch.float64)  # (2,)
        turn = torch.polar(torch.ones(9, 2, dtype=torch.float64), torch.arange(start, start + 9).double()[:, None] * w)

        def rotated(t: torch.Tensor, turn=turn) -> torch.Tensor:
            z = torch.view_as_complex(t.unflatten(-1, (2, 2)).contiguous()) * turn  # (x_2i + i x_2i+1) e^(i p w_i)
            return torch.view_as_real(z).flatten(-2)

        k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)  # 2 query heads per key head
        scores = rotated(q) @ rotated(k).transpose(-2, -1) * scaling.attention_factor**2 / 2  # sqrt(E) = 2
        future = torch.ones(9, 9, dtype=torch.bool).triu(1)
        out = torch.softmax(scores.masked_fill(future, -math.inf), -1) @ v  # (B, 4, N, 4)
        expected = block.attn.out_proj(out.transpose(1, 2).reshape(2, 9, 16))
        torch.testing.assert_close(block.attend(h, start), expected)
    assert scaling.method == "llama3" and RopeScaling("yarn", 4, original_length=4).attention_factor > 1.1


def test_rope_scaling_needs_rotary_softmax_attention():
    yarn = RopeScaling("yarn", 4, original_length=8)
    for options in (dict(positions="alibi"), dict(positions="none"), dict(attention="linear")):
        with pytest.raises(
            ValueError, match="LMConfig: rope_scaling stretches the rotary positions of softmax attention"
        ):
            LMConfig(V, rope_scaling=yarn, **options)
    with pytest.raises(ValueError, match=r"got positions='rope', attention='latent'"):
        LMConfig(V, attention="latent", rope_scaling=yarn)
    with pytest.raises(TypeError, match=r"LMConfig: rope_scaling must be a RopeScaling or None, got str \('yarn'\)"):
        LMConfig(V, rope_scaling="yarn")
    assert LMConfig(V).rope_scaling is None


def test_the_caches_grow_by_a_tokens_keys_and_values_except_linear_attentions_state():
    for options, groups in ((dict(), 4), (dict(num_kv_heads=2), 2), (dict(num_kv_heads=1), 1)):
        model = lm(**options)
        caches = model.new_caches()
        sizes = []
        with torch.no_grad():
            for t in range(5):
                model(torch.zeros(1, 1, dtype=torch.long), t, caches)
                sizes.append(sum(c.nbytes for c in caches))
        per_token = kv_cache_bytes_per_token(2, groups, 4)
        assert sizes == [per_token * (t + 1) for t in range(5)]
        assert caches[0].key.shape == (1, groups, 5, 4)
    model = lm(attention="latent", latent_dim=8, rope_dim=2)
    caches = model.new_caches()
    with torch.no_grad():
        model(torch.zeros(1, 5, dtype=torch.long), 0, caches)
    assert sum(c.nbytes for c in caches) == 5 * latent_cache_bytes_per_token(2, 8, 2)  # the latent and k_R only
    assert caches[0].key.shape == (1, 1, 5, 2) and caches[0].value.shape == (1, 1, 5, 8)
    model = lm(attention="linear")
    caches = model.new_caches()
    with torch.no_grad():
        sizes = [
            (model(torch.zeros(1, 1, dtype=torch.long), t, caches), sum(c.nbytes for c in caches))[1] for t in range(5)
        ]
    assert sizes == [2 * (4 * 4 * 4 + 4 * 4) * 4] * 5  # 2 blocks x (S: H E E, z: H E) x float32
    model = lm(attention=("gated", "softmax"))
    caches = model.new_caches()
    with torch.no_grad():
        for t in range(5):
            model(torch.zeros(1, 1, dtype=torch.long), t, caches)
            assert caches[0].nbytes == 4 * 4 * 4 * 4  # S: H E E x float32, whatever t
            assert caches[1].nbytes == kv_cache_bytes_per_token(1, 4, 4) * (t + 1)
    assert len(caches[0].state) == 1 and caches[0].length == 5


def test_linear_and_gated_layers_take_no_rotation():
    """positions="rope" rotates the softmax layers only: a linear or gated model's logits are those
    of the same weights without positions, and a hybrid's gated layer is a GatedLinearAttention."""
    tokens = torch.randint(0, V, (2, 9))
    with torch.no_grad():
        for attention in ("linear", "gated"):
            torch.testing.assert_close(
                lm(attention=attention)(tokens), lm(positions="none", attention=attention)(tokens)
            )
        hybrid = lm(attention=("gated", "softmax"))
        assert not torch.allclose(hybrid(tokens), lm(positions="none", attention=("gated", "softmax"))(tokens))
    assert hybrid.config.layer_attention == ("gated", "softmax") and LMConfig(V).layer_attention == ("softmax",) * 2
    assert type(hybrid.blocks[0].attn).__name__ == "GatedLinearAttention" and hybrid.blocks[1].kind == "softmax"
    assert LMCache().nbytes == 0


def test_the_learned_table_trains_only_the_positions_it_sees():
    model = lm(positions="learned").train()
    before = model.pe.detach().clone()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randint(0, V, (2, 8))).sum().backward()
        optimizer.step()
    assert torch.equal(model.pe[8:], before[8:]) and not torch.equal(model.pe[:8], before[:8])


def test_bad_configurations_and_inputs_get_named_errors():
    with pytest.raises(ValueError, match="latent attention brings its own rotary key"):
        lm(attention="latent", positions="alibi")
    with pytest.raises(ValueError, match="latent attention brings its own rotary key"):
        lm(attention="latent", num_kv_heads=2)
    with pytest.raises(ValueError, match="window must have one entry per layer"):
        lm(window=(2, None, 2))
    with pytest.raises(ValueError, match="window must be an int >= 0"):
        lm(window=-1)
    with pytest.raises(ValueError, match="a window needs causal softmax attention"):
        lm(window=2, attention="linear")
    with pytest.raises(ValueError, match=r"sinks \(2\) need a window"):
        lm(sinks=2)
    with pytest.raises(TypeError, match="linear and gated attention keep their state in LMCache"):
        from attnlab.attention import SinkKVCache

        lm(attention="linear")(torch.zeros(1, 3, dtype=torch.long), 0, [SinkKVCache(2), SinkKVCache(2)])
    with pytest.raises(ValueError, match="positions must be one of"):
        LMConfig(V, positions="relative")
    for attention in ("linear", "gated", ("softmax", "gated")):
        with pytest.raises(ValueError, match="linear, gated and sparse attention have none to bias"):
            LMConfig(V, positions="alibi", attention=attention)
    with pytest.raises(ValueError, match=r"attention must have one entry per layer \(2\), got 3"):
        LMConfig(V, attention=("gated", "softmax", "gated"))
    with pytest.raises(
        ValueError, match=r"attention must be one of \('softmax', 'linear', 'latent', 'gated', 'sparse'\), got 'mamba'"
    ):
        LMConfig(V, attention=("gated", "mamba"))
    with pytest.raises(ValueError, match="conv_size is the short convolution of gated layers, and this model has none"):
        LMConfig(V, conv_size=4)
    with pytest.raises(ValueError, match=r"^LMConfig: conv_size must be an int >= 0, got -1$"):
        LMConfig(V, attention="gated", conv_size=-1)
    with pytest.raises(ValueError, match=r"gate must be one of \('scalar', 'vector', 'fixed'\), got 'sigmoid'"):
        LMConfig(V, attention="gated", gate="sigmoid")
    with pytest.raises(ValueError, match="gated attention forgets what came before; it needs causal=True"):
        LMConfig(V, attention=("gated", "softmax"), causal=False)
    with pytest.raises(ValueError, match="a window needs causal softmax attention in its layer"):
        LMConfig(V, attention=("gated", "softmax"), window=(2, None))
    with pytest.raises(ValueError, match="rope_scaling stretches the rotary positions of softmax attention"):
        LMConfig(V, attention=("gated", "softmax"), rope_scaling=RopeScaling("ntk", 2))
    with pytest.raises(TypeError, match="gated attention keeps its state in an LMCache"):
        from attnlab.attention import SinkKVCache

        lm(attention=("softmax", "gated")).blocks[1](torch.zeros(1, 3, 16), 0, SinkKVCache(2))
    with pytest.raises(ValueError, match=r"num_heads \(4\) must be a multiple of num_kv_heads \(3\)"):
        LMConfig(V, num_kv_heads=3)
    with pytest.raises(ValueError, match="an even head size"):
        LMConfig(V, d_model=12, num_heads=4)
    with pytest.raises(TypeError, match="causal must be a bool, got int"):
        LMConfig(V, causal=1)
    with pytest.raises(TypeError, match="config must be an LMConfig"):
        TransformerLM(TransformerConfig(V, V))
    model = lm(positions="sinusoidal")
    with pytest.raises(ValueError, match="positions up to 70 exceed max_len 64 of the sinusoidal table"):
        model(torch.zeros(1, 10, dtype=torch.long), start=60)
    with pytest.raises(TypeError, match="tokens must be"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="caches need a causal model"):
        lm(causal=False)(torch.zeros(1, 3, dtype=torch.long), 0, [LMCache(), LMCache()])
    with pytest.raises(ValueError, match="caches must be a list of 2 KeyValueCache"):
        model(torch.zeros(1, 3, dtype=torch.long), 0, [LMCache()])


def test_a_sparse_layer_is_causal_and_dense_when_it_keeps_every_block():
    """attention="sparse" selects each query's top_k blocks (block_select_attention). Keeping every
    block is dense causal attention: the softmax model's logits, with the same weights (a sparse
    layer adds no parameter); keeping one block each changes them. Rotary positions and grouped
    keys and values apply as in a softmax layer."""
    tokens = torch.randint(0, V, (2, 9))
    for options in ({}, {"num_kv_heads": 2, "qk_norm": True}):
        dense = lm(**options)
        every = lm(attention="sparse", block_size=2, top_k=5, **options)  # ceil(9 / 2) = 5 blocks
        one = lm(attention="sparse", block_size=2, top_k=1, **options)
        every.load_state_dict(dense.state_dict())
        one.load_state_dict(dense.state_dict())
        with torch.no_grad():
            torch.testing.assert_close(every(tokens), dense(tokens))
            assert not torch.allclose(one(tokens)[:, 2:], dense(tokens)[:, 2:])
            torch.testing.assert_close(one(tokens)[:, :2], dense(tokens)[:, :2])  # block 0 sees itself only
    model = lm(attention=("gated", "sparse"), block_size=3, top_k=1)
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % V
    with torch.no_grad():
        torch.testing.assert_close(model(tokens)[:, :6], model(changed)[:, :6])
    assert block_parameters(model.config, 1) == sum(p.numel() for p in model.blocks[1].parameters())
    with pytest.raises(ValueError, match="sparse attention selects among all keys at once and keeps no cache"):
        generate(lm(attention="sparse"), tokens[:, :3], 2)
    with pytest.raises(ValueError, match="block_size must be an int >= 1, got 0"):
        LMConfig(V, attention="sparse", block_size=0)
    with pytest.raises(ValueError, match="linear, gated and sparse attention have none to bias"):
        LMConfig(V, attention="sparse", positions="alibi")


# --- sampling and generation ---------------------------------------------------------------------


def test_sample_next_follows_temperature_and_top_k():
    logits = torch.tensor([[0.0, 1.0, 3.0, 2.0], [5.0, 0.0, 0.0, 4.0]])
    assert sample_next(logits, temperature=0).tolist() == [[2], [0]]
    assert sample_next(logits, top_k=1, generator=torch.Generator().manual_seed(0)).tolist() == [[2], [0]]
    draws = torch.cat(
        [sample_next(logits, top_k=2, generator=torch.Generator().manual_seed(s)) for s in range(200)], dim=1
    )
    assert set(draws[0].tolist()) == {2, 3} and set(draws[1].tolist()) == {0, 3}
    # a low temperature puts almost every draw on the argmax, a high one spreads them out
    g = torch.Generator().manual_seed(1)
    cold = torch.cat([sample_next(logits[:1], temperature=0.1, generator=g) for _ in range(200)], dim=1)
    hot = torch.cat([sample_next(logits[:1], temperature=10.0, generator=g) for _ in range(200)], dim=1)
    assert (cold == 2).float().mean() > 0.99 and len(set(hot[0].tolist())) == 4
    with pytest.raises(ValueError, match="temperature must be"):
        sample_next(logits, temperature=-1)
    with pytest.raises(ValueError, match=r"top_k must be an int in \[1, 4\] \(at most V = 4\), got 5"):
        sample_next(logits, top_k=5)
    with pytest.raises(ValueError, match=r"logits must have shape \(B, V\), got shape \(4,\)"):
        sample_next(logits[0])


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_generation_with_the_cache_equals_generation_without_it(kind):
    model = lm(**KINDS[kind])
    prompt = torch.randint(0, V, (3, 4))
    runs = [
        generate(
            model, prompt, 12, temperature=1.0, top_k=5, generator=torch.Generator().manual_seed(3), use_cache=cached
        )
        for cached in (True, False)
    ]
    assert runs[0].shape == (3, 16) and torch.equal(runs[0][:, :4], prompt)
    assert torch.equal(runs[0], runs[1])
    greedy = generate(model, prompt, 1, temperature=0)
    with torch.no_grad():
        assert torch.equal(greedy[:, -1], model(prompt)[:, -1].argmax(-1))


def test_generate_refuses_what_it_cannot_do():
    with pytest.raises(TypeError, match="model must be a causal TransformerLM"):
        generate(lm(causal=False), torch.zeros(1, 2, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="steps must be an int >= 0"):
        generate(lm(), torch.zeros(1, 2, dtype=torch.long), -1)
    with pytest.raises(TypeError, match="prompt must be"):
        generate(lm(), torch.zeros(1, 2), 3)


# --- objectives and trainers ---------------------------------------------------------------------


def test_mask_tokens_follows_berts_recipe():
    tokens = torch.randint(1, 50, (200, 500))
    inputs, targets = mask_tokens(tokens, 50, rate=0.15, generator=torch.Generator().manual_seed(0))
    chosen = targets != -100
    assert torch.equal(targets[chosen], tokens[chosen]) and abs(chosen.float().mean() - 0.15) < 0.005
    masked = inputs == 0
    assert not (masked & ~chosen).any() and abs(masked[chosen].float().mean() - 0.8) < 0.01
    kept = chosen & (inputs == tokens)
    randomised = chosen & ~masked & (inputs != tokens)
    assert abs(kept[chosen].float().mean() - 0.1 - 0.1 / 49) < 0.01  # 10 %, and random ones that hit the token
    assert abs(randomised[chosen].float().mean() - 0.1 * 48 / 49) < 0.01
    assert torch.equal(inputs[~chosen], tokens[~chosen])
    with pytest.raises(ValueError, match=r"rate must be"):
        mask_tokens(tokens, 50, rate=0)
    with pytest.raises(TypeError, match="tokens must be"):
        mask_tokens(tokens.float(), 50)


def test_warmup_cosine():
    f = warmup_cosine(10, 2)
    assert [f(1), f(2)] == [0.5, 1.0] and f(10) == pytest.approx(0.0, abs=1e-12)
    assert f(6) == pytest.approx(0.5 * (1 + math.cos(math.pi * 4 / 8)))
    assert warmup_cosine(4)(1) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    with pytest.raises(ValueError, match=r"warmup must be an int in \[0, 10\]"):
        warmup_cosine(10, 11)


def test_the_loss_by_position_is_the_cross_entropy_of_each_position():
    model = lm()
    ids = torch.randint(0, V, (50,))
    by_position = lm_loss_by_position(model, ids, context=8)
    assert not by_position.requires_grad  # measured without building a graph
    windows = torch.stack([ids[i * 8 : i * 8 + 9] for i in range(6)])  # (50 - 1) // 8 = 6 windows
    with torch.no_grad():
        logits = model(windows[:, :-1])
    expected = torch.nn.functional.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none").mean(0)
    torch.testing.assert_close(by_position, expected)
    assert evaluate_lm(model, ids, context=8) == pytest.approx(float(expected.mean()))
    masked = lm_loss_by_position(
        lm(causal=False), torch.randint(1, V, (400,)), context=8, objective="masked", mask_rate=0.5
    )
    assert masked.shape == (8,) and bool((masked > 0).all())


def test_token_losses_keep_every_tokens_loss_with_its_window():
    model = lm()
    ids = torch.randint(0, V, (50,))
    windows, losses = lm_token_losses(model, ids, context=8, batch_size=4)
    assert not losses.requires_grad
    expected = torch.stack([ids[i * 8 : i * 8 + 8] for i in range(6)])  # the inputs of 6 windows
    torch.testing.assert_close(windows, expected, rtol=0, atol=0)
    with torch.no_grad():
        logits = model(expected)
    targets = torch.stack([ids[i * 8 + 1 : i * 8 + 9] for i in range(6)])
    torch.testing.assert_close(
        losses, torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    )
    torch.testing.assert_close(losses.mean(0), lm_loss_by_position(model, ids, context=8))
    with pytest.raises(ValueError, match="needs LMConfig\\(causal=True\\)"):
        lm_token_losses(lm(causal=False), ids, context=8)
    with pytest.raises(ValueError, match=r"^lm_token_losses: batch_size must be an int >= 1, got 0$"):
        lm_token_losses(model, ids, context=8, batch_size=0)
    with pytest.raises(ValueError, match="ids must hold more than context = 64 tokens, got 50"):
        lm_token_losses(model, ids, context=64)


def test_training_lowers_the_loss_and_checks_its_arguments():
    ids = torch.arange(200) % 5 + 1  # 1 2 3 4 5 1 2 ...: the next token is certain
    for objective, causal in (("causal", True), ("masked", False)):
        model = lm(causal=causal)
        before = evaluate_lm(model, ids, context=16, objective=objective)
        history = train_lm(
            model, ids, steps=40, context=16, objective=objective, batch_size=8, lr=1e-2, warmup=5, progress=False
        )
        assert len(history.loss) == 40
        assert evaluate_lm(model, ids, context=16, objective=objective) < 0.7 * before
    with pytest.raises(ValueError, match=r"the 'masked' objective needs LMConfig\(causal=False\)"):
        train_lm(lm(), ids, steps=1, objective="masked")
    with pytest.raises(ValueError, match="objective must be one of"):
        train_lm(lm(), ids, steps=1, objective="next")
    with pytest.raises(ValueError, match="ids must hold more than context = 64 tokens, got 20"):
        train_lm(lm(), ids[:20], steps=1)
    with pytest.raises(TypeError, match="model must be a TransformerLM"):
        train_lm(torch.nn.Linear(2, 2), ids, steps=1)


def test_the_seq2seq_loss_by_position_is_the_teacher_forced_cross_entropy():
    vocab = CharVocab("abc")
    pairs = [("ab", "cab"), ("b", "ca"), ("abc", "a")]
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(len(vocab), len(vocab), d_model=8, num_heads=2, dim_feedforward=8)).eval()
    by_position = seq2seq_loss_by_position(model, pairs, vocab, vocab)
    expected = torch.zeros(3)
    counts = torch.zeros(3)
    with torch.no_grad():
        for source, target in pairs:
            src = torch.tensor([vocab.encode(source)])
            tgt_in = torch.tensor([vocab.encode(target, start=True)])
            logits, _ = model(src, torch.tensor([len(source)]), tgt_in)
            loss = torch.nn.functional.cross_entropy(
                logits[0], torch.tensor(vocab.encode(target, end=True)), reduction="none"
            )
            expected[: len(target)] += loss[: len(target)]
            counts[: len(target)] += 1
    torch.testing.assert_close(by_position, expected / counts)
