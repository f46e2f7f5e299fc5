"""pytest configuration for the whole repository: nbval's patience with a busy kernel.

nbval 0.11 waits at most 5 seconds (``IPyNbCell.output_timeout``, hard-coded, no option) for
each output message of a cell after the kernel has answered that the cell finished. On a
2-core CI machine that wait has expired twice after long training cells whose results were
right (chapter 4's three-decoder cell, then chapter 1's four-model cell), failing the build
without a difference in any output. The wait is raised to 60 s here. This changes how long
nbval waits for the kernel's messages, not what it compares; a cell that runs too long is
still stopped by ``--nbval-cell-timeout``.

A kernel that dies while it starts is started again, up to KERNEL_STARTS times in all. `make
test` runs two chapters at once, and two kernels that start at the same moment can die before
they answer (seen once here: "Kernel died before replying to kernel_info", every cell of
chapter 2 an error); a kernel that started runs its chapter as before. Each retry is printed.

Run on several workers (``pytest -n N``, as `make test` does), PyTorch's OpenMP threads sleep
while they wait (``OMP_WAIT_POLICY=PASSIVE``) unless the variable is already set: by default they
spin on a core that another worker needs, and a direct ``pytest -n 2`` of the unit tests ran for
ten minutes on what takes about one (CONTRIBUTING.md, "Running the tests beside other work").
The workers, and the kernels they start, inherit it. One process (no ``-n``) keeps OpenMP's default.
"""

from __future__ import annotations

import os
import sys

try:
    import nbval.plugin
    from nbval.plugin import IPyNbCell
except ImportError:  # nbval is a test dependency; without it there is nothing to configure
    IPyNbCell = None


def pytest_configure(config):  # type: ignore[no-untyped-def]
    if getattr(config.option, "numprocesses", None) and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # before xdist starts its workers


OUTPUT_TIMEOUT = 60
KERNEL_STARTS = 3
_DIED = "Kernel died before replying to kernel_info"

if IPyNbCell is not None and not getattr(IPyNbCell, "_attnlab_patient", False):
    _original_init = IPyNbCell.__init__

    def _patient_init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        _original_init(self, *args, **kwargs)
        self.output_timeout = OUTPUT_TIMEOUT

    IPyNbCell.__init__ = _patient_init
    IPyNbCell._attnlab_patient = True

    class _RestartingKernel(nbval.plugin.RunningKernel):
        """nbval's kernel, started again when it dies before answering (jupyter_client has
        already shut the dead one down and closed its channels when it raises)."""

        starts, died = KERNEL_STARTS, _DIED

        def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            for attempt in range(1, KERNEL_STARTS + 1):
                try:
                    super().__init__(*args, **kwargs)
                    return
                except RuntimeError as error:
                    if _DIED not in str(error) or attempt == KERNEL_STARTS:
                        raise
                    print(
                        f"nbval: the kernel died while starting ({error}); starting it again "
                        f"({attempt + 1} of {KERNEL_STARTS})",
                        file=sys.stderr,
                    )

    nbval.plugin.RunningKernel = _RestartingKernel
