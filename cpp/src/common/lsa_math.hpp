// Per-prompt LSA arithmetic shared by the CPU loops and the CUDA kernels (LSA_HD inline functions).
#pragma once

#include "lsa_native/types.hpp"

#if defined(__CUDACC__)
#define LSA_HD __host__ __device__
#else
#define LSA_HD
#endif

namespace lsa_native::detail {

// q = W^KQ e_q for the query token e_q = E[:, N] = (x_q; y_slot). For prompts built by (3.4) the
// label slot is 0 and q = K x_q with K the first d columns of W^KQ   [ZFB (3.6)]; keeping the
// slot makes ŷ equal [f(E)]_{d+1,N+1} for any E.
//   W_kq [d+1, d+1], E [d+1, N+1] (one prompt), q [d+1] (written)
template <class T, class Out>
LSA_HD inline void query_vector(const T* W_kq, const T* E, index_t d, index_t N, Out* q) {
  const index_t rows = d + 1, cols = N + 1;
  for (index_t r = 0; r < rows; ++r) {
    Out acc = 0;
    for (index_t c = 0; c < rows; ++c) acc += Out(W_kq[r * rows + c]) * Out(E[c * cols + N]);
    q[r] = acc;
  }
}

// C = A B for n x n row-major matrices (small: n = d+1). C must not alias A or B.
template <class TA, class TB>
LSA_HD inline void matmul_small(const TA* A, const TB* B, double* C, index_t n) {
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j) {
      double acc = 0;
      for (index_t k = 0; k < n; ++k) acc += double(A[i * n + k]) * double(B[k * n + j]);
      C[i * n + j] = acc;
    }
}

// C = A^T B for n x n row-major matrices.
template <class TA, class TB>
LSA_HD inline void matmul_tn_small(const TA* A, const TB* B, double* C, index_t n) {
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j) {
      double acc = 0;
      for (index_t k = 0; k < n; ++k) acc += double(A[k * n + i]) * double(B[k * n + j]);
      C[i * n + j] = acc;
    }
}

// C = A B^T for n x n row-major matrices.
template <class TA, class TB>
LSA_HD inline void matmul_nt_small(const TA* A, const TB* B, double* C, index_t n) {
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j) {
      double acc = 0;
      for (index_t k = 0; k < n; ++k) acc += double(A[i * n + k]) * double(B[j * n + k]);
      C[i * n + j] = acc;
    }
}

// Adds one prompt's contribution to the batch gradient of L = (1/2B)Σ(ŷ − y)^2:
//   ∂ŷ/∂p = G q = (1/N) Σ_j s_j e_j  → d_p += r · g_p
//   ∂ŷ/∂W^KQ = (G p) e_q^T = ((1/N) Σ_j t_j e_j) e_q^T → d_K += r · g_k e_q^T   (SPEC 3.2)
// with r = ŷ − y (the caller scales by 1/B once). The last column of d_K is 0 when the query's
// label slot is 0, as in (3.4).
//   g_p, g_k [d+1]; e_q strided by x_stride; d_p [d+1], d_K [d+1, d+1] (accumulated)
template <class T>
LSA_HD inline void accumulate_prediction_grad(double residual, const double* g_p, const double* g_k,
                                              const T* e_q, index_t x_stride, index_t d,
                                              double* d_p, double* d_K) {
  for (index_t r = 0; r <= d; ++r) {
    d_p[r] += residual * g_p[r];
    const double rg = residual * g_k[r];
    for (index_t c = 0; c <= d; ++c) d_K[r * (d + 1) + c] += rg * double(e_q[c * x_stride]);
  }
}

}  // namespace lsa_native::detail
