CELLS = []


def md(text):
    CELLS.append(("markdown", text.strip("\n")))


def code(text):
    CELLS.append(("code", text.strip("\n")))


md(r'''
# Attention at inference

A trained model meets its users as a server, and there attention stops being a formula and
becomes a cost: the key/value cache fills the accelerator's memory, and every generated token
reads all of it again. This chapter follows one request through a server. It measures why
decoding is slow where the prompt was fast, how many bytes of cache each kind of attention keeps
per token, how servers share one memory between requests of any length, how one long query
keeps a whole GPU busy, what a model loses when its cache forgets the first tokens, and how a
small model can write several tokens per pass of a large one. By the end you can estimate the
memory and the speed limit of serving a model from its configuration, and say which of today's
techniques attacks which limit.
''')

md("## Setup")

code(r'''
import sys

if "google.colab" in sys.modules:  # on Colab only: install the book's package
    %pip install -q "attnlab @ git+https://github.com/attnlab/attnlab@v0.2.0"

import copy
import dataclasses
import statistics

import matplotlib.pyplot as plt
import torch

import attnlab
from attnlab.attention import (MultiHeadLatentAttention, SinkKVCache,
                               grouped_query_attention,
                               kv_cache_bytes_per_token,
                               latent_cache_bytes_per_token)
from attnlab.complexity import decoder_pass_cost, measure
from attnlab.data import python_corpus
from attnlab.inference import (KVBlockPool, PagedKVCache, cache_memory,
                               merge_attention_partials, paged_attention,
                               speculative_decode, split_kv_attention)
from attnlab.models import LMCache, LMConfig, TransformerLM, generate
from attnlab.train import evaluate_lm, lm_loss_by_position, train_lm

torch.set_num_threads(2)  # fixed, so the printed digits are the same every run
attnlab.set_seed(0)
device = attnlab.get_device()
print("device:", device)
''')

md(r'''
## Prefill and decode

A decoder-only model answers a prompt in two phases. **Prefill** runs the whole prompt through
the model in one pass: every position's keys and values go into the cache, and the last
position's logits give the first new token. **Decode** then runs one pass per token, for that
token alone, reading the cache of every position before it (chapter 8's `generate`).

Each pass reads every weight of the model once. Prefill does about $2P$ FLOPs per token with
those weights, for $P$ parameters (a multiply-add is two FLOPs), over thousands of tokens;
decode does $2P$ for one token per sequence. The ratio of FLOPs to bytes read, the
*arithmetic intensity*, decides which resource limits a pass. A chip that computes $F$ FLOPs per
second and reads $W$ bytes per second from memory can do at most $\min(F, W \cdot I)$ FLOPs per
second at intensity $I$: the *roofline* of {cite:t}`williams2009roofline`. Below the ridge
$I = F / W$ a pass waits for memory; above it, for arithmetic.

`decoder_pass_cost` counts both for a model: the matrix products' $2P$ per token, $4d$ per
layer for each (query, key) pair that attention scores and sums, the weights read once per pass
and each sequence's cache read once. For Llama 3 8B (32 layers, $d$ = 4096, 8 key/value heads
of 128, bfloat16; {cite:t}`grattafiori2024llama3`, Table 3) on an H100, whose datasheet gives
989 TFLOP/s of dense bfloat16 and 3.35 TB/s of memory bandwidth {cite:p}`nvidia2023h100`:
''')

code(r'''
LLAMA3_8B = dict(params=8_000_000_000, num_layers=32, d_model=4096,
                 kv_bytes_per_token=kv_cache_bytes_per_token(
                     32, 8, 128, torch.bfloat16))
PEAK, BANDWIDTH = 989e12, 3.35e12  # FLOP/s and bytes/s of an H100 SXM
ridge = PEAK / BANDWIDTH
passes = {
    "prefill, 2048 tokens": decoder_pass_cost(**LLAMA3_8B, new_tokens=2048),
    **{f"decode, batch {b}": decoder_pass_cost(
        **LLAMA3_8B, new_tokens=1, cache_length=2048, batch=b)
       for b in (1, 16, 256)},
}
print(f"{'pass':22}{'GFLOP':>10}{'GB read':>9}{'FLOP/byte':>11}")
for name, cost in passes.items():
    print(f"{name:22}{cost.flops / 1e9:10.1f}{cost.bytes / 1e9:9.2f}"
          f"{cost.intensity:11.1f}")
print(f"ridge of the H100: {ridge:.0f} FLOP/byte")
prefill, alone = passes["prefill, 2048 tokens"], passes["decode, batch 1"]
assert prefill.intensity > ridge > 100 * alone.intensity
attnlab.glue("ridge", ridge)
attnlab.glue("prefill-intensity", prefill.intensity)
attnlab.glue("decode-intensity", alone.intensity)
attnlab.glue("decode-256", passes["decode, batch 256"].intensity)
attnlab.glue("llama-kv-KiB", LLAMA3_8B["kv_bytes_per_token"] / 1024)
''')

