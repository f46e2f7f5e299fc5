# attnlab: the two commands are `make book` and `make test` (see README.md).
#   make book      create .venv, install everything, build the website into _build/html
#   make book-student  the student edition (no exercise solutions) into _build/html-student
#   make pdf       the PDF edition, printed from the website: _build/pdf/attnlab.pdf
#   make test      install, then every check below, in this order (a failing one stops none of the others):
#     make lint      ruff check, ruff format --check, mypy (configured in pyproject.toml), CITATION.cff
#     make unit      tests/unit and tests/book, but for the checks of the built website
#     make chapters  every chapter executed and compared with its committed outputs (nbval)
#     make site      both editions and the PDF built, then checked in Chromium (tests/site, and tests marked `site`)
#     make grading   the assignments built and graded (tests/assignments)
#   make execute   re-execute every chapter in place (regenerates the published outputs)
#   make assignments  student notebooks and autograder zips into _build/assignments
#   make bench     benchmarks against PyTorch, written to benchmarks/results.md
#   make screenshots  a full-page screenshot of every page of the site into _build/screenshots/
#   make test-gpu  the whole verification on a CUDA machine (its own Python and torch; see CONTRIBUTING.md)
#   make bench-gpu the GPU benchmarks alone (the Triton kernel among them), on a CUDA machine
#   make gpu-wheels  download, here, the wheels test-gpu needs on a CUDA machine without a network

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed-stamp
NODE_STAMP := node_modules/.installed-stamp
CHAPTERS := $(wildcard chapters/*.ipynb)
# Kernel threads: fixed, so that chapters print the same digits on every machine.
export OMP_NUM_THREADS ?= 2
export MKL_NUM_THREADS ?= 2
export PYDEVD_DISABLE_FILE_VALIDATION := 1

.PHONY: lock all install book book-student pdf vendor test lint unit chapters site grading times screenshots test-gpu \
	gpu-wheels execute browser clean distclean bench bench-gpu assignments

all: book

# --- installation ---------------------------------------------------------------------------
$(STAMP): requirements.txt pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) not found; install Python 3.11 or run 'make PYTHON=python3.X'"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip==25.3
	@# torch first and alone: pip then takes the pinned CPU wheel rather than resolving a CUDA build.
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -r requirements.txt
	$(PIP) install --quiet --no-deps --no-build-isolation -e .
	$(PIP) check
	@touch $@

install: $(STAMP)

# requirements.txt from pyproject.toml's dev extra (PyPI's metadata; the pins already there are
# kept unless a requirement changed: add --upgrade-package NAME to move one).
lock: $(STAMP)
	$(VENV)/bin/uv pip compile pyproject.toml --extra dev --python-version 3.11.7 \
		--python-platform x86_64-unknown-linux-gnu --no-annotate --custom-compile-command "make lock" \
		-o requirements.txt

$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { echo "make: npm not found; install Node.js (needed to build the website)"; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

vendor: $(NODE_STAMP) $(STAMP)
	$(PY) scripts/vendor_assets.py

# --- the website ----------------------------------------------------------------------------
# -W -n --keep-going: every warning fails the build, and all of them are reported at once.
book: vendor
	rm -rf _build/html
	$(VENV)/bin/jupyter-book build . --warningiserror --nitpick --keep-going
	@echo "make book: open _build/html/index.html"

# The student edition: the same pages without the exercises' solutions and without the
# instructor guide (scripts/student_edition.py makes its sources; its Colab buttons open the
# committed student/chapters/*.ipynb, which `python scripts/student_edition.py notebooks` writes).
book-student: vendor
	rm -rf _build/html-student _build/student-src
	$(PY) scripts/student_edition.py sources _build/student-src
	$(VENV)/bin/jupyter-book build _build/student-src --warningiserror --nitpick --keep-going
	mv _build/student-src/_build/html _build/html-student
	@echo "make book-student: open _build/html-student/index.html"

# The PDF edition: the built website printed by Chromium into one PDF (scripts/build_pdf.py says
# why a print and not LaTeX): title page, contents with page numbers, every page of _toc.yml.
pdf: book browser
	$(PY) scripts/build_pdf.py

# --- chapters -------------------------------------------------------------------------------
execute: $(STAMP)
	@for nb in $(CHAPTERS); do \
		echo "executing $$nb"; \
		$(VENV)/bin/jupyter execute --inplace "$$nb" || exit 1; \
		$(PY) scripts/nbval_mode.py record "$$nb" || exit 1; \
	done
	$(PY) scripts/student_edition.py notebooks

# --- tests ----------------------------------------------------------------------------------
# Every check, each target runnable on its own, in this order; -k: a failing one stops none of the
# others. Then where the time went (scripts/junit_times.py over the runs' JUnit files).
JUNIT := $(addprefix _build/test-results-,unit.xml chapters.xml site.xml grading.xml)
test:
	@rm -f $(JUNIT)
	$(MAKE) --no-print-directory -k -j1 lint unit chapters site grading; status=$$?; \
	$(MAKE) --no-print-directory times; exit $$status

# The summary of the JUnit files the last `make test` wrote (lint writes none).
times:
	@$(PY) scripts/junit_times.py --folders $(wildcard $(JUNIT)) || true

# The linters (versions pinned in requirements.txt; settings in pyproject.toml); no notebook. Then
# CITATION.cff against the Citation File Format's schema and the book (scripts/check_citation.py).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) scripts/check_citation.py

# The runs whose tests use no hypothesis leave its pytest plugin out (0.6 s of each process's start).
NO_HYPOTHESIS := -p no:hypothesispytest
# Two workers, file by file; the checks of the built website (marked `site`) are make site's.
unit: $(STAMP)
	$(PY) -m pytest tests/unit tests/book -m "not site" -n 2 --dist loadfile -p no:cacheprovider \
		--junitxml=_build/test-results-unit.xml

# nbval in the mode scripts/nbval_mode.py picks (strict where the outputs were recorded, portable
# elsewhere), two chapters at a time; OMP_WAIT_POLICY=PASSIVE keeps one chapter's waiting OpenMP
# threads off the core the other needs (the digits do not change).
# $$flag: --nbval or --nbval-lax, which the recipe sets
NBVAL = $$flag --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider $(NO_HYPOTHESIS)
chapters: $(STAMP)
	@flag=$$($(PY) scripts/nbval_mode.py mode $(CHAPTERS)) || exit 1; \
	OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest chapters -n 2 --dist loadfile $(NBVAL) \
		--junitxml=_build/test-results-chapters.xml

# Both editions, side by side (Sphinx uses one core each), then their checks three at a time (each
# worker drives its own Chromium; --dist loadgroup keeps a page's checks on one worker).
site:
	bash scripts/install_chromium.sh
	$(MAKE) -j2 -Otarget book book-student
	$(PY) scripts/build_pdf.py
	$(PY) -m pytest tests/site tests/book -m site -n 3 --dist loadgroup -p no:cacheprovider $(NO_HYPOTHESIS) \
		--junitxml=_build/test-results-site.xml

# The assignments built and graded as a course would (minutes: every wrong solution is graded).
grading: $(STAMP)
	$(PY) -m pytest tests/assignments -n 2 --dist loadfile -p no:cacheprovider $(NO_HYPOTHESIS) \
		--junitxml=_build/test-results-grading.xml

# Debian's Chromium for the browser checks (scripts/install_chromium.sh; make site runs it too).
browser:
	bash scripts/install_chromium.sh

# make test saves each page's first screen (tests/site/test_site.py); this saves each page whole,
# for a person to read the site as a reader scrolls it (slow, and it checks nothing more).
screenshots: browser book
	ATTNLAB_FULL_PAGE_SHOTS=1 $(PY) -m pytest tests/site/test_site.py -k test_page_renders_offline -n 3 \
		--dist loadgroup -p no:cacheprovider $(NO_HYPOTHESIS)
	@echo "make screenshots: _build/screenshots/"

# On a CUDA machine: unit tests on every device, every chapter on the GPU (portable nbval), GPU
# benchmarks. Uses the machine's own python3 and torch (PYTHON=... to choose), not .venv.
test-gpu:
	bash scripts/test_gpu.sh

# The GPU benchmarks alone (benchmarks/bench_gpu.py: the blockwise loop, MultiHeadAttention and the
# Triton kernel, each against PyTorch), with the machine's own python3 and torch, as test-gpu.
bench-gpu:
	mkdir -p _build/gpu
	cd benchmarks && PYTHONPATH=../src $${PYTHON:-python3} bench_gpu.py --out ../_build/gpu/results-gpu.md

gpu-wheels: $(STAMP)
	$(PY) scripts/fetch_gpu_wheels.py

# Assignments: otter assign on each source notebook (see book/instructor-guide.md); the student
# versions are also copied to assignments/public/ (committed: Colab opens them from there).
assignments: $(STAMP)
	$(PY) assignments/build.py _build/assignments --publish

# Benchmarks against PyTorch (not part of `make test`: they report, tests check correctness).
bench: $(STAMP)
	cd benchmarks && ../$(PY) run_all.py

clean:
	rm -rf _build

distclean: clean
	rm -rf $(VENV) node_modules
