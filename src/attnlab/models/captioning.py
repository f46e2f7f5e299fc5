"""Show, attend and tell (Xu et al. 2015): image captioning with soft or hard attention (chapter 4).

A small CNN turns an image into a grid of ``S`` annotation vectors ``a_1 .. a_S`` (one per
region, ``D`` numbers each); an LSTM writes the caption one word at a time. At step ``t`` the
attention MLP ``f_att`` scores every region against the previous hidden state, a softmax gives
the weights ``alpha_t``, and one of two mechanisms turns them into the context ``z_t``:

- **soft** (deterministic): ``z_t = sum_i alpha_ti a_i``, differentiable, trained by backprop;
- **hard** (stochastic): a location ``s_t ~ Multinoulli(alpha_t)`` is drawn and ``z_t = a_{s_t}``;
  the sampling is not differentiable, so ``f_att`` learns by REINFORCE (``attention.hard``).

The two variants share every line but ``attend`` (``SoftCaptioner``, ``HardCaptioner``).

Shapes: images ``(B, 3, P, P)`` (``P`` pixels a side); annotations ``(B, S, D)`` with ``S = grid**2``
(Xu et al. write ``L`` for this number; here ``L`` is the caption's length, as everywhere in the book);
captions ``(B, L)``; logits ``(B, L, V)``; weights ``(B, L, S)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attnlab.attention.hard import attention_entropy, hard_attend
from attnlab.attention.scoring import AdditiveScore
from attnlab.data.scenes import SCENE_WORDS, START
from attnlab.validation import check_int, check_int_sequence, check_number, check_tensor

__all__ = [
    "CaptionOutput",
    "Captioner",
    "CaptionerConfig",
    "ConvEncoder",
    "HardCaptioner",
    "SoftCaptioner",
    "region_cells",
]


@dataclass(frozen=True)
class CaptionerConfig:
    """Sizes of the captioner.

    The encoder has one 3x3 convolution + ReLU per entry of ``channels``, each but the last with
    stride 2, and a final max-pool to a ``grid x grid`` map: ``S = grid**2`` regions of
    ``D = channels[-1]`` numbers. ``image_size / 2**(len(channels) - 1)`` must be a multiple of
    ``grid`` so that every region covers the same square of pixels. ``init_from_mean``: start
    the LSTM from the mean annotation, as Xu et al. do; by default it starts from zeros, so that
    all the decoder learns of the image comes through attention.
    """

    image_size: int = 48
    grid: int = 4
    channels: tuple[int, ...] = (16, 32)
    vocab_size: int = len(SCENE_WORDS)
    embed_dim: int = 32
    hidden_dim: int = 128
    attention_dim: int = 64
    init_from_mean: bool = False

    def __post_init__(self) -> None:
        for name in ("image_size", "grid", "vocab_size", "embed_dim", "hidden_dim", "attention_dim"):
            check_int("CaptionerConfig", name, getattr(self, name))
        check_int_sequence("CaptionerConfig", "channels", self.channels)
        side = self.image_size / 2 ** (len(self.channels) - 1)
        if side != int(side) or int(side) % self.grid:
            raise ValueError(
                f"CaptionerConfig: image_size / 2**(len(channels) - 1) = {side:g} must be a multiple of "
                f"grid = {self.grid}"
            )

    @property
    def regions(self) -> int:
        return self.grid**2

    @property
    def annotation_dim(self) -> int:
        return self.channels[-1]


class ConvEncoder(nn.Module):
    """Image ``(B, 3, P, P)`` -> annotations ``(B, S, D)``, one vector per region, row-major.

    Xu et al. take the annotations from a lower convolutional layer (not the last, pooled one)
    so that each vector describes one part of the image. Here the last max-pool gathers each
    region's square, and a learned embedding of the region's position is added: the caption's
    reading order depends on where things are, and a small CNN's features say little about that.
    """

    def __init__(self, config: CaptionerConfig):
        super().__init__()
        layers: list[nn.Module] = []
        previous = 3
        last = len(config.channels) - 1
        for i, width in enumerate(config.channels):
            stride = 1 if i == last else 2  # halve the resolution, except in the last layer
            layers += [nn.Conv2d(previous, width, 3, stride=stride, padding=1), nn.ReLU()]
            previous = width
        layers.append(nn.AdaptiveMaxPool2d(config.grid))
        self.cnn = nn.Sequential(*layers)
        self.position = nn.Parameter(torch.zeros(config.regions, config.annotation_dim))
        self.config = config

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        size = self.config.image_size
        check_tensor(
            "ConvEncoder", "images", images, kind="float", shape=(None, 3, size, size), names=f"(B, 3, {size}, {size})"
        )
        features = self.cnn(images)  # (B, D, grid, grid)
        return features.flatten(2).transpose(1, 2) + self.position  # (B, D, S) -> (B, S, D)


@dataclass
class CaptionOutput:
    """What a captioner returns.

    ``logits (B, L, V)``; ``weights (B, L, S)`` the attention weights ``alpha_t``;
    ``locations (B, L)`` the attended region (sampled or argmax for hard attention, argmax of the
    weights for soft); ``log_prob (B, L)`` the log-probability of each sampled location (hard,
    sampling only; else ``None``); ``tokens (B, L)`` the generated words (``generate`` only).
    """

    logits: torch.Tensor
    weights: torch.Tensor
    locations: torch.Tensor
    log_prob: torch.Tensor | None = None
    tokens: torch.Tensor | None = None

    def entropy(self) -> torch.Tensor:
        """Entropy of each step's attention weights, ``(B, L)``."""
        return attention_entropy(self.weights)


