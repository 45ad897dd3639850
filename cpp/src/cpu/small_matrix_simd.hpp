// The SIMD register-tile product of the small-matrix kit, for the per-ISA translation units (like
// simd.hpp, everything here has internal linkage: each ISA's unit keeps its own copy). Used by the
// LSA full-output kernels on padded matrices (lsa_kernels.inl) and by the dense population products
// (small_matrix_kernels.inl); the LSA_HD scalar kit is common/small_matrix.hpp.
#pragma once

#include <algorithm>

#include "cpu/simd.hpp"

namespace lsa_native::cpu::small {
namespace {

// C[i0:i0+RI, c0:c0+L·NC] (+)= A[i0:i0+RI, :k] B[:k, c0:c0+L·NC] for row-major A, B, C with
// leading dimensions lda, ldb, ldc: RI·NC vector accumulators (12 independent FMA chains for 4 x 3,
// so the k-loop is throughput- rather than latency-bound), each B load used RI times.
template <class S, int RI, int NC>
inline void multiply_tile(const S* A, index_t lda, const S* B, index_t ldb, S* C, index_t ldc,
                          index_t k, index_t i0, index_t c0, bool accumulate) {
  constexpr index_t L = simd::kLanes<S>;
  simd::Vec<S> acc[RI][NC];
  for (int i = 0; i < RI; ++i)
    for (int v = 0; v < NC; ++v)
      acc[i][v] = accumulate ? simd::load(C + (i0 + i) * ldc + c0 + v * L) : simd::zero<S>();
  for (index_t m = 0; m < k; ++m) {
    simd::Vec<S> b[NC];
    for (int v = 0; v < NC; ++v) b[v] = simd::load(B + m * ldb + c0 + v * L);
    for (int i = 0; i < RI; ++i) {
      const simd::Vec<S> a = simd::broadcast(A[(i0 + i) * lda + m]);
      for (int v = 0; v < NC; ++v) acc[i][v] += a * b[v];
    }
  }
  for (int i = 0; i < RI; ++i)
    for (int v = 0; v < NC; ++v) simd::store(C + (i0 + i) * ldc + c0 + v * L, acc[i][v]);
}

// Rows [0, n) x the column vectors [c0, c0 + nc·L), nc in 1..3: tiles of 4 rows, then single rows.
template <class S>
inline void multiply_columns(const S* A, index_t lda, const S* B, index_t ldb, S* C, index_t ldc,
                             index_t n, index_t k, index_t c0, index_t nc, bool accumulate) {
  auto rows = [&](auto ri_tag, index_t i0) {
    constexpr int RI = decltype(ri_tag)::value;
    if (nc == 3) multiply_tile<S, RI, 3>(A, lda, B, ldb, C, ldc, k, i0, c0, accumulate);
    else if (nc == 2) multiply_tile<S, RI, 2>(A, lda, B, ldb, C, ldc, k, i0, c0, accumulate);
    else multiply_tile<S, RI, 1>(A, lda, B, ldb, C, ldc, k, i0, c0, accumulate);
  };
  index_t i = 0;
  for (; i + 4 <= n; i += 4) rows(std::integral_constant<int, 4>{}, i);
  for (; i < n; ++i) rows(std::integral_constant<int, 1>{}, i);
}

// C (+)= A B for n x n matrices stored [n, ld] with ld a multiple of the lanes and zero padding
// columns (the padding of C stays zero). C aliases neither A nor B.
template <class S>
void multiply_padded(const S* A, const S* B, S* C, index_t n, index_t ld, bool accumulate) {
  constexpr index_t L = simd::kLanes<S>;
  for (index_t c0 = 0; c0 < ld; c0 += 3 * L)
    multiply_columns(A, ld, B, ld, C, ld, n, n, c0, std::min<index_t>(3, (ld - c0) / L), accumulate);
}

// C = A B for dense row-major A [rows, n], B [n, n], C [rows, n] (no padding): whole column vectors
// by tiles, the last n mod L columns by plain loops. C aliases neither A nor B. rows = n is the
// matrix product, rows = 1 the product xᵀ B of a row vector.
template <class S>
void multiply_dense(const S* A, const S* B, S* C, index_t rows, index_t n) {
  constexpr index_t L = simd::kLanes<S>;
  const index_t n_vec = n / L * L;
  for (index_t c0 = 0; c0 < n_vec; c0 += 3 * L)
    multiply_columns(A, n, B, n, C, n, rows, n, c0, std::min<index_t>(3, (n_vec - c0) / L), false);
  for (index_t i = 0; i < rows; ++i) {
    for (index_t j = n_vec; j < n; ++j) C[i * n + j] = S(0);
    for (index_t m = 0; m < n; ++m) {
      const S a = A[i * n + m];
      for (index_t j = n_vec; j < n; ++j) C[i * n + j] += a * B[m * n + j];
    }
  }
}

// y = A x for dense row-major n x n A (y != x): 4 rows at a time, vector partial sums along the
// row (each x load used 4 times), the last n mod L entries by plain loops.
template <class S>
void matvec_dense(const S* A, const S* x, S* y, index_t n) {
  constexpr index_t L = simd::kLanes<S>;
  const index_t n_vec = n / L * L;
  auto rows = [&](auto ri_tag, index_t i0) {
    constexpr int RI = decltype(ri_tag)::value;
    simd::Vec<S> acc[RI];
    for (int i = 0; i < RI; ++i) acc[i] = simd::zero<S>();
    for (index_t j = 0; j < n_vec; j += L) {
      const simd::Vec<S> xv = simd::load(x + j);
      for (int i = 0; i < RI; ++i) acc[i] += simd::load(A + (i0 + i) * n + j) * xv;
    }
    for (int i = 0; i < RI; ++i) {
      S sum = simd::hsum(acc[i]);
      for (index_t j = n_vec; j < n; ++j) sum += A[(i0 + i) * n + j] * x[j];
      y[i0 + i] = sum;
    }
  };
  index_t i = 0;
  for (; i + 4 <= n; i += 4) rows(std::integral_constant<int, 4>{}, i);
  for (; i < n; ++i) rows(std::integral_constant<int, 1>{}, i);
}

}  // namespace
}  // namespace lsa_native::cpu::small
