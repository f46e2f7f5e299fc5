"""The otter plugin that seals the grading (listed in each assignment's config, ``plugins:``).

otter runs a plugin in its own process, where no code of the submission ever runs:

- ``before_execution`` hands otter's kernel a notebook without the student's cells, so that
  otter's own pass (its init cell, the tests, the pickled results it reads back) runs none of
  the student's code;
- ``after_grading`` runs the submission in a kernel of its own: the harness of
  :mod:`attnlab.grading.sealed` first (installed by :mod:`attnlab.grading.harness`), then the
  student's code cells, then the cell that starts the tests. The harness writes its outcomes signed
  with a key that only it and this process know; this process checks the signature and puts the
  outcomes into otter's results, which otter then reports as usual. A submission whose kernel writes
  no signed result (it ended the process, for instance) fails every test, with a message that says
  why.

Every test of the sealed run has a time limit (:data:`TIME_LIMIT` seconds; the config's
``time_limit`` or the environment's ``ATTNLAB_TIME_LIMIT`` sets another): a test that runs longer
fails with a message that says so, and the other tests are still graded.
"""

from __future__ import annotations

import ast
import hmac
import json
import os
import secrets
import shutil
import tempfile
from glob import glob
from pathlib import Path

import nbformat
from otter.plugins import AbstractOtterPlugin
from otter.test_files.abstract_test import TestCaseResult

NO_RESULT = (
    "The grader received no result from your notebook: it ended the grading process (for instance "
    "with os._exit, exit() or an error that killed the kernel), or ran past the time limit, or "
    "removed the grader's result. Every question scores 0: make sure the notebook runs from top to "
    "bottom, then hand it in again."
)
KERNEL_DIED_STARTING = "Kernel died before replying to kernel_info"  # jupyter_client's words
DEFAULT_TIMEOUT = 1800  # seconds for one cell of the sealed run (the trainings of assignments 2 and 5 included)
TIME_LIMIT = 30  # seconds for one test of the sealed run: a test stopped there fails, the others are graded


def _ignored(cell: nbformat.NotebookNode) -> bool:
    """otter's own rule for cells it does not run (tag otter_ignore, or otter metadata ignore)."""
    meta = cell.get("metadata", {})
    return "otter_ignore" in meta.get("tags", []) or meta.get("otter", {}).get("ignore", False)


def sealed_notebook(submission: nbformat.NotebookNode, setup_path: str, token: str) -> nbformat.NotebookNode:
    """The notebook the sealed kernel runs: the harness, the submission's code cells, the grading."""
    cells = [
        nbformat.v4.new_code_cell(f"from attnlab.grading.harness import install\ninstall({setup_path!r})\ndel install")
    ]
    cells += [
        nbformat.v4.new_code_cell(c.source) for c in submission.cells if c.cell_type == "code" and not _ignored(c)
    ]
    cells.append(
        nbformat.v4.new_code_cell(
            f"import sys\nsys.audit('attnlab.sealed.grade', {token!r})\nsys.audit('attnlab.sealed.run')"
        )
    )
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return notebook


def read_result(path: Path, key: bytes) -> tuple[dict[str, list[tuple[str, bool, str]]], list[str]] | None:
    """The outcomes the harness signed, or None where there is no result or its signature is wrong."""
    try:
        signature, payload = path.read_bytes().split(b"\n", 1)
    except (OSError, ValueError):
        return None
    expected = hmac.new(key, payload, "sha256").hexdigest().encode()
    if not hmac.compare_digest(signature, expected):
        return None
    files, violations = ast.literal_eval(payload.decode())
    return {name: list(cases) for name, cases in files}, list(violations)


def run_sealed(
    submission_path: str,
    tests_dir: str,
    protected: list[str],
    timeout: int = DEFAULT_TIMEOUT,
    time_limit: float = TIME_LIMIT,
):
    """Run the submission sealed, each test for at most ``time_limit`` seconds (0: no limit):
    (outcomes by test file stem, violations), or None."""
    from nbclient import NotebookClient

    key, token = secrets.token_bytes(32), secrets.token_hex(16)
    tests = {
        Path(p).stem: Path(p).read_text(encoding="utf-8")
        for p in sorted(glob(os.path.join(tests_dir, "*.py")))
        if Path(p).name != "__init__.py"
    }
    folder = Path(tempfile.mkdtemp(prefix="attnlab-sealed-"))
    try:
        work = folder / "work"
        work.mkdir()
        setup, result = folder / "setup.json", folder / "result"
        fd = os.open(setup, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "key": key.hex(),
                    "token": token,
                    "tests": tests,
                    "result": str(result),
                    "protected": [os.path.abspath(p) for p in protected],
                    "time_limit": time_limit,
                },
                f,
            )
        notebook = sealed_notebook(nbformat.read(submission_path, as_version=4), str(setup), token)
        for attempt in range(2):  # a kernel that dies while it starts, before any cell, is started again
            client = NotebookClient(
                notebook,
                timeout=timeout,
                kernel_name="python3",
                allow_errors=True,
                resources={"metadata": {"path": str(work)}},
            )
            try:
                client.execute()
            except Exception as error:  # a dead kernel, a cell past its time: no result
                if KERNEL_DIED_STARTING in str(error) and attempt == 0:
                    continue
            break
        if os.environ.get("ATTNLAB_SEALED_DEBUG"):  # the sealed run's outputs, for a maintainer to read
            nbformat.write(notebook, os.environ["ATTNLAB_SEALED_DEBUG"])
        return read_result(result, key)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class SealedGrading(AbstractOtterPlugin):
    """otter plugin: grade the submission in a sealed kernel (see the module's docstring).
    Its config may set ``timeout`` (seconds for one cell) and ``time_limit`` (seconds for one
    test; the environment's ATTNLAB_TIME_LIMIT, where set, comes first)."""

    def during_assign(self, assignment) -> None:  # nothing to do at assign time
        return None

    def before_execution(self, submission):
        if isinstance(submission, str):  # a .py submission: no cells to keep
            return ""
        empty = nbformat.v4.new_notebook(metadata=submission.metadata)
        return empty

    def after_grading(self, results) -> None:
        submission_dir = os.getcwd()  # otter grades from the submission's folder, with tests/ in it
        protected = [os.path.dirname(submission_dir), os.path.join(submission_dir, "tests")]
        if os.path.isdir("/autograder"):
            protected.append("/autograder")
        config = self.plugin_config or {}
        outcome = run_sealed(
            self.submission_path,
            os.path.join(submission_dir, "tests"),
            protected,
            int(config.get("timeout", DEFAULT_TIMEOUT)),
            float(os.environ.get("ATTNLAB_TIME_LIMIT") or config.get("time_limit", TIME_LIMIT)),
        )
        outcomes = outcome[0] if outcome else {}
        missing = (False, "❌ Test case failed\n" + NO_RESULT)
        for name, test_file in results.results.items():
            cases = {case_name: (passed, message) for case_name, passed, message in outcomes.get(name, [])}
            test_file.test_case_results = [
                TestCaseResult(test_case=case, passed=passed, message=message)
                for case in test_file.test_cases
                for passed, message in [cases.get(case.name, missing)]
            ]