md(r'''
Prefill does {glue:text}`prefill-intensity:,.0f` FLOPs per byte, far above the ridge of
{glue:text}`ridge:.0f`: it is limited by arithmetic. Decoding one sequence does
{glue:text}`decode-intensity:.1f`: the chip waits for memory almost all the time. A batch shares
the weights, so its intensity grows with the batch, but not the cache: each sequence reads its
own {glue:text}`llama-kv-KiB:.0f` KiB per cached token. At 256 sequences of 2048 tokens decode
reaches only {glue:text}`decode-256:.0f` FLOPs per byte, and the longer the contexts the lower the
ceiling. Memory traffic, and most of it cache, limits decoding; the rest of this chapter attacks
that traffic.
''')

code(r'''
intensity = [2.0 ** k for k in range(-2, 13)]
fig, ax = plt.subplots(figsize=(6.4, 3.6))
ax.loglog(intensity, [min(PEAK, BANDWIDTH * i) / 1e12 for i in intensity],
          color="0.3", label="roofline of an H100")
for cache, marker in ((512, "o"), (8192, "s")):
    batches = [1, 4, 16, 64, 256]
    points = [decoder_pass_cost(**LLAMA3_8B, new_tokens=1, cache_length=cache,
                                batch=b).intensity for b in batches]
    ax.loglog(points, [min(PEAK, BANDWIDTH * i) / 1e12 for i in points],
              marker=marker, linestyle="none",
              label=f"decode, cache {cache}, batch 1 to 256")
ax.loglog([prefill.intensity], [min(PEAK, BANDWIDTH * prefill.intensity)
                                / 1e12], "^", label="prefill, 2048 tokens")
ax.set(xlabel="arithmetic intensity (FLOP per byte)",
       ylabel="attainable TFLOP/s", title="Llama 3 8B on the roofline")
ax.legend(fontsize=8)
plt.show()
''')

md(r'''
Measured on the book's own scale, with a model of 2 blocks of `d_model` 256 on this chapter's
device: one decoding step after caches of growing length, and one step for batches of growing
size (each the median of interleaved rounds). The figure shows times from the machine that
built this page; the cell checks only their direction.
''')

code(r'''
attnlab.set_seed(0)
timed = TransformerLM(LMConfig(100, d_model=256, num_heads=4,
                               dim_feedforward=1024)).to(device).eval()


def step_time(cache_length, batch=1):
    """One decoding step after cache_length cached positions."""
    tokens = torch.randint(0, 100, (batch, cache_length + 1), device=device)
    caches = timed.new_caches()
    with torch.no_grad():
        timed(tokens[:, :-1], 0, caches)  # prefill, once
        return lambda: timed(tokens[:, -1:], cache_length,
                             [dataclasses.replace(c) for c in caches])


lengths, batches = [256, 1024, 4096, 16384], [1, 4, 16, 64]
steps = {("cache", n): step_time(n) for n in lengths}
steps |= {("batch", b): step_time(256, b) for b in batches}
rounds = []
with torch.no_grad():
    for _ in range(5):
        rounds.append({key: measure(fn, repeats=3, device=device,
                                    memory=False).median
                       for key, fn in steps.items()})
median = {key: statistics.median(r[key] for r in rounds) for key in steps}
per_length = [median["cache", n] for n in lengths]
per_sequence = [median["batch", b] / b for b in batches]
assert per_length[-1] > 1.5 * per_length[0]  # longer caches, slower steps
assert per_sequence[-1] < per_sequence[0] / 4  # a batch shares the weights
fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3))
left.loglog(lengths, [t * 1e3 for t in per_length], "o-")
left.set(xlabel="cached positions", ylabel="ms per step",
         title="one sequence")
right.loglog(batches, [t * 1e3 for t in per_sequence], "o-")
right.set(xlabel="batch", ylabel="ms per token and sequence",
          title="cache of 256")
fig.suptitle(f"one decoding step, measured on this page's {device}")
fig.tight_layout()
plt.show()
''')

