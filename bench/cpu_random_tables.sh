#!/usr/bin/env bash
# Issue 22's random numbers per CPU table, for a host with AVX-512 (no GPU needed; a few minutes on
# 2 cores): the table-agreement tests, then the cost per variate (uniforms, normals, gammas; float32
# and float64) with numpy's same-run ratio for the AVX2 and AVX-512 tables (each forced through
# LSA_NATIVE_CPU_ISA; two rounds, interleaved), normals/s by report_e2e, and tokens_step_parts'
# Philox / transform / fill cycles compiled with each table's flags. Run from a tree whose module is
# built (python/lsa_native/_core*.so, or installed) with BUILD its configured build directory:
#   BUILD=build/pydev bash bench/cpu_random_tables.sh
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/pydev}
PY=${PYTHON:-python3}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# the source tree's module where it is built there, else the installed package (pip install .)
compgen -G "python/lsa_native/_core*.so" >/dev/null && export PYTHONPATH=${PYTHONPATH:-python}
lscpu | grep -E 'Model name|^CPU\(s\)'
echo "avx512: $(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
uptime

"$PY" -m pytest -q -p no:cacheprovider -rs tests/test_isa_tables.py
[ -x build/gt/cpp/tests/lsa_native_tests ] &&
  build/gt/cpp/tests/lsa_native_tests --gtest_filter='Fills.*:WideFills.*:Random.*:*IsaTables*' | tail -3

for round in 1 2; do
  for isa in avx2-fma avx512; do
    LSA_NATIVE_CPU_ISA=$isa "$PY" bench/report_sampling.py --variates-only --repeats 7
  done
done
"$PY" bench/report_e2e.py --sections normals --tables avx2-fma,avx512 --repeats 7

# The sampling parts compiled here with each table's flags (the step itself: the library's table).
flags_avx2="-mavx2 -mfma"
flags_avx512="-mavx512f -mavx512vl -mavx512bw -mavx512dq -mfma -mprefer-vector-width=512"
[ -f "$BUILD"/liblsa_native.a ] || { echo "no $BUILD/liblsa_native.a: tokens_step_parts not built"; exit 0; }
isas="avx2 avx512"
grep -qw avx512f /proc/cpuinfo || { isas=avx2; echo "no AVX-512 on this CPU: the AVX-512 tables fall back to AVX2"; }
for isa in $isas; do
  flags=flags_$isa
  g++ -O3 -std=c++17 ${!flags} -DNDEBUG -DLSA_NATIVE_X86_DISPATCH -Icpp/src -Icpp/include -I"$BUILD"/generated \
    bench/cpp/tokens_step_parts.cpp "$BUILD"/liblsa_native.a -lpthread -o /tmp/tokens_step_parts_$isa || exit 1
done
for round in 1 2; do
  for isa in $isas; do echo "== tokens_step_parts, $isa flags"; /tmp/tokens_step_parts_$isa; done
done
uptime
