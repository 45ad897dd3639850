#!/usr/bin/env bash
# The Python test suite against an AddressSanitizer + UBSan build of the extension (CPU): host
# memory errors and undefined behaviour that the C++ tests' own ASan run (.ci/run) does not reach,
# through every Python entry point and its odd sizes. ~10 min build and ~6 min tests on 2 cores.
#   bash tools/sanitize_python_suite.sh [pytest arguments]
# torch and jax tests are left out (their own allocators under a preloaded ASan runtime); the
# address-space-cap test skips itself (ASan reserves terabytes of shadow memory).
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
BUILD=build/sanitize-py
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLSA_NATIVE_BUILD_PYTHON=ON \
  -DLSA_NATIVE_CUDA=OFF -DLSA_NATIVE_SANITIZE=address,undefined \
  -DPython_EXECUTABLE="$(command -v "$PY")" -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)" >/dev/null
cmake --build "$BUILD" --target _core
pkg=$(mktemp -d)
cp -r python/lsa_native "$pkg/"
rm -f "$pkg"/lsa_native/_core*.so
cp "$BUILD"/_core*.so "$pkg/lsa_native/"
# libstdc++ preloaded with the ASan runtime: its __cxa_throw interceptor finds the real function
# (else extensions linking libstdc++ statically, e.g. matplotlib's ft2font, abort on a throw).
LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)" \
ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
LSA_NATIVE_SANITIZED=1 PYTHONPATH="$pkg" \
  "$PY" -m pytest -q -p no:cacheprovider -p no:faulthandler --capture=sys tests \
  --ignore=tests/test_torch.py --ignore=tests/test_jax.py "$@"
