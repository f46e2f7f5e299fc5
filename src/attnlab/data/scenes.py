"""Synthetic scenes with captions, for image captioning with attention (chapter 4).

A scene is a small RGB image with a few coloured shapes, each in its own cell of a ``grid x grid``
layout (jittered inside the cell). Its caption names the objects in reading order, row by row
and left to right, for example ``red square , blue circle , green triangle``. Each object word
(a colour or a shape) knows the layout cell of its object, so that a chapter can check where a
captioner looked when it said the word (Xu et al. 2015, "Show, attend and tell").

Token ids: ``0`` padding, ``1`` start, ``2`` end, ``3`` the comma, then the colours, then the
shapes (``SCENE_WORDS``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.validation import check_int, check_number

__all__ = ["COLOURS", "SCENE_WORDS", "SHAPES", "SceneTask", "caption_text", "make_scene_splits", "make_scenes"]

COLOURS: dict[str, tuple[float, float, float]] = {
    "red": (0.90, 0.15, 0.10),
    "green": (0.15, 0.75, 0.20),
    "blue": (0.15, 0.35, 0.95),
    "yellow": (0.95, 0.85, 0.10),
}
SHAPES: tuple[str, ...] = ("square", "circle", "triangle", "cross")
SCENE_WORDS: tuple[str, ...] = ("<pad>", "<start>", "<end>", ",", *COLOURS, *SHAPES)
PAD, START, END, COMMA = 0, 1, 2, 3
_FIRST_COLOUR = 4
_FIRST_SHAPE = _FIRST_COLOUR + len(COLOURS)


@dataclass(frozen=True)
class SceneTask:
    """Images and their captions.

    ``images (n, 3, P, P)`` (``P = image_size``) in [0, 1]; ``captions (n, L)`` token ids ending with ``<end>``, padded
    with 0; ``lengths (n,)`` (``<end>`` included); ``cells (n, L)`` the layout cell (row-major,
    ``0 .. grid**2 - 1``) of the object each word names, ``-1`` for commas, ``<end>`` and padding;
    ``grid`` the layout size.
    """

    images: torch.Tensor
    captions: torch.Tensor
    lengths: torch.Tensor
    cells: torch.Tensor
    grid: int

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: slice | torch.Tensor) -> SceneTask:
        """The scenes at ``index`` (a slice or an index tensor), as a new ``SceneTask``."""
        return SceneTask(self.images[index], self.captions[index], self.lengths[index], self.cells[index], self.grid)

    @property
    def vocab_size(self) -> int:
        return len(SCENE_WORDS)


def caption_text(tokens: torch.Tensor | list[int]) -> str:
    """Words of a caption, up to (not including) ``<end>``; padding and ``<start>`` skipped."""
    words = []
    for t in tokens.tolist() if isinstance(tokens, torch.Tensor) else tokens:
        if t == END:
            break
        if t not in (PAD, START):
            words.append(SCENE_WORDS[t])
    return " ".join(words)


def _draw(kind: torch.Tensor, cy: torch.Tensor, cx: torch.Tensor, r: torch.Tensor, size: int) -> torch.Tensor:
    """Masks ``(n, size, size)`` of one shape per row: ``kind`` indexes ``SHAPES``; centre and
    half-size in pixels."""
    coords = torch.arange(size, dtype=torch.float32) + 0.5  # pixel centres
    dy = coords[None, :, None] - cy[:, None, None]  # (n, size, 1)
    dx = coords[None, None, :] - cx[:, None, None]  # (n, 1, size)
    r = r[:, None, None]
    square = (dy.abs() <= r) & (dx.abs() <= r)
    circle = dy**2 + dx**2 <= r**2
    triangle = (dy.abs() <= r) & (dx.abs() <= (dy + r) / 2)  # apex up, base down
    bar = r / 3
    cross = ((dy.abs() <= bar) & (dx.abs() <= r)) | ((dx.abs() <= bar) & (dy.abs() <= r))
    masks = torch.stack([square, circle, triangle, cross])  # (4, n, size, size)
    return masks[kind, torch.arange(len(kind))]


def make_scenes(
    n: int,
    *,
    image_size: int = 48,
    grid: int = 3,
    min_objects: int = 1,
    max_objects: int = 3,
    noise: float = 0.05,
    seed: int = 0,
) -> SceneTask:
    """``n`` scenes of ``min_objects .. max_objects`` shapes on a black background.

    Defined in chapter 4. Each object takes a distinct cell of the ``grid x grid`` layout, a
    colour from ``COLOURS``, a shape from ``SHAPES``, a half-size of 28-36% of the cell and a
    random offset inside it; Gaussian pixel noise of standard deviation ``noise`` is added and
    the image clipped to [0, 1]. The caption reads the cells row by row, left to right.
    """
    name = "make_scenes"
    check_int(name, "n", n)
    check_int(name, "grid", grid)
    check_int(name, "min_objects", min_objects)
    check_int(name, "max_objects", max_objects, low=min_objects, note="min_objects")
    check_int(name, "seed", seed, low=0)
    if check_int(name, "image_size", image_size, low=8) % grid:
        raise ValueError(f"{name}: image_size must be a multiple of grid = {grid}, got {image_size}")
    if max_objects > grid * grid:
        raise ValueError(f"{name}: max_objects must be at most grid**2 = {grid * grid}, got {max_objects}")
    check_number(name, "noise", noise, low=0)
    g = torch.Generator().manual_seed(seed)
    cell = image_size / grid
    counts = torch.randint(min_objects, max_objects + 1, (n,), generator=g)  # (n,)
    # Distinct cells: the first `count` of a random permutation, then sorted into reading order.
    order = torch.rand(n, grid * grid, generator=g).argsort(dim=1)[:, :max_objects]  # (n, K)
    present = torch.arange(max_objects)[None, :] < counts[:, None]  # (n, K)
    order = torch.where(present, order, grid * grid).sort(dim=1).values  # absent slots last
    present = order < grid * grid
    colour = torch.randint(0, len(COLOURS), (n, max_objects), generator=g)
    shape = torch.randint(0, len(SHAPES), (n, max_objects), generator=g)
    half = cell * (0.28 + 0.08 * torch.rand(n, max_objects, generator=g))  # (n, K)
    slack = cell / 2 - half  # room left around the shape in its cell
    jitter = (torch.rand(n, max_objects, 2, generator=g) * 2 - 1) * slack[..., None]  # (n, K, 2)
    row, col = order.clamp(max=grid * grid - 1) // grid, order.clamp(max=grid * grid - 1) % grid
    cy = (row + 0.5) * cell + jitter[..., 0]
    cx = (col + 0.5) * cell + jitter[..., 1]

    palette = torch.tensor(list(COLOURS.values()))  # (colours, 3)
    images = torch.zeros(n, 3, image_size, image_size)
    for k in range(max_objects):
        mask = _draw(shape[:, k], cy[:, k], cx[:, k], half[:, k], image_size) & present[:, k, None, None]
        rgb = palette[colour[:, k]][:, :, None, None]  # (n, 3, 1, 1)
        images = torch.where(mask[:, None], rgb, images)
    if noise:
        images = (images + noise * torch.randn(images.shape, generator=g)).clamp(0, 1)

    L = 3 * max_objects  # colour shape , ... colour shape <end>
    captions = torch.zeros(n, L, dtype=torch.long)
    cells = torch.full((n, L), -1, dtype=torch.long)
    for k in range(max_objects):
        here = present[:, k]
        captions[:, 3 * k] = torch.where(here, _FIRST_COLOUR + colour[:, k], captions[:, 3 * k])
        captions[:, 3 * k + 1] = torch.where(here, _FIRST_SHAPE + shape[:, k], captions[:, 3 * k + 1])
        cells[:, 3 * k] = torch.where(here, order[:, k], -1)
        cells[:, 3 * k + 1] = torch.where(here, order[:, k], -1)
        if k + 1 < max_objects:
            captions[:, 3 * k + 2] = torch.where(present[:, k + 1], COMMA, captions[:, 3 * k + 2])
    lengths = 3 * counts  # 2 words per object, count - 1 commas, one <end>
    captions[torch.arange(n), lengths - 1] = END
    return SceneTask(images, captions, lengths, cells, grid)


def make_scene_splits(
    n_train: int, n_test: int, *, seed: int = 0, **options: int | float
) -> tuple[SceneTask, SceneTask]:
    """A training set and a held-out set with no scene in common.

    Defined in chapter 4. Two scenes are the same when they have the same caption in the same
    cells (position jitter, size and noise aside); held-out scenes that also occur in the
    training set are dropped and replaced. ``options`` go to ``make_scenes``.
    """
    check_int("make_scene_splits", "n_train", n_train)
    check_int("make_scene_splits", "n_test", n_test)
    train = make_scenes(n_train, seed=seed, **options)  # type: ignore[arg-type]
    seen = {_signature(train, i) for i in range(len(train))}
    kept: list[SceneTask] = []
    total, attempt = 0, 1
    while total < n_test:
        candidates = make_scenes(2 * n_test, seed=seed + 7919 * attempt, **options)  # type: ignore[arg-type]
        keep = torch.tensor([_signature(candidates, i) not in seen for i in range(len(candidates))])
        chosen = candidates[keep.nonzero().flatten()[: n_test - total]]
        kept.append(chosen)
        total += len(chosen)
        attempt += 1
        if attempt > 20:
            raise ValueError(
                "make_scene_splits: could not find enough unseen scenes; use a larger grid or fewer scenes"
            )
    images, captions, lengths, cells = (
        torch.cat([getattr(t, f) for t in kept]) for f in ("images", "captions", "lengths", "cells")
    )
    test = SceneTask(images, captions, lengths, cells, train.grid)
    return train, test


def _signature(task: SceneTask, i: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(task.captions[i].tolist()), tuple(task.cells[i].tolist())
