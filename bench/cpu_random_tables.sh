#!/usr/bin/env bash
# Issue 22's random numbers per CPU table, for a host with AVX-512 (no GPU needed; a few minutes on
# 2 cores): the table-agreement tests (RUN_TESTS=0 skips them, e.g. after run_gpu_checks.sh's
# isa_host stage), then the cost per variate (uniforms, normals, gammas; float32 and float64) with
# numpy's same-run ratio for the AVX2 and AVX-512 tables (each forced through LSA_NATIVE_CPU_ISA;
# two rounds, interleaved), normals/s by report_e2e, and — where BUILD holds a configured build
# tree with liblsa_native.a (not after a plain `pip install .`) — tokens_step_parts' Philox /
# transform / fill cycles compiled with each table's flags. Exits with the first failing step's
# status. Run from the source tree:
#   BUILD=build/pydev GTEST_BUILD=build/gt bash bench/cpu_random_tables.sh
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/pydev}
GTEST_BUILD=${GTEST_BUILD:-build/gt}
PY=${PYTHON:-python3}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# the source tree's module where it is built there, else the installed package (pip install .)
compgen -G "python/lsa_native/_core*.so" >/dev/null && export PYTHONPATH=${PYTHONPATH:-python}
rc=0
run() { "$@"; local s=$?; [ "$rc" -eq 0 ] && rc=$s; return 0; }
lscpu | grep -E 'Model name|^CPU\(s\)'
echo "avx512: $(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
uptime

if [ "${RUN_TESTS:-1}" = 1 ]; then
  run "$PY" -m pytest -q -p no:cacheprovider -rs tests/test_isa_tables.py
  if [ -x "$GTEST_BUILD"/cpp/tests/lsa_native_tests ]; then
    run bash -c "'$GTEST_BUILD'/cpp/tests/lsa_native_tests --gtest_filter='Fills.*:WideFills.*:Random.*:*IsaTables*' | tail -3"
  fi
fi

for round in 1 2; do
  for isa in avx2-fma avx512; do
    run env LSA_NATIVE_CPU_ISA=$isa "$PY" bench/report_sampling.py --variates-only --repeats 7
  done
done
run "$PY" bench/report_e2e.py --sections normals --tables avx2-fma,avx512 --repeats 7

# The sampling parts compiled here with each table's flags (the step itself: the library's table).
# The flags are CMakeLists.txt's LSA_NATIVE_ISA_avx2_OPTIONS and LSA_NATIVE_ISA_avx512_OPTIONS.
isa_flags() {
  awk -v k="LSA_NATIVE_ISA_$1_OPTIONS" 'index($0, "set(" k) {on = 1; $0 = substr($0, index($0, k) + length(k))}
    on {end = index($0, ")"); if (end) {print substr($0, 1, end - 1); exit} printf "%s ", $0}' CMakeLists.txt
}
[ -f "$BUILD"/liblsa_native.a ] || { echo "no $BUILD/liblsa_native.a: tokens_step_parts not built"; exit "$rc"; }
isas="avx2 avx512"
grep -qw avx512f /proc/cpuinfo || { isas=avx2; echo "no AVX-512 on this CPU: the AVX-512 tables fall back to AVX2"; }
for isa in $isas; do
  # shellcheck disable=SC2046
  g++ -O3 -std=c++17 $(isa_flags "$isa") -DNDEBUG -DLSA_NATIVE_X86_DISPATCH -Icpp/src -Icpp/include -I"$BUILD"/generated \
    bench/cpp/tokens_step_parts.cpp "$BUILD"/liblsa_native.a -lpthread -o /tmp/tokens_step_parts_$isa || exit 1
done
for round in 1 2; do
  for isa in $isas; do echo "== tokens_step_parts, $isa flags"; run /tmp/tokens_step_parts_$isa; done
done
uptime
exit "$rc"