md(r'''
## Bytes of cache per token

Every cached position holds, in every layer, a key and a value for each of the $G$ key/value
heads: $2 L G E$ numbers for $L$ layers of heads of size $E$. Multi-head attention has
$G = H$; grouped-query attention {cite:p}`ainslie2023gqa` shares each key/value head among
$H / G$ query heads, and multi-query attention {cite:p}`shazeer2019fast` has $G = 1$ (chapter 8).
*Multi-head latent attention* (MLA), introduced with DeepSeek-V2 {cite:p}`deepseek2024v2`, caches
something else: a latent vector $c_t = W^{DKV} h_t$ of $d_c$ numbers per token, from which every
head decompresses its own key $W^{UK}_h c_t$ and value $W^{UV}_h c_t$, and one rotary key
$k^R_t$ of $d_R$ numbers shared by all heads: $L (d_c + d_R)$ numbers per token.
''')

md(r'''
```{figure} ../book/figures/latent-attention.svg
:name: fig-latent-attention
:class: dark-light
:width: 540px
:alt: Multi-head latent attention: the token goes to a small latent and a rotary key, which are cached; per-head keys and values are decompressed from the latent.

Multi-head latent attention. Only the latent $c_t$ and the rotary key $k^R_t$ are cached; the
heads' keys and values are decompressed from the latent, or never formed at all when the
up-projections are absorbed.
```

Why a separate rotary key? A content score is $q_h^\top W^{UK}_h c_j = (W^{UK\top}_h q_h)^\top
c_j$: the up-projection can move onto the query, once per step, instead of onto every cached
latent. This *absorption* {cite:p}`deepseek2024v2` lets decoding attend to the latents
directly, and $W^{UV}_h$ likewise joins the output projection. Rotary embeddings would put a
rotation that depends on the key's position between $q_h$ and $W^{UK}_h$, and no single matrix
could then be absorbed, so positions travel in the extra $d_R$ features instead. The package's
`MultiHeadLatentAttention` computes both ways:
''')

code(r'''
print(attnlab.listing(MultiHeadLatentAttention.forward, "absorb"))
''')

md(r'''
Four models of the same size (2 blocks of `d_model` 64, 4 query heads of 16 numbers) on chapter 8's
corpus of Python code, with multi-head, grouped (2 key/value heads), multi-query and latent
attention ($d_c$ = 16, $d_R$ = 8), each trained from 3 seeds. The bytes per token are read from
their caches after a prompt and checked against the formulas; the loss is measured on
the held-out module.
''')

code(r'''
corpus = python_corpus()
train_ids, val_ids = corpus.ids("train"), corpus.ids("validation")
CONTEXT, STEPS, SEEDS = 64, 300, (0, 1, 2)


def train_model(seed, **options):
    """A TransformerLM of 2 blocks (d_model 64, 4 heads), trained here."""
    attnlab.set_seed(seed)
    config = LMConfig(corpus.vocab_size, **options)
    model = TransformerLM(config).to(device)
    train_lm(model, train_ids, steps=STEPS, context=CONTEXT, batch_size=16,
             warmup=30, seed=seed, progress=False)
    return model.eval()


KINDS = {"multi-head": dict(), "grouped, G = 2": dict(num_kv_heads=2),
         "multi-query": dict(num_kv_heads=1),
         "latent": dict(attention="latent", latent_dim=16, rope_dim=8)}
FORMULA = {"multi-head": kv_cache_bytes_per_token(2, 4, 16),
           "grouped, G = 2": kv_cache_bytes_per_token(2, 2, 16),
           "multi-query": kv_cache_bytes_per_token(2, 1, 16),
           "latent": latent_cache_bytes_per_token(2, 16, 8)}
models = {kind: [train_model(s, **options) for s in SEEDS]
          for kind, options in KINDS.items()}
prompt = val_ids[:32].view(1, -1).to(device)
print(f"{'attention':15}{'bytes/token':>12}{'loss (3 seeds)':>22}")
losses = {}
for kind, trained in models.items():
    caches = trained[0].new_caches()
    with torch.no_grad():
        trained[0](prompt, 0, caches)
    per_token = sum(c.nbytes for c in caches) / prompt.shape[1]
    assert per_token == FORMULA[kind]
    losses[kind] = [evaluate_lm(m, val_ids, context=CONTEXT) for m in trained]
    low, high = min(losses[kind]), max(losses[kind])
    print(f"{kind:15}{per_token:12.0f}   {statistics.mean(losses[kind]):.3f}"
          f" ({low:.3f} to {high:.3f})")
mean = {kind: statistics.mean(v) for kind, v in losses.items()}
spread = max(max(v) - min(v) for v in losses.values())
attnlab.glue("mla-bytes", FORMULA["latent"])
attnlab.glue("mla-ratio", FORMULA["multi-head"] / FORMULA["latent"])
attnlab.glue("mqa-bytes", FORMULA["multi-query"])
attnlab.glue("mla-vs-mha", mean["latent"] - mean["multi-head"])
attnlab.glue("mqa-vs-mha", mean["multi-query"] - mean["multi-head"])
attnlab.glue("seed-spread", spread)
''')

