// Small dense products, included by one translation unit per instruction set with LSA_ISA_NS
// defined (small_matrix_kernels_{base,avx2}.cpp): register tiles of simd.hpp vectors.
#include "cpu/simd.hpp"
#include "cpu/small_matrix_kernels.hpp"

#ifndef LSA_ISA_NS
#error "define LSA_ISA_NS before including small_matrix_kernels.inl"
#endif

namespace lsa_native::cpu::LSA_ISA_NS {
namespace {

using simd::Vec;
constexpr index_t kL = simd::kLanes<double>;

// C[i0:i0+4, j0:j0+L·NV] = A[i0:i0+4, :] B[:, j0:j0+L·NV]: 4·NV vector accumulators, each B load
// used 4 times.
template <int NV>
inline void matmul_tile(const double* a, const double* b, double* c, index_t n, index_t i0,
                        index_t j0) {
  Vec<double> acc[4][NV] = {};
  for (index_t k = 0; k < n; ++k) {
    Vec<double> bk[NV];
    for (int v = 0; v < NV; ++v) bk[v] = simd::load(b + k * n + j0 + kL * v);
    for (index_t ii = 0; ii < 4; ++ii) {
      const Vec<double> aik = simd::broadcast(a[(i0 + ii) * n + k]);
      for (int v = 0; v < NV; ++v) acc[ii][v] += aik * bk[v];
    }
  }
  for (index_t ii = 0; ii < 4; ++ii)
    for (int v = 0; v < NV; ++v) simd::store(c + (i0 + ii) * n + j0 + kL * v, acc[ii][v]);
}

void matmul(const double* a, const double* b, double* c, index_t n) {
  // Register tiles of 4 rows x (2L or L) columns; rows and columns past the last whole tile with
  // plain i-k-j loops.
  const index_t n_i = n / 4 * 4, n_j2 = n / (2 * kL) * (2 * kL), n_j = n / kL * kL;
  for (index_t i0 = 0; i0 < n_i; i0 += 4) {
    for (index_t j0 = 0; j0 < n_j2; j0 += 2 * kL) matmul_tile<2>(a, b, c, n, i0, j0);
    if (n_j > n_j2) matmul_tile<1>(a, b, c, n, i0, n_j2);
  }
  for (index_t i = 0; i < n; ++i) {  // edges: columns >= n_j of rows < n_i, all of rows >= n_i
    const index_t j_begin = i < n_i ? n_j : 0;
    for (index_t j = j_begin; j < n; ++j) c[i * n + j] = 0;
    for (index_t k = 0; k < n; ++k) {
      const double aik = a[i * n + k];
      for (index_t j = j_begin; j < n; ++j) c[i * n + j] += aik * b[k * n + j];
    }
  }
}

}  // namespace

SmallMatrixKernels small_matrix_kernels() { return {&matmul}; }

}  // namespace lsa_native::cpu::LSA_ISA_NS
