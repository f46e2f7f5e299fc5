"""The autograding is real: full marks for the reference, zero for the untouched student
version, every plausible wrong solution in ``assignments/wrong_solutions.yml`` loses points
on its question with a message that teaches, and every right answer written otherwise in
``assignments/other_solutions.yml`` keeps full marks on its question.

Grades with ``otter run`` (no Docker) against the autograder zip that ``make assignments`` builds;
the build here goes to a temporary folder. The zip's own grading environment is checked too: what it
installs, and, for the third assignment, that a fresh virtual environment built from the zip alone
(in a folder attnlab/.venv, as in a course's clone of the book) grades a submission with a mistake
in its last question: that question loses points, the others keep full marks. The session's grades
run with their temporary files in a folder named attnlab too: a rules test must know the book's code
by where the package is installed. Every submission is graded once, by a session fixture, two at a
time (one grading process per core, ``build.workers``; a grade that sleeps until the time limit
stops one of its tests runs beside them, in a process of its own, with the limit lowered to
SHORT_LIMIT seconds). Each process imports otter once, then runs what
``otter run`` runs for each submission it is given, so that the grades (55 then) do not each pay for
starting Python and importing otter: 329 s with one ``otter run`` process per submission, 232 s this
way, on one 2-core machine. Each submission's kernel, too, is a process of its own that runs the
notebook from its first line, but it is forked from a server that has imported ipykernel, PyTorch
(with the two parts it imports on first use), otter and the book's package once (kernel_server.py;
test_kernel_server.py checks that such a kernel sees what a usual one sees): the fixture alone took
260 s with usual kernels, 167 s with forked ones, on another 2-core machine, and the 55 results.json
files were the same. ATTNLAB_FORKED_KERNELS=0 grades with usual kernels; the test of the grading
environment built from the zip alone always does (otter's own command, a kernel of that
environment). Each test then checks its own grade. Assignments 2 and 5 train a model (their wrong
solutions of the questions before the training cut it to one step, and the notebook's held-out
evaluation to 16 dates: the grader evaluates a model of its own).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import zipfile
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "assignments"))
import build  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernel_server  # noqa: E402

WRONG = yaml.safe_load((ROOT / "assignments" / "wrong_solutions.yml").read_text(encoding="utf-8"))
# Right answers written otherwise than the reference, in the same format (the answer in place of the
# mistake): each must keep full marks on its question, so that a test too strict for a correct
# answer shows here and not in a course.
OTHER = yaml.safe_load((ROOT / "assignments" / "other_solutions.yml").read_text(encoding="utf-8"))
NAMES = [p.stem for p in build.sources()]


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict[str, Path]:
    """Every assignment built as `make assignments` builds it, except that otter assign does not
    grade the solution first: test_reference_solution_scores_full_marks grades it with the zip."""
    out = tmp_path_factory.mktemp("assignments")
    return {dest.name: dest for dest in build.main(out, run_tests=False)}


KERNEL_DIED = "Kernel died before replying to kernel_info"
GRADE_TIMEOUT = 600  # seconds for one grade (assignment 5's reference trains for about a minute)


def _start_worker(env: dict[str, str]) -> None:
    os.environ.clear()
    os.environ.update(env)


def _otter_run(autograder: str, submission: str, work: str) -> str | None:
    """In a grading worker: what ``otter run -a AUTOGRADER -o WORK SUBMISSION`` does (the CLI calls
    ``otter.run.main`` with these arguments), without starting Python and importing otter again
    for every submission (about half of each grade's time). The submission's notebook runs in a
    kernel of its own, as with the CLI. None, or what otter printed and raised when it failed."""
    import contextlib
    import io
    import signal
    import traceback

    from otter.run import main

    def too_long(*_):
        raise TimeoutError(f"the grade took more than {GRADE_TIMEOUT} s")

    signal.signal(signal.SIGALRM, too_long)  # the worker's main thread runs this: the alarm reaches it
    for attempt in range(2):  # a kernel that dies while starting (rare, with several at once) is tried again
        printed = io.StringIO()
        signal.alarm(GRADE_TIMEOUT)
        try:
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                main(submission, autograder=autograder, output_dir=work)
            return None
        except Exception as error:  # the test that asked for this grade reports it
            if KERNEL_DIED in str(error) and attempt == 0:
                continue
            return printed.getvalue()[-2000:] + traceback.format_exc()[-3000:]
        finally:
            signal.alarm(0)


def grade(pool: ProcessPoolExecutor, dest: Path, notebook: Path, work: Path) -> Future:
    """Start grading ``notebook`` with the assignment's autograder zip in one of ``pool``'s
    workers, into ``work``: a future of None, or of what otter printed when it failed."""
    name = dest.name
    work.mkdir(parents=True)
    submission = work / f"{name}.ipynb"
    shutil.copy(notebook, submission)
    return pool.submit(_otter_run, str(dest / "autograder" / f"{name}-autograder.zip"), str(submission), str(work))


def grades_in(work: Path) -> dict[str, dict]:
    """The grade written to ``work``: question name -> result."""
    results = json.loads((work / "results.json").read_text())
    return {t["name"]: t for t in results["tests"] if t["name"] != "Public Tests"}


def public_results(work: Path) -> dict[str, str]:
    """What the public tests (the ones students run) said of each question in the grade written
    to ``work``: question name -> its part of otter's "Public Tests" output."""
    results = json.loads((work / "results.json").read_text())
    output = next(t["output"] for t in results["tests"] if t["name"] == "Public Tests")
    return dict(re.findall(r"^(q\d+) results:(.*?)(?=^q\d+ results:|\Z)", output, flags=re.M | re.S))


def _wrong_id(wrong: dict) -> str:
    return f"{wrong['assignment']}-{wrong['question']}-{wrong.get('mistake') or wrong['answer']}"


def _wrong_notebook(dest: Path, wrong: dict, path: Path) -> Path | str:
    """The reference solution with one plausible mistake written in, or why it cannot be."""
    nb = nbformat.read(dest / "autograder" / f"{dest.name}.ipynb", as_version=4)
    for edit in wrong.get("edits", [wrong]):  # one edit (find, replace), or a list of them
        hits = [c for c in nb.cells if c.cell_type == "code" and edit["find"] in c.source]
        if len(hits) != 1:
            return f"the edit {edit['find']!r} must match one solution cell, matched {len(hits)}"
        if hits[0].source.count(edit["find"]) != 1:
            return f"the edit {edit['find']!r} must match once in its cell"
        hits[0].source = hits[0].source.replace(edit["find"], edit["replace"])
    nbformat.write(nb, path)
    return path


# The assignments whose notebook trains a model (for about a minute, on one thread, for the fifth).
TRAINING = {source.stem for source in build.sources() if "train_seq2seq(" in source.read_text(encoding="utf-8")}


# The time limit of each test (the sealed grader's, 30 s) for the grades of the wrong solutions
# that it stops (time_limit: true): they wait for it without work, and each of their other tests
# must still end within it.
SHORT_LIMIT = 10


def _stopped(wrong: dict | None) -> bool:
    """Whether a wrong solution waits for the grader's time limit to stop one of its tests."""
    return wrong is not None and bool(wrong.get("time_limit"))


def _expected_cost(key: str, name: str, wrong: dict | None) -> int:
    """A rank of how long a grade takes: 2 when it runs a training in full (the reference of an
    assignment that trains, or a wrong solution that leaves its training as it is), 1 for the other
    grades of an assignment that trains (a whole notebook, evaluations included), 0 for the rest."""
    edits = [] if wrong is None else wrong.get("edits", [wrong])
    if name not in TRAINING:
        return 0
    if key.startswith("reference/"):
        return 2
    if wrong is None:  # the untouched student version
        return 1
    return 1 if any("steps=" in edit["replace"] for edit in edits) else 2


@pytest.fixture(scope="session")
def graded(built, tmp_path_factory) -> dict[str, dict[str, dict] | str]:
    """Every submission the tests below judge, graded once: ``reference/<name>``,
    ``student/<name>`` and ``wrong/<id>`` -> grades (or an error message)."""
    root = tmp_path_factory.mktemp("graded")
    jobs: dict[str, tuple[Path, Path]] = {}
    results: dict[str, dict[str, dict] | str] = {}
    for name, dest in built.items():
        jobs[f"reference/{name}"] = (dest, dest / "autograder" / f"{name}.ipynb")
        jobs[f"student/{name}"] = (dest, dest / "student" / f"{name}.ipynb")
    for i, wrong in enumerate(WRONG):
        dest = built[wrong["assignment"]]
        notebook = _wrong_notebook(dest, wrong, root / f"wrong-{i}.ipynb")
        if isinstance(notebook, str):
            results[f"wrong/{_wrong_id(wrong)}"] = notebook
        else:
            jobs[f"wrong/{_wrong_id(wrong)}"] = (dest, notebook)
    for i, other in enumerate(OTHER):
        dest = built[other["assignment"]]
        notebook = _wrong_notebook(dest, other, root / f"other-{i}.ipynb")
        if isinstance(notebook, str):
            results[f"other/{_wrong_id(other)}"] = notebook
        else:
            jobs[f"other/{_wrong_id(other)}"] = (dest, notebook)
    n, env = build.workers()
    # The grading kernels' temporary files (ipykernel writes the code of each cell there, and otter
    # unpacks the autograder there) lie in a folder named attnlab, as a course's clone of the book
    # named attnlab puts its .venv's PyTorch: a rules test must know the book's package by where it is
    # installed, not by its name in a path (every reference solution would lose its rules points).
    (root / "attnlab" / "tmp").mkdir(parents=True)
    env = {**env, "TMPDIR": str(root / "attnlab" / "tmp")}
    # the longest first, so that the pool does not end on one of them while the other process waits
    wrong = {f"wrong/{_wrong_id(w)}": w for w in WRONG} | {f"other/{_wrong_id(o)}": o for o in OTHER}
    order = sorted(jobs, key=lambda key: -_expected_cost(key, jobs[key][0].name, wrong.get(key)))
    # the grades that sleep until the time limit stops a test get a process of their own beside the
    # pool, where the limit is SHORT_LIMIT: they would hold one of its cores without using it
    sleeping = [key for key in order if _stopped(wrong.get(key))]
    # spawned, not forked: this process may hold PyTorch's threads (other tests ran in it)
    spawn = dict(mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker)
    with (
        kernel_server.running(env) as env,
        ProcessPoolExecutor(n, initargs=(env,), **spawn) as pool,
        ProcessPoolExecutor(
            max(1, len(sleeping)), initargs=({**env, "ATTNLAB_TIME_LIMIT": str(SHORT_LIMIT)},), **spawn
        ) as beside,
    ):
        futures = {
            key: grade(beside if key in sleeping else pool, *jobs[key], root / f"run-{i}")
            for i, key in enumerate(order)
        }
        for i, key in enumerate(order):
            failed = futures[key].result()
            notebook = jobs[key][1].name
            results[key] = f"otter run failed on {notebook}:\n{failed}" if failed else grades_in(root / f"run-{i}")
    for i, key in enumerate(order):  # and what the public tests said, as students see it
        if not isinstance(results[key], str):
            results[f"public/{key}"] = public_results(root / f"run-{i}")
    return results


def _grades(graded: dict, key: str) -> dict[str, dict]:
    grades = graded[key]
    assert not isinstance(grades, str), grades
    return grades


def _questions(source: Path) -> list[tuple[str, int, str, int]]:
    """(name, points in its config, its heading, the points of its tests) for each question."""
    cells = nbformat.read(source, as_version=4).cells
    found = []
    for i, cell in enumerate(cells):
        if cell.cell_type == "raw" and cell.source.startswith("# BEGIN QUESTION"):
            config = yaml.safe_load(cell.source.split("\n", 1)[1])
            end = next(j for j in range(i, len(cells)) if cells[j].source.startswith("# END QUESTION"))
            tests = [
                yaml.safe_load(c.source.split('""" # BEGIN TEST CONFIG', 1)[1].split('""" # END TEST CONFIG')[0])
                for c in cells[i:end]
                if c.cell_type == "code" and c.source.startswith('""" # BEGIN TEST CONFIG')
            ]
            found.append(
                (
                    config["name"],
                    config["points"],
                    cells[i + 1].source.split("\n", 1)[0],
                    sum(t["points"] for t in tests),
                )
            )
    return found


@pytest.mark.parametrize("name", NAMES)
def test_students_see_each_questions_points_and_the_tests_add_up(name):
    questions = _questions(ROOT / "assignments" / f"{name}.ipynb")
    assert questions, f"{name}: no questions"
    for question, points, heading, tests in questions:
        assert heading.startswith("## Question") and heading.endswith(f"({points} points)"), (
            f"{name} {question}: its heading must end with its points, ({points} points): {heading!r}"
        )
        assert tests == points, f"{name} {question}: its tests give {tests} points, its config {points}"


def test_the_instructor_guide_gives_each_assignments_marks():
    guide = (ROOT / "book" / "instructor-guide.md").read_text(encoding="utf-8")
    # a time measured once on one machine is not a fact of the assignment (the grading got faster)
    typed = re.findall(r"^\|.*\| \d+(?:\.\d+)? ?s \|$", guide, flags=re.M)
    assert not typed, f"the guide's table types grading times: {typed}"
    for name in NAMES:
        row = next((line for line in guide.splitlines() if line.startswith(f"| `{name}` |")), None)
        assert row, f"the instructor guide's table has no row for {name}"
        marks = sum(points for _, points, _, _ in _questions(ROOT / "assignments" / f"{name}.ipynb"))
        assert row.split("|")[4].strip() == str(marks), (
            f"{name}: the guide says {row.split('|')[4].strip()} marks, the questions give {marks}"
        )


@pytest.mark.parametrize("name", NAMES)
def test_the_student_zip_unpacks_into_one_folder(built, name):
    import zipfile

    with zipfile.ZipFile(built[name] / f"{name}-student.zip") as archive:
        entries = [e for e in archive.namelist() if not e.endswith("/")]
    assert entries and all(e.startswith(f"{name}/") for e in entries), (
        f"every file of the student zip belongs in {name}/: {[e for e in entries if not e.startswith(name + '/')]}"
    )
    assert f"{name}/{name}.ipynb" in entries and any(e.startswith(f"{name}/tests/") for e in entries), entries


def _pins() -> dict[str, str]:
    """The book's own pins (requirements.txt, the Makefile's torch): name -> version."""
    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return dict(line.split("==", 1) for line in lines if "==" in line and not line.startswith("#"))


def _grader_environment(dest: Path) -> tuple[dict, list[str]]:
    with zipfile.ZipFile(dest / "autograder" / f"{dest.name}-autograder.zip") as archive:
        return yaml.safe_load(archive.read("environment.yml")), archive.namelist()


@pytest.mark.parametrize("name", NAMES)
def test_the_autograder_zip_holds_its_whole_environment(built, name):
    """What Gradescope and `otter grade` build the grading image from: otter-grader kept, Python and
    a CPU torch pinned as the book pins them, the book's package from the wheel inside the zip."""
    environment, names = _grader_environment(built[name])
    dependencies = environment["dependencies"]
    pip = next(d["pip"] for d in dependencies if isinstance(d, dict))
    book_python = re.search(r"^PYTHON \?= python(3\.\d+)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    python = f"python={book_python}"
    assert python in dependencies, f"{name}: the grading image must have the book's Python, {python}: {dependencies}"
    otter_pin = f"otter-grader[grading,plugins]=={_pins()['otter-grader']}"
    assert otter_pin in pip, f"{name}: otter-grader is missing from the grading image ({pip}): overwrite_requirements?"
    torch_pin = f"torch=={_pins()['torch']}+cpu"
    assert torch_pin in pip and "--extra-index-url https://download.pytorch.org/whl/cpu" in pip, (
        f"{name}: the grading image needs {torch_pin} from PyTorch's CPU index: {pip}"
    )
    wheel = f"attnlab-{build.VERSION}-py3-none-any.whl"
    assert f"{build.GRADER_FILES}/dist/{wheel}" in pip and f"files/dist/{wheel}" in names, (
        f"{name}: the book's package must come from files/dist/{wheel} inside the zip: {pip}"
    )
    assert not [p for p in pip if "git+" in p or "github.com" in p], f"{name}: nothing from git at grading time: {pip}"


def test_the_autograder_environment_builds_from_the_zip_alone_and_grades(built, tmp_path):
    """Assignment 3's grading environment built in a fresh virtual environment from the zip alone
    (no Docker), then a wrong submission graded with it: a mistake in the last question loses
    points with its message, and the questions before it keep full marks (their rules tests too).
    Two differences from Gradescope, both of this machine: the zip is unpacked here instead of
    /autograder/source, and PyTorch's CPU index is left out (the CPU wheel lies on this machine's
    disk). The environment's pip is the book's (the Makefile's pin), which resolves the
    environment faster than the one `python -m venv` bundles. The environment lies in
    attnlab/.venv, as in a course's clone of the book: its rules tests must not take PyTorch's
    own code (nn.Module's, under that path) for the book's. One submission: the questions before
    the mistake are graded as the reference's are."""
    name = "a3_multihead"
    dest = built[name]
    source = tmp_path / "source"
    with zipfile.ZipFile(dest / "autograder" / f"{name}-autograder.zip") as archive:
        archive.extractall(source)
    environment, _ = _grader_environment(dest)
    pip = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict))
    assert "pip" in environment["dependencies"], f"the grading image must have pip: {environment['dependencies']}"
    packages = [p.replace(build.GRADER_FILES, str(source / "files")) for p in pip if not p.startswith("--")]
    # Without PYTHONDONTWRITEBYTECODE (where it is set): the packages install without .pyc files
    # (--no-compile), and each process would compile all it imports again (otter in the grading
    # process and again in its kernel; torch in both kernels).
    leaks = {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE"}
    env = {k: v for k, v in os.environ.items() if k not in leaks}
    env.update(
        PIP_NO_INPUT="1",
        PIP_PROGRESS_BAR="off",
        JUPYTER_DATA_DIR=str(tmp_path / "jupyter"),
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
    )
    venv = tmp_path / "attnlab" / ".venv"
    python = str(venv / "bin" / "python")
    book_pip = re.search(r"\bpip==([0-9.]+)", (ROOT / "Makefile").read_text(encoding="utf-8")).group(1)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=env, timeout=300)
    for step in (
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", f"pip=={book_pip}"],
        [python, "-m", "pip", "install", "--no-compile", "-q", *packages],
    ):
        done = subprocess.run(step, capture_output=True, text=True, env=env, timeout=1200)
        assert done.returncode == 0, f"the grading environment did not install:\n{done.stderr[-3000:]}"
    # a mistake in the last question: the questions before it do not use its code, and keep full marks
    last = _questions(ROOT / "assignments" / f"{name}.ipynb")[-1][0]
    wrong = next(w for w in WRONG if w["assignment"] == name and w["question"] == last)
    work = tmp_path / "wrong"
    work.mkdir()
    _wrong_notebook(dest, wrong, work / f"{name}.ipynb")
    run = subprocess.run(
        [
            str(venv / "bin" / "otter"),
            "run",
            "-a",
            str(dest / "autograder" / f"{name}-autograder.zip"),
            "-o",
            str(work),
            str(work / f"{name}.ipynb"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, f"otter run in the grading environment failed:\n{run.stderr[-3000:]}"
    grades = grades_in(work)
    assert set(grades) == {q for q, *_ in _questions(ROOT / "assignments" / f"{name}.ipynb")}, grades
    right = {q: g for q, g in grades.items() if q != wrong["question"]}
    assert right and all(g["score"] == g["max_score"] > 0 for g in right.values()), right
    broken = grades[wrong["question"]]
    assert broken["score"] < broken["max_score"] and wrong["message"] in broken["output"], broken


def test_make_assignments_grades_the_solution_first_and_the_tests_build_can_skip_it(built, tmp_path):
    """`make assignments` stops when the solution fails its own tests (otter assign grades it);
    the `built` fixture skips that run (the reference is graded with the zip instead), and the
    build then succeeds. The solution broken here is the first wrong solution of assignment 1.
    The wheel is the one the `built` fixture made."""
    wrong = next(w for w in WRONG if w["assignment"] == "a1_three_stages")
    nb = nbformat.read(ROOT / "assignments" / "a1_three_stages.ipynb", as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and wrong["find"] in c.source]
    cell.source = cell.source.replace(wrong["find"], wrong["replace"])
    source = tmp_path / "source" / "a1_three_stages.ipynb"
    source.parent.mkdir()
    nbformat.write(nb, source)
    _, env = build.workers()
    wheel = built["a1_three_stages"].parent / "dist" / f"attnlab-{build.VERSION}-py3-none-any.whl"
    with pytest.raises(RuntimeError, match="otter assign failed for a1_three_stages"):
        build.build(source, tmp_path / "graded", env, wheel)
    dest = build.build(source, tmp_path / "skipped", env, wheel, run_tests=False)
    assert (dest / "autograder" / "a1_three_stages-autograder.zip").is_file()


def test_every_assignment_has_questions_and_wrong_solutions():
    assert len(NAMES) >= 3, f"at least three assignments, found {NAMES}"
    for name in NAMES:
        wrong = [w for w in WRONG if w["assignment"] == name]
        assert len(wrong) >= 2, f"{name}: at least two plausible wrong solutions, found {len(wrong)}"


@pytest.mark.parametrize("name", NAMES)
def test_reference_solution_scores_full_marks(graded, name):
    grades = _grades(graded, f"reference/{name}")
    assert grades, "no questions graded"
    for question, g in grades.items():
        assert g["score"] == g["max_score"] > 0, f"{name} {question}: {g['score']}/{g['max_score']}\n{g['output']}"


@pytest.mark.parametrize("name", NAMES)
def test_untouched_student_version_scores_zero(built, graded, name):
    dest = built[name]
    student = nbformat.read(dest / "student" / f"{name}.ipynb", as_version=4)
    code = "\n".join(c.source for c in student.cells if c.cell_type == "code")
    assert "BEGIN SOLUTION" not in code and "# END SOLUTION" not in code
    grades = _grades(graded, f"student/{name}")
    assert {q: g["score"] for q, g in grades.items()} == {q: 0 for q in grades}


@pytest.mark.parametrize("wrong", WRONG, ids=[_wrong_id(w) for w in WRONG])
def test_wrong_solution_fails_with_a_teaching_message(graded, wrong):
    grades = _grades(graded, f"wrong/{_wrong_id(wrong)}")
    g = grades[wrong["question"]]
    assert g["score"] < g["max_score"], f"{wrong['mistake']!r} kept full marks on {wrong['question']}"
    assert wrong["message"] in g["output"], f"message {wrong['message']!r} not shown; output:\n{g['output']}"
    if wrong.get("tampering"):  # the sealed grading: nothing for any question, and the reason said
        scores = {q: x["score"] for q, x in grades.items()}
        assert set(scores.values()) == {0}, f"{wrong['mistake']!r} earned points: {scores}"


STOPPED = [w for w in WRONG if _stopped(w)]


@pytest.mark.parametrize("wrong", STOPPED, ids=[_wrong_id(w) for w in STOPPED])
def test_a_test_past_the_time_limit_loses_its_points_and_the_rest_is_graded(graded, wrong):
    """The sealed grader's time limit (attnlab.grading.sealed; lowered to SHORT_LIMIT for this
    grade) stops the one test that runs on, with the message that says so, and grades the rest:
    the question keeps the points of its other tests, the other questions keep full marks."""
    grades = _grades(graded, f"wrong/{_wrong_id(wrong)}")
    g = grades[wrong["question"]]
    stopped = f"this test ran for more than {SHORT_LIMIT} s and was stopped, so that the rest of your notebook"
    assert stopped in g["output"], f"no test of {wrong['question']} was stopped at the limit:\n{g['output']}"
    assert 0 < g["score"] < g["max_score"], f"{wrong['question']}: {g['score']}/{g['max_score']}\n{g['output']}"
    others = {q: (x["score"], x["max_score"]) for q, x in grades.items() if q != wrong["question"]}
    assert others and all(score == most > 0 for score, most in others.values()), others


# The time guard that every test held before the sealed grader kept the limit (about 170 copies).
PASTED_GUARD = re.compile(r"signal\.alarm|SIGALRM|too_slow")


def test_no_test_holds_a_time_guard_of_its_own(built):
    """The time limit lives in the sealed grader, once: no test in the source notebooks, the
    published student versions or the autograder zips pastes a guard of its own."""
    texts = {
        str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
        for p in (ROOT / "assignments").rglob("*")
        if p.suffix in (".py", ".ipynb")
    }
    assert any(name.endswith("/tests/q1.py") for name in texts), "no published test found"
    for name, dest in built.items():
        with zipfile.ZipFile(dest / "autograder" / f"{name}-autograder.zip") as archive:
            tests = [n for n in archive.namelist() if n.endswith((".py", ".ipynb"))]
            assert any(n.startswith("tests/") for n in tests), f"{name}: no tests in the autograder zip"
            texts |= {f"{name}-autograder.zip:{n}": archive.read(n).decode("utf-8") for n in tests}
    pasted = sorted(name for name, text in texts.items() if PASTED_GUARD.search(text))
    assert not pasted, f"a time guard pasted into tests (the sealed grader keeps the limit): {pasted}"


@pytest.mark.parametrize("other", OTHER, ids=[_wrong_id(o) for o in OTHER])
def test_another_right_answer_keeps_full_marks(graded, other):
    g = _grades(graded, f"other/{_wrong_id(other)}")[other["question"]]
    assert g["score"] == g["max_score"], f"{other['answer']!r} lost points on {other['question']}:\n{g['output']}"


# Questions whose public tests cannot check values on a small case, and why (every other question's
# must: a wrong solution that keeps the shapes right fails them, before the student hands in).
PUBLIC_WITHOUT_VALUES = {
    ("a2_bahdanau", "q3"): "the trained model's quality needs the held-out set, which the grader makes",
    ("a5_transformer", "q5"): "the trained model's accuracy needs the held-out set, which the grader makes",
}
QUESTIONS = [(source.stem, q[0]) for source in build.sources() for q in _questions(source)]


@pytest.mark.parametrize("name,question", QUESTIONS, ids=[f"{n}-{q}" for n, q in QUESTIONS])
def test_public_tests_check_values_so_a_wrong_solution_fails_them(graded, name, question):
    """Public tests that check shapes only would let every wrong solution below pass them: a
    student would learn of the mistake from the grade. Each question's public tests must fail at
    least one of its wrong solutions (they check values on a small case), and pass the reference."""
    reference = graded[f"public/reference/{name}"]
    assert reference[question].strip() == "All test cases passed!", f"{name} {question}: {reference[question]}"
    if (name, question) in PUBLIC_WITHOUT_VALUES:
        return
    wrong = [w for w in WRONG if (w["assignment"], w["question"]) == (name, question)]
    assert wrong, f"{name} {question} has no wrong solution to try its public tests on"
    failed = [
        w["mistake"]
        for w in wrong
        if graded[f"public/wrong/{_wrong_id(w)}"][question].strip() != "All test cases passed!"
    ]
    assert failed, (
        f"{name} {question}: every wrong solution passes the public tests "
        f"({[w['mistake'] for w in wrong]}); add a check of values on a small case"
    )


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("name", NAMES)
def test_the_published_student_version_is_up_to_date(built, name):
    """assignments/public/NAME/ (committed; Colab opens the notebook and fetches the tests from
    there) is exactly the student version that the source notebook builds now."""
    public, fresh = build.PUBLIC / name, built[name] / "student"
    hint = "run `make assignments` and commit assignments/public/"
    assert _files(public) == _files(fresh), (
        f"{name}: assignments/public/{name}/ holds other files than the build: {hint}"
    )
    for f in _files(fresh):
        assert (public / f).read_bytes() == (fresh / f).read_bytes(), (
            f"{name}: public/{name}/{f} is out of date: {hint}"
        )


def _colab_branch(source: Path) -> str:
    """The setup cell's code under ``if "google.colab" in sys.modules:``, dedented, its %pip line
    replaced by ``pass`` (pip is Colab's business, not this test's)."""
    setup = next(c for c in nbformat.read(source, as_version=4).cells if c.cell_type == "code").source
    lines = setup.splitlines()
    start = lines.index(next(line for line in lines if line.startswith('if "google.colab" in sys.modules:'))) + 1
    body = []
    for line in lines[start:]:
        if line and not line.startswith("    "):
            break
        body.append("pass" if line.strip().startswith("%pip") else line[4:])
    return "\n".join(body)


@pytest.mark.parametrize("name", NAMES)
def test_on_colab_the_setup_cell_fetches_this_releases_public_tests(built, name, tmp_path, monkeypatch):
    """The Colab branch of the setup cell, run here with the network replaced by the repository:
    without an upload it fetches every public test from assignments/public/ at the release tag;
    with the course's zip uploaded it takes the zip's tests instead."""
    import urllib.request

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    raw = config["repository"]["url"].replace("https://github.com/", "https://raw.githubusercontent.com/")
    prefix = f"{raw}/v{build.VERSION}/"
    fetched = []

    def fetch(url: str, filename: str):
        assert url.startswith(prefix), f"{name}: the tests must come from this release, {prefix}...: {url}"
        shutil.copy(ROOT / url.removeprefix(prefix), filename)
        fetched.append(url)

    monkeypatch.setattr(urllib.request, "urlretrieve", fetch)
    expected = built[name] / "student" / "tests"
    for case in ("fetched", "uploaded"):
        work = tmp_path / case
        work.mkdir()
        if case == "uploaded":
            shutil.copy(built[name] / f"{name}-student.zip", work)
        monkeypatch.chdir(work)
        fetched.clear()
        exec(_colab_branch(ROOT / "assignments" / f"{name}.ipynb"), {})
        assert _files(work / "tests") == _files(expected), f"{name} ({case}): tests/ holds {_files(work / 'tests')}"
        for f in _files(expected):
            assert (work / "tests" / f).read_bytes() == (expected / f).read_bytes(), f"{name} ({case}): {f} differs"
        assert bool(fetched) == (case == "fetched"), f"{name} ({case}): fetched {fetched}"


def test_the_instructor_guide_links_colab_to_this_releases_student_versions():
    guide = (ROOT / "book" / "instructor-guide.md").read_text(encoding="utf-8")
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    org_repo = config["repository"]["url"].removeprefix("https://github.com/")
    link = (
        f"https://colab.research.google.com/github/{org_repo}/blob/v{build.VERSION}/assignments/public/NAME/NAME.ipynb"
    )
    assert link in guide, f"the instructor guide must give the Colab link of this release: {link}"
