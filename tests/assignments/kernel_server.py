"""Kernels for the grading tests that start without importing PyTorch and otter again each time.

Every grade in tests/assignments/test_grading.py starts a kernel, and every kernel imports the
same modules before it runs a line of the submission: ipykernel, PyTorch, otter and the book's
package, about 2.3 s of one core's time per kernel (55 grades when this was written). Here a server process imports
them once and forks a kernel from itself for each grade. Each kernel is still a process of its
own, started for one grade and gone after it, running the notebook from its first line: what is
saved is the imports' time (a module already imported is only bound again by ``import``).

How a kernel starts (Linux only: ``os.pidfd_open``, ``socket.send_fds``):

- ``serve SOCKET [MODULE ...]``: the server. It imports PRELOAD (or the modules named, where a
  test needs a server and not its imports), listens on the Unix socket SOCKET, and for
  each request forks a child that becomes the kernel: the launcher's standard streams, working
  directory, environment and connection file, ``sys.path`` as ``python -m ipykernel_launcher``
  leaves it (IPython adds the working directory as ``''``), Python's, NumPy's and PyTorch's
  global random state drawn afresh (a fork would share the server's), a session of its own.
  The server sends the child's process id back and goes on; the children are reaped as they end.
- ``launch SOCKET -f CONNECTION_FILE``: what the kernel spec's ``argv`` runs, as jupyter_client
  runs any kernel. It sends its request, passes on each signal it is sent (an interrupt,
  a terminate) to the kernel and waits for the kernel to end, so that jupyter_client sees the
  usual kernel process. The kernel watches its launcher: when the launcher is killed
  (jupyter_client's immediate shutdown), the kernel kills itself.

``kernel_spec_dir(folder, socket_path)`` writes a ``python3`` kernel spec that runs the
launcher; with ``JUPYTER_PATH`` set to that folder, jupyter_client (and so otter, which asks for
``python3``) finds it before the environment's own. The server must be started with the
environment that the grading kernels are to inherit (one thread each: OMP_NUM_THREADS=1), so
that importing PyTorch leaves it with one thread, which ``fork`` needs. ``running(env)`` does
all of this for the length of a ``with`` block (the grading fixture uses it).

Measured on one 2-core machine: the grading fixture alone, 260 s with usual kernels and 167 s
with forked ones, and the 55 results.json files it wrote were the same; later, with the two
lazily imported parts of PyTorch in PRELOAD too, 110.5 s against 126.9 s without them, on one
machine. Where the time went then: almost all of a grade is its notebook's cells running in the kernel (a profile of one
grade of assignment 5: 3.5 s of 4.0 s waiting on the kernel), and two grades of assignment 5
train for its full 800 steps (about a minute each, on one thread).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

PARENT_CHECK_S = 2.0  # how often an idle server checks that the process that started it is there
AVAILABLE = hasattr(os, "pidfd_open") and hasattr(socket, "send_fds") and hasattr(os, "fork")
# and two parts of PyTorch that it imports on first use, in the kernel's time otherwise:
# torch.distributed.tensor (the first torch.testing.assert_close, which every assignment's tests
# call: 0.6 s) and torch._dynamo (the first optimizer: 0.7 s; assignments 2, 4 and 5 make one).
PRELOAD = (
    "ipykernel.kernelapp",
    "torch",
    "otter",
    "otter.check.notebook",
    "attnlab",
    "torch.distributed.tensor",
    "torch._dynamo",
)
RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def kernel_spec_dir(folder: Path, socket_path: Path) -> Path:
    """``folder/kernels/python3/kernel.json``, a kernel spec that asks the server at
    ``socket_path`` for its kernel; ``folder`` is what JUPYTER_PATH must name."""
    spec = folder / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-S", str(Path(__file__).resolve()), "launch", str(socket_path), "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "Python 3 (ipykernel)", "language": "python"}), encoding="utf-8"
    )
    return folder


@contextlib.contextmanager
def running(env: dict[str, str], timeout: float = 120) -> Iterator[dict[str, str]]:
    """The server, started with ``env`` (the grading kernels' environment) for the duration of the
    ``with`` block: yields ``env`` with JUPYTER_PATH naming the kernel spec that uses it, for the
    processes that start the kernels. With ATTNLAB_FORKED_KERNELS=0, or where the system lacks what
    the server needs (anything but Linux), nothing is started and ``env`` comes back unchanged (every
    kernel then starts as usual, ``python -m ipykernel_launcher``)."""
    if os.environ.get("ATTNLAB_FORKED_KERNELS", "1") == "0" or not AVAILABLE:
        yield env
        return
    folder = Path(tempfile.mkdtemp(prefix="attnlab-kernels-"))  # short: a socket's path has 107 bytes at most
    socket_path = folder / "server.sock"
    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "serve", str(socket_path)], env=env, stdin=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + timeout
        while not socket_path.exists():
            if server.poll() is not None:
                raise RuntimeError(f"the kernel server ended while starting (exit status {server.returncode})")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the kernel server did not listen within {timeout} s")
            time.sleep(0.05)
        kernel_spec_dir(folder / "jupyter", socket_path)
        paths = [str(folder / "jupyter"), *filter(None, env.get("JUPYTER_PATH", "").split(os.pathsep))]
        yield {**env, "JUPYTER_PATH": os.pathsep.join(paths)}
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(folder, ignore_errors=True)


def launch(socket_path: str, argv: list[str]) -> int:
    """The launcher: ask for a kernel, pass signals on to it, wait until it ends."""
    import select

    request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "launcher": os.getpid()}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(socket_path)
        socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
        conn.shutdown(socket.SHUT_WR)
        pid = int(conn.makefile().read())

    def relay(signum: int, _frame) -> None:
        with contextlib.suppress(ProcessLookupError):  # it has just ended
            os.kill(pid, signum)

    for signum in RELAYED:
        signal.signal(signum, relay)
    try:
        ended = os.pidfd_open(pid)
    except ProcessLookupError:
        return 0
    select.select([ended], [], [])  # readable once the kernel has ended
    return 0


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while chunk := conn.recv(1 << 20):  # the environment may not arrive in one piece
        data += chunk
    return json.loads(data), fds


def _become_kernel(request: dict, fds: list[int]) -> None:
    """In the forked child: start the kernel as ``python -m ipykernel_launcher`` would; never
    returns."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server ignores it; the kernel's subprocesses need it
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's own way to end is not the kernel's
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # The server's sys.path[0] is this file's folder; ipykernel_launcher removes its own first
        # entry (the working directory) in the same way, and IPython then puts '' before site-packages.
        del sys.path[0]
        import importlib.util
        import random
        import threading

        import numpy

        random.seed()
        numpy.random.seed()
        if "torch" in sys.modules:  # PyTorch too seeds itself afresh in each process
            sys.modules["torch"].seed()
        sys.argv = [importlib.util.find_spec("ipykernel_launcher").origin, *request["argv"]]
        launcher = os.pidfd_open(request["launcher"])

        def follow_the_launcher() -> None:  # killed (immediate shutdown): the kernel goes too
            import select

            select.select([launcher], [], [])
            os.kill(os.getpid(), signal.SIGKILL)

        threading.Thread(target=follow_the_launcher, daemon=True).start()
        import logging

        from ipykernel.kernelapp import IPKernelApp

        class ForkedKernelApp(IPKernelApp):
            def init_io(self) -> None:
                """As ipykernel's, then the logging handlers that the server's imports made
                (otter's, PyTorch's) write where they would had the kernel imported them: to
                the kernel's streams, which reach the notebook."""
                streams = {id(sys.stdout): "stdout", id(sys.stderr): "stderr"}
                super().init_io()
                names = list(logging.Logger.manager.loggerDict)
                loggers = [logging.getLogger(), *(logging.getLogger(name) for name in names)]
                for handler in {h for logger in loggers for h in getattr(logger, "handlers", [])}:
                    if type(handler) is logging.StreamHandler and id(handler.stream) in streams:
                        handler.setStream(getattr(sys, streams[id(handler.stream)]))

        # JPY_PARENT_PID is read when ipykernel is imported, and the server imported it
        parent = f"--IPKernelApp.parent_handle={int(os.environ.get('JPY_PARENT_PID') or 0)}"
        ForkedKernelApp.launch_instance(argv=[*request["argv"], parent])
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:  # what a kernel that failed to start prints
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def serve(socket_path: str, preload: tuple[str, ...] = PRELOAD) -> None:
    """The server: import ``preload``, then fork a kernel for each request until terminated, or
    until the process that started it has gone (a test run killed before it could stop the server)."""
    import importlib

    parent = os.getppid()
    for name in preload:
        importlib.import_module(name)
    assert len(os.listdir("/proc/self/task")) == 1, "the server must have one thread to fork (OMP_NUM_THREADS=1)"
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped as they end
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(socket_path + ".tmp")
        listener.listen(16)
        os.replace(socket_path + ".tmp", socket_path)  # there once it listens
        listener.settimeout(PARENT_CHECK_S)  # a timer, not a thread: fork needs the one thread alone
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                if os.getppid() != parent:  # orphaned: no one will ask again
                    return
                continue
            conn.settimeout(None)
            with conn:
                request, fds = _receive(conn)
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    conn.close()
                    _become_kernel(request, fds)
                for fd in fds:
                    os.close(fd)
                conn.sendall(str(pid).encode())


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], tuple(sys.argv[3:]) or PRELOAD)
    elif sys.argv[1] == "launch":
        sys.exit(launch(sys.argv[2], sys.argv[3:]))
    else:
        sys.exit(f"usage: {sys.argv[0]} serve SOCKET [MODULE ...] | launch SOCKET -f CONNECTION_FILE")
