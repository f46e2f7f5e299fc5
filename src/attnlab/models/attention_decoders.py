"""The attention decoders: Bahdanau's and Luong's (chapter 2), Luong's local attention (chapter 4).

Each is a ``Decoder`` of chapter 1 whose steps attend to the encoder's states ``hs`` instead of
reading one context vector: ``BahdanauDecoder`` attends before each recurrent step,
``LuongDecoder`` after all of them (so, with teacher forcing, in one batched attention), and
``LuongLocalDecoder`` to a window of ``2w + 1`` source positions around a centre, fixed or
predicted (``PositionPredictor``). Each returns its attention weights ``(B, L, S)``.

Shapes as in ``attnlab.models.recurrent``: ``B`` batch, ``S`` source length, ``L`` target length,
``D_h`` a recurrent layer's state, ``D`` the encoder's states, ``E`` embedding size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attnlab.attention.local import local_attention, window_to_dense
from attnlab.attention.masking import masked_softmax
from attnlab.attention.scoring import make_score
from attnlab.models.recurrent import Decoder, EncoderOutput, Seq2SeqConfig, State
from attnlab.validation import check_choice, check_int

__all__ = [
    "AttentionDecoder",
    "BahdanauDecoder",
    "LocalState",
    "LuongDecoder",
    "LuongLocalDecoder",
    "PositionPredictor",
]


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
