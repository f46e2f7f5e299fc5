"""Multi-query associative recall (MQAR): look up, at each query, the value a key was paired with.

Introduced in the chapter "Beyond softmax". Arora et al. (2023), "Zoology: Measuring and
improving recall in efficient language models", arXiv:2312.04927: a sequence starts with
key-value pairs, ``k_1 v_1 k_2 v_2 ... k_D v_D``, and goes on with some of the keys again; at
each of them a model must output the value that key came with. Softmax attention can look the
key up among every earlier position; a model with a state of fixed size must hold every pair in
that state, so the task measures how much such a state can recall. In Zoology's experiments,
at a fixed model width, the efficient models fall behind attention as the pairs grow.

The layout follows the authors' generator (``_mqar`` in HazyResearch/zoology,
``zoology/data/associative_recall.py``): keys are drawn without replacement from
``1 .. V/2 - 1`` and values without replacement from ``V/2 .. V - 1`` (disjoint halves of the
vocabulary, 0 left out of the keys), each query occupies two positions, the key and a filler
token drawn uniformly from the whole vocabulary, and the target is the value at the key's
position and -100 (``cross_entropy``'s ``ignore_index``) everywhere else. Zoology spreads the
queries over a longer tail at gaps drawn from a power law and asks for every key; here the
``Q`` queries are distinct keys, in random order, one after another, so that
``N = 2 D + 2 Q``.
"""

from __future__ import annotations

import torch

from attnlab.validation import check_int, check_ints, describe

__all__ = ["mqar_batch"]


def _without_replacement(rows: int, pool: int, count: int, generator: torch.Generator) -> torch.Tensor:
    """``(rows, count)`` distinct indices in ``[0, pool)`` per row: the first ``count`` of a random permutation."""
    return torch.rand(rows, pool, generator=generator).argsort(dim=-1)[:, :count]


def mqar_batch(
    batch_size: int,
    *,
    num_pairs: int,
    num_queries: int,
    vocab_size: int,
    seed: int | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of multi-query associative recall: ``D`` key-value pairs, then ``Q`` of the keys again.

    Defined in the chapter "Beyond softmax" (the module's docstring has the layout and its
    source). Row ``b`` is ``k_1 v_1 ... k_D v_D q_1 f_1 ... q_Q f_Q``: the ``D = num_pairs``
    distinct keys with their distinct values, then ``Q = num_queries`` distinct keys among them,
    each followed by a filler token ``f``; ``targets[b, t]`` is the value paired with the key at
    ``t`` where ``t`` is a query's position, and -100 elsewhere.

    Args:
        batch_size: ``B``.
        num_pairs: ``D``, at most ``V / 2 - 1`` (keys come from ``1 .. V/2 - 1``).
        num_queries: ``Q``, in ``[1, D]``.
        vocab_size: ``V``; keys and values take the two halves of ``0 .. V - 1``.
        seed: draws from a new generator seeded with it (0 when neither ``seed`` nor
            ``generator`` is given): the same seed gives the same batch.
        generator: a CPU ``torch.Generator`` to draw from instead, so that successive batches
            differ; not together with ``seed``.

    Returns:
        ``(tokens (B, N), targets (B, N))``, ``torch.long`` on the CPU, ``N = 2 D + 2 Q``.
    """
    name = "mqar_batch"
    check_ints(name, batch_size=batch_size, num_pairs=num_pairs, vocab_size=vocab_size)
    check_int(name, "num_queries", num_queries, high=num_pairs, note="num_pairs: each query asks for another key")
    check_int(name, "seed", seed, low=None, none=True)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"{name}: generator must be a torch.Generator or None, got {describe(generator)}")
    if seed is not None and generator is not None:
        raise ValueError(f"{name}: pass seed or generator, not both")
    half = vocab_size // 2
    if num_pairs > half - 1:
        raise ValueError(
            f"{name}: vocab_size must be at least {2 * num_pairs + 2} for {num_pairs} pairs (keys come from 1 .. "
            f"vocab_size // 2 - 1, values from the other half), got {vocab_size}"
        )
    if generator is None:
        generator = torch.Generator().manual_seed(0 if seed is None else seed)
    B, D, Q = batch_size, num_pairs, num_queries
    keys = 1 + _without_replacement(B, half - 1, D, generator)  # (B, D), in 1 .. V/2 - 1
    values = half + _without_replacement(B, vocab_size - half, D, generator)  # (B, D), in V/2 .. V - 1
    asked = _without_replacement(B, D, Q, generator)  # (B, Q): which pairs the queries ask for, in order
    tokens = torch.randint(0, vocab_size, (B, 2 * D + 2 * Q), generator=generator)  # fillers everywhere at first
    targets = torch.full_like(tokens, -100)  # cross_entropy's default ignore_index
    tokens[:, 0 : 2 * D : 2], tokens[:, 1 : 2 * D : 2] = keys, values  # k_1 v_1 ... k_D v_D
    tokens[:, 2 * D :: 2] = keys.gather(1, asked)  # q_1 f_1 ... q_Q f_Q: the fillers stay between the queries
    targets[:, 2 * D :: 2] = values.gather(1, asked)  # at q_i: the value of its pair
    return tokens, targets
