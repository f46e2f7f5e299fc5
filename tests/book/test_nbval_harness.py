"""The chapter harness can fail, in both of its modes.

`make test` runs every chapter with the sanitize file tests/nbval_sanitize.cfg, in strict mode
(`pytest --nbval`: every output compared) on the platform that recorded the chapters' outputs,
and in portable mode (`pytest --nbval-lax`: every cell runs and must not raise, only cells tagged
`nbval-check-output` are compared) anywhere else; scripts/nbval_mode.py chooses. These tests run
the same commands on copies of a small fixture notebook and of a real chapter, with and without
tampering, and check the choice of mode. Two check what the runs on several workers rely on: the
root conftest.py's OpenMP wait policy, and pytest-xdist's groups; the last, that the runs started
here leave pytest's temporary folders of other runs alone.
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
SANITIZE = ROOT / "tests" / "nbval_sanitize.cfg"
FIXTURE = ROOT / "tests" / "fixtures" / "harness.ipynb"
MODE_SCRIPT = ROOT / "scripts" / "nbval_mode.py"
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
# pytest as these tests start it: without its cache and without hypothesis's plugin, which none of
# these runs uses (it took 0.6 of the 1.0 s that starting pytest takes, in each process: each
# run below, and each of its xdist workers)
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest"]


def _pytest(
    args: list[str], cwd: Path, *, env: dict[str, str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess:
    """``pytest ARGS`` in a process of its own, in ``cwd``, as these tests start it (without the
    calling run's PYTEST_ variables), with its temporary folders in ``cwd/.basetemp``. Without
    --basetemp a run makes a numbered folder under /tmp/pytest-of-USER (an xdist run always
    does: its workers' folders) and, as it ends, deletes all but the newest three there, which
    would delete the folders of the user's earlier `make test`, with their Colab and grading
    environments (gigabytes, slow to delete)."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [*PYTEST, "--basetemp", str(cwd / ".basetemp"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _nbval(notebook: Path, flag: str = "--nbval") -> subprocess.CompletedProcess:
    return _pytest(
        [flag, str(notebook), "--nbval-sanitize-with", str(SANITIZE), "-q", "--rootdir", str(notebook.parent)],
        notebook.parent,
    )


def _alter(path: Path, cell_index: int, old: str, new: str) -> None:
    nb = nbformat.read(path, as_version=4)
    cell = [c for c in nb.cells if c.cell_type == "code"][cell_index]
    output = cell.outputs[0]
    if output.output_type == "stream":
        assert old in output.text, (old, output.text)
        output.text = output.text.replace(old, new)
    else:
        assert old in output.data["text/plain"], (old, output.data["text/plain"])
        output.data["text/plain"] = output.data["text/plain"].replace(old, new)
    nbformat.write(nb, path)


@pytest.fixture
def fixture_copy(tmp_path: Path) -> Path:
    return Path(shutil.copy(FIXTURE, tmp_path / "harness.ipynb"))


# The copies below, untouched and tampered, each in a folder of its own, are run by nbval in two
# pytest runs (one strict, one portable) instead of one run each: starting pytest with its plugins
# costs about 1.3 s of the 2.1 s of a run of the fixture, and each notebook still gets its own kernel.
def _tamper_chapter(path: Path) -> None:
    shutil.copy(ROOT / "chapters" / "00_preliminaries.ipynb", path)
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    target = next(
        i
        for i, c in enumerate(cells)
        if c.outputs and c.outputs[0].output_type == "stream" and "maximum possible entropy" in c.outputs[0].text
    )
    _alter(path, target, "1.792", "1.800")


def _append_failing_claim(path: Path) -> None:
    shutil.copy(FIXTURE, path)
    nb = nbformat.read(path, as_version=4)
    claim = nbformat.v4.new_code_cell("assert sum(range(10)) == 46, 'the claim no longer holds'")
    claim.execution_count = 4
    nb.cells.append(claim)  # untagged and without outputs: only the assertion can fail it
    nbformat.write(nb, path)


def _altered(cell: int, old: str, new: str):
    def make(path: Path) -> None:
        shutil.copy(FIXTURE, path)
        _alter(path, cell, old, new)

    return make


ALTERED = [(1, "45", "46"), (2, "0.1429", "0.143")]
CASES = {  # name -> (how its notebook is made, the modes it runs in)
    "untouched": (lambda path: shutil.copy(FIXTURE, path), ("--nbval", "--nbval-lax")),
    **{f"altered-{cell}": (_altered(cell, old, new), ("--nbval",)) for cell, old, new in ALTERED},
    # a GPU runtime prints cuda: not a failure
    "sanitized": (_altered(0, "device: cpu", "device: cuda"), ("--nbval",)),
    "chapter": (_tamper_chapter, ("--nbval",)),
    # cell 1 is tagged nbval-check-output; cell 2 is not: its digits may differ on another platform
    "tagged-changed": (_altered(1, "45", "46"), ("--nbval-lax",)),
    "digits-changed": (_altered(2, "0.1429", "0.143"), ("--nbval", "--nbval-lax")),
    "failing-claim": (_append_failing_claim, ("--nbval-lax",)),
}


@pytest.fixture(scope="module")
def harness_runs(tmp_path_factory) -> dict[tuple[str, str], dict]:
    """(mode flag, case) -> what nbval made of that case's notebook: passed and failed cells, and
    the text of the failures. Each mode's notebooks are collected by one pytest run."""
    results: dict[tuple[str, str], dict] = {}
    for flag in ("--nbval", "--nbval-lax"):
        root = tmp_path_factory.mktemp("strict" if flag == "--nbval" else "portable")
        notebooks = []
        for name, (make, flags) in CASES.items():
            if flag in flags:
                (root / name).mkdir()
                make(root / name / "harness.ipynb")
                notebooks.append(f"{name}/harness.ipynb")
        done = _pytest(
            [
                flag,
                *notebooks,
                "--nbval-sanitize-with",
                str(SANITIZE),
                "-q",
                "--rootdir",
                str(root),
                "--junitxml",
                str(root / "results.xml"),
            ],
            root,
            timeout=600,
        )
        assert (root / "results.xml").exists(), done.stdout[-3000:] + done.stderr[-3000:]
        for name in (n.split("/")[0] for n in notebooks):
            results[flag, name] = {"passed": 0, "failed": 0, "text": ""}
        for case in ET.parse(root / "results.xml").getroot().iter("testcase"):
            outcome = results[flag, case.get("classname", "").split(".")[0]]
            failures = [child for child in case if child.tag in ("failure", "error")]
            outcome["failed" if failures else "passed"] += 1
            outcome["text"] += "".join((f.get("message") or "") + (f.text or "") for f in failures)
    return results


def test_untouched_fixture_passes(harness_runs):
    assert harness_runs["--nbval", "untouched"] == {"passed": 3, "failed": 0, "text": ""}


@pytest.mark.parametrize(("cell", "old", "new"), ALTERED)
def test_an_altered_output_fails(harness_runs, cell, old, new):
    result = harness_runs["--nbval", f"altered-{cell}"]
    assert result["failed"] == 1, "nbval accepted a tampered output"
    assert "mismatch" in result["text"].lower(), result["text"]


def test_the_sanitizer_masks_only_volatile_text(harness_runs):
    assert harness_runs["--nbval", "sanitized"]["failed"] == 0, harness_runs["--nbval", "sanitized"]["text"]


def test_a_tampered_chapter_fails(harness_runs):
    result = harness_runs["--nbval", "chapter"]
    assert result["failed"] == 1 and result["passed"] > 10, "nbval accepted a tampered chapter"


def test_nbval_waits_long_enough_for_a_busy_kernel(tmp_path):
    """The root conftest.py raises nbval's hard-coded 5 s wait for a cell's output messages."""
    from nbval.plugin import IPyNbCell

    assert getattr(IPyNbCell, "_attnlab_patient", False), "conftest.py did not patch nbval"
    notebook = tmp_path / "slow_output.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('done')")])
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="done\n")]
    nb.cells[0].execution_count = 1
    nbformat.write(nb, notebook)
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")  # as when running from the repository
    result = _nbval(notebook)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_kernel_that_dies_while_starting_is_started_again(monkeypatch, capsys):
    """The root conftest.py starts nbval's kernel again when it dies before answering (two
    chapters start theirs at once in `make test`), up to KERNEL_STARTS times, and only then."""
    import nbval.kernel
    import nbval.plugin

    restarting = nbval.plugin.RunningKernel
    assert hasattr(restarting, "starts"), "conftest.py did not patch nbval's kernel"
    real = nbval.kernel.start_new_kernel
    calls = []

    def start(*args, dies=1, error=restarting.died, **kwargs):
        calls.append(error)
        if len(calls) <= dies:
            raise RuntimeError(error)
        return real(*args, **kwargs)

    monkeypatch.setattr(nbval.kernel, "start_new_kernel", start)
    kernel = nbval.plugin.RunningKernel("python3", cwd=str(ROOT))
    try:
        assert len(calls) == 2 and f"starting it again (2 of {restarting.starts})" in capsys.readouterr().err
    finally:
        kernel.stop()
    for dies, error, tries in [(99, restarting.died, restarting.starts), (1, "another failure", 1)]:
        calls.clear()
        monkeypatch.setattr(
            nbval.kernel,
            "start_new_kernel",
            lambda *a, dies=dies, error=error, **k: start(*a, dies=dies, error=error, **k),
        )
        with pytest.raises(RuntimeError, match=error):
            nbval.plugin.RunningKernel("python3", cwd=str(ROOT))
        assert len(calls) == tries, (error, calls)