class Captioner(nn.Module):
    """Encoder, attention MLP and LSTM decoder of Show, attend and tell; ``attend`` is the hook.

    Defined in chapter 4. Step ``t`` (Xu et al., eqs. 1-7): ``e_ti = f_att(a_i, h_{t-1})`` (an
    additive score, an MLP), ``alpha_t = softmax(e_t)``, ``z_t = attend(alpha_t, a)``, the LSTM
    reads ``[E y_{t-1}; z_t]``, and the deep output layer gives
    ``p(y_t) ~ exp(L_o(E y_{t-1} + L_h h_t + L_z z_t))``. The initial state is zero, or (with
    ``config.init_from_mean``) comes from the mean annotation through ``init_h`` and ``init_c``.
    """

    def __init__(self, config: CaptionerConfig | None = None):
        super().__init__()
        config = config or CaptionerConfig()
        if not isinstance(config, CaptionerConfig):
            raise TypeError(f"{type(self).__name__}: config must be a CaptionerConfig, got {type(config).__name__}")
        self.config = config
        D, H, E = config.annotation_dim, config.hidden_dim, config.embed_dim
        self.encoder = ConvEncoder(config)
        self.f_att = AdditiveScore(H, D, config.attention_dim)
        self.embedding = nn.Embedding(config.vocab_size, E)
        self.lstm = nn.LSTMCell(E + D, H)
        if config.init_from_mean:
            self.init_h, self.init_c = nn.Linear(D, H), nn.Linear(D, H)
        self.L_h, self.L_z = nn.Linear(H, E), nn.Linear(D, E)
        self.L_o = nn.Linear(E, config.vocab_size)

    def attend(
        self, weights: torch.Tensor, annotations: torch.Tensor, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``(weights (B, S), annotations (B, S, D))`` -> ``(z (B, D), location (B,), log_prob (B,) or None)``."""
        raise NotImplementedError

    def _step(
        self,
        word: torch.Tensor,
        state: tuple[torch.Tensor, torch.Tensor],
        annotations: torch.Tensor,
        generator: torch.Generator | None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor | None]:
        h, c = state
        scores = self.f_att(h[:, None, :], annotations)[:, 0]  # (B, 1, D_h), (B, S, D) -> (B, S)
        weights = scores.softmax(-1)  # (B, S): alpha_t
        z, location, log_prob = self.attend(weights, annotations, generator)  # (B, D)
        y = self.embedding(word)  # (B,) -> (B, E)
        h, c = self.lstm(torch.cat([y, z], dim=-1), (h, c))  # (B, E + D) -> (B, D_h)
        logits = self.L_o(y + self.L_h(h) + self.L_z(z))  # deep output: (B, E) -> (B, V)
        return logits, (h, c), weights, location, log_prob

    def _start(self, images: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        annotations = self.encoder(images)  # (B, S, D)
        if self.config.init_from_mean:  # Xu et al.: h_0, c_0 from the mean annotation
            mean = annotations.mean(dim=1)  # (B, D)
            return annotations, (torch.tanh(self.init_h(mean)), torch.tanh(self.init_c(mean)))
        zeros = annotations.new_zeros(len(annotations), self.config.hidden_dim)  # (B, D_h)
        return annotations, (zeros, zeros)

    def forward(
        self, images: torch.Tensor, captions_in: torch.Tensor, *, generator: torch.Generator | None = None
    ) -> CaptionOutput:
        """Teacher forcing: ``captions_in (B, L)`` starts with ``<start>`` (``shift_captions``)."""
        name = type(self).__name__
        check_tensor(name, "captions_in", captions_in, kind="long", dim=2, names="(B, L)")
        check_tensor(name, "images", images, kind="float")
        if len(images) != len(captions_in):
            raise ValueError(
                f"{name}: images and captions_in must have the same batch size, got {len(images)} and "
                f"{len(captions_in)}"
            )
        annotations, state = self._start(images)
        logits, weights, locations, log_probs = [], [], [], []
        for t in range(captions_in.shape[1]):
            out, state, w, location, log_prob = self._step(captions_in[:, t], state, annotations, generator)
            logits.append(out)
            weights.append(w)
            locations.append(location)
            log_probs.append(log_prob)
        return CaptionOutput(
            torch.stack(logits, 1),
            torch.stack(weights, 1),
            torch.stack(locations, 1),
            None if log_probs[0] is None else torch.stack(log_probs, 1),  # type: ignore[arg-type]
        )

    @torch.no_grad()
    def generate(
        self, images: torch.Tensor, max_len: int = 9, *, generator: torch.Generator | None = None
    ) -> CaptionOutput:
        """Greedy captions of ``max_len`` words (``<end>`` and what follows it included)."""
        check_int(f"{type(self).__name__}.generate", "max_len", max_len)
        annotations, state = self._start(images)
        word = torch.full((len(images),), START, dtype=torch.long, device=annotations.device)
        logits, weights, locations, tokens = [], [], [], []
        for _ in range(max_len):
            out, state, w, location, _ = self._step(word, state, annotations, generator)
            word = out.argmax(-1)
            logits.append(out)
            weights.append(w)
            locations.append(location)
            tokens.append(word)
        return CaptionOutput(
            torch.stack(logits, 1), torch.stack(weights, 1), torch.stack(locations, 1), tokens=torch.stack(tokens, 1)
        )


class SoftCaptioner(Captioner):
    """Deterministic soft attention: ``z_t = sum_i alpha_ti a_i`` (Xu et al., section 4.2)."""

    def attend(
        self, weights: torch.Tensor, annotations: torch.Tensor, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        z = (weights[:, None, :] @ annotations)[:, 0]  # (B, 1, S) @ (B, S, D) -> (B, D)
        return z, weights.argmax(-1), None


class HardCaptioner(Captioner):
    """Stochastic hard attention: ``z_t = a_{s_t}``, ``s_t ~ Multinoulli(alpha_t)`` (section 4.1).

    In training mode the location is sampled and its log-probability returned for REINFORCE;
    in eval mode it is the most likely one, ``argmax_i alpha_ti``, so that evaluation is
    deterministic (call ``train()`` to sample when generating). ``expected_prob`` is Xu et al.'s
    trick: in training, with this probability a step uses the expected context (the soft one)
    instead of the sample; such steps have ``log_prob = 0`` (their sample changed nothing).
    """

    def __init__(self, config: CaptionerConfig | None = None, expected_prob: float = 0.0):
        super().__init__(config)
        check_number("HardCaptioner", "expected_prob", expected_prob, low=0, high=1)
        self.expected_prob = float(expected_prob)

    def attend(
        self, weights: torch.Tensor, annotations: torch.Tensor, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        if not self.training:
            location = weights.argmax(-1)  # (B,)
            return annotations[torch.arange(len(location), device=location.device), location], location, None
        z, location, log_prob = hard_attend(weights, annotations, generator=generator)  # (B, D), (B,), (B,)
        if self.expected_prob:
            device = generator.device if generator is not None else z.device
            expected = (torch.rand(len(z), generator=generator, device=device) < self.expected_prob).to(z.device)
            z = torch.where(expected[:, None], (weights[:, None, :] @ annotations)[:, 0], z)
            log_prob = torch.where(expected, torch.zeros_like(log_prob), log_prob)
        return z, location, log_prob


def region_cells(config: CaptionerConfig, grid: int) -> torch.Tensor:
    """Layout cell (of a ``grid x grid`` scene layout) that holds the centre of each region, ``(S,)``."""
    check_int("region_cells", "grid", grid)
    side = config.grid
    centre = (torch.arange(side) + 0.5) * grid // side  # region row/column -> layout row/column
    return (centre[:, None] * grid + centre[None, :]).flatten().long()  # (side, side) -> (S,)
