"""Encoder-decoder (seq2seq) models with a fixed-length context vector.

Introduced in chapter 1, where they show the bottleneck: whatever the length of the source,
the decoder receives one vector of ``D`` numbers. The choices of that vector follow the lecture
notes ("before attention"): the encoder's last hidden state, or the mean or the maximum of all
its hidden states. The *peeky* decoder (Deep Learning from Scratch 2, ch. 7) feeds the context
to every decoding step instead of only the first.

``Seq2Seq`` is here; its parts are in ``attnlab.models.recurrent`` (the configuration, the
encoder, the plain decoder) and ``attnlab.models.attention_decoders`` (the decoders of chapters 2
and 4), and this module exports them all, as it always has.

Shapes: ``B`` batch, ``S`` source length, ``L`` target length (decoder steps), ``D_h`` the size of
a recurrent layer's state (``hidden_dim``), ``D`` the size of the encoder's states ``hs`` (``D_h``,
doubled when bidirectional), ``E`` embedding size, ``V`` vocabulary size.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from attnlab.data.vocab import CharVocab
from attnlab.models.attention_decoders import (
    AttentionDecoder,
    BahdanauDecoder,
    LocalState,
    LuongDecoder,
    LuongLocalDecoder,
    PositionPredictor,
)
from attnlab.models.recurrent import CELLS, CONTEXTS, Decoder, Encoder, EncoderOutput, Seq2SeqConfig, summarize
from attnlab.models.recurrent import State as State
from attnlab.validation import check_int, check_tensor

__all__ = [
    "CELLS",
    "CONTEXTS",
    "AttentionDecoder",
    "BahdanauDecoder",
    "Decoder",
    "Encoder",
    "EncoderOutput",
    "LocalState",
    "LuongDecoder",
    "LuongLocalDecoder",
    "PositionPredictor",
    "Seq2Seq",
    "Seq2SeqConfig",
    "summarize",
]


class Seq2Seq(nn.Module):
    """Encoder, then decoder: trained with teacher forcing, decoded greedily.

    Defined in chapter 1. ``decoder`` may be any ``Decoder`` subclass (chapter 2 passes
    attention decoders).
    """

    def __init__(self, config: Seq2SeqConfig, decoder: Decoder | None = None):
        super().__init__()
        if not isinstance(config, Seq2SeqConfig):
            raise TypeError(f"Seq2Seq: config must be a Seq2SeqConfig, got {type(config).__name__}")
        self.config = config
        self.encoder = Encoder(config)
        self.decoder = decoder if decoder is not None else Decoder(config)

    @staticmethod
    def _check_source(src: torch.Tensor, src_lengths: torch.Tensor) -> torch.Tensor:
        """Check the source; returns ``src_lengths`` on the CPU, where the encoder reads them anyway
        (so the check of their values costs no extra synchronisation)."""
        check_tensor("Seq2Seq", "src", src, kind="long", dim=2, names="(B, S)", note="token ids")
        check_tensor("Seq2Seq", "src_lengths", src_lengths, kind="integer", shape=(src.shape[0],))
        lengths = src_lengths.to("cpu", torch.long)  # the encoder's one read of data on the host
        if int(lengths.min()) < 1 or int(lengths.max()) > src.shape[1]:
            raise ValueError(f"Seq2Seq: src_lengths must lie in [1, {src.shape[1]}], got {lengths.tolist()}")
        return lengths

    def forward(
        self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher forcing: logits ``(B, L, V)`` for every target position, and the attention
        weights ``(B, L, S)`` (``None`` for decoders without attention)."""
        lengths = self._check_source(src, src_lengths)
        check_tensor("Seq2Seq", "tgt_in", tgt_in, kind="long", shape=(src.shape[0], None), names=f"({src.shape[0]}, L)")
        memory = self.encoder(src, lengths)
        logits, _, weights = self.decoder(tgt_in, self.decoder.init_state(memory), memory)
        return logits, weights

    @torch.no_grad()
    def greedy_decode(
        self, src: torch.Tensor, src_lengths: torch.Tensor, max_len: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Decode by always taking the most likely next token, for at most ``max_len`` steps.

        Decoding stops early once every sequence has produced END: that test reads a flag on the
        host after each step (a synchronisation per step on an accelerator, and the reason this
        method cannot run on the meta device; its steps, ``greedy_steps``, can).

        Returns:
            tokens ``(B, L')`` with ``L' <= max_len`` (END included where it was produced;
            decode each row with ``CharVocab.decode``), and the attention weights
            ``(B, L', S)`` or ``None``.
        """
        lengths = self._check_source(src, src_lengths)  # on the CPU: checked again there at no cost
        check_int("Seq2Seq.greedy_decode", "max_len", max_len)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        tokens, weights = [], []
        for token, w in self.greedy_steps(src, lengths, max_len):
            tokens.append(token)
            if w is not None:
                weights.append(w)
            done |= token[:, 0] == CharVocab.END
            if bool(done.all()):  # the host read: stop once every sequence has ended
                break
        return torch.cat(tokens, dim=1), (torch.cat(weights, dim=1) if weights else None)

    def greedy_steps(
        self, src: torch.Tensor, src_lengths: torch.Tensor, max_len: int
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
        """The steps of ``greedy_decode``, without its early stop (chapter 1): for each of
        ``max_len`` steps, the most likely token ``(B, 1)`` and the attention weights
        ``(B, 1, S)`` (or ``None``).

        Apart from the source lengths, which packing reads on the host (pass them on the CPU),
        nothing here reads a value on the host, so the steps run on any device, meta included.
        Run it under ``torch.no_grad()`` unless gradients are wanted.
        """
        memory = self.encoder(src, self._check_source(src, src_lengths))
        state = self.decoder.init_state(memory)
        token = torch.full((src.shape[0], 1), CharVocab.START, dtype=torch.long, device=src.device)  # (B, 1)
        for _ in range(max_len):
            logits, state, w = self.decoder(token, state, memory)  # (B, 1, V)
            token = logits.argmax(-1)  # (B, 1)
            yield token, w
