"""Benchmark 4: training time to quality on the dates task (chapters 2 and 6).

Trains each model with its chapter's recipe, evaluating exact match on all 5000 held-out dates every
25 steps, and reports the training time (evaluations excluded), the steps and the epochs at the
first evaluation that reaches 99.5%. Targets on 2 CPU cores: the Luong attention model within 25 s,
the Transformer within 90 s. Chapter 6's comparison of post-LN and pre-LN at its own schedule is run
here to the end (three seeds each), where a chapter's time budget cannot: the chapter cites these
rows, and a test checks what it says of them. There is no PyTorch counterpart to interleave with:
these are absolute times, and the machine is described beside them.
Run: ``python benchmarks/bench_training.py [--quick]``.
"""

from __future__ import annotations

import argparse

import torch
from _common import save, verdict

from attnlab import set_seed
from attnlab.data import CharVocab, make_date_pairs
from attnlab.models import LuongDecoder, Seq2Seq, Seq2SeqConfig, Transformer, TransformerConfig, warmup_schedule
from attnlab.train import train_seq2seq

QUALITY, EVERY, BATCH = 0.995, 25, 128
QUICK_STEPS = 5  # --quick: each recipe 5 steps, evaluated once, after the last (a smoke test)
HELD_OUT, QUICK_HELD_OUT = 5000, 500  # --quick evaluates on the first 500 (4 of its 8 s on all 5000)


def every(quick: bool) -> int:
    """Steps between two evaluations on the held-out dates."""
    return QUICK_STEPS if quick else EVERY


def held_out(quick: bool) -> str:
    """Which held-out dates each evaluation uses, in words (the results table says it)."""
    return f"the first {QUICK_HELD_OUT} of {HELD_OUT}" if quick else f"all {HELD_OUT}"


def _recipes(src: int, tgt: int) -> dict:
    rnn = Seq2SeqConfig(src, tgt, embed_dim=32, hidden_dim=128, bidirectional=True)
    transformer = TransformerConfig(
        src,
        tgt,
        d_model=64,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dim_feedforward=256,
        norm_first=False,
    )
    recipes = {
        "Luong GRU (chapter 2's model), lr 3e-3": dict(
            build=lambda: Seq2Seq(rnn, decoder=LuongDecoder(rnn)), steps=400, target=25.0, kwargs=dict(lr=3e-3)
        ),
        "Luong GRU, constant lr 5e-3 (chapter 6's recipe)": dict(
            build=lambda: Seq2Seq(rnn, decoder=LuongDecoder(rnn)), steps=500, target=None, kwargs=dict(lr=5e-3)
        ),
        "Transformer 2+2, post-LN (chapter 6)": dict(
            build=lambda: Transformer(transformer),
            steps=1000,
            target=90.0,
            kwargs=dict(lr=1.0, betas=(0.9, 0.98), schedule=warmup_schedule(64, 100, factor=0.24, total_steps=1000)),
        ),
    }
    # chapter 6's pre-LN / post-LN comparison, run to the end: its recipe, both orders, 3 seeds
    for norm_first in (False, True):
        for seed in (0, 1, 2):
            if not norm_first and seed == 0:
                continue  # the row above
            config = TransformerConfig(
                src,
                tgt,
                d_model=64,
                num_heads=4,
                num_encoder_layers=2,
                num_decoder_layers=2,
                dim_feedforward=256,
                norm_first=norm_first,
            )
            recipes[f"Transformer 2+2, {'pre' if norm_first else 'post'}-LN, seed {seed}"] = dict(
                build=lambda c=config: Transformer(c),
                steps=1000,
                target=None,
                seed=seed,
                kwargs=dict(
                    lr=1.0, betas=(0.9, 0.98), schedule=warmup_schedule(64, 100, factor=0.24, total_steps=1000)
                ),
            )
    return recipes


def main(quick: bool = False) -> list[dict]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_pairs, test_pairs = make_date_pairs(45_000, HELD_OUT, seed=0)
    if quick:
        test_pairs = test_pairs[:QUICK_HELD_OUT]
    src_vocab = CharVocab.from_texts(s for s, _ in train_pairs)
    tgt_vocab = CharVocab("0123456789-")
    rows = []
    for name, recipe in _recipes(len(src_vocab), len(tgt_vocab)).items():
        seed = recipe.get("seed", 0)
        if quick and seed:
            continue  # a smoke test runs each recipe once
        set_seed(seed)
        model = recipe["build"]()
        steps = QUICK_STEPS if quick else recipe["steps"]
        history = train_seq2seq(
            model,
            train_pairs,
            src_vocab,
            tgt_vocab,
            steps=steps,
            batch_size=BATCH,
            device=device,
            eval_pairs=test_pairs,
            eval_every=every(quick),
            progress=False,
            seed=seed,
            **recipe["kwargs"],
        )
        hit = next((i for i, r in enumerate(history.evals) if r.exact_match >= QUALITY), None)
        row = {
            "model": name,
            "steps_run": steps,
            "target": recipe["target"],
            "parameters": sum(p.numel() for p in model.parameters()),
            "final_exact": history.evals[-1].exact_match,
        }
        if hit is None:
            row.update(
                seconds=None,
                steps=None,
                epochs=None,
                verdict="MISSES (never reached)" if recipe["target"] else "for comparison",
            )
        else:
            step = history.eval_steps[hit]
            row.update(
                seconds=history.eval_seconds[hit],
                steps=step,
                epochs=step * BATCH / len(train_pairs),
                exact=history.evals[hit].exact_match,
                verdict=verdict(history.eval_seconds[hit], recipe["target"]) if recipe["target"] else "for comparison",
            )
        rows.append(row)
        if row["seconds"] is None:
            print(f"{name}: {QUALITY:.1%} not reached in {steps} steps (last {row['final_exact']:.4f})")
        else:
            print(
                f"{name}: {QUALITY:.1%} at step {row['steps']} ({row['epochs']:.2f} epochs) after "
                f"{row['seconds']:.1f} s of training (exact match {row['exact']:.4f}): {row['verdict']}"
            )
    save("training" + ("-quick" if quick else ""), rows, device)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_STEPS} steps, one evaluation on {QUICK_HELD_OUT} dates (a smoke test; the target is not reached)",
    )
    main(parser.parse_args().quick)
