#!/usr/bin/env bash
# GPU checks of the CUDA backend, for a lent GPU machine (no network, ~10 minutes): versions, build
# with `pip install --no-build-isolation .`, the GPU tests, the CPU suite, compute-sanitizer, and the
# benchmark. Every stage runs even when an earlier one fails; failures are listed at the end, and
# the benchmark table is printed last. Full logs (and bench_cuda.json) go to $OUT (default ./gpu-out).
#   bash bench/gpu/run_gpu_checks.sh
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-16}
export LSA_NATIVE_EXPECT_CUDA=1
failures=()
t_start=$(date +%s)
deadline=${GPU_DEADLINE_S:-570}

# stage NAME TIMEOUT_S CMD...: runs CMD with its output in $OUT/NAME.log, prints the log's tail;
# its exit status in last_rc (0 when skipped). GPU_STAGES selects stages by name, or by PARENT's
# name for the stages a selected one spawns (PARENT=test_cuda stage test_cuda_x ...).
stage() {
  local name=$1 limit=$2
  shift 2
  last_rc=0
  if [ -n "${GPU_STAGES:-}" ] && [[ " $GPU_STAGES " != *" ${PARENT:-$name} "* ]]; then return 0; fi
  local left=$(( deadline - ($(date +%s) - t_start) ))
  if [ "$left" -lt 20 ]; then failures+=("$name (skipped: deadline)"); echo "=== $name skipped (deadline)"; return 0; fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "=== $name (limit ${limit}s, at +$(( $(date +%s) - t_start ))s)"
  local t0=$(date +%s)
  timeout --signal=KILL "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  last_rc=$rc
  echo "--- $name: rc=$rc in $(( $(date +%s) - t0 ))s"
  [ "${TAIL:-6}" -gt 0 ] && tail -n "${TAIL:-6}" "$OUT/$name.log"
  if [ "$rc" -ne 0 ]; then
    if [ -n "${OPTIONAL:-}" ]; then echo "(optional stage: not counted as a failure)"
    else failures+=("$name (rc=$rc, log $OUT/$name.log)"); fi
  fi
}

TAIL=14 stage versions 60 bash -c "nvidia-smi; $PY --version; $PY -c 'import numpy, torch; print(\"numpy\", numpy.__version__, \"torch\", torch.__version__, torch.version.cuda, torch.cuda.get_device_name())'; $PY -c 'import cupy; print(\"cupy\", cupy.__version__)'; nvcc --version | tail -2; cmake --version | head -1; compute-sanitizer --version | tail -1; lscpu | grep -E 'Model name|^CPU\(s\)'; grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\\n' ' '"

TAIL=4 stage build 300 "$PY" -m pip install --no-build-isolation --no-deps -v . \
  -C cmake.define.LSA_NATIVE_CUDA=ON -C cmake.define.LSA_NATIVE_CUDA_ARCHITECTURES=90 \
  -C cmake.define.CMAKE_CUDA_FLAGS=-Xptxas=-v
# ptxas resource usage of the kernels (registers, spills, shared memory), when the log has it.
grep -E "ptxas info|spill" "$OUT/build.log" >"$OUT/ptxas.txt" || true
echo "ptxas (sm_90, all kernels): $(grep -c 'Compiling entry' "$OUT/ptxas.txt") entries; spills: $(grep -E 'spill (stores|loads)' "$OUT/ptxas.txt" | grep -vc ' 0 bytes spill stores, 0 bytes spill loads')"

stage import 60 "$PY" -c "import lsa_native as ln; print('cuda_compiled', ln.cuda_compiled(), 'cuda_available', ln.cuda_available()); assert ln.cuda_compiled() and ln.cuda_available()"