md(r'''
The latent model caches {glue:text}`mla-bytes` bytes per token, less than multi-query attention's
{glue:text}`mqa-bytes`, and {glue:text}`mla-ratio:.1f` times less than multi-head attention. Its mean loss
differs from multi-head attention's by {glue:text}`mla-vs-mha:+.3f` nats, multi-query's by
{glue:text}`mqa-vs-mha:+.3f`, while the three seeds of one model spread over up to
{glue:text}`seed-spread:.3f`: at this size the kinds of attention do not differ by more than
chance. DeepSeek-V2's authors report MLA above multi-head attention in their larger ablations
({cite:t}`deepseek2024v2`, Appendix D); a model this small cannot confirm or refute that. The
absorbed form gives the same outputs as the decompressed one, in float64 to rounding:
''')

code(r'''
attention = copy.deepcopy(models["latent"][0].blocks[0].attn).double()
x = torch.randn(2, 10, 64, dtype=torch.float64, device=device)
plain, absorbed = attention(x), attention(x, absorb=True)
gap = (plain - absorbed).abs().max().item()
print(f"largest difference, absorbed against decompressed: {gap:.1e}")
assert gap < 1e-12
''')

md(r'''
At full size the same formulas give the cache of today's models. DeepSeek-V3
{cite:p}`deepseek2024v3` has 61 layers, a latent of 512 and a rotary key of 64 (576 numbers per
token and layer); with multi-head attention over its 128 heads of 128 it would cache 32,768:
''')

code(r'''
GiB = 2 ** 30
full = {
    "Llama 3 8B (GQA, 8 of 128)": kv_cache_bytes_per_token(
        32, 8, 128, torch.bfloat16),
    "DeepSeek-V3 (MLA, 512 + 64)": latent_cache_bytes_per_token(
        61, 512, 64, torch.bfloat16),
    "DeepSeek-V3 if multi-head": kv_cache_bytes_per_token(
        61, 128, 128, torch.bfloat16),
}
print(f"{'model':30}{'KiB/token':>10}{'GiB at 128K tokens':>20}")
for name, b in full.items():
    print(f"{name:30}{b / 1024:10.1f}{b * 131072 / GiB:20.1f}")
mla_saving = full["DeepSeek-V3 if multi-head"] / full[
    "DeepSeek-V3 (MLA, 512 + 64)"]
attnlab.glue("mla-saving", mla_saving)
''')

md(r'''
The latent divides DeepSeek-V3's cache by {glue:text}`mla-saving:.0f`: a context of 128K tokens
fits in a few GiB instead of hundreds.

## A paged cache

A server decodes many requests at once, and cannot know how long each will run. A cache kept
contiguous must reserve, for each request, room for the longest it might become. PagedAttention
{cite:p}`kwon2023efficient` borrows the operating system's answer to the same problem: the cache
is a pool of fixed-size blocks, each request owns a list of blocks (its *block table*), and
attention gathers a request's keys through its table. A request wastes at most the unfilled
part of its last block.

```{figure} ../book/figures/paged-kv-cache.svg
:name: fig-paged-kv-cache
:class: dark-light
:width: 540px
:alt: Three requests of different lengths, their block tables, and a shared pool of physical blocks in which their blocks are scattered.

A paged KV cache: each request's logical blocks map through its block table to physical
blocks of one pool, in any order. Only the last block of a request is partly empty.
```

First, a model decoding through paged caches gives the logits of the whole sequence at once,
because a `PagedKVCache` follows the same protocol as every cache of the book:
''')

code(r'''
model = models["multi-head"][0]
tokens = val_ids[:40].view(1, -1).to(device)
pools = [KVBlockPool(8, 16, 4, 16, device=device) for _ in model.blocks]
paged = [PagedKVCache(pool, batch_size=1) for pool in pools]
with torch.no_grad():
    whole = model(tokens)
    steps = [model(tokens[:, :24], 0, paged)]
    steps += [model(tokens[:, t:t + 1], t, paged) for t in range(24, 40)]
torch.testing.assert_close(torch.cat(steps, dim=1), whole)
print("block tables of the first layer:", paged[0].block_tables)
''')