# --- portable mode ------------------------------------------------------------------------------


def test_portable_mode_passes_the_untouched_fixture(harness_runs):
    assert harness_runs["--nbval-lax", "untouched"] == {"passed": 3, "failed": 0, "text": ""}


def test_portable_mode_fails_on_a_changed_platform_independent_output(harness_runs):
    result = harness_runs["--nbval-lax", "tagged-changed"]  # the cell tagged nbval-check-output
    assert result["failed"] == 1, "portable mode accepted a changed output of a tagged cell"
    assert "mismatch" in result["text"].lower(), result["text"]


def test_portable_mode_lets_platform_digits_differ(harness_runs):
    assert harness_runs["--nbval-lax", "digits-changed"]["failed"] == 0
    assert harness_runs["--nbval", "digits-changed"]["failed"] == 1  # strict mode still compares it


def test_portable_mode_fails_on_a_failing_assertion(harness_runs):
    result = harness_runs["--nbval-lax", "failing-claim"]
    assert result["failed"] == 1, "portable mode accepted a failing assertion"
    assert "the claim no longer holds" in result["text"], result["text"]


def _mode(env_extra: dict[str, str], notebooks: list[Path]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NBVAL_MODE"} | env_extra
    return subprocess.run(
        [sys.executable, str(MODE_SCRIPT), "mode", *map(str, notebooks)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def _recorded_copy(tmp_path: Path, env_extra: dict[str, str]) -> Path:
    copy = Path(shutil.copy(FIXTURE, tmp_path / "recorded.ipynb"))
    env = dict(os.environ) | env_extra
    subprocess.run([sys.executable, str(MODE_SCRIPT), "record", str(copy)], check=True, env=env, timeout=120)
    return copy


def test_the_mode_is_strict_on_the_recording_platform_and_portable_elsewhere(tmp_path):
    copy = _recorded_copy(tmp_path, {})
    here = _mode({}, [copy])
    assert here.stdout.strip() == "--nbval" and "strict" in here.stderr, here.stderr
    # The same machine with PyTorch's vectorised CPU kernels switched off is another platform.
    other = _mode({"ATEN_CPU_CAPABILITY": "default"}, [copy])
    assert other.stdout.strip() == "--nbval-lax", other.stderr
    assert "portable" in other.stderr and "DEFAULT" in other.stderr, other.stderr
    # Another thread count too (PyTorch reads both variables; make exports both as 2).
    threads = _mode({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}, [copy])
    if "1 threads" not in here.stderr:
        assert threads.stdout.strip() == "--nbval-lax", threads.stderr
    forced = _mode({"NBVAL_MODE": "strict", "ATEN_CPU_CAPABILITY": "default"}, [copy])
    assert forced.stdout.strip() == "--nbval" and "NBVAL_MODE" in forced.stderr


def test_a_notebook_without_a_recorded_platform_runs_portable(fixture_copy):
    result = _mode({}, [fixture_copy])
    assert result.stdout.strip() == "--nbval-lax" and "no platform recorded" in result.stderr, result.stderr


def test_every_chapter_records_one_platform():
    """A chapter re-executed on another machine would make `make test` portable for every chapter."""
    platforms = {}
    for path in CHAPTERS:
        platform = nbformat.read(path, as_version=4).metadata.get("attnlab", {}).get("platform")
        assert platform, f"{path.name}: no platform in its metadata: run `make execute`"
        assert set(platform) == {"python", "torch", "device", "cpu_capability", "threads"}, platform
        platforms[path.name] = tuple(sorted(platform.items()))
    assert len(set(platforms.values())) == 1, f"chapters were executed on different platforms: {platforms}"


def test_every_chapter_compares_some_outputs_in_portable_mode():
    for path in CHAPTERS:
        cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        checked = [c for c in cells if "nbval-check-output" in c.metadata.get("tags", [])]
        assert checked, f"{path.name}: no cell tagged nbval-check-output, so portable mode compares nothing"
        for cell in checked:
            assert cell.outputs, f"{path.name}: a cell tagged nbval-check-output has no output to compare"
            assert "nbval-ignore-output" not in cell.metadata.get("tags", []), path.name


def test_several_workers_let_pytorchs_threads_sleep_while_they_wait(tmp_path):
    """The root conftest.py sets OMP_WAIT_POLICY=PASSIVE for a run on several workers (`pytest -n
    2`) where the variable is not set, before xdist starts them: the workers have it. One process
    keeps OpenMP's default, and a policy already set is kept."""
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")  # as when running from the repository
    seen = tmp_path / "seen.txt"
    (tmp_path / "test_policy.py").write_text(
        "import os\n\n\ndef test_policy():\n"
        f"    open({str(seen)!r}, 'w').write(os.environ.get('OMP_WAIT_POLICY', 'unset'))\n"
    )
    clean = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    for workers, preset, expected in [
        (["-n", "2"], None, "PASSIVE"),
        ([], None, "unset"),
        (["-n", "2"], "ACTIVE", "ACTIVE"),
    ]:
        env = clean if preset is None else {**clean, "OMP_WAIT_POLICY": preset}
        result = _pytest([*workers, "test_policy.py", "-q", "--rootdir", str(tmp_path)], tmp_path, env=env, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        assert seen.read_text() == expected, (workers, preset, seen.read_text())


def test_xdist_groups_keep_their_tests_on_one_worker(tmp_path):
    """`make test` runs the website's checks with `--dist loadgroup`: each page's browser checks (its
    accessibility scans, its diagrams' cases and its rendering) carry the page's xdist group so that
    one worker runs them in order, on one loaded page (tests/site/conftest.py). pytest 9.2 with
    pytest-xdist 3.8 stops grouping without a word (pytest-dev/pytest-xdist#1386); here, tests of
    one group in two files must share a worker, among ungrouped tests that spread over both."""
    seen = tmp_path / "seen"
    seen.mkdir()
    for name in ("a", "b"):
        (tmp_path / f"test_{name}.py").write_text(
            "import os\n\nimport pytest\n\n\n"
            "@pytest.mark.xdist_group('together')\n@pytest.mark.parametrize('i', range(4))\n"
            f"def test_grouped(i):\n    open({str(seen)!r} + f'/grouped-{name}{{i}}', 'w').write("
            "os.environ['PYTEST_XDIST_WORKER'])\n\n\n"
            "@pytest.mark.parametrize('i', range(4))\ndef test_alone(i):\n    pass\n"
        )
    result = _pytest(["-n", "2", "--dist", "loadgroup", "-q", "--rootdir", str(tmp_path)], tmp_path, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    workers = {p.name: p.read_text() for p in seen.iterdir()}
    assert len(workers) == 8 and len(set(workers.values())) == 1, f"one group ran on several workers: {workers}"


def test_a_run_started_here_leaves_other_runs_temporary_folders_alone(tmp_path):
    """pytest keeps the newest three of its numbered folders under TMPDIR/pytest-of-USER and
    deletes the rest as a run ends: the runs these tests start must not (they would delete the
    folders of the user's earlier `make test`, with their environments). Four folders of earlier
    runs here, then an xdist run started as the tests above start theirs: all four are kept."""
    temp = tmp_path / "tmp"
    earlier = [temp / f"pytest-of-{getpass.getuser()}" / f"pytest-{i}" for i in range(4)]
    for folder in earlier:
        folder.mkdir(parents=True)
        (folder / "kept.txt").write_text("an earlier run's file")
    (tmp_path / "test_one.py").write_text("def test_one(tmp_path):\n    assert tmp_path.is_dir()\n")
    result = _pytest(
        ["-n", "2", "test_one.py", "-q", "--rootdir", str(tmp_path)],
        tmp_path,
        env={**os.environ, "TMPDIR": str(temp)},
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    gone = [f.name for f in earlier if not (f / "kept.txt").exists()]
    assert not gone, f"the run deleted earlier runs' temporary folders: {gone}"
