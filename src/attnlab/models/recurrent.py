"""The recurrent encoder and decoder of chapter 1, and the configuration of the models built from them.

Introduced in chapter 1. ``Encoder`` reads the source with a GRU or an LSTM and hands the decoder
its states ``hs`` and one context vector (``summarize``: the last state, or the mean or the maximum
of all of them); ``Decoder`` sees the source only through that vector, the bottleneck of chapter 1.
The attention decoders of chapters 2 and 4 (``attnlab.models.attention_decoders``) extend it, and
``Seq2Seq`` (``attnlab.models.seq2seq``) puts an encoder and a decoder together.

Shapes: ``B`` batch, ``S`` source length, ``L`` target length (decoder steps), ``D_h`` the size of
a recurrent layer's state (``hidden_dim``), ``D`` the size of the encoder's states ``hs`` (``D_h``,
doubled when bidirectional), ``E`` embedding size, ``V`` vocabulary size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnlab.validation import check_choice, check_ints

__all__ = ["CELLS", "CONTEXTS", "Decoder", "Encoder", "EncoderOutput", "Seq2SeqConfig", "State", "summarize"]


CELLS = {"gru": nn.GRU, "lstm": nn.LSTM}

CONTEXTS = ("last", "mean", "max")

State = torch.Tensor | tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Seq2SeqConfig:
    """Hyperparameters of a ``Seq2Seq`` model (defined in chapter 1).

    Args:
        src_vocab_size, tgt_vocab_size: sizes of the two vocabularies (with the 3 special tokens).
        embed_dim: size of the token embeddings.
        hidden_dim: size of the recurrent state of encoder and decoder.
        cell: ``"gru"`` or ``"lstm"``.
        bidirectional: a bidirectional encoder (its outputs have size ``2 * hidden_dim``).
        context: how the encoder's states become one vector: ``"last"``, ``"mean"`` or ``"max"``.
        peeky: feed the context to every decoder step (input and output layer), not only the first.
    """

    src_vocab_size: int
    tgt_vocab_size: int
    embed_dim: int = 32
    hidden_dim: int = 128
    cell: str = "gru"
    bidirectional: bool = False
    context: str = "last"
    peeky: bool = False

    def __post_init__(self) -> None:
        check_ints(
            "Seq2SeqConfig",
            src_vocab_size=self.src_vocab_size,
            tgt_vocab_size=self.tgt_vocab_size,
            embed_dim=self.embed_dim,
            hidden_dim=self.hidden_dim,
        )
        if self.src_vocab_size < 4 or self.tgt_vocab_size < 4:
            raise ValueError("Seq2SeqConfig: a vocabulary needs the 3 special tokens and at least one character")
        check_choice("Seq2SeqConfig", "cell", self.cell, tuple(CELLS))
        check_choice("Seq2SeqConfig", "context", self.context, CONTEXTS)

    @property
    def encoder_dim(self) -> int:
        return self.hidden_dim * (2 if self.bidirectional else 1)


@dataclass
class EncoderOutput:
    """What the encoder hands to the decoder.

    Shapes:
        hs: ``(B, S, D)``: one state per source position (the matrix ``hs``), zeros on padding.
        mask: ``(B, S)`` boolean, ``True`` on real source tokens.
        context: ``(B, D)``: the fixed-length summary the plain decoders receive.
    """

    hs: torch.Tensor
    mask: torch.Tensor
    context: torch.Tensor


def summarize(hs: torch.Tensor, last: torch.Tensor, mask: torch.Tensor, how: str) -> torch.Tensor:
    """One context vector per sequence from the encoder's states: ``last``, ``mean`` or ``max``.

    Defined in chapter 1. Padding never counts: the mean divides by the true length and the
    maximum ignores padded positions.

    Shapes:
        hs: ``(B, S, D)``; last: ``(B, D)``; mask: ``(B, S)``; returns ``(B, D)``.
    """
    # listing: how
    if how == "last":
        return last
    keep = mask[:, :, None]  # (B, S) -> (B, S, 1)
    if how == "mean":
        return (hs * keep).sum(1) / keep.sum(1).clamp_min(1)  # (B, S, D) -> (B, D)
    if how == "max":
        return hs.masked_fill(~keep, float("-inf")).amax(1)  # (B, S, D) -> (B, D)
    raise ValueError(f"summarize: how must be one of {CONTEXTS}, got {how!r}")
    # end listing: how


def _packed_rnn(rnn: nn.RNNBase, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, State]:
    """Run ``rnn`` over the real positions of the padded sequences ``x (B, S, E)`` (chapter 1).

    ``lengths (B,)`` must be on the CPU: packing needs them there. This is what
    ``pack_padded_sequence(..., enforce_sorted=False)`` and ``pad_packed_sequence`` do, with the
    sorting by length done here on the host, from those lengths: ``pad_packed_sequence`` would
    copy the order back from the device (a synchronisation; impossible on the meta device).
    Returns the outputs ``(B, S, D)``, zero on padding, and the last state, in the batch's order.
    """
    sorted_lengths, order = torch.sort(lengths, descending=True)  # longest first, as packing wants
    restore = order.argsort()  # the inverse permutation
    order, restore = order.to(x.device), restore.to(x.device)
    packed = pack_padded_sequence(x.index_select(0, order), sorted_lengths, batch_first=True)
    outputs, state = rnn(packed)
    hs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=x.shape[1])  # (B, S, D), sorted
    if isinstance(state, tuple):  # LSTM: (h, c), each (directions, B, D_h)
        return hs.index_select(0, restore), (state[0].index_select(1, restore), state[1].index_select(1, restore))
    return hs.index_select(0, restore), state.index_select(1, restore)


class Encoder(nn.Module):
    """Embedding and a recurrent layer (GRU or LSTM, optionally bidirectional).

    Defined in chapter 1. Padded sequences are packed, so the last state of each sequence is
    the state after its last *real* token, and ``hs`` is zero on padding. Packing reads the
    lengths on the host: ``src_lengths`` on the CPU costs nothing, on a GPU one copy per call.
    """

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.src_vocab_size, config.embed_dim, padding_idx=0)
        self.rnn = CELLS[config.cell](
            config.embed_dim, config.hidden_dim, batch_first=True, bidirectional=config.bidirectional
        )

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor) -> EncoderOutput:
        _, S = src.shape  # (B, S)
        embedded = self.embedding(src)  # (B, S) -> (B, S, E)
        hs, state = _packed_rnn(self.rnn, embedded, src_lengths.to("cpu", torch.long))  # (B, S, D)
        h = state[0] if isinstance(state, tuple) else state  # (directions, B, D_h)
        # forward direction's last state, and for a bidirectional encoder the backward direction's
        # state after reading the first token: (directions, B, D_h) -> (B, D)
        last = torch.cat([h[0], h[1]], dim=-1) if self.config.bidirectional else h[0]
        mask = torch.arange(S, device=src.device)[None, :] < src_lengths.to(src.device)[:, None]  # (B, S)
        return EncoderOutput(hs=hs, mask=mask, context=summarize(hs, last, mask, self.config.context))


class Decoder(nn.Module):
    """A recurrent decoder that sees the source only through the context vector.

    Defined in chapter 1. The context sets the initial state (through a linear layer and
    ``tanh``). With ``peeky=True`` it is also concatenated to the input of every step and to the
    input of the output layer.

    Subclasses (the attention decoders of chapter 2) override ``forward``; its third return
    value is the attention weights ``(B, L, S)``, ``None`` here.
    """

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        self.config = config
        extra_input, extra_output = self._extra_dims()
        self.embedding = nn.Embedding(config.tgt_vocab_size, config.embed_dim, padding_idx=0)
        self.bridge = nn.Linear(config.encoder_dim, config.hidden_dim)
        self.rnn = CELLS[config.cell](config.embed_dim + extra_input, config.hidden_dim, batch_first=True)
        self.out = nn.Linear(config.hidden_dim + extra_output, config.tgt_vocab_size)

    def _extra_dims(self) -> tuple[int, int]:
        """Sizes added to the recurrent layer's input and to the output layer's input."""
        peek = self.config.encoder_dim if self.config.peeky else 0
        return peek, peek

    def init_state(self, memory: EncoderOutput) -> State:
        h0 = torch.tanh(self.bridge(memory.context))[None]  # (B, D) -> (1, B, D_h)
        return (h0, torch.zeros_like(h0)) if self.config.cell == "lstm" else h0

    def forward(
        self, tgt_in: torch.Tensor, state: State, memory: EncoderOutput
    ) -> tuple[torch.Tensor, State, torch.Tensor | None]:
        # listing: decoder-steps
        L = tgt_in.shape[1]
        x = self.embedding(tgt_in)  # (B, L) -> (B, L, E)
        if self.config.peeky:
            peek = memory.context[:, None, :].expand(-1, L, -1)  # (B, D) -> (B, L, D)
            x = torch.cat([x, peek], dim=-1)  # (B, L, E + D)
        out, state = self.rnn(x, state)  # (B, L, D_h)
        if self.config.peeky:
            out = torch.cat([out, peek], dim=-1)  # (B, L, D_h + D)
        return self.out(out), state, None  # logits (B, L, V)
        # end listing: decoder-steps
