"""The harness inside the kernel that runs a submission for sealed grading.

:func:`attnlab.grading.harness.install` runs first, before any of the student's cells. It reads its set-up (a key, a
token, the tests' sources, where to write the result) from a file that it then deletes, takes
snapshots of what the tests rely on, and adds an audit hook. Python code cannot remove an audit
hook, and the harness keeps no other reference to its state: the key lives in the hook's closure,
which the student's code could reach only through the call stack or the garbage collector, and
the hook refuses both to it.

The last cell raises the audit event ``attnlab.sealed.grade`` with the token, then
``attnlab.sealed.run``. The hook then runs every test with a profiler on, checks what the tests rely
on after each, and writes the outcomes, signed (HMAC-SHA256), where the set-up said. Any tampering
found (a changed function, method or module, the student's code running inside a test's own checks,
a refused operation) fails every test with a message that names it.

Each test runs under the set-up's time limit (``SIGALRM``, where the system has it: Linux and
macOS): a test that runs longer is stopped and fails with :data:`TIME_LIMIT`'s message, and the
tests after it are still graded, instead of the whole submission running into the grading's own
time limit and scoring nothing. The tests themselves hold no time guard: students' own
``grader.check`` calls run without one (a check that hangs there is in front of them, and they
can interrupt it).
"""

from __future__ import annotations

import builtins
import os
import signal
import sys
import threading
import traceback
import types
from typing import Any

from attnlab.grading.harness import module_snapshot, watched_classes
from attnlab.grading.rules import (
    BY_PROXY,
    FRAME_ATTRIBUTES,
    FRAMES,
    FUNCTION_PARTS,
    GRADE_EVENT,
    INTROSPECTION,
    PROCESSES,
    QUICK,
    RUN_EVENT,
    TEST_PREFIX,
    TIME_LIMIT,
    WATCHED,
)
from attnlab.grading.sanction import sanctioned_codes


class Violation(Exception):
    """Raised (and recorded) when the student's code does what no submission may do."""


class TimeLimit(BaseException):
    """Raised in a test that runs past its time limit: not an Exception, so that an ``except
    Exception`` in the test or in the student's code lets it through."""