# A hung test must not eat the lease: pytest-timeout where it is installed.
per_test=$("$PY" -c "import pytest_timeout" 2>/dev/null && echo "--timeout=90")
# --capture=sys: what native code writes to fd 2 (glibc's heap checks, std::terminate) reaches the
# log; pytest's default fd capture lost it when a test aborted the interpreter (2026-11-27, H200).
TAIL=25 stage test_cuda 240 "$PY" -m pytest -p no:cacheprovider -q -rs --capture=sys $per_test -m cuda tests
# A native crash (SIGABRT 134, SIGSEGV 139, ...) ends pytest at the crashing test and every test
# after it goes unrun: then each file on its own, verbose (the crashing test is the last one named
# in its log). Not after 137: that is the stage's own time limit (timeout --signal=KILL), and
# reruns would spend the deadline the sanitizers and benchmarks need.
if [ "$last_rc" -ge 128 ] && [ "$last_rc" -ne 137 ]; then
  for f in $(grep -l "mark.cuda" tests/test_*.py); do
    PARENT=test_cuda TAIL=2 stage "test_cuda_$(basename "$f" .py)" 120 "$PY" -m pytest \
      -p no:cacheprovider -v -rs --capture=sys $per_test -m cuda "$f"
  done
fi

# Sanitizers: memcheck of every kernel first, then shared-memory races and barriers.
stage memcheck 100 compute-sanitizer --tool memcheck --error-exitcode 3 --leak-check no "$PY" bench/gpu/sanitize_run.py
stage memcheck_ka 100 compute-sanitizer --tool memcheck --error-exitcode 3 --leak-check no "$PY" bench/gpu/sanitize_ka_run.py
stage racecheck_ka 100 compute-sanitizer --tool racecheck --error-exitcode 3 "$PY" bench/gpu/sanitize_ka_run.py
stage racecheck 100 compute-sanitizer --tool racecheck --error-exitcode 3 "$PY" bench/gpu/sanitize_run.py
stage synccheck 100 compute-sanitizer --tool synccheck --error-exitcode 3 "$PY" bench/gpu/sanitize_run.py

stage memcheck_kgp 100 compute-sanitizer --tool memcheck --error-exitcode 3 --leak-check no "$PY" bench/gpu/sanitize_kgp_run.py
stage memcheck_optim 60 compute-sanitizer --tool memcheck --error-exitcode 3 --leak-check no "$PY" bench/gpu/sanitize_optim_run.py
stage racecheck_optim 60 compute-sanitizer --tool racecheck --error-exitcode 3 "$PY" bench/gpu/sanitize_optim_run.py
# Issue 18, the device loop (θ, gradients, losses, held-out loss on the GPU; one readback per
# record): its cuda tests run in test_cuda above (tests/test_device_loop.py); memcheck of the new
# paths (loss=/out= outputs, pieces of flat buffers, the optimizer's loss slot and mask); the
# device loop against the host-θ loop with the copies counted, the model-axis question, and a
# timed paper-size ccs-fig1 cell (B = 30000, 800 steps) with the grid extrapolated.
stage memcheck_device_loop 120 compute-sanitizer --tool memcheck --error-exitcode 3 --leak-check no "$PY" bench/gpu/sanitize_device_loop_run.py
TAIL=16 stage bench_device_loop 420 "$PY" bench/gpu/bench_device_loop.py --out "$OUT/bench_device_loop.json"
# The lsa_native.torch host path on CUDA, layer by layer (issue 18's 684 us): which layer costs.
TAIL=12 stage torch_host_path 90 "$PY" bench/gpu/torch_host_path.py --out "$OUT"
TAIL=16 stage bench_ccs_training 300 "$PY" bench/gpu/bench_ccs_training.py --out "$OUT/bench_ccs_training.json"

# Issue 21, the H-head kernels (cuda/multihead_*): memcheck and racecheck of every entry point, and
# the model's loss/gradient and fresh-prompt step against PyTorch CUDA.
stage memcheck_multihead 100 compute-sanitizer --tool memcheck --error-exitcode 3 --leak-check no "$PY" bench/gpu/sanitize_multihead_run.py
stage racecheck_multihead 100 compute-sanitizer --tool racecheck --error-exitcode 3 "$PY" bench/gpu/sanitize_multihead_run.py
TAIL=12 stage bench_multihead 150 "$PY" bench/gpu/bench_multihead_cuda.py --out "$OUT/bench_multihead_cuda.json"

