#!/usr/bin/env bash
# make test-gpu: the whole verification of the book on a CUDA machine, in one command.
#
#   1. the unit tests, with every device-parametrised test on each available device (cpu, cuda);
#   2. every chapter executed on the GPU with nbval in portable mode (every cell runs and its
#      assertions must hold; cells tagged nbval-check-output are compared), several at once;
#   3. benchmarks/bench_gpu.py: blockwise vs torch's flash kernel in fp16/bf16, and
#      MultiHeadAttention vs nn.MultiheadAttention, for the Performance appendix.
#
# It uses the machine's own Python and its own CUDA build of torch (never reinstalled). A machine
# without the Jupyter stack gets it from .gpu-wheels/, which `python scripts/fetch_gpu_wheels.py`
# downloads on a machine with a network (pass it along with the working tree).
# Results go to $OUT (when set) or _build/gpu: the pytest log, JUnit XML, per-chapter times and
# results-gpu.md (the tables of the Performance appendix's GPU section).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
RESULTS=${OUT:-_build/gpu}
mkdir -p "$RESULTS"
start=$(date +%s)

if ! $PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "make test-gpu: no CUDA device here (torch.cuda.is_available() is False); use make test"
    exit 1
fi
if ! $PY -c "import nbval, nbclient, ipykernel, ipywidgets" 2>/dev/null; then
    if ! ls .gpu-wheels/*.whl >/dev/null 2>&1; then
        echo "make test-gpu: the Jupyter stack is missing and .gpu-wheels/ is empty:"
        echo "  run 'python scripts/fetch_gpu_wheels.py' on a machine with a network first"
        exit 1
    fi
    $PY -m pip install --quiet --no-index --no-deps --target .gpu-deps .gpu-wheels/*.whl || exit 1
    export PYTHONPATH="$PWD/.gpu-deps${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYDEVD_DISABLE_FILE_VALIDATION=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
$PY -c "import torch; print('make test-gpu: torch', torch.__version__, 'on', torch.cuda.get_device_name(0))"
$PY scripts/nbval_mode.py show

# Two pytest runs. First the unit tests and every chapter that times nothing, side by side (a
# chapter's cells stay on one worker). Then the chapters that time something (they call measure()
# or perf_counter) one at a time on the quiet machine, as a reader runs them: a timing claim such
# as "the LSTM takes more than 3x the time of the same FLOPs" is about one program on the GPU, and
# fourteen processes sharing it time-slice each other's kernels. GPU_TEST_TIMEOUT (seconds) bounds
# each run, so that the benchmarks still run after a hang.
workers=${GPU_TEST_WORKERS:-12}
timed=$(grep -l -E 'measure\(|perf_counter' chapters/*.ipynb)
untimed=$(ls chapters/*.ipynb | grep -v -F -x -f <(printf '%s\n' $timed))
pytest_run() {  # pytest_run NAME ARGS...: NBVAL in portable mode, JUnit XML to $RESULTS/NAME.xml
    local name=$1; shift
    NBVAL_MODE=portable timeout "${GPU_TEST_TIMEOUT:-1800}" $PY -m pytest "$@" --nbval-lax \
        --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider \
        --junitxml="$RESULTS/$name.xml" -q 2>&1 | tee -a "$RESULTS/pytest.log"
    return "${PIPESTATUS[0]}"
}
: >"$RESULTS/pytest.log"
pytest_run junit-parallel tests/unit $untimed -n "$workers" --dist loadfile; status=$?
pytest_run junit-alone $timed -p no:xdist || status=$?
$PY scripts/junit_times.py "$RESULTS/junit-parallel.xml" "$RESULTS/junit-alone.xml" | tee "$RESULTS/times.md"

# The benchmarks on the quiet GPU; results-gpu.md is the Performance appendix's GPU section
# (commit it as benchmarks/results-gpu.md).
(cd benchmarks && $PY bench_gpu.py ${GPU_BENCH_QUICK:+--quick} --times "$RESULTS/times.md" \
    --out "$RESULTS/results-gpu.md") 2>&1 | tee "$RESULTS/bench_gpu.log"

echo "make test-gpu: pytest exit status $status, $(( $(date +%s) - start )) s in all"
exit "$status"
