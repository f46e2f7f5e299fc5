"""pytest configuration for the whole repository: nbval's patience with a busy kernel.

nbval 0.11 waits at most 5 seconds (``IPyNbCell.output_timeout``, hard-coded, no option) for
each output message of a cell after the kernel has answered that the cell finished. On a
2-core CI machine that wait has expired twice after long training cells whose results were
right (chapter 4's three-decoder cell, then chapter 1's four-model cell), failing the build
without a difference in any output. The wait is raised to 60 s here. This changes how long
nbval waits for the kernel's messages, not what it compares; a cell that runs too long is
still stopped by ``--nbval-cell-timeout``.
"""

from __future__ import annotations

try:
    from nbval.plugin import IPyNbCell
except ImportError:  # nbval is a test dependency; without it there is nothing to configure
    IPyNbCell = None

OUTPUT_TIMEOUT = 60

if IPyNbCell is not None and not getattr(IPyNbCell, "_attnlab_patient", False):
    _original_init = IPyNbCell.__init__

    def _patient_init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        _original_init(self, *args, **kwargs)
        self.output_timeout = OUTPUT_TIMEOUT

    IPyNbCell.__init__ = _patient_init
    IPyNbCell._attnlab_patient = True
