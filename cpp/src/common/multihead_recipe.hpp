// Per-prompt math of the H-head LSA (multihead.hpp), written once for every backend (LSA_HD):
//
//   ŷ = E[d, N] + Σ_h p_hᵀ G q_h,   p_h = last row of W^PV_h,  q_h = W^KQ_h e_q,  G = E Eᵀ / N
//   ∂ŷ/∂p_h = G q_h,   ∂ŷ/∂W^KQ_h = (G p_h) e_qᵀ                                 [ZFB (3.6) per head]
//
// Two routes to G: the tokens (the CUDA kernels of cuda/multihead_kernels.cuh stage a prompt and
// form G entry by entry with recipe::token_product) and the Wishart draw (wishart.hpp: G = M Mᵀ +
// e_q e_qᵀ/N from a Bartlett factor, never formed; the fused sampled step of the CPU). Head arrays
// are [H, rows] (rows = d+1) and the parameters [H, rows, rows] row-major. Every formula sums in
// the order written here, so the CPU tests of these functions check the arithmetic the GPU runs.
#pragma once

#include <cmath>

#include "common/hd.hpp"
#include "common/lsa_recipe.hpp"
#include "common/wishart.hpp"

namespace lsa_native::multihead {

// Width of one prompt's (and a batch's) gradient sums [Σ w², Σ w G q_h, Σ w (G p_h) e_qᵀ]:
// 1 + H rows + H rows², in that order (the d_W_kq part [H, rows, rows] row-major).
LSA_HD_LOCAL index_t loss_grad_width(index_t heads, index_t rows) { return 1 + heads * rows + heads * rows * rows; }

// ---- the Gram route on a formed G (the CUDA prediction kernels) --------------------------------
// (q_h = W^KQ_h e_q, G q_h and G p_h are plain ordered dot products there: dot_quads.)

// S[r, c] = (dŷ/N) Σ_h (p_h[r] q_h[c] + q_h[r] p_h[c]): the prediction's input gradient is S E on
// every token, + dŷ (Σ_h W^KQ_hᵀ G p_h) on the query column and + dŷ on the query-label slot.
// p, q [H, ld].
template <class T>
LSA_HD_LOCAL T input_grad_coefficient(T dy_over_n, const T* p, const T* q, int heads, int ld, int r,
                                int c) {
  T acc = T(0);
  for (int h = 0; h < heads; ++h)
    acc += p[h * ld + r] * q[h * ld + c] + q[h * ld + r] * p[h * ld + c];
  return dy_over_n * acc;
}

// (Σ_h W^KQ_hᵀ G p_h)_r = Σ_h Σ_k W^KQ_h[k, r] (G p_h)_k: the query column's gradient through q_h.
// W_kq [H, rows, ld] (row stride ld), Gp [H rows].
template <class T>
LSA_HD_LOCAL T through_queries_entry(const T* W_kq, const T* Gp, int heads, int rows, int ld, int r) {
  T acc = T(0);
  for (int h = 0; h < heads; ++h)
    for (int k = 0; k < rows; ++k) acc += W_kq[(h * rows + k) * ld + r] * Gp[h * rows + k];
  return acc;
}

// dŷ ∂ŷ/∂E[r, j] = (S E)[r, j] (+ dŷ through_r on the query column, + dŷ on the label slot).
template <class T>
LSA_HD_LOCAL T input_grad_entry(T dy, recipe::Mat<T> S, recipe::Mat<T> E, T through_r, int rows, int N,
                          int r, int j) {
  T v = recipe::row_combination_entry(T(0), S, E, rows, r, j);
  if (j == N) {
    v += dy * through_r;
    if (r == rows - 1) v += dy;
  }
  return v;
}

// G = E Eᵀ / N in 4 x 4 register tiles over the tokens (heads_gram of the CUDA kernels), the upper
// triangle only (G is symmetric): kGramTile, the tile count, and tile t's first row and column
// (row-major over the tiles (bi, bj), bi <= bj, of the ceil(rows/4)² grid).
constexpr int kGramTile = 4;
LSA_HD_LOCAL int gram_tiles(int rows) {
  const int nb = (rows + kGramTile - 1) / kGramTile;
  return nb * (nb + 1) / 2;
}
LSA_HD_LOCAL void gram_tile_origin(int t, int rows, int& r0, int& c0) {
  const int nb = (rows + kGramTile - 1) / kGramTile;
  int bi = 0;
  while (t >= nb - bi) t -= nb - bi++;
  r0 = kGramTile * bi;
  c0 = kGramTile * (bi + t);
}

// The batch sums of acc_width's layout, one prompt's terms at a time in double:
//   [0] += w², [1 + h rows + r] += (w G q_h)[r], [1 + H rows + (h rows + r) rows + c] += (w G p_h)[r] e_q[c],
// with wGq = w G q_h, wGp = w G p_h [H rows] and e_q [rows] already in double (the CUDA kernels
// add a block's prompts in slot order with d_K_quad over kGramTile columns c0.. of one row).
LSA_HD_LOCAL void d_K_quad(double (&v)[kGramTile], double wGp_hr, const double* e_q, int c0,
                            int rows) {
  for (int k = 0; k < kGramTile; ++k)
    if (c0 + k < rows) v[k] += wGp_hr * e_q[c0 + k];
}

// ---- the Wishart route (wishart.hpp): the fused sampled step's prompt ---------------------------

// Per-prompt arrays of the Wishart route, with the heads on the inner (contiguous) axis so that
// every loop over them is independent accumulators (vectorizable): X = [p_1..p_H | q_1..q_H]
// [rows, 2H], M [rows, dp], A = Mᵀ X [dp, 2H], GX = G X [rows, 2H] (G p_h, then G q_h), ex = e_qᵀ X.
template <class T>
struct HeadsWork {
  T *X, *M, *A, *GX, *ex;
  LSA_HD static index_t size(index_t heads, index_t d, index_t dp) {
    return 2 * heads * (d + 1) * 2 + (d + 1) * dp + dp * 2 * heads + 2 * heads;
  }
  LSA_HD static HeadsWork at(T* base, index_t heads, index_t d, index_t dp) {
    const index_t w = 2 * heads, rows = d + 1;
    HeadsWork h;
    h.X = base;
    h.M = h.X + rows * w;
    h.A = h.M + rows * dp;
    h.GX = h.A + dp * w;
    h.ex = h.GX + rows * w;
    return h;
  }
};

// M = Ã L̃ T / √N [rows, dp] of wishart.hpp, formed: B = T/√N, L̃ B (L lower, or diag(√λ), or I;
// the noise row of L̃ is 1), then the rows of Ã: x rows as they are, the label row wᵀ(L B) + σ B_d.
template <class T>
LSA_HD_LOCAL void form_m(const wishart::Prompt<T>& pr, T* M) {
  const index_t d = pr.d, dp = pr.dp;
  for (index_t k = 0; k < d; ++k) {
    for (index_t m = 0; m < dp; ++m) M[k * dp + m] = T(0);
    if (pr.L) {
      for (index_t i = 0; i <= k; ++i)
        for (index_t m = 0; m <= i; ++m) M[k * dp + m] += pr.L[k * d + i] * pr.Tm[i * dp + m];
    } else {
      const T c = pr.lam_sqrt ? pr.lam_sqrt[k] : T(1);
      for (index_t m = 0; m <= k; ++m) M[k * dp + m] = c * pr.Tm[k * dp + m];
    }
    for (index_t m = 0; m < dp; ++m) M[k * dp + m] *= pr.inv_sqrt_n;
  }
  T* y = M + d * dp;
  for (index_t m = 0; m < dp; ++m) y[m] = dp > d ? pr.sigma * pr.Tm[d * dp + m] * pr.inv_sqrt_n : T(0);
  for (index_t k = 0; k < d; ++k)
    for (index_t m = 0; m < dp; ++m) y[m] += pr.w[k] * M[k * dp + m];
}

// The residual r = ŷ − y_q of one Wishart prompt (in double) for H heads (parameters as
// heads_inner arranges them), ŷ = Σ_h p_hᵀ G q_h with
// G = M Mᵀ + e_q e_qᵀ/N (the query's label slot is 0): p_hᵀ G q_h = (Mᵀp_h)·(Mᵀq_h) +
// (p_h·e_q)(q_h·e_q)/N. Leaves h.GX = [G p_h | G q_h] and s.e_q for accumulate. O(H d²) per prompt.
// The parameters with the heads on the inner axis, once per range of prompts: p_t [rows, H]
// (p_t[k H + j] = W^PV_j[d, k]) and W_kq_t [rows, rows, H] (W_kq_t[(k rows + c) H + j] = W^KQ_j[k, c]).
// Entry i of [p_t | W_kq_t] (heads_inner_size entries; the CUDA kernels fill a block's copy with
// threads over i): a permutation of W_pv's last rows and W_kq.
LSA_HD_LOCAL index_t heads_inner_size(index_t heads, index_t rows) { return heads * rows * (rows + 1); }
template <class T>
LSA_HD_LOCAL T heads_inner_entry(index_t heads, index_t rows, const T* W_pv, const T* W_kq, index_t i) {
  const index_t n2 = rows * rows;
  if (i < rows * heads) {  // p_t[k H + j] = W^PV_j[d, k]
    const index_t k = i / heads, j = i % heads;
    return W_pv[j * n2 + (rows - 1) * rows + k];
  }
  i -= rows * heads;  // W_kq_t[(k rows + c) H + j] = W^KQ_j[k, c]
  const index_t kc = i / heads, j = i % heads;
  return W_kq[j * n2 + kc];
}
template <class T>
LSA_HD_LOCAL void heads_inner(index_t heads, index_t rows, const T* W_pv, const T* W_kq, T* p_t,
                        T* W_kq_t) {
  const index_t np = rows * heads;
  for (index_t i = 0; i < np; ++i) p_t[i] = heads_inner_entry(heads, rows, W_pv, W_kq, i);
  for (index_t i = np; i < heads_inner_size(heads, rows); ++i)
    W_kq_t[i - np] = heads_inner_entry(heads, rows, W_pv, W_kq, i);
}

template <class T>
LSA_HD_LOCAL double heads_residual(const linear::Law<T>& P, index_t heads, const T* p_t, const T* W_kq_t,
                             const T* z, const T* chi2, const T* w, const T* lam_sqrt,
                             const wishart::Work<T>& s, const HeadsWork<T>& h) {
  const index_t d = P.d, rows = d + 1, H = heads, W = 2 * heads;
  const wishart::Prompt<T> pr = wishart::prompt_factors(P, z, chi2, w, lam_sqrt, s);
  const index_t dp = pr.dp;
  const T inv_n = T(1) / T(P.N);
  for (index_t k = 0; k < rows; ++k) {  // X = [p_j | q_j = W^KQ_j e_q]
    T* x = h.X + k * W;
    for (index_t j = 0; j < H; ++j) {
      x[j] = p_t[k * H + j];
      x[H + j] = T(0);
    }
    for (index_t c = 0; c < rows; ++c)
      for (index_t j = 0; j < H; ++j) x[H + j] += W_kq_t[(k * rows + c) * H + j] * s.e_q[c];
  }
  form_m(pr, h.M);
  for (index_t i = 0; i < dp * W; ++i) h.A[i] = T(0);
  for (index_t j = 0; j < W; ++j) h.ex[j] = T(0);
  for (index_t k = 0; k < rows; ++k) {  // A = Mᵀ X, ex = e_qᵀ X
    for (index_t m = 0; m < dp; ++m)
      for (index_t j = 0; j < W; ++j) h.A[m * W + j] += h.M[k * dp + m] * h.X[k * W + j];
    for (index_t j = 0; j < W; ++j) h.ex[j] += s.e_q[k] * h.X[k * W + j];
  }
  for (index_t k = 0; k < rows; ++k) {  // G X = M A + e_q exᵀ / N
    for (index_t j = 0; j < W; ++j) h.GX[k * W + j] = s.e_q[k] * h.ex[j] * inv_n;
    for (index_t m = 0; m < dp; ++m)
      for (index_t j = 0; j < W; ++j) h.GX[k * W + j] += h.M[k * dp + m] * h.A[m * W + j];
  }
  T y_hat = T(0);
  for (index_t j = 0; j < H; ++j) {
    T v = h.ex[j] * h.ex[H + j] * inv_n;
    for (index_t m = 0; m < dp; ++m) v += h.A[m * W + j] * h.A[m * W + H + j];
    y_hat += v;
  }
  return double(y_hat) - double(wishart::query_target(P, w, s.e_q, z));
}

// Term i of one prompt's contribution to the batch sums (loss_grad_width's layout): r², r (G q_h)[k]
// or r (G p_h)[k] e_q[c] (the CUDA kernel's threads take entries); the last column of each d_K
// block is 0 (e_q[d] = 0).
template <class T>
LSA_HD_LOCAL double accumulate_term(index_t i, double r, const T* e_q, const HeadsWork<T>& h,
                              index_t heads, index_t rows) {
  if (i == 0) return r * r;
  const index_t W = 2 * heads;
  i -= 1;
  if (i < heads * rows) {  // d_p[j rows + k] += r (G q_j)[k]
    const index_t j = i / rows, k = i % rows;
    return r * double(h.GX[k * W + heads + j]);
  }
  i -= heads * rows;  // d_K[(j rows + k) rows + c] += (r (G p_j)[k]) e_q[c]
  const index_t c = i % rows, jk = i / rows, j = jk / rows, k = jk % rows;
  if (c + 1 == rows) return 0.0;
  const double rk = r * double(h.GX[k * W + j]);
  return rk * double(e_q[c]);
}

// acc [loss_grad_width] += the prompt's terms for the weight r: Σ r², Σ r G q_h, Σ r (G p_h) e_qᵀ
// (loss_grad_width's layout), entry by entry from accumulate_term (the CUDA kernel's terms): the
// tests' per-prompt form, which the CPU lanes of multihead_kernels.inl equal.
template <class T>
LSA_HD_LOCAL void accumulate(double r, const T* e_q, const HeadsWork<T>& h, index_t heads, index_t rows,
                       double* acc) {
  const index_t width = loss_grad_width(heads, rows);
  for (index_t i = 0; i < width; ++i) acc[i] += accumulate_term(i, r, e_q, h, heads, rows);
}

// ---- the separate parametrization: W^KQ_h = W^K_hᵀ W^Q_h and the chain rule ---------------------
// W_k, W_q [H, r, rows], W_kq and its gradient [H, rows, rows], all row-major; each entry a sum over
// the rank (merge) or the rows (chain) in index order, in T. The CPU backend loops over the
// entries, the CUDA kernel takes one per thread: the same sums, equal to rounding (the GPU
// contracts the multiply-adds to FMA).

// W^KQ_h[a, b] = Σ_i W^K_h[i, a] W^Q_h[i, b], entry e = (h rows + a) rows + b.
template <class T>
LSA_HD_LOCAL T merged_kq_entry(const T* W_k, const T* W_q, index_t rank, index_t rows, index_t e) {
  const index_t b = e % rows, ha = e / rows, a = ha % rows, h = ha / rows;
  const T* k = W_k + h * rank * rows;
  const T* q = W_q + h * rank * rows;
  T acc = T(0);
  for (index_t i = 0; i < rank; ++i) acc += k[i * rows + a] * q[i * rows + b];
  return acc;
}

// ∂ℓ/∂W^K_h = W^Q_h dW^KQ_hᵀ: [i, a] = Σ_b W^Q_h[i, b] dW^KQ_h[a, b], entry e = (h r + i) rows + a.
template <class T>
LSA_HD_LOCAL T key_grad_entry(const T* W_q, const T* d_W_kq, index_t rank, index_t rows, index_t e) {
  const index_t a = e % rows, hi = e / rows, h = hi / rank;
  const T* q = W_q + hi * rows;
  const T* g = d_W_kq + (h * rows + a) * rows;
  T acc = T(0);
  for (index_t b = 0; b < rows; ++b) acc += q[b] * g[b];
  return acc;
}

// ∂ℓ/∂W^Q_h = W^K_h dW^KQ_h: [i, b] = Σ_a W^K_h[i, a] dW^KQ_h[a, b], entry e = (h r + i) rows + b.
template <class T>
LSA_HD_LOCAL T query_grad_entry(const T* W_k, const T* d_W_kq, index_t rank, index_t rows, index_t e) {
  const index_t b = e % rows, hi = e / rows, h = hi / rank;
  const T* k = W_k + hi * rows;
  const T* g = d_W_kq + h * rows * rows + b;
  T acc = T(0);
  for (index_t a = 0; a < rows; ++a) acc += k[a] * g[a * rows];
  return acc;
}

}  // namespace lsa_native::multihead
