// Per-prompt LSA math [ZFB (3.3)-(3.7), SPEC 3.2], written once for every backend (LSA_HD).
//
// A recipe is the list of per-entry formulas of one prompt's computation. A backend decides which
// thread computes which entry and when the inputs of a step are ready (the CUDA kernels: lanes of a
// warp or threads of a block over a prompt staged in shared memory; the scalar host driver in
// cpp/tests/test_lsa_recipe.cpp: plain loops). Every formula sums in the order written here, so the
// CPU test of the scalar instantiation checks the arithmetic the GPU runs.
//
// Indices inside one prompt are int: a staged prompt has (d+1)(N+1) < 2^31 entries (the callers
// check); offsets of whole prompts in a batch are 64-bit and stay in the callers.
#pragma once

#include "common/hd.hpp"

namespace lsa_native::recipe {

// A read-only [rows, cols] matrix with arbitrary element strides: a prompt E_b [d+1, N+1] with
// row stride ld, a small [d+1, d+1] matrix, or its transpose (swap the strides, no copy).
template <class T>
struct Mat {
  const T* p;
  int row_stride;
  int col_stride;
  LSA_HD T operator()(int r, int c) const { return p[r * row_stride + c * col_stride]; }
  LSA_HD Mat transposed() const { return {p, col_stride, row_stride}; }
};

// Row-major [rows, ld] view.
template <class T>
LSA_HD_LOCAL Mat<T> rows_of(const T* p, int ld) {
  return {p, ld, 1};
}

// 1/N in the prompt's dtype: ρ = N   [ZFB (3.3)]
template <class T>
LSA_HD_LOCAL T inv_context(long long N) {
  return T(1) / T(N);
}

// ---- prediction ŷ = p^T G q and its gradients (SPEC 3.2) ----------------------------------------
// E: the prompt [rows, cols] (rows = d+1, cols = N+1, the query token e_q = column N).

// q_r = (W^KQ e_q)_r = Σ_c W^KQ[r, c] E[c, N]  [ZFB (3.6)] (exact for any label slot E[d, N]).
template <class T>
LSA_HD_LOCAL T query_entry(Mat<T> W_kq, Mat<T> E, int rows, int N, int r) {
  T q = T(0);
  for (int c = 0; c < rows; ++c) q += W_kq(r, c) * E(c, N);
  return q;
}

// Token scalars t_j = p·e_j and s_j = e_j·q, p = last row of W^PV (SPEC 3.2).
template <class T>
LSA_HD_LOCAL void token_scalars(Mat<T> E, int rows, const T* p, const T* q, int j, T& t, T& s) {
  T tt = T(0), ss = T(0);
  for (int r = 0; r < rows; ++r) {
    const T e = E(r, j);
    tt += p[r] * e;
    ss += q[r] * e;
  }
  t = tt;
  s = ss;
}

// ŷ = E[d, N] + (1/N) Σ_j t_j s_j: the label slot of the query plus p^T G q  [ZFB (3.6)].
template <class T>
LSA_HD_LOCAL T prediction(T label_slot, T sum_ts, long long N) {
  return label_slot + sum_ts * inv_context<T>(N);
}

// Unscaled backward row sums: g_p[r] = Σ_j s_j E[r, j] and g_k[r] = Σ_j t_j E[r, j], so that
// ∂ŷ/∂p = g_p / N = G q and ∂ŷ/∂K = (g_k / N) x_q^T = (G p) x_q^T (SPEC 3.2).
template <class T>
LSA_HD_LOCAL void weighted_row_sums(Mat<T> E, int cols, const T* t, const T* s, int r, T& g_p, T& g_k) {
  T a = T(0), b = T(0);
  for (int j = 0; j < cols; ++j) {
    const T e = E(r, j);
    a += s[j] * e;
    b += t[j] * e;
  }
  g_p = a;
  g_k = b;
}

// Loss-gradient terms of one prompt with residual res = ŷ − y_q (in double):
// L_b = res², ∂L_b/∂p = res · g_p / N, ∂L_b/∂W^KQ[r, c] = res · (g_k[r] / N) · e_q[c]  [ZFB (3.7)]
// (the factor ½ and 1/B of (3.7) are applied once to the batch sums).
template <class T>
LSA_HD_LOCAL double residual_scale(double res, long long N) {
  return res * double(inv_context<T>(N));
}

// ---- VJP of the prediction for an upstream dŷ (lsa_predict_vjp, SPEC 3.2) ----------------------
// ∂ŷ/∂p = G q = g_p / N,  ∂ŷ/∂W^KQ = (G p) e_qᵀ = (g_k / N) e_qᵀ  (weighted by dŷ like the loss
// gradient above with res replaced by dŷ), and ∂ŷ/∂E[r, j] below.

// (W^KQᵀ G p)_r = Σ_k W^KQ[k, r] (G p)_k: the query column's gradient through q = W^KQ e_q.
template <class T>
LSA_HD_LOCAL T through_query_entry(Mat<T> W_kq, const T* Gp, int rows, int r) {
  T acc = T(0);
  for (int k = 0; k < rows; ++k) acc += W_kq(k, r) * Gp[k];
  return acc;
}

// dŷ · ∂ŷ/∂E[r, j] = (dŷ/N)(s_j p_r + t_j q_r), + dŷ (W^KQᵀ G p)_r on the query column j = N,
// + dŷ on the query-label slot [d, N]  (through_q_r = through_query_entry(.., r)).
template <class T>
LSA_HD_LOCAL T prediction_input_grad_entry(T dy, T inv_n, const T* p, const T* q, const T* t, const T* s,
                                     T through_q_r, int rows, int N, int r, int j) {
  const T dyn = dy * inv_n;
  T v = (dyn * p[r]) * s[j] + (dyn * q[r]) * t[j];
  if (j == N) {
    v += dy * through_q_r;
    if (r == rows - 1) v += dy;
  }
  return v;
}

// ---- full output F = E + P E with P = W^PV G W^KQ, and its VJP (SPEC 3.2) ----------------------

// Σ_j A[r, j] B[c, j] over the cols tokens: G = E E^T / N (scale after), dP = d_F E^T.
template <class T>
LSA_HD_LOCAL T token_product(Mat<T> A, Mat<T> B, int cols, int r, int c) {
  T acc = T(0);
  for (int j = 0; j < cols; ++j) acc += A(r, j) * B(c, j);
  return acc;
}

// (A B)[r, c] = Σ_m A[r, m] B[m, c] for [n, n] matrices.
template <class T>
LSA_HD_LOCAL T product_entry(Mat<T> A, Mat<T> B, int n, int r, int c) {
  T acc = T(0);
  for (int m = 0; m < n; ++m) acc += A(r, m) * B(m, c);
  return acc;
}

// base[r, j] + Σ_s C[r, s] src[s, j]: F = E + P E, and the two terms of dE.
template <class T>
LSA_HD_LOCAL T row_combination_entry(T base, Mat<T> C, Mat<T> src, int rows, int r, int j) {
  T acc = base;
  for (int s = 0; s < rows; ++s) acc += C(r, s) * src(s, j);
  return acc;
}

// Views with one unit stride fixed at compile time (the tiled CUDA kernels' operands, whose inner
// index then steps by immediate offsets): RowsOf(p, ld)(r, c) = p[r * ld + c] and its transpose
// ColsOf(p, ld)(r, c) = p[c * ld + r].
template <class T>
struct RowsOf {
  const T* p;
  int ld;
  LSA_HD T operator()(int r, int c) const { return p[r * ld + c]; }
};
template <class T>
struct ColsOf {
  const T* p;
  int ld;
  LSA_HD T operator()(int r, int c) const { return p[c * ld + r]; }
};

// A register tile of a product, the unit of work of the tiled CUDA kernels: acc[i][j] +=
// Σ_{k0 <= k < k1} A(r_i, k) B(k, c_j), r_i = min(r0 + i, r_max), c_j = min(c0 + j, c_max) (a tile
// past the edge repeats the last row/column; the caller drops those entries); A, B any views (Mat,
// RowsOf, ColsOf). Each entry sums in k order: with acc = 0 over [0, K) an entry equals
// product_entry (K = n) or token_product (B = the second factor transposed).
template <class T, int TR, int TC, class MA, class MB>
LSA_HD_LOCAL void accumulate_tile(T (&acc)[TR][TC], MA A, MB B, int r0, int r_max, int c0, int c_max,
                            int k0, int k1) {
  int ri[TR], cj[TC];
  for (int i = 0; i < TR; ++i) ri[i] = r0 + i < r_max ? r0 + i : r_max;
  for (int j = 0; j < TC; ++j) cj[j] = c0 + j < c_max ? c0 + j : c_max;
#if defined(__CUDA_ARCH__)
#pragma unroll 2
#endif
  for (int k = k0; k < k1; ++k) {
    T a[TR], b[TC];
    for (int i = 0; i < TR; ++i) a[i] = A(ri[i], k);
    for (int j = 0; j < TC; ++j) b[j] = B(k, cj[j]);
    for (int i = 0; i < TR; ++i)
      for (int j = 0; j < TC; ++j) acc[i][j] += a[i] * b[j];
  }
}

// (dG + dG^T)[r, c] / N, the coefficient of E in dE = d_F + P^T d_F + (dG + dG^T) E / N.
template <class T>
LSA_HD_LOCAL T symmetric_part_entry(Mat<T> dG, int N, int r, int c) {
  return (dG(r, c) + dG(c, r)) / T(N);
}

// The VJP's steps, each a product_entry over [d+1, d+1] matrices (SPEC 3.2):
//   G  = E E^T / N,           dP = d_F E^T
//   T1 = W^KQ^T G = (G W^KQ)^T,   T2 = G W^PV^T = (W^PV G)^T
//   dW^PV += dP T1,           dW^KQ += T2 dP            (batch sums in double)
//   P^T = W^KQ^T T2,          dG = (W^PV^T dP) W^KQ^T
//   dE = (d_F + P^T d_F) + ((dG + dG^T)/N) E
// The tiled CUDA VJP associates two of them the other way (G is symmetric), six products instead
// of seven: U = dP W^KQ^T, dW^PV += U G (= dP T1), dG = W^PV^T U.

}  // namespace lsa_native::recipe
