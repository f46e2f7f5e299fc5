"""What the sealed grader watches and refuses: its events, the modules it snapshots, the audit
events it refuses to a submission's code (attnlab.grading.sealed applies them).

Every container here is immutable (tuples, frozensets, a read-only mapping): the harness binds
these objects when it installs, before any of the student's code runs, and no later code can
widen what they allow.
"""

from __future__ import annotations

from types import MappingProxyType

GRADE_EVENT = "attnlab.sealed.grade"  # with the token: arm the grading
RUN_EVENT = "attnlab.sealed.run"  # then: run the tests
TEST_PREFIX = "<attnlab test "
# What a test stopped at the time limit says (the limit, in seconds, filled in).
TIME_LIMIT = (
    "this test ran for more than {limit:g} s and was stopped, so that the rest of your notebook is "
    "still graded: is a loop in your code much slower than it needs to be?"
)

# Modules whose attributes the tests (and the library code they call) use: each is compared with
# its snapshot before the tests, after each test, and (the QUICK ones) after every call that a
# test makes into the student's code.
QUICK = ("builtins", "torch", "torch.testing", "torch.nn.functional", "math")
WATCHED = (
    *QUICK,
    "operator",
    "functools",
    "itertools",
    "os",
    "posixpath",
    "signal",
    "threading",
    "types",
    "inspect",
    "tracemalloc",
    "warnings",
    "traceback",
    "numpy",
    "torch.nn",
    "torch.nn.init",
    "torch.overrides",
    "torch.autograd",
    "torch.linalg",
    "torch.profiler",
    "torch.testing._comparison",
    "torch._tensor",
    "torch.nn.modules.module",
    "torch._C",
    "otter",
    "otter.test_files",
    "sys",
)
# Names that IPython itself sets in builtins and sys between cells.
SKIPPED = MappingProxyType(
    {
        "builtins": frozenset({"_", "__IPYTHON__", "display", "get_ipython", "exit", "quit", "input", "raw_input"}),
        "sys": frozenset(
            {
                "stdout",
                "stderr",
                "stdin",
                "displayhook",
                "excepthook",
                "ps1",
                "ps2",
                "ps3",
                "last_type",
                "last_value",
                "last_traceback",
                "argv",
                "path_importer_cache",
                "_jupyter_stdout",
                "_jupyter_stderr",
                "modules",
                "path",
                "meta_path",
                "path_hooks",
            }
        ),
    }
)
# The student's methods that a test may call, directly or through a library: anything that is not
# a dunder, and these. The other dunders (__eq__, __bool__, __torch_function__, ...) answer for an
# object when a test compares it: none of the student's may run inside a test.
CALLABLE_DUNDERS = frozenset({"__init__", "__new__", "__call__", "__post_init__"})
# Audit events refused to the student's code (see _Sealed.policy for which, and when).
FRAMES = frozenset({"sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile"})
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
INTROSPECTION = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents"})
PROCESSES = frozenset(
    {
        "os.fork",
        "os.forkpty",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.system",
        "subprocess.Popen",
        "pty.spawn",
        "os.kill",
        "os.killpg",
    }
)
# Refused when the student's code asks for them through any library (IPython's own open()
# wraps io.open); the others only when asked directly, or through the helper modules below.
BY_PROXY = PROCESSES | frozenset({"open"})
FUNCTION_PARTS = frozenset({"__code__", "__globals__", "__defaults__", "__kwdefaults__", "__closure__"})
