"""Sealed grading for the book's assignments (see the instructor guide, "What the graders defend").

otter-grader runs a submission's tests in the submission's own Python process, after its code:
anything the tests call (``torch.allclose``, ``isinstance``, otter itself) can have been replaced
first. Here the grading is sealed:

- :mod:`attnlab.grading.plugin` is an otter plugin, run in otter's own process. It keeps the
  student's code out of otter's kernel, runs the submission in a fresh kernel of its own with the
  harness installed first, and takes the grades only from a result signed with a key that the
  student's code never sees.
- :mod:`attnlab.grading.sealed` is that harness, inside the kernel: an audit hook that Python
  code cannot remove, snapshots of what the tests rely on, and a profiler that sees any of the
  student's code that runs while a test checks a result.

Neither module is imported by ``import attnlab``.
"""
