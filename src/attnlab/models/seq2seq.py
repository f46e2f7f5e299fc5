"""Encoder-decoder (seq2seq) models with a fixed-length context vector.

Introduced in chapter 1, where they show the bottleneck: whatever the length of the source,
the decoder receives one vector of ``D`` numbers. The choices of that vector follow the lecture
notes ("before attention"): the encoder's last hidden state, or the mean or the maximum of all
its hidden states. The *peeky* decoder (Deep Learning from Scratch 2, ch. 7) feeds the context
to every decoding step instead of only the first.

Shapes: ``B`` batch, ``S`` source length, ``L`` target length (decoder steps), ``D_h`` the size of
a recurrent layer's state (``hidden_dim``), ``D`` the size of the encoder's states ``hs`` (``D_h``,
doubled when bidirectional), ``E`` embedding size, ``V`` vocabulary size.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnlab.attention.local import local_attention, window_to_dense
from attnlab.attention.masking import masked_softmax
from attnlab.attention.scoring import make_score
from attnlab.data.vocab import CharVocab
from attnlab.validation import check_choice, check_int, check_ints, check_tensor

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


def _query_state(state: State) -> torch.Tensor:
    """The decoder's current hidden state as a query: (1, B, D_h) -> (B, 1, D_h)."""
    h = state[0] if isinstance(state, tuple) else state
    return h[-1][:, None, :]


class AttentionDecoder(Decoder):
    """What the attention decoders share: a score module over the encoder states (chapter 2).

    Subclasses set ``default_score`` and implement ``forward``, returning the attention weights
    ``(B, L, S)`` as its third value.
    """

    default_score = "general"

    def __init__(self, config: Seq2SeqConfig, score: str | None = None, attention_dim: int = 64):
        if config.peeky:
            raise ValueError(f"{type(self).__name__}: config.peeky must be False; attention replaces the peek")
        super().__init__(config)
        self.score = make_score(score or self.default_score, config.hidden_dim, config.encoder_dim, attention_dim)


class BahdanauDecoder(AttentionDecoder):
    r"""Attention decoder of Bahdanau et al. (2015): attend first, then step the RNN.

    Defined in chapter 2. At step ``t`` the previous state :math:`s_{t-1}` queries the encoder
    states ``hs``; the context :math:`c_t = \sum_s \alpha_{ts} h_s` joins the input of the step,
    :math:`s_t = g([y_{t-1}; c_t], s_{t-1})`, and the output layer reads :math:`[s_t; c_t]`.
    Because each query needs the previous step's state, the steps run one after the other,
    in training too.

    Args:
        config: the model's configuration (``peeky`` must be False: attention replaces it).
        score: a score name (``"additive"`` by default, as in the paper; see ``SCORES``).
        attention_dim: hidden size of the additive and concat scores.
    """

    default_score = "additive"

    def _extra_dims(self) -> tuple[int, int]:
        return self.config.encoder_dim, self.config.encoder_dim

    def forward(
        self, tgt_in: torch.Tensor, state: State, memory: EncoderOutput
    ) -> tuple[torch.Tensor, State, torch.Tensor]:
        x = self.embedding(tgt_in)  # (B, L) -> (B, L, E)
        mask = memory.mask[:, None, :]  # (B, S) -> (B, 1, S): padding takes no part
        outputs, all_weights = [], []
        # listing: bahdanau-steps
        for t in range(tgt_in.shape[1]):
            scores = self.score(_query_state(state), memory.hs)  # (B, 1, D_h), (B, S, D) -> (B, 1, S)
            weights = masked_softmax(scores, mask)  # (B, 1, S)
            context = weights @ memory.hs  # (B, 1, S) @ (B, S, D) -> (B, 1, D)
            step_input = torch.cat([x[:, t : t + 1], context], dim=-1)  # (B, 1, E + D)
            out, state = self.rnn(step_input, state)  # (B, 1, D_h)
            outputs.append(torch.cat([out, context], dim=-1))  # (B, 1, D_h + D)
            all_weights.append(weights)
        # end listing: bahdanau-steps
        logits = self.out(torch.cat(outputs, dim=1))  # (B, L, D_h + D) -> (B, L, V)
        return logits, state, torch.cat(all_weights, dim=1)  # weights (B, L, S)


class LuongDecoder(AttentionDecoder):
    r"""Global attention decoder of Luong et al. (2015): step the RNN, then attend.

    Defined in chapter 2. The new state :math:`h_t` queries the encoder states; the context
    :math:`c_t` and :math:`h_t` make the attentional state
    :math:`\tilde h_t = \tanh(W_c [c_t; h_t])`, and :math:`p(y_t) = \mathrm{softmax}(W_s \tilde h_t)`.
    Attention does not feed back into the RNN here (the paper's optional "input feeding" is left
    out), so with teacher forcing all steps run at once: one recurrent pass, then one batched
    attention over every target position.

    Args:
        config: the model's configuration (``peeky`` must be False).
        score: a score name (``"general"`` by default; Luong et al.'s Table 4 has dot best for global
            attention, general for local).
        attention_dim: hidden size of the additive and concat scores.
    """

    default_score = "general"

    def __init__(self, config: Seq2SeqConfig, score: str | None = None, attention_dim: int = 64):
        super().__init__(config, score, attention_dim)
        self.combine = nn.Linear(config.encoder_dim + config.hidden_dim, config.hidden_dim, bias=False)

    def _extra_dims(self) -> tuple[int, int]:
        return 0, 0

    def forward(
        self, tgt_in: torch.Tensor, state: State, memory: EncoderOutput
    ) -> tuple[torch.Tensor, State, torch.Tensor]:
        # listing: luong-steps
        x = self.embedding(tgt_in)  # (B, L) -> (B, L, E)
        h, state = self.rnn(x, state)  # (B, L, D_h): every target position at once
        scores = self.score(h, memory.hs)  # (B, L, D_h), (B, S, D) -> (B, L, S)
        weights = masked_softmax(scores, memory.mask[:, None, :])  # (B, L, S)
        context = weights @ memory.hs  # (B, L, S) @ (B, S, D) -> (B, L, D)
        attentional = torch.tanh(self.combine(torch.cat([context, h], dim=-1)))  # (B, L, D_h)
        return self.out(attentional), state, weights
        # end listing: luong-steps


