"""The sealed grading's parent side: only a result signed with the grade's key counts, and the
notebook it runs puts the harness before the student's cells and the grading after them. The
attacks themselves are graded from the built zips (tests/assignments/test_grading.py)."""

from __future__ import annotations

import hmac

import nbformat
import pytest

pytest.importorskip("otter")
from attnlab.grading.plugin import read_result, sealed_notebook


def _signed(key: bytes, payload: bytes) -> bytes:
    return hmac.new(key, payload, "sha256").hexdigest().encode() + b"\n" + payload


PAYLOAD = repr(((("q1", (("q1 - 1", True, "ok"), ("q1 - 2", False, "no"))),), ())).encode()


def test_a_signed_result_is_read(tmp_path):
    key = b"k" * 32
    (tmp_path / "result").write_bytes(_signed(key, PAYLOAD))
    outcomes, violations = read_result(tmp_path / "result", key)
    assert outcomes == {"q1": [("q1 - 1", True, "ok"), ("q1 - 2", False, "no")]} and violations == []


@pytest.mark.parametrize("forgery", ["other key", "payload changed", "no signature", "no file"])
def test_a_forged_or_missing_result_counts_for_nothing(tmp_path, forgery):
    key = b"k" * 32
    path = tmp_path / "result"
    if forgery == "other key":
        path.write_bytes(_signed(b"x" * 32, PAYLOAD))
    elif forgery == "payload changed":
        path.write_bytes(_signed(key, PAYLOAD).replace(b"False", b"True "))
    elif forgery == "no signature":
        path.write_bytes(PAYLOAD)
    assert read_result(path, key) is None


def test_the_sealed_notebook_runs_the_harness_first_and_the_grading_last():
    submission = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("# text"),
            nbformat.v4.new_code_cell("x = 1"),
            nbformat.v4.new_code_cell("skipped = True", metadata={"tags": ["otter_ignore"]}),
            nbformat.v4.new_code_cell("y = 2"),
        ]
    )
    cells = sealed_notebook(submission, "/tmp/setup.json", "TOKEN").cells
    assert [c.cell_type for c in cells] == ["code"] * 4
    assert "install('/tmp/setup.json')" in cells[0].source
    assert [c.source for c in cells[1:3]] == ["x = 1", "y = 2"]
    assert "sys.audit('attnlab.sealed.grade', 'TOKEN')" in cells[-1].source
    assert cells[-1].source.index("sealed.grade") < cells[-1].source.index("sealed.run")


def test_a_kernel_that_dies_while_starting_is_started_again(tmp_path, monkeypatch):
    """A kernel that dies before it runs a cell (it happens with several starting at once) is
    no reason for a submission to lose its grade: the sealed run starts another, once."""
    import ast
    import json

    import nbclient

    from attnlab.grading import plugin

    calls = []

    def execute(self):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError(plugin.KERNEL_DIED_STARTING)
        setup_path = ast.literal_eval(self.nb.cells[0].source.split("install(")[1].split(")")[0])
        with open(setup_path, encoding="utf-8") as f:
            setup = json.load(f)
        with open(setup["result"], "wb") as f:
            f.write(_signed(bytes.fromhex(setup["key"]), PAYLOAD))

    monkeypatch.setattr(nbclient.NotebookClient, "execute", execute)
    submission = tmp_path / "s.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), submission)
    (tmp_path / "tests").mkdir()
    outcome = plugin.run_sealed(str(submission), str(tmp_path / "tests"), [str(tmp_path)])
    assert len(calls) == 2 and outcome is not None and outcome[0]["q1"][0] == ("q1 - 1", True, "ok")
