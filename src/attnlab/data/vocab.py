"""A character vocabulary and padded batches for sequence-to-sequence tasks.

Introduced in chapter 1 (the seq2seq bottleneck). Token ids 0, 1, 2 are reserved for padding,
the start of an output and its end; every character of the data gets an id after them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from attnlab.validation import describe

__all__ = ["Batch", "CharVocab", "make_batch"]


class CharVocab:
    """Maps characters to integer ids and back.

    Defined in chapter 1. ``PAD`` (0) fills short sequences in a batch, ``START`` (1) is the
    decoder's first input, ``END`` (2) is the last token a decoder must produce.
    """

    PAD, START, END = 0, 1, 2
    SPECIALS = ("<pad>", "<s>", "</s>")

    def __init__(self, characters: Iterable[str]):
        chars = sorted(set(characters))
        for c in chars:
            if not isinstance(c, str):
                raise TypeError(f"CharVocab: characters must be single-character strings, got {describe(c)}")
            if len(c) != 1:
                raise ValueError(f"CharVocab: characters must be single-character strings, got {c!r}")
        self.itos: list[str] = [*self.SPECIALS, *chars]
        self.stoi: dict[str, int] = {c: i for i, c in enumerate(self.itos)}

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> CharVocab:
        """The vocabulary of every character that occurs in ``texts``."""
        return cls(c for text in texts for c in text)

    def __len__(self) -> int:
        return len(self.itos)

    def __repr__(self) -> str:
        shown = "".join(self.itos[3:])
        return f"CharVocab({len(self)} tokens: 3 special + {shown!r})"

    def encode(self, text: str, *, start: bool = False, end: bool = False) -> list[int]:
        """Ids of the characters of ``text``, optionally with START before and END after.

        Raises:
            TypeError: ``text`` is not a string.
            ValueError: a character is not in the vocabulary (the message names it).
        """
        if not isinstance(text, str):
            raise TypeError(f"CharVocab.encode: text must be a str, got {type(text).__name__}")
        unknown = sorted({c for c in text if c not in self.stoi})
        if unknown:
            raise ValueError(f"CharVocab.encode: characters {unknown} of {text!r} are not in the vocabulary")
        ids = [self.stoi[c] for c in text]
        return ([self.START] if start else []) + ids + ([self.END] if end else [])

    def decode(self, ids: Iterable[int] | torch.Tensor) -> str:
        """The text of ``ids``: stops at the first END and skips PAD and START."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(f"CharVocab.decode: ids must be 1-D, got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        out = []
        for i in ids:
            if not 0 <= i < len(self.itos):
                raise ValueError(f"CharVocab.decode: id {i} is outside the vocabulary of {len(self)} tokens")
            if i == self.END:
                break
            if i not in (self.PAD, self.START):
                out.append(self.itos[i])
        return "".join(out)


@dataclass
class Batch:
    """A padded batch of source/target pairs.

    Shapes:
        src: ``(B, S)`` source ids, padded with PAD on the right.
        src_lengths: ``(B,)`` true source lengths.
        tgt_in: ``(B, L)`` decoder inputs: START, then the target (teacher forcing).
        tgt_out: ``(B, L)`` what the decoder must predict: the target, then END.
    """

    src: torch.Tensor
    src_lengths: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor

    def to(self, device: torch.device | str) -> Batch:
        return Batch(*(t.to(device) for t in (self.src, self.src_lengths, self.tgt_in, self.tgt_out)))

    def __len__(self) -> int:
        return self.src.shape[0]


def _pad(rows: list[list[int]], value: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [value] * (width - len(r)) for r in rows], dtype=torch.long)


def make_batch(
    pairs: Sequence[tuple[str, str]],
    src_vocab: CharVocab,
    tgt_vocab: CharVocab,
    device: torch.device | str | None = None,
) -> Batch:
    """Encode and pad ``(source, target)`` pairs into a ``Batch``.

    Defined in chapter 1. Sources are padded on the right; targets get START in front (decoder
    input) and END behind (decoder output).

    Raises:
        ValueError: ``pairs`` is empty, or a source is empty, or a character is unknown.
    """
    if len(pairs) == 0:
        raise ValueError("make_batch: pairs must hold at least one (source, target) pair")
    sources, targets = [], []
    for source, target in pairs:
        if len(source) == 0:
            raise ValueError("make_batch: every source must have at least one character, got ''")
        sources.append(src_vocab.encode(source))
        targets.append(tgt_vocab.encode(target))
    batch = Batch(
        src=_pad(sources, CharVocab.PAD),
        src_lengths=torch.tensor([len(s) for s in sources], dtype=torch.long),
        tgt_in=_pad([[CharVocab.START, *t] for t in targets], CharVocab.PAD),
        tgt_out=_pad([[*t, CharVocab.END] for t in targets], CharVocab.PAD),
    )
    return batch.to(device) if device is not None else batch
