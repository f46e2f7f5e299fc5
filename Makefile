# attnlab: the two commands are `make book` and `make test` (see README.md).
#   make book      create .venv, install everything, build the website into _build/html
#   make book-student  the student edition (no exercise solutions) into _build/html-student
#   make test      install, build, then run every test (site in Chromium, unit, ..., chapters with nbval)
#   make execute   re-execute every chapter in place (regenerates the published outputs)
#   make assignments  student notebooks and autograder zips into _build/assignments
#   make bench     benchmarks against PyTorch, written to benchmarks/results.md
#   make screenshots  a full-page screenshot of every page of the site into _build/screenshots/
#   make test-gpu  the whole verification on a CUDA machine (its own Python and torch; see README.md)
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

.PHONY: all install book book-student vendor test screenshots test-gpu gpu-wheels execute browser clean distclean bench assignments

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

# --- chapters -------------------------------------------------------------------------------
execute: $(STAMP)
	@for nb in $(CHAPTERS); do \
		echo "executing $$nb"; \
		$(VENV)/bin/jupyter execute --inplace "$$nb" || exit 1; \
		$(PY) scripts/nbval_mode.py record "$$nb" || exit 1; \
	done
	$(PY) scripts/student_edition.py notebooks

# --- tests ----------------------------------------------------------------------------------
# Debian's Chromium for the browser checks (Playwright drives it; it downloads no browser).
browser:
	@command -v chromium >/dev/null || { \
		echo "installing Debian's chromium for the browser checks"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-cjk; }

# nbval's mode: strict (--nbval) where the chapters' outputs were recorded (make execute writes the
# platform into each chapter), portable (--nbval-lax: every cell runs and its assertions must hold,
# only cells tagged nbval-check-output are compared) anywhere else. NBVAL_MODE=strict|portable forces it.
# The two editions of the website are built side by side (Sphinx uses one core each). Then three
# runs: the website's checks first, three at a time (each drives its own Chromium; one check's page
# work is one core's at most, and it waits too: for the network to fall quiet, for the theme's
# timers; on 2 cores, two workers kept 1.75 cores busy and took 113 to 125 s, three kept 1.9 busy
# and took 109 s, for the same 210 core-seconds), then everything else on two workers, file by file
# (--dist loadfile: a chapter's cells stay together, in order, on one worker), so that two chapters,
# or a chapter and the grading, run side by side. A chapter keeps the two kernel threads its outputs
# were recorded with, and PyTorch's OpenMP threads wait for each other at every parallel operation:
# by default they spin while they wait, on a core that the other worker needs (measured: two chapters
# side by side ran about 30 cells in ten minutes). OMP_WAIT_POLICY=PASSIVE makes them sleep instead.
# The digits do not change (the thread count does not), and the chapters' strict comparison passes;
# two copies of chapter 5 side by side took 22 s, against 18.6 s for one alone with the default
# policy. One chapter alone is slower with PASSIVE (29.7 s for chapter 5), so only `make test` sets it.
# ALONE: the chapters whose claims are timings of small operations run last, one at a time, with the
# default policy. Chapter 7 times an LSTM's 1,024 sequential steps against one matrix product of
# the same FLOPs and asserts more than 3x: 4.5x alone here, 2.8x beside another worker with PASSIVE.
ALONE := chapters/07_complexity.ipynb
# The runs whose tests use no hypothesis leave its pytest plugin out: 0.6 of the 1.0 s that starting
# pytest takes, in each process (a run and each of its workers).
NO_HYPOTHESIS := -p no:hypothesispytest
test: browser
	$(MAKE) -j2 -Otarget book book-student
	@flag=$$($(PY) scripts/nbval_mode.py mode $(CHAPTERS)) || exit 1; \
	$(PY) -m pytest tests/site -n 3 --dist loadgroup -p no:cacheprovider $(NO_HYPOTHESIS) --junitxml=_build/test-results-site.xml; \
	site=$$?; \
	OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest chapters tests --ignore=tests/site $(addprefix --ignore=,$(ALONE)) \
		-n 2 --dist loadfile $$flag --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider \
		--junitxml=_build/test-results.xml; \
	status=$$?; \
	$(PY) -m pytest $(ALONE) $$flag $(NO_HYPOTHESIS) --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider \
		--junitxml=_build/test-results-alone.xml; \
	alone=$$?; $(PY) scripts/nbval_mode.py mode $(CHAPTERS) >/dev/null; \
	$(PY) scripts/junit_times.py --folders _build/test-results-site.xml _build/test-results.xml \
		_build/test-results-alone.xml || true; \
	[ $$site -eq 0 ] || exit $$site; [ $$status -eq 0 ] || exit $$status; exit $$alone

# make test saves each page's first screen (tests/site/test_site.py); this saves each page whole,
# for a person to read the site as a reader scrolls it (33 core-seconds that check nothing).
screenshots: browser book
	ATTNLAB_FULL_PAGE_SHOTS=1 $(PY) -m pytest tests/site/test_site.py -k test_page_renders_offline -n 3 \
		--dist loadgroup -p no:cacheprovider $(NO_HYPOTHESIS)
	@echo "make screenshots: _build/screenshots/"

# On a CUDA machine: unit tests on every device, every chapter on the GPU (portable nbval), GPU
# benchmarks. Uses the machine's own python3 and torch (PYTHON=... to choose), not .venv.
test-gpu:
	bash scripts/test_gpu.sh

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