md(r'''
Now a batch of requests of mixed lengths, as a server sees them: 32 requests whose final
lengths are drawn between 16 and 2048 tokens, served with blocks of 16 positions. The pool gives
out blocks as the requests grow; `paged_attention` reads each request's keys through its block
table, and matches attention over each request's contiguous keys.
''')

code(r'''
generator = torch.Generator().manual_seed(0)
final = torch.randint(16, 2049, (32,), generator=generator).tolist()
G, E, BLOCK = 4, 16, 16
pool = KVBlockPool(4096, BLOCK, G, E, device=device)
cache = PagedKVCache(pool, batch_size=len(final))
contiguous = []
for row, n in enumerate(final):
    k, v = torch.randn(2, G, n, E, generator=generator).to(device)
    cache.append_row(row, k, v)
    contiguous.append((k, v))
query = torch.randn(len(final), 8, 1, E, generator=generator).to(device)
out = paged_attention(query, pool.key_pool, pool.value_pool,
                      cache.block_table_tensor(), cache.length_tensor())
for row, (k, v) in enumerate(contiguous):
    expected = grouped_query_attention(query[row:row + 1], k[None], v[None])
    torch.testing.assert_close(out[row:row + 1], expected)
memory = cache_memory(final, max_length=2048, block_size=BLOCK,
                      bytes_per_token=pool.bytes_per_token)
assert cache.nbytes == memory.paged_bytes
print(f"filled:     {memory.filled_bytes / 2**20:6.1f} MiB")
print(f"contiguous: {memory.contiguous_bytes / 2**20:6.1f} MiB reserved, "
      f"{memory.contiguous_waste:.0%} of it empty")
print(f"paged:      {memory.paged_bytes / 2**20:6.1f} MiB reserved, "
      f"{memory.paged_waste:.1%} of it empty")
attnlab.glue("contiguous-waste", 100 * memory.contiguous_waste)
attnlab.glue("paged-waste", 100 * memory.paged_waste)
''')

md(r'''
Reserving the maximum length leaves {glue:text}`contiguous-waste:.0f`% of the contiguous cache
empty; paging leaves {glue:text}`paged-waste:.1f`%, less than one block per request. The memory
saved becomes a larger batch, and a larger batch is a higher arithmetic intensity. The blocks
also let requests share memory: two requests with the same prompt can point their tables at the
same blocks, which is how servers share a long system prompt {cite:p}`kwon2023efficient`.

## Split-KV decoding

FlashAttention (chapter 8) gives each block of queries to one of the GPU's processors. A
decoding step has one query per sequence and head, so for one long sequence there are only
$H$ pieces of work, and an H100 has 132 streaming multiprocessors {cite:p}`nvidia2023h100`: most
would idle while a few walk the whole cache. *Flash-Decoding* {cite:p}`dao2023flashdecoding` cuts
the keys into chunks that are attended to in parallel, each giving a partial output $o_i$ and the
log-sum-exp $\ell_i$ of its scores, and merges them exactly: $\ell = \log \sum_i e^{\ell_i}$,
$o = \sum_i e^{\ell_i - \ell} o_i$. It is the online softmax of chapter 8, with the chunks
combined at the end instead of in turn.

```{figure} ../book/figures/split-kv.svg
:name: fig-split-kv
:class: dark-light
:width: 540px
:alt: One query attends to four chunks of the cache in parallel; each gives a partial output and a log-sum-exp, merged into the output.

Split-KV decoding: one query, the cache cut into chunks attended to side by side, and the
partial outputs merged by their log-sum-exps.
```
''')

code(r'''
print(attnlab.listing(merge_attention_partials, "merge"))
''')

md(r'''
The merge is exact for any cut, also one that does not divide the cache evenly. Against attention
computed in float64, for one query of 8 heads (2 key/value heads) over a cache of 4099 positions:
''')

