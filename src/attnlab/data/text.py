"""A small real text corpus shipped with the package: a slice of Python's standard library.

Introduced in chapter 8, whose language models learn to write Python one character at a
time. ``python_corpus()`` reads 14 modules of CPython 3.11.7's ``Lib/`` (PSF licence; the
licence and the list of files are in ``data/corpus/``), nothing downloaded: 13 modules to train
on and ``calendar.py``, which no model sees while training, to validate on.

Token ids: 0 is ``MASK`` (the masked-token objective's blank), every character of the corpus
gets an id after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import torch

from attnlab.validation import check_choice, check_int, check_tensor

__all__ = ["TextCorpus", "ngram_distance", "python_corpus"]

VALIDATION_MODULE = "calendar"
_HEADER = "# ==== Lib/"


@dataclass(frozen=True)
class TextCorpus:
    """Modules of text with a character vocabulary (defined in chapter 8).

    ``modules`` maps a module's name to its text; ``validation`` names the held-out ones.
    ``chars`` lists the characters in id order after ``MASK`` (id 0).
    """

    modules: dict[str, str]
    validation: tuple[str, ...]
    chars: tuple[str, ...]
    MASK = 0

    @property
    def vocab_size(self) -> int:
        return len(self.chars) + 1

    def encode(self, text: str) -> torch.Tensor:
        """Ids of the characters of ``text``, shape ``(len(text),)``, dtype long."""
        if not isinstance(text, str):
            raise TypeError(f"TextCorpus.encode: text must be a str, got {type(text).__name__}")
        index = {c: i + 1 for i, c in enumerate(self.chars)}
        unknown = sorted({c for c in text if c not in index})
        if unknown:
            raise ValueError(f"TextCorpus.encode: characters not in the vocabulary: {unknown[:5]!r}")
        return torch.tensor([index[c] for c in text], dtype=torch.long)

    def decode(self, ids: torch.Tensor) -> str:
        """The text of ``ids`` ``(N,)``; ``MASK`` is shown as ``_``."""
        check_tensor("TextCorpus.decode", "ids", ids, kind="integer", dim=1, names="(N,)")
        return "".join("_" if i == self.MASK else self.chars[i - 1] for i in ids.tolist())

    def text(self, split: str) -> str:
        """The modules of ``split`` ("train" or "validation") joined in order."""
        check_choice("TextCorpus.text", "split", split, ("train", "validation"))
        held = split == "validation"
        return "".join(t for name, t in self.modules.items() if (name in self.validation) == held)

    def ids(self, split: str) -> torch.Tensor:
        """``encode(text(split))``: the split as one long sequence of ids."""
        return self.encode(self.text(split))


def python_corpus() -> TextCorpus:
    """The shipped slice of the standard library, split by module (defined in chapter 8)."""
    raw = resources.files("attnlab.data").joinpath("corpus", "python_stdlib.txt").read_text(encoding="utf-8")
    modules: dict[str, str] = {}
    for part in raw.split(_HEADER)[1:]:
        header, _, body = part.partition("\n")
        modules[header.removesuffix(".py ====")] = body
    chars = tuple(sorted(set(raw)))
    return TextCorpus(modules=modules, validation=(VALIDATION_MODULE,), chars=chars)


def ngram_distance(ids: torch.Tensor, n: int = 4) -> torch.Tensor:
    """How far back the ``n`` tokens ending at each position last occurred, ``(..., N)``.

    Defined in chapter 8, to measure how a language model uses far context: where the ``n``
    tokens ending at ``t`` also ended at an earlier ``s``, the token after ``s`` is evidence for
    the token after ``t`` (text repeats itself), ``t - s`` positions back. Entry ``t`` of each
    row of ``ids (..., N)`` is ``t - s`` for the largest such ``s < t`` in the same row, and -1
    where there is none (always for ``t < n - 1``). An integer tensor on the CPU, ``torch.long``.
    """
    name = "ngram_distance"
    check_tensor(name, "ids", ids, kind="integer")
    check_int(name, "n", n)
    if ids.dim() < 1:
        raise ValueError(f"{name}: ids must have shape (..., N), got a scalar")
    rows = ids.reshape(-1, ids.shape[-1]).tolist()
    out = torch.full((len(rows), ids.shape[-1]), -1, dtype=torch.long)
    for r, row in enumerate(rows):
        last: dict[tuple[int, ...], int] = {}  # each n-gram -> where it last ended
        for t in range(n - 1, len(row)):
            gram = tuple(row[t - n + 1 : t + 1])
            if gram in last:
                out[r, t] = t - last[gram]
            last[gram] = t
    return out.view(ids.shape)