@dataclass
class LocalState:
    """A local decoder's state: the recurrent state, the number of target steps taken so far, and
    the window centres ``p_t`` of the steps of the call that returned it, ``(B, L)`` (``None``
    before the first step).

    The centres travel in the returned state, not on the module: a model that stored them would
    give a plot the centres of whichever call ran last.
    """

    rnn: State
    step: int
    centres: torch.Tensor | None = None


class PositionPredictor(nn.Module):
    r"""Local-p's aligned position :math:`p_t = (S - 1)\,\sigma(v_p^\top \tanh(W_p h_t))` (chapter 4).

    Luong et al. (2015) scale by the source length ``S``; scaling by ``S - 1`` keeps the centre on a
    real position of each (padded) source.
    """

    def __init__(self, hidden_dim: int, attention_dim: int = 64):
        super().__init__()
        self.W_p = nn.Linear(hidden_dim, attention_dim, bias=False)
        self.v_p = nn.Linear(attention_dim, 1, bias=False)

    def forward(self, h: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``h (B, L, D_h)``, ``lengths (B,)`` -> centres ``(B, L)`` in ``[0, lengths - 1]``."""
        share = torch.sigmoid(self.v_p(torch.tanh(self.W_p(h)))).squeeze(-1)  # (B, L) in (0, 1)
        return (lengths[:, None] - 1).to(h.dtype) * share


class LuongLocalDecoder(LuongDecoder):
    r"""Luong et al. (2015) with local attention: each target step attends to ``2w + 1`` positions.

    Defined in chapter 4. ``mode="local-m"`` centres the window of step ``t`` on source position
    ``t`` (monotonic alignment); ``mode="local-p"`` predicts the centre with ``PositionPredictor``
    and weights the window by a Gaussian of :math:`\sigma = w / 2` around it. The window is
    gathered (``local_attention``), so the attention costs ``O(L w)``, not ``O(L S)``. Everything
    else is ``LuongDecoder``. The weights returned are spread over the ``S`` source positions
    (zeros outside the window), for plots and alignment measures: that copy is a ``(B, L, S)``
    tensor, made at every call, so the decoder as a whole still writes ``O(L S)`` numbers (the
    scores and the weighted sum stay ``O(L w)``). The returned state holds the centres of the
    steps just taken (``LocalState.centres``).

    Args:
        config: the model's configuration (``peeky`` must be False).
        mode: ``"local-m"`` or ``"local-p"``.
        window: the half-width ``w`` (Luong et al.'s ``D``).
        score: a score name (``"general"`` by default).
        attention_dim: hidden size of the additive/concat scores and of the position predictor.
    """

    MODES = ("local-m", "local-p")

    def __init__(
        self,
        config: Seq2SeqConfig,
        mode: str = "local-p",
        window: int = 4,
        score: str | None = None,
        attention_dim: int = 64,
    ):
        check_choice("LuongLocalDecoder", "mode", mode, self.MODES)
        check_int("LuongLocalDecoder", "window", window)  # w, half the window
        super().__init__(config, score, attention_dim)
        self.mode, self.window = mode, window
        self.predictor = PositionPredictor(config.hidden_dim, attention_dim) if mode == "local-p" else None

    # This decoder's state is a LocalState (it also carries the step and the centres), not the
    # recurrent state of the base classes' signatures: Seq2Seq hands back whatever init_state
    # returned, and forward checks it, so the narrower types below are deliberate.
    def init_state(self, memory: EncoderOutput) -> LocalState:  # type: ignore[override]
        return LocalState(super().init_state(memory), 0)

    def forward(  # type: ignore[override]
        self,
        tgt_in: torch.Tensor,
        state: LocalState,  # type: ignore[override]
        memory: EncoderOutput,
    ) -> tuple[torch.Tensor, LocalState, torch.Tensor]:
        if not isinstance(state, LocalState):
            raise TypeError(f"LuongLocalDecoder: state must come from init_state, got {type(state).__name__}")
        x = self.embedding(tgt_in)  # (B, L) -> (B, L, E)
        h, rnn_state = self.rnn(x, state.rnn)  # (B, L, D_h)
        B, L = h.shape[:2]
        lengths = memory.mask.sum(dim=1)  # (B,)
        if self.predictor is not None:  # local-p: the centres predicted
            centres = self.predictor(h, lengths)  # (B, L)
        else:  # local-m: p_t = t, kept inside each source
            t = torch.arange(state.step, state.step + L, device=h.device, dtype=h.dtype)
            centres = torch.minimum(t[None, :].expand(B, L), (lengths[:, None] - 1).to(h.dtype))
        context, window_weights, positions = local_attention(
            self.score,
            h,
            memory.hs,
            memory.hs,
            centres,
            self.window,
            lengths=lengths,
            gaussian=self.mode == "local-p",
        )  # (B, L, D), (B, L, W), (B, L, W)
        attentional = torch.tanh(self.combine(torch.cat([context, h], dim=-1)))  # (B, L, D_h)
        weights = window_to_dense(window_weights, positions, memory.hs.shape[1])  # (B, L, S)
        return self.out(attentional), LocalState(rnn_state, state.step + L, centres.detach()), weights


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
