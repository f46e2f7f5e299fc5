"""The sealed grader's time limit (attnlab.grading.sealed), in a real sealed kernel: a test that
runs past it fails with the message that says so, whether the submission sleeps, loops without
a call, or catches what stops it, and the tests after it are still graded. The assignments' tests
hold no time guard of their own (test_grading.py checks that, and grades a wrong solution that
the limit stops through the built autograder). The limit here is 1 s, so that the four tests take
a few seconds; a cell of the run that does not end in 90 s (a limit that does not work) leaves no
result."""

from __future__ import annotations

import nbformat
import pytest

pytest.importorskip("otter")
from attnlab.grading import plugin, sealed

SUBMISSION = """
import time


def slow(n):
    if n > 5:  # quick on the notebook's inputs, hopeless on the test's
        time.sleep(120)
    return n


def stubborn():
    try:
        time.sleep(120)
    except BaseException:  # catches what stops it, and answers anyway
        pass
    return 1


def spin():
    while True:  # no call, no end
        pass
"""

TESTS = """from otter.test_files import test_case

OK_FORMAT = False

name = "q1"
points = 4

@test_case(points=1, hidden=False)
def test_sleeps(slow):
    assert slow(10) == 10

@test_case(points=1, hidden=False)
def test_caught(stubborn):
    try:
        assert stubborn() == 1
    except Exception:
        raise AssertionError("not the time limit")

@test_case(points=1, hidden=False)
def test_spins(spin):
    spin()

@test_case(points=1, hidden=False)
def test_quick(slow):
    assert slow(1) == 1
"""


def test_a_test_past_the_limit_fails_with_its_message_and_the_next_is_graded(tmp_path):
    submission = tmp_path / "submission.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SUBMISSION)]), submission)
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "q1.py").write_text(TESTS, encoding="utf-8")
    outcome = plugin.run_sealed(str(submission), str(tests), [str(tests)], timeout=90, time_limit=1)
    assert outcome is not None, "the sealed run left no result: did a test run on past its limit?"
    outcomes, violations = outcome
    assert violations == []
    cases = {name: (passed, message) for name, passed, message in outcomes["q1"]}
    stopped = sealed.TIME_LIMIT.format(limit=1)
    assert stopped.startswith("this test ran for more than 1 s and was stopped, so that the rest of your notebook")
    for name, line in [("q1 - 1", "assert slow(10) == 10"), ("q1 - 2", None), ("q1 - 3", "spin()")]:
        passed, message = cases[name]
        assert not passed and f"TimeoutError: {stopped}" in message, (name, message)
        if line:  # where the test was stopped, as otter shows a failure
            assert "Error at line" in message and f"  {line}\n" in message, (name, message)
    assert cases["q1 - 4"] == (True, "✅ Test case passed")
