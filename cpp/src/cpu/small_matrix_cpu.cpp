// Batched small-matrix routines (small_matrix.hpp) over common/small_matrix.hpp, and the run-time
// choice of the SIMD small-matrix kernels (small_matrix_cpu.hpp).
#include "lsa_native/small_matrix.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/parallel.hpp"
#include "common/small_matrix.hpp"
#include "cpu/isa.hpp"
#include "cpu/small_matrix_cpu.hpp"

namespace lsa_native {
namespace {
void check(index_t batch, index_t n, int max_sweeps = 0) {
  detail::require(batch >= 1, "batch: expected B >= 1, got " + std::to_string(batch));
  detail::require(n >= 1 && n <= 4096, "n: expected 1 <= n <= 4096, got " + std::to_string(n));
  detail::require(max_sweeps >= 0, "max_sweeps: expected >= 0, got " + std::to_string(max_sweeps));
}
}  // namespace

template <class T>
void batched_cholesky(index_t batch, index_t n, T* a, std::int32_t* ok) {
  check(batch, n);
  detail::for_each_chunk(batch, [&](index_t, index_t b0, index_t b1) {
    for (index_t b = b0; b < b1; ++b)
      ok[b] = detail::cholesky_in_place(a + b * n * n, static_cast<int>(n)) ? 1 : 0;
  });
}

template <class T>
void batched_symmetric_eigen(index_t batch, index_t n, T* a, T* w, T* v, std::int32_t* sweeps,
                             int max_sweeps) {
  check(batch, n, max_sweeps);
  detail::for_each_chunk(batch, [&](index_t, index_t b0, index_t b1) {
    for (index_t b = b0; b < b1; ++b)
      sweeps[b] = detail::jacobi_eigen(a + b * n * n, static_cast<int>(n), w + b * n,
                                       v + b * n * n, max_sweeps);
  });
}

namespace cpu {
const SmallMatrixKernels& small_matrix_kernels() {
  return LSA_NATIVE_SELECT_KERNELS(SmallMatrixKernels, small_matrix_kernels());
}

void require_symmetric_positive_definite(const double* a, index_t n, const char* name,
                                         index_t index) {
  auto fail = [&](const char* why) {
    throw Error(std::string(name) + (index >= 0 ? "[" + std::to_string(index) + "]" : "") + why);
  };
  double scale = 0;
  for (index_t i = 0; i < n * n; ++i) {
    if (!std::isfinite(a[i])) fail(": contains non-finite values");
    scale = std::max(scale, std::fabs(a[i]));
  }
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < i; ++j)
      if (!(std::fabs(a[i * n + j] - a[j * n + i]) <= 1e-10 * scale)) fail(": must be symmetric");
  std::vector<double> c(a, a + n * n);
  if (!detail::cholesky_in_place(c.data(), static_cast<int>(n))) fail(": must be positive definite");
}
}  // namespace cpu

template void batched_cholesky<float>(index_t, index_t, float*, std::int32_t*);
template void batched_cholesky<double>(index_t, index_t, double*, std::int32_t*);
template void batched_symmetric_eigen<float>(index_t, index_t, float*, float*, float*,
                                             std::int32_t*, int);
template void batched_symmetric_eigen<double>(index_t, index_t, double*, double*, double*,
                                              std::int32_t*, int);

}  // namespace lsa_native