class _Sealed:
    """The harness's state; its one reference is the audit hook's bound method."""

    def __init__(self, setup: dict, cell_prefixes: tuple[str, ...], harness_cell: str) -> None:
        import torch
        import torch._dynamo  # on first import it rebinds torch.manual_seed: before the snapshot
        import torch.distributed.tensor  # the first assert_close imports it
        from torch._dynamo.mutation_guard import install_generation_tagging_init

        # dynamo's first compile (flex_attention's, for one) rebinds nn.Module.__init__ and
        # __setstate__ once: done here, before the snapshot, it is not taken for the student's
        install_generation_tagging_init()
        import otter.test_files  # noqa: F401 (watched: a notebook may patch it)

        self.key = bytes.fromhex(setup["key"])
        self.token = setup["token"]
        self.tests = setup["tests"]  # file name -> source
        self.result_path = setup["result"]
        self.protected_paths = tuple(os.path.join(os.path.realpath(p), "") for p in setup["protected"])
        self.protected_files = {os.path.realpath(setup["result"])}
        self.cell_prefixes = cell_prefixes
        self.harness_files = {harness_cell}
        self.student_codes: set = set()
        self.violations: list[str] = []
        self.armed = self.graded = False
        self.in_hook = False
        self.sanctioned: set = set()
        self.top_calls: set[int] = set()
        self.torch = torch
        # The primitives the harness itself needs, taken now: the student's code may replace the
        # modules' attributes later (a check then sees it), but never these.
        self.getframe, self.setprofile = sys._getframe, sys.setprofile
        self.open, self.write, self.close = os.open, os.write, os.close
        import _hashlib

        self.digest = _hashlib.hmac_digest
        self.builtins = dict(vars(builtins))
        self.import_ = builtins.__import__
        self.modules = module_snapshot(WATCHED)
        self.quick = {name: self.modules[name] for name in QUICK if name in self.modules}
        self.classes = {c: dict(vars(c)) for c in watched_classes()}
        self.tensor_dict = self.classes[torch.Tensor]
        self.sys_modules = {name: module for name, (module, _) in self.modules.items()}
        self.threads = {t.ident for t in threading.enumerate()}
        # The time limit of each test (seconds; none where the set-up gives none), kept by SIGALRM,
        # whose handler only the main thread may set: the cells, and so the grading, run there.
        self.time_limit = float(setup.get("time_limit") or 0)
        self.limited = (
            self.time_limit > 0 and hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
        )
        if self.limited:
            self.set_handler, self.set_timer = signal.signal, signal.setitimer
            self.alarm, self.real_time = signal.SIGALRM, signal.ITIMER_REAL
        self.in_test = self.stopped = False
        # The modules through which code asks for what the hook refuses (inspect.stack() calls
        # sys._getframe, subprocess.run starts a process): a refusal counts when the first frame
        # outside them is the student's own. Library code that does such things on its own
        # account (typing, an import) is not refused.
        import ctypes
        import inspect
        import subprocess
        import traceback as tb

        self.helpers = {
            m.__file__ for m in (ctypes, inspect, subprocess, tb, os, threading) if getattr(m, "__file__", None)
        }

    # --- who is calling -------------------------------------------------------------------
    def is_student(self, code: types.CodeType) -> bool:
        name = code.co_filename
        return (name.startswith(self.cell_prefixes) and name not in self.harness_files) or code in self.student_codes

    def caller(self, frame) -> str:
        """'student', 'test' or 'harness': the nearest frame, from ``frame`` up, that is the
        student's code or a test (library code in between does not count)."""
        while frame is not None:
            code = frame.f_code
            if self.is_student(code):
                return "student"
            if code.co_filename.startswith(TEST_PREFIX):
                return "test"
            frame = frame.f_back
        return "harness"

    def violate(self, what: str) -> None:
        if what not in self.violations:
            self.violations.append(what)

    # --- the audit hook -------------------------------------------------------------------
    def hook(self, event: str, args: tuple) -> None:
        if self.in_hook:
            return
        if event == GRADE_EVENT:
            if not self.armed and args and args[0] == self.token:
                self.harness_files.add(self.frame(1).f_code.co_filename)
                self.armed = True
                # Python turns profiling off inside an audit hook's call, unless the hook says
                # otherwise: for the next event (RUN_EVENT) it does, so that the profiler and the
                # tests' own see the tests. Not for the others: a rules test would see the hook.
                type(self).hook.__cantrace__ = True  # type: ignore[attr-defined]  # read by CPython, unknown to typeshed
            return
        if event == RUN_EVENT:
            if self.armed and not self.graded:
                self.graded = True
                # read once, for this call: the hook's calls for the events inside the tests
                # stay out of the profiles, as the student's code sees none of them
                type(self).hook.__cantrace__ = False  # type: ignore[attr-defined]  # as above
                self.grade()
            return
        refusal = self.policy(event, args)
        if refusal is None:
            return
        frame = self.frame(1)
        if event in BY_PROXY:  # a library that opens a file or starts a process does it for its caller
            student = self.caller(frame) == "student"
        else:
            while frame is not None and frame.f_code.co_filename in self.helpers:
                frame = frame.f_back
            student = frame is not None and self.is_student(frame.f_code)
        if student:
            if os.environ.get("ATTNLAB_SEALED_DEBUG"):
                f = self.frame(1)
                where: list[str] = []
                while f is not None and len(where) < 8:
                    where.append(f"{f.f_code.co_filename}:{f.f_lineno}")
                    f = f.f_back
                refusal += " [" + " < ".join(where) + "]"
            self.violate(refusal)
            raise Violation(f"the grader refuses this: {refusal}")

    def policy(self, event: str, args: tuple) -> str | None:
        """Why ``event`` is refused to the student's code, or None where it is not."""
        if event in FRAMES:
            return f"your code read or traced the call stack ({event})"
        if event == "object.__getattr__" and len(args) > 1 and args[1] in FRAME_ATTRIBUTES:
            return f"your code read a frame of the call stack (.{args[1]})"
        if event in INTROSPECTION:
            return f"your code searched the interpreter's objects ({event})"
        if event.startswith("ctypes."):
            return f"your code used ctypes ({event})"
        if event in PROCESSES:
            return f"your code started or signalled a process ({event})"
        if event == "code.__new__":
            return "your code built a code object"
        if event == "compile":  # compile(), exec() or eval() of a string
            return "your code compiled a string at run time (compile, exec or eval)"
        if event == "exec":
            code = args[0] if args else None
            if isinstance(code, types.CodeType) and not code.co_filename.startswith(self.cell_prefixes):
                frame = self.frame(2)
                if frame is not None and self.is_student(frame.f_code):
                    self._add_student_code(code)
            return None
        if event == "object.__setattr__" and len(args) > 1:
            target, name = args[0], args[1]
            if name == "__class__" and issubclass(type(target), self.torch.Tensor):
                return "your code changed the class of a tensor"
            if name in FUNCTION_PARTS and type(target) is types.FunctionType and not self.is_student(target.__code__):
                return f"your code changed {name} of a function it did not write"
            return None
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.path.realpath(os.fsdecode(args[0]))
            name = os.path.basename(path)
            if (
                path.startswith(self.protected_paths)
                or path in self.protected_files
                or (path.startswith("/proc/") and path.endswith("/mem"))
                or (name.endswith(".py") and os.path.basename(os.path.dirname(path)) == "tests")
                or (name.endswith(".zip") and "autograder" in name)
            ):
                return f"your code opened a file of the grader's ({path})"
        return None

    def frame(self, depth: int):
        """The frame ``depth`` levels above the function that asks (0: that function), read
        without raising an event that the hook would judge."""
        self.in_hook = True
        try:
            return self.getframe(depth + 1)
        finally:
            self.in_hook = False

    def _add_student_code(self, code: types.CodeType) -> None:
        todo = [code]
        while todo:
            c = todo.pop()
            self.student_codes.add(c)
            todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))

    # --- integrity ------------------------------------------------------------------------
    def check(self, full: bool = True) -> None:
        """Record every difference between what the tests rely on and its snapshot."""
        for name, (module, saved) in (self.modules if full else self.quick).items():
            now = vars(module)
            changed = [k for k, v in saved.items() if now.get(k, _MISSING) is not v]
            for k in changed[:3]:
                self.violate(
                    f"your notebook changed {name}.{k}"
                    if name != "builtins"
                    else f"your notebook changed the builtin {k}"
                )
        tensor = vars(self.torch.Tensor)
        classes = self.classes if full else {self.torch.Tensor: self.tensor_dict}
        for cls, saved in classes.items():
            attrs = tensor if cls is self.torch.Tensor else vars(cls)
            if len(attrs) != len(saved) or any(attrs.get(k, _MISSING) is not v for k, v in saved.items()):
                changed = sorted(set(attrs) ^ set(saved) | {k for k, v in saved.items() if attrs.get(k) is not v})
                # caches, and private names that PyTorch adds on first use (they override nothing)
                changed = [
                    k
                    for k in changed
                    if k not in ("__slotnames__", "_abc_impl")
                    and not (
                        k not in saved
                        and k.startswith("_")
                        and not k.endswith("__")
                        and not any(k in vars(base) for base in cls.__mro__[1:])
                    )
                ]
                if not changed:
                    continue
                self.violate(f"your notebook changed {cls.__module__}.{cls.__qualname__}.{changed[0]}")
        if not full:
            return
        for name, module in self.sys_modules.items():
            if sys.modules.get(name) is not module:
                self.violate(f"your notebook replaced sys.modules[{name!r}]")
        if self.torch._C._len_torch_function_stack() or self.torch._C._len_torch_dispatch_stack():
            self.violate("your notebook left a torch function or dispatch mode active")
        for thread in threading.enumerate():
            target = getattr(thread, "_target", None)
            code = getattr(target, "__code__", None) or getattr(type(thread).run, "__code__", None)
            if thread.ident not in self.threads and code is not None and self.is_student(code):
                self.violate(f"your notebook started a thread that runs while the tests run ({thread.name})")

    # --- the profiler: the student's code inside a test -----------------------------------
    def profile(self, frame, event: str, arg) -> None:
        if event == "call":
            code = frame.f_code
            if not self.is_student(code):
                return
            who = self.caller(frame.f_back)
            if who == "student":
                return
            if who == "test" and code in self.sanctioned:
                self.top_calls.add(id(frame))
                return
            self.violate(
                f"your code ({code.co_name}, line {code.co_firstlineno} of its cell) ran inside "
                f"a test's own checks, where no code of a submission runs"
            )
        elif event == "return" and id(frame) in self.top_calls:
            self.top_calls.discard(id(frame))
            self.check(full=False)

    # --- grading --------------------------------------------------------------------------
    def grade(self) -> None:
        outcomes: dict[str, list[dict]] = {}
        self.student_globals = self.frame(2).f_globals  # the grade cell's: the notebook's namespace
        self.check()
        if self.limited:
            self.set_handler(self.alarm, self.too_slow)
        for file_name, source in sorted(self.tests.items()):
            name, cases = self.run_file(file_name, source)
            outcomes[name] = cases
        self.check()
        if self.violations:
            why = (
                "The grader stopped this submission: " + "; ".join(self.violations[:5]) + ". A notebook "
                "that replaces, wraps or inspects what the tests use earns no points: remove that code "
                "and hand it in again."
            )
            for cases in outcomes.values():
                for case in cases:
                    case.update(passed=False, message=why)
        # repr of tuples of str and bool: C code all the way, which no patch of json can reach
        payload = repr(
            (
                tuple(
                    (f, tuple((c["name"], c["passed"], c["message"]) for c in cases)) for f, cases in outcomes.items()
                ),
                tuple(self.violations),
            )
        ).encode()
        signature = self.digest(self.key, payload, "sha256").hex().encode()
        fd = self.open(self.result_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            self.write(fd, signature + b"\n" + payload)
        finally:
            self.close(fd)

    def run_file(self, file_name: str, source: str) -> tuple[str, list[dict]]:
        """Run the test cases of one otter test file: its name, [{name, passed, message}] (the
        cases named as otter names them: NAME - 1, NAME - 2, ... where a case has no name)."""
        cases: list = []

        class TestCase:  # otter's test_case decorator, as the test files use it
            def __init__(self, name=None, points=None, hidden=False, success_message=None, failure_message=None):
                self.name = name

            def __call__(self, fn):
                cases.append((self.name, fn))
                return self

        shim = types.ModuleType("otter.test_files")
        shim.test_case = TestCase  # type: ignore[attr-defined]  # a module takes any attribute
        real_import = self.import_

        def import_(name, globals=None, locals=None, fromlist=(), level=0):
            return shim if name == "otter.test_files" else real_import(name, globals, locals, fromlist, level)

        namespace: dict[str, Any] = {"__builtins__": {**self.builtins, "__import__": import_}, "__name__": file_name}
        filename = f"{TEST_PREFIX}{file_name}>"
        exec(compile(source, filename, "exec"), namespace)  # the course's own tests
        lines = source.splitlines()
        results = []
        file_label = namespace.get("name", file_name)
        for i, (name, fn) in enumerate(cases):
            name = name or f"{file_label} - {i + 1}"
            import inspect

            params = list(inspect.signature(fn).parameters)
            args = {p: self.student_globals.get(p) for p in params}
            self.sanctioned = sanctioned_codes(list(args.values()), self.student_globals, self.is_student, self.torch)
            passed, message = True, "✅ Test case passed"
            error: BaseException | None = None
            self.stopped = False
            self.setprofile(self.profile)
            self.start_timer()
            try:
                fn(**args)
            except BaseException as raised:  # SystemExit too: a test cannot end the grading
                self.in_test = False  # first: a late alarm now raises nothing here
                error = raised
                passed = False
                self.setprofile(None)
                message = "❌ Test case failed\n" + self.describe(error, filename, lines, name)
            finally:
                self.in_test = False
                self.stop_timer()
                self.setprofile(None)
                self.top_calls.clear()
            if self.stopped:  # past the limit: failed, however the test or the submission took it
                passed = False
                where = self.where(error, filename, lines, name) if error is not None else ""
                message = f"❌ Test case failed\n{where}TimeoutError: {TIME_LIMIT.format(limit=self.time_limit)}"
            self.check()
            results.append({"name": name, "passed": passed, "message": message})
        return file_label, results

    # --- the time limit ---------------------------------------------------------------------
    def start_timer(self) -> None:
        """Arm the alarm for one test: it fires at the limit, then every second until the test
        ends (a test that the first alarm did not stop, because the student's code caught it or
        the harness's own code was running, is stopped by the next)."""
        self.in_test = True
        if self.limited:
            self.set_timer(self.real_time, self.time_limit, 1.0)

    def stop_timer(self) -> None:
        if self.limited:
            self.set_timer(self.real_time, 0)

    def too_slow(self, signum: int, frame: types.FrameType | None) -> None:
        """SIGALRM's handler while the tests run: note that the test ran past its limit, and stop
        it, unless it has ended or the harness's own code (the profiler, the hook) is running."""
        self.stopped = True
        if self.in_test and not (frame is not None and frame.f_code.co_filename == __file__):
            raise TimeLimit(TIME_LIMIT.format(limit=self.time_limit))

    # --- messages -------------------------------------------------------------------------
    def where(self, error: BaseException, filename: str, lines: list[str], name: str) -> str:
        """The test's line that ``error`` came through, as otter names it ("" where none)."""
        line = next(
            (f.lineno for f in reversed(traceback.extract_tb(error.__traceback__)) if f.filename == filename), None
        )
        return f"Error at line {line} in test {name}:\n  {lines[line - 1].strip()}\n" if line else ""

    def describe(self, error: BaseException, filename: str, lines: list[str], name: str) -> str:
        """otter's message: the test's line that failed, and the error (never the student's
        own __str__: only exceptions of Python's own classes are turned into text)."""
        kind = type(error)
        text = str(error) if kind.__module__ == "builtins" else "(an exception of the submission's own class)"
        return f"{self.where(error, filename, lines, name)}{kind.__name__}: {text}"


_MISSING = object()
