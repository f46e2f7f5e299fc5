"""The requirements that reproduce Colab's runtime for the book: ``python scripts/colab_pins.py [FREEZE]``.

Prints one ``name==version`` line for each package named in tests/book/colab_versions.txt (the
packages of Colab's runtime that the book's package and a chapter's kernel use). The versions
come from FREEZE, a ``pip freeze`` of Colab's runtime (the weekly workflow downloads the newest
one, googlecolab/backend-info's pip-freeze.txt), or, without it, from colab_versions.txt itself.
A local version label (``torch==2.11.0+cu126``) is dropped: the CPU build of the same version is
what a machine without a GPU installs. ``pip`` is left out (the environment's own is used).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLAB_VERSIONS = ROOT / "tests" / "book" / "colab_versions.txt"
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(freeze: str | None = None) -> list[str]:
    """``name==version`` for every package of colab_versions.txt, at FREEZE's versions if given."""
    ours = [m.groups() for line in COLAB_VERSIONS.read_text(encoding="utf-8").splitlines() if (m := PIN.match(line))]
    versions = {_normal(n): v for n, v in ours}
    if freeze is not None:
        found = {_normal(m.group(1)): m.group(2) for line in freeze.splitlines() if (m := PIN.match(line.strip()))}
        missing = [n for n, _ in ours if _normal(n) not in found and _normal(n) != "pip"]
        if missing:
            raise ValueError(f"colab_pins: the freeze lists none of {missing}; it is not Colab's runtime")
        versions = {key: found.get(key, v) for key, v in versions.items()}
    return [f"{n}=={versions[_normal(n)].split('+')[0]}" for n, _ in ours if _normal(n) != "pip"]


def main(argv: list[str]) -> int:
    freeze = Path(argv[0]).read_text(encoding="utf-8") if argv else None
    print("\n".join(pins(freeze)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