code(r'''
generator = torch.Generator().manual_seed(1)
q = torch.randn(1, 8, 1, 64, generator=generator, dtype=torch.float64)
k = torch.randn(1, 2, 4099, 64, generator=generator, dtype=torch.float64)
v = torch.randn(1, 2, 4099, 64, generator=generator, dtype=torch.float64)
exact = grouped_query_attention(q, k, v)
print(f"{'chunks':>6}{'float32 error':>15}{'float16 error':>15}")
for splits in (1, 3, 16, 100):
    errors = []
    for dtype in (torch.float32, torch.float16):
        out = split_kv_attention(q.to(device, dtype), k.to(device, dtype),
                                 v.to(device, dtype), num_splits=splits)
        errors.append((out.double().cpu() - exact).abs().max().item())
    print(f"{splits:6}{errors[0]:15.1e}{errors[1]:15.1e}")
    assert errors[0] < 1e-5 and errors[1] < 2e-3
SMS = 132
for heads, splits in ((32, 1), (32, 16)):
    print(f"{heads} heads x {splits:2} chunks: {heads * splits:4} pieces of work"
          f" for {SMS} multiprocessors")
''')

md(r'''
The error stays at the rounding of the data type, whatever the number of chunks: splitting
changes where the work runs, not the result. Llama 3 8B's 32 query heads give 32 pieces of work
for one sequence; cut into 16 chunks they give 512, enough for every multiprocessor. The
merge costs one small extra pass over $C$ partial results.

## Attention sinks and windows

A sliding window (chapter 8) bounds the cache: a layer whose queries see only the last $w$
positions keeps only those. Serving a model *trained* with full attention through a window is
another matter. {cite:t}`xiao2024efficient` found that large language models put much of their
attention on the first few tokens, whatever those tokens are, and that a window cache that has
evicted them makes the perplexity explode; keeping the first four tokens besides the window (the
*attention sinks*, StreamingLLM) restores it. `SinkKVCache` keeps both, and
`sliding_window_mask` applies the same rule to a whole sequence:
''')

code(r'''
print(attnlab.listing(SinkKVCache.append, "sink-cache"))
''')

md(r'''
The multi-head models above, trained with full attention over 64 characters, served with a window
of 16 positions, without and with 4 sinks (the same weights loaded into a model whose `LMConfig`
sets `window` and `sinks`). The losses are those of positions 16 to 63, where the window has
started to evict:
''')

code(r'''
WINDOW, SINKS = 16, 4


def served(trained, **options):
    """The trained weights in a model with another window or sinks."""
    config = dataclasses.replace(trained.config, **options)
    model = TransformerLM(config).to(device)
    model.load_state_dict(trained.state_dict())
    return model.eval()


def late_loss(model):
    """The mean loss of positions WINDOW to CONTEXT - 1."""
    by_position = lm_loss_by_position(model, val_ids, context=CONTEXT)
    return by_position[WINDOW:].mean().item()


serving = {"full attention": {}, "window": dict(window=WINDOW),
           "window and sinks": dict(window=WINDOW, sinks=SINKS)}
sink_loss = {name: [late_loss(served(m, **options))
                    for m in models["multi-head"]]
             for name, options in serving.items()}
for name, values in sink_loss.items():
    print(f"{name:17} " + "  ".join(f"{x:.3f}" for x in values))
window_cost = [w - f for w, f in zip(sink_loss["window"],
                                     sink_loss["full attention"])]
sink_gain = [w - s for w, s in zip(sink_loss["window"],
                                   sink_loss["window and sinks"])]
attnlab.glue("window-cost-max", max(window_cost))
attnlab.glue("sink-gain-max", max(abs(g) for g in sink_gain))
''')

md(r'''
For our small models the window costs at most {glue:text}`window-cost-max:.3f` nats per
character, and keeping the sinks changes the loss by at most {glue:text}`sink-gain-max:.3f`: they
have learned no sink worth keeping. {cite:t}`xiao2024efficient` saw sinks in Llama-2, MPT, Falcon
and Pythia, models trained far longer on far longer texts, and explain them by the softmax: a
head with nothing to attend to must still put its weight somewhere, and the first tokens, visible
to every later position, become the place. gpt-oss learns instead one extra logit per head that
joins the softmax's denominator, a sink with no token.

Today's models also interleave windowed layers with global ones: Gemma 2 alternates them
{cite:p}`gemma2024gemma2`, Gemma 3 has five local layers to each global one
{cite:p}`gemma2025gemma3`. Only the global layers' caches grow. Our models with a window of 16
in the first block and full attention in the second, from the same 3 seeds:
''')

