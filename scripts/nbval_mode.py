"""Which nbval mode a machine runs the chapters in: strict where the outputs were made, portable elsewhere.

The chapters are committed with their outputs, and those outputs carry the digits of the
platform that produced them: the CPU's vector instructions (PyTorch picks AVX-512, AVX2 or
plain kernels at start-up, and each sums floats in another order), the number of threads, the
torch version, and the device (a GPU draws other random numbers and rounds matrix products
differently). ``make execute`` records that platform in every chapter's metadata
(``metadata.attnlab.platform``), with the date (``metadata.attnlab.recorded``) that each
chapter's page shows beside the torch version; ``make test`` compares it with the machine it runs on:

- **strict** (``pytest --nbval``) where every chapter was recorded on this very platform:
  every cell's output is compared with the committed one;
- **portable** (``pytest --nbval-lax``) anywhere else: every cell is executed and must raise
  no error, so every claim a chapter asserts in code must still hold, but only the cells tagged
  ``nbval-check-output`` have their outputs compared. Those are the cells whose output cannot
  depend on the platform: source listings, shapes, integer results of integer code, data made
  on the CPU from a seed, exact formulas (tests/book/test_chapters.py checks the tags).

Usage:
    python scripts/nbval_mode.py record chapters/*.ipynb   # after executing the chapters
    python scripts/nbval_mode.py mode chapters/*.ipynb     # prints the pytest flag; why on stderr
    python scripts/nbval_mode.py show                      # this machine's platform

``NBVAL_MODE=strict`` or ``NBVAL_MODE=portable`` in the environment overrides the choice.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path

KEY = "attnlab"
FLAGS = {"strict": "--nbval", "portable": "--nbval-lax"}


def current_platform() -> dict[str, object]:
    """What decides a chapter's printed digits on this machine (in this process's environment)."""
    import torch

    from attnlab.utils import get_device

    device = get_device()
    name = device.type
    if device.type == "cuda":
        name = f"cuda ({torch.cuda.get_device_name(device)})"
    return {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "torch": torch.__version__,
        "device": name,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
    }


def describe(platform: dict[str, object] | None) -> str:
    if not platform:
        return "no platform recorded"
    return (
        f"torch {platform.get('torch')} on {platform.get('device')}, CPU kernels {platform.get('cpu_capability')}, "
        f"{platform.get('threads')} threads, Python {platform.get('python')}"
    )


def recorded_platform(path: Path) -> dict[str, object] | None:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return nb.get("metadata", {}).get(KEY, {}).get("platform")


def record(paths: list[Path], today: datetime.date | None = None) -> None:
    """Write this machine's platform, and today's date, into each notebook's metadata (nothing else
    changes). The chapter's page shows both: "computed with PyTorch ... on ..." (book/_ext)."""
    platform = current_platform()
    for path in paths:
        text = path.read_text(encoding="utf-8")
        nb = json.loads(text)
        meta = nb.setdefault("metadata", {}).setdefault(KEY, {})
        meta["platform"] = platform
        meta["recorded"] = (today or datetime.date.today()).isoformat()
        # The layout nbformat writes: sorted keys, one-space indent, non-ASCII kept, a final newline.
        path.write_text(json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"recorded {describe(platform)} in {len(paths)} notebook(s)", file=sys.stderr)


def choose(paths: list[Path], override: str | None = None) -> tuple[str, str]:
    """``(mode, reason)``: strict only where every notebook was recorded on this platform."""
    if override:
        if override not in FLAGS:
            raise SystemExit(f"NBVAL_MODE must be one of {sorted(FLAGS)}, got {override!r}")
        return override, f"NBVAL_MODE={override} was set"
    here = current_platform()
    others = {}
    for path in paths:
        platform = recorded_platform(path)
        if platform != here:
            others[path.name] = platform
    if not others:
        return "strict", f"the chapters' outputs were recorded on this platform ({describe(here)})"
    first = next(iter(others.values()))
    which = "every chapter" if len(others) == len(paths) else ", ".join(sorted(others))
    return "portable", (
        f"{which} recorded on {describe(first)}; this machine runs {describe(here)}: every cell "
        "runs and its assertions must hold, outputs are compared only in cells tagged "
        "nbval-check-output"
    )


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("record", "mode", "show"):
        print(__doc__, file=sys.stderr)
        return 2
    command, paths = argv[0], [Path(p) for p in argv[1:]]
    if command == "show":
        print(json.dumps(current_platform()))
        return 0
    if not paths:
        print(f"nbval_mode.py {command}: name the notebooks", file=sys.stderr)
        return 2
    if command == "record":
        record(paths)
        return 0
    mode, reason = choose(paths, os.environ.get("NBVAL_MODE") or None)
    print(f"nbval mode: {mode}: {reason}", file=sys.stderr)
    print(FLAGS[mode])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
