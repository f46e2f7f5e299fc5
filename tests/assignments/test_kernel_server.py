"""The grading tests' forked kernels (kernel_server.py) behave as the kernels they replace: what a
submission's code sees (working directory, ``sys.path``, environment, PyTorch's threads, its
printed output) is what it sees in a kernel started as usual, each kernel's random state is its
own, an interrupt reaches the running cell, and a kernel whose launcher is killed (jupyter_client's
immediate shutdown) does not outlive it."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernel_server

pytestmark = pytest.mark.skipif(not kernel_server.AVAILABLE, reason="the kernel server needs Linux")

PROBE = """
import json, os, sys, random, logging
import numpy, torch
print(json.dumps({"cwd": os.getcwd(), "path": sys.path, "mark": os.environ.get("ATTNLAB_PROBE"),
                  "threads": torch.get_num_threads(), "name": __name__, "argv0": os.path.basename(sys.argv[0]),
                  "random": random.random(), "numpy": float(numpy.random.rand()), "torch": float(torch.rand(1)),
                  "pid": os.getpid()}))
import otter.check.notebook  # noqa: F401 (its loggers write to the streams they found at import)
for name in ("attnlab-probe", "otter.check", "torch"):
    logging.getLogger(name).warning("logged by %s", name)
"""


def _start(env: dict[str, str], cwd: Path):
    from jupyter_client import KernelManager

    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(cwd=str(cwd), env=env)
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    return manager, client


def _run(client, code: str, timeout: float = 60) -> tuple[dict, list[dict]]:
    outputs: list[dict] = []

    def hook(msg: dict) -> None:
        if msg["msg_type"] in ("stream", "error"):
            outputs.append(msg["content"])

    reply = client.execute_interactive(code, output_hook=hook, timeout=timeout)
    return reply["content"], outputs


def _probe(client) -> tuple[dict, str]:
    reply, outputs = _run(client, PROBE)
    assert reply["status"] == "ok", reply
    stdout = "".join(o["text"] for o in outputs if o.get("name") == "stdout")
    stderr = "".join(o["text"] for o in outputs if o.get("name") == "stderr")
    return json.loads(stdout), stderr


def _gone(pid: int, within: float) -> bool:
    """Whether process ``pid`` ends within ``within`` seconds (a zombie has ended: it waits only
    for its parent to read its exit status)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def server() -> tuple[dict[str, str], dict[str, str]]:
    """One server for the tests below, as the grading has one for all its kernels (starting one
    imports PyTorch and otter: a few seconds): (the environment for a forked kernel, the one for
    a usual kernel)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "ATTNLAB_PROBE": "seen"}
    env.pop("JUPYTER_PATH", None)
    with kernel_server.running(env) as forked_env:
        yield forked_env, env


@pytest.fixture
def kernels(server, tmp_path, monkeypatch):
    """(the environment for a forked kernel, the one for a usual kernel, a working directory)."""
    forked_env, env = server
    work = tmp_path / "work"
    work.mkdir()
    # jupyter_client looks kernel specs up in this process's JUPYTER_PATH
    monkeypatch.setenv("JUPYTER_PATH", forked_env["JUPYTER_PATH"])
    return forked_env, env, work


def test_a_forked_kernel_sees_what_a_usual_kernel_sees(kernels, monkeypatch):
    forked_env, env, work = kernels
    seen = {}
    for kind in ("usual", "forked", "forked again"):
        if kind == "usual":
            monkeypatch.delenv("JUPYTER_PATH")
        else:
            monkeypatch.setenv("JUPYTER_PATH", forked_env["JUPYTER_PATH"])
        manager, client = _start(forked_env if kind != "usual" else env, work)
        try:
            seen[kind] = _probe(client)
            launcher = manager.provisioner.process.pid
        finally:
            client.stop_channels()
            manager.shutdown_kernel(now=False)
        kernel = seen[kind][0]["pid"]
        assert (kernel == launcher) == (kind == "usual"), (
            f"{kind}: the kernel runs in pid {kernel}, launched as {launcher}"
        )
        assert _gone(kernel, 10), f"{kind}: the kernel outlived its shutdown"
    usual, usual_log = seen["usual"]
    for kind in ("forked", "forked again"):
        probe, log = seen[kind]
        for key in ("cwd", "path", "mark", "threads", "name", "argv0"):
            assert probe[key] == usual[key], f"{kind} kernel: {key} is {probe[key]!r}, in a usual kernel {usual[key]!r}"
        same = re.sub(r"\d+", "N", log) == re.sub(r"\d+", "N", usual_log)  # torch's lines give a time and pid
        assert same, f"{kind} kernel: its logging printed {log!r}, a usual kernel's {usual_log!r}"
    assert all(f"logged by {name}" in usual_log for name in ("attnlab-probe", "otter.check", "torch")), usual_log
    assert usual["cwd"] == str(work) and usual["mark"] == "seen" and usual["threads"] == 1, usual
    for key in ("random", "numpy", "torch"):  # drawn afresh in each kernel, as in each new process
        assert seen["forked"][0][key] != seen["forked again"][0][key], f"two forked kernels drew the same {key}"


def test_an_interrupt_reaches_the_running_cell(kernels):
    forked_env, _, work = kernels
    manager, client = _start(forked_env, work)
    try:
        # stop_on_error=False, as otter's grading sends every cell (nbclient with allow_errors): after an
        # error with stop_on_error, ipykernel aborts the execute requests that reach it before its
        # "stop aborting" message, and under load the next request can win that race (seen in CI)
        msg_id = client.execute("import time\nfor _ in range(600): time.sleep(0.1)", stop_on_error=False)
        time.sleep(1)
        started = time.monotonic()
        manager.interrupt_kernel()
        reply = client.get_shell_msg(timeout=30)
        assert reply["parent_header"]["msg_id"] == msg_id
        content = reply["content"]
        assert content["status"] == "error" and content["ename"] == "KeyboardInterrupt", content
        assert time.monotonic() - started < 10
        reply, outputs = _run(client, "print(6 * 7)")  # and the kernel goes on
        assert reply["status"] == "ok" and "42" in "".join(o.get("text", "") for o in outputs), outputs
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_a_kernel_whose_launcher_is_killed_ends_too(kernels):
    forked_env, _, work = kernels
    manager, client = _start(forked_env, work)
    try:
        kernel = _probe(client)[0]["pid"]
        launcher = manager.provisioner.process.pid
        assert kernel != launcher
        os.kill(launcher, signal.SIGKILL)  # what shutdown_kernel(now=True) does to the process it started
        assert _gone(kernel, 10), "the kernel outlived its launcher"
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_the_server_ends_when_the_process_that_started_it_is_gone(tmp_path):
    """A test run killed before it could stop the server leaves no server behind. The server here
    imports one small module instead of PRELOAD (PyTorch, otter: about 5 s of a core), which has
    no part in how it notices that it is orphaned."""
    import subprocess

    socket_path = tmp_path / "s.sock"
    starter = (
        "import subprocess, sys, time, pathlib\n"
        f"server = subprocess.Popen([sys.executable, {str(Path(kernel_server.__file__))!r}, 'serve', "
        f"{str(socket_path)!r}, 'json'], env={{**__import__('os').environ, 'OMP_NUM_THREADS': '1'}}, "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        f"while not pathlib.Path({str(socket_path)!r}).exists(): time.sleep(0.05)\n"
        "print(server.pid, flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", starter], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    server = int(done.stdout.split()[-1])
    assert _gone(server, 5 * kernel_server.PARENT_CHECK_S), "the server outlived the process that started it"