code(r'''
local_global = [train_model(s, window=(WINDOW, None)) for s in SEEDS]
lg_loss = [evaluate_lm(m, val_ids, context=CONTEXT) for m in local_global]
caches = local_global[0].new_caches()
with torch.no_grad():
    local_global[0](val_ids[:CONTEXT].view(1, -1).to(device), 0, caches)
held = [c.nbytes for c in caches]
assert held[0] == WINDOW * FORMULA["multi-head"] // 2
print("loss, local and global: " + "  ".join(f"{x:.3f}" for x in lg_loss))
print("loss, global only:      "
      + "  ".join(f"{x:.3f}" for x in losses["multi-head"]))
print(f"cache after {CONTEXT} tokens: local block {held[0]:,} bytes, "
      f"global block {held[1]:,} bytes")
attnlab.glue("lg-vs-global", statistics.mean(lg_loss) - mean["multi-head"])
attnlab.glue("window", WINDOW)
''')

md(r'''
The local block holds {glue:text}`window` positions, however long the text; the interleaved
models' mean loss differs from the all-global ones' by {glue:text}`lg-vs-global:+.3f` nats, a
difference to read against the seeds' spread above.

## Speculative decoding

Decoding is limited by reading the weights, and a pass over $k + 1$ tokens reads them once, just
as a pass over one does. *Speculative decoding* {cite:p}`leviathan2023fast,chen2023accelerating`
lets a small draft model propose $k$ tokens, one cheap pass each; the large target model then
scores all of them in one pass (its causal mask gives the logits after every draft prefix at
once), keeps the longest prefix it agrees with, and adds one token of its own. Greedy
verification keeps a draft token when it is the target's argmax, so the output is exactly the
target's greedy output; with sampling, a rejection rule keeps the target's distribution
{cite:p}`leviathan2023fast`.
''')

code(r'''
print(attnlab.listing(speculative_decode, "round"))
''')

md(r'''
The multi-head models are the targets; each gets a draft of one block of `d_model` 32, trained
from the same seed. From 3 prompts of the held-out module, 48 new characters per prompt:
''')

code(r'''
drafts = [train_model(s, d_model=32, num_heads=2, num_layers=1,
                      dim_feedforward=64) for s in SEEDS]
prompts = [val_ids[i:i + 32].view(1, -1).to(device) for i in (0, 700, 1400)]
DRAFT_LENGTHS = (1, 2, 4, 8)
per_pass = {k: [] for k in DRAFT_LENGTHS}
for target, draft in zip(models["multi-head"], drafts):
    for prompt in prompts:
        greedy = generate(target, prompt, 48, temperature=0)
        for k in DRAFT_LENGTHS:
            result = speculative_decode(target, draft, prompt, 48,
                                        draft_length=k)
            assert torch.equal(result.tokens, greedy)  # the target's text
            per_pass[k].append(result.tokens_per_target_pass)
print(f"{'draft length':>12}{'tokens per target pass (9 runs)':>36}")
for k, values in per_pass.items():
    print(f"{k:12}{statistics.mean(values):14.2f}"
          f" ({min(values):.2f} to {max(values):.2f})")
best = max(DRAFT_LENGTHS, key=lambda k: statistics.mean(per_pass[k]))
attnlab.glue("spec-best", statistics.mean(per_pass[best]))
attnlab.glue("spec-best-k", best)
''')

md(r'''
Every run writes exactly the target's greedy text, with {glue:text}`spec-best:.2f` characters per
pass of the target at best (draft length {glue:text}`spec-best-k`), where plain decoding writes
one. Whether that is faster depends on the price of the draft's passes against the target's: the
wider the gap in size, the more speculation pays. The larger the draft length, the more proposals
the target rejects, so the gain flattens.

## Summary

- Prefill is limited by arithmetic, decode by memory: one token per pass reads every weight and
  the whole cache.
- A batch shares the weights but not the caches; the cache, $2 L G E$ numbers per token, limits
  decoding at long contexts.
- Grouped and multi-query attention shrink the cache by sharing heads; latent attention caches a
  low-rank latent and a rotary key, and absorbs the up-projections into the query and output.
- A paged cache wastes less than a block per request; split-KV decoding gives one long query
  enough parallel work; both compute exactly the same attention.
- A window bounds the cache; sinks keep the tokens that large models attend to by default.
- Speculative decoding writes several of the target's tokens per target pass, and the same text.

## Exercises

:::{exercise}
:label: ch9-ex-cache

A request to Llama 3 8B has a prompt of 6000 tokens and writes 2000. How many GiB of cache does it
hold at the end, in bfloat16? How many such requests fit next to the 16 GB of weights on an 80 GB
GPU, with a contiguous cache reserving 8192 positions each, and with a paged one?
:::

:::{solution-start} ch9-ex-cache
:class: dropdown
:::
''')