TAIL=8 stage bench_ka 120 "$PY" bench/gpu/bench_ka_cuda.py --out "$OUT/bench_ka_cuda.json"
TAIL=20 stage bench_sampled 120 "$PY" bench/gpu/bench_sampled.py --out "$OUT/bench_sampled.json"
TAIL=12 stage bench_torch 120 "$PY" bench/report_torch.py --device cuda --steps 10
TAIL=8 stage bench 150 "$PY" bench/gpu/bench_cuda.py --out "$OUT/bench_cuda.json"
TAIL=13 stage call_latency 60 "$PY" bench/gpu/call_latency.py

# Nsight Compute on the prediction kernels (optional: needs GPU performance-counter permission).
TAIL=0 OPTIONAL=1 stage ncu 120 ncu --kernel-name regex:lsa_prediction_kernel --launch-skip 1 --launch-count 2 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
  "$PY" bench/gpu/profile_once.py
grep -E "lsa_prediction_kernel|DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Registers Per|Theoretical Occupancy|ERR|rror" \
  "$OUT/ncu.log" | head -n 24

TAIL=0 OPTIONAL=1 stage ncu_ka 120 ncu --kernel-name regex:"ka_(warp_)?kernel" --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  "$PY" bench/gpu/profile_once.py --ka

# Issue 22 on the lent machine's host CPU (the development machine has no AVX-512): every CPU
# kernel table forced in turn (AVX-512 included) against the baseline, then the CPU report.
TAIL=6 stage isa_host 90 "$PY" -m pytest -p no:cacheprovider -q -rs tests/test_isa_tables.py
# On 2 of the host's cores (taskset; the native pool follows the affinity mask): issue 22's targets
# are for a 2-core AVX-512 machine, and 16 threads on ms-size steps measured scheduling, not tables.
TAIL=30 stage bench_isa_host 150 taskset -c 0,1 "$PY" bench/report_e2e.py --repeats 3 --tables avx2-fma,avx512 --activations linear,softmax
# The random numbers per table (the 16-lane Philox and the wide transforms run only there): the cost
# per variate (after pip install there is no build tree for tokens_step_parts; isa_host ran the tests).
TAIL=40 stage random_tables 200 taskset -c 0,1 env PYTHON="$PY" RUN_TESTS=0 bash bench/cpu_random_tables.sh

stage test_cpu 240 "$PY" -m pytest -p no:cacheprovider -q -m "not cuda" tests

echo "=== done in $(( $(date +%s) - t_start ))s"
if [ "${#failures[@]}" -gt 0 ]; then
  echo "FAILED stages:"
  printf '  %s\n' "${failures[@]}"
else
  echo "all stages passed"
fi
echo "=== benchmark (median of CUDA-event timings; % copy = achieved bandwidth / D2D copy bandwidth)"
cat "$OUT/bench_cuda.txt" 2>/dev/null || echo "(no benchmark table)"
echo "=== kernel attention benchmark (d=5 n=30 L=3 H=1; median of CUDA-event timings)"
cat "$OUT/bench_ka_cuda.txt" 2>/dev/null || echo "(no kernel-attention benchmark table)"
echo "=== fused sampled step (steps/s; native CUDA vs a PyTorch CUDA loop)"
grep "^|" "$OUT/bench_sampled.log" 2>/dev/null || echo "(no sampled-step table)"
echo "=== device loop (issue 18): steps/s and device->host copies; model axis; paper-size cell"
grep -E "^\||model axis|cell |grid" "$OUT/bench_device_loop.log" 2>/dev/null || echo "(no device-loop table)"
echo "=== lsa_native.torch host path on CUDA (us per forward+backward, by layer)"
grep "^|" "$OUT/torch_host_path.log" 2>/dev/null || echo "(no torch host-path table)"
echo "=== H-head linear attention on CUDA (issue 21; per second; native vs PyTorch CUDA)"
grep "^|" "$OUT/bench_multihead.log" 2>/dev/null || echo "(no multihead table)"
echo "=== lsa_native.torch on CUDA tensors (Adam steps/s; native vs pure PyTorch)"
grep "^|" "$OUT/bench_torch.log" 2>/dev/null || echo "(no torch table)"
[ "${#failures[@]}" -eq 0 ]