code(r'''
per_token = kv_cache_bytes_per_token(32, 8, 128, torch.bfloat16)
request = (6000 + 2000) * per_token
room = 80e9 - 16e9
print(f"one request: {request / GiB:.2f} GiB")
print("contiguous:", int(room // (8192 * per_token)), "requests")
print("paged:     ", int(room // (-(-8000 // 16) * 16 * per_token)),
      "requests")
''')

md(r'''
Paging fits as many requests as their actual lengths allow; a contiguous cache fits as many as
the reserved maximum does. Here the lengths are close to the maximum, so the gain is small; with
the mixed lengths of the section above it is large.

:::{solution-end}
:::

:::{exercise}
:label: ch9-ex-merge

Show that merging two partial results by their log-sum-exps gives exactly softmax attention over
the union of their keys. Then show that the merge is associative, so that chunks can be merged in
any order or in a tree.
:::

:::{solution} ch9-ex-merge
:class: dropdown

Let chunk $i$ have scores $s_j$ for its keys $j \in K_i$, $Z_i = \sum_{j \in K_i} e^{s_j}$,
$\ell_i = \log Z_i$ and $o_i = \sum_{j \in K_i} e^{s_j} v_j / Z_i$. Then
$e^{\ell_1} o_1 + e^{\ell_2} o_2 = \sum_{j \in K_1 \cup K_2} e^{s_j} v_j$ and
$e^{\ell_1} + e^{\ell_2} = Z$, the full normaliser, so
$\sum_i e^{\ell_i - \ell} o_i$ with $\ell = \log(e^{\ell_1} + e^{\ell_2})$ is the full softmax
average. A merged pair is again a pair $(o, \ell)$ of the same meaning, for the union of the keys;
merging is a sum of $e^{\ell_i} o_i$ and of $e^{\ell_i}$, and sums are associative.
:::

:::{exercise}
:label: ch9-ex-absorb

With absorption, each score of latent attention costs $d_c + d_R$ multiply-adds instead of
$E + d_R$. For DeepSeek-V3's sizes ($d_c = 512$, $d_R = 64$, $E = 128$, 128 heads), compare the
FLOPs of scoring one decoding query against $n$ cached tokens with and without absorption,
counting the decompression of the keys. When does absorption pay?
:::

:::{solution} ch9-ex-absorb
:class: dropdown

Without absorption, decompressing the $n$ keys costs $n \cdot 128 \cdot 128 \cdot 512$
multiply-adds per layer (every head's $W^{UK}_h c_j$), then $128 \cdot n \cdot (128 + 64)$ for
the scores. With absorption, the query costs $128 \cdot 128 \cdot 512$ once, then
$128 \cdot n \cdot (512 + 64)$ for the scores. Per cached token, $128 \cdot 512 \cdot 128 +
128 \cdot 192$ against $128 \cdot 576$: absorption pays as soon as $n > 1$ when one query is
decoded. In prefill, with as many queries as keys, the decompression is shared by all
queries, and the decompressed form is the cheaper one.
:::

:::{exercise}
:label: ch9-ex-accept

Suppose that the target accepts each draft token independently with probability $\alpha$.
Show that a round with draft length $k$ yields on average $(1 - \alpha^{k+1}) / (1 - \alpha)$
tokens {cite:p}`leviathan2023fast`. Estimate $\alpha$ from the measured tokens per pass above
for $k = 1$, and predict $k = 8$. Why does the measurement fall short of the prediction?
:::

:::{solution-start} ch9-ex-accept
:class: dropdown
:::

A round yields $j + 1$ tokens when the first $j$ proposals are accepted and the next rejected
(or $k + 1$ when all $k$ are): the expectation is $\sum_{j=0}^{k} \alpha^j = (1 - \alpha^{k+1})
/ (1 - \alpha)$. With $k = 1$ the yield is $1 + \alpha$:
''')

code(r'''
alpha = statistics.mean(per_pass[1]) - 1
predicted = (1 - alpha ** 9) / (1 - alpha)
print(f"alpha from k = 1: {alpha:.2f}")
print(f"k = 8: predicted {predicted:.2f}, measured "
      f"{statistics.mean(per_pass[8]):.2f} tokens per target pass")
''')

md(r'''
Acceptances are not independent: a draft that has gone wrong once tends to stay wrong, and easy
stretches of code (an indentation, a repeated name) are accepted in runs. And the last round of
each text is cut short to end at exactly 48 tokens.

:::{solution-end}
:::
''')
