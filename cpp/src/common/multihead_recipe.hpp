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
// 1 + H rows + H rows² (acc_term's layout).
LSA_HD index_t loss_grad_width(index_t heads, index_t rows) { return 1 + heads * rows + heads * rows * rows; }

// ---- the Gram route on a formed G [rows, rows] (the CUDA prediction kernels) -------------------

// (G x)_r = Σ_c G[r, c] x[c]  (G p_h, G q_h).
template <class T>
LSA_HD T gram_times_entry(const T* G, const T* x, int rows, int r) {
  T acc = T(0);
  for (int c = 0; c < rows; ++c) acc += G[r * rows + c] * x[c];
  return acc;
}

// Σ_h p_h · (G q_h) over the heads, the part of ŷ beyond the query's label slot.
template <class T>
LSA_HD T heads_sum(const T* p, const T* Gq, int heads, int rows) {
  T acc = T(0);
  for (int i = 0; i < heads * rows; ++i) acc += p[i] * Gq[i];
  return acc;
}

// S[r, c] = (dŷ/N) Σ_h (p_h[r] q_h[c] + q_h[r] p_h[c]): the prediction's input gradient is S E on
// every token, + dŷ (Σ_h W^KQ_hᵀ G p_h) on the query column and + dŷ on the query-label slot.
template <class T>
LSA_HD T input_grad_coefficient(T dy_over_n, const T* p, const T* q, int heads, int rows, int r,
                                int c) {
  T acc = T(0);
  for (int h = 0; h < heads; ++h)
    acc += p[h * rows + r] * q[h * rows + c] + q[h * rows + r] * p[h * rows + c];
  return dy_over_n * acc;
}

// (Σ_h W^KQ_hᵀ G p_h)_r = Σ_h Σ_k W^KQ_h[k, r] (G p_h)_k: the query column's gradient through q_h.
template <class T>
LSA_HD T through_queries_entry(const T* W_kq, const T* Gp, int heads, int rows, int r) {
  T acc = T(0);
  for (int h = 0; h < heads; ++h)
    for (int k = 0; k < rows; ++k) acc += W_kq[(h * rows + k) * rows + r] * Gp[h * rows + k];
  return acc;
}

// dŷ ∂ŷ/∂E[r, j] = (S E)[r, j] (+ dŷ through_r on the query column, + dŷ on the label slot).
template <class T>
LSA_HD T input_grad_entry(T dy, recipe::Mat<T> S, recipe::Mat<T> E, T through_r, int rows, int N,
                          int r, int j) {
  T v = recipe::row_combination_entry(T(0), S, E, rows, r, j);
  if (j == N) {
    v += dy * through_r;
    if (r == rows - 1) v += dy;
  }
  return v;
}

// Term i of one prompt's contribution to the batch sums [loss_grad_width] = [Σ w², Σ w G q_h,
// Σ w (G p_h) e_qᵀ] for the weight w (the residual or
// dŷ; slot 0 only for a loss).
template <class T>
LSA_HD double acc_term(int i, double w, const T* Gq, const T* Gp, const T* e_q, int heads,
                       int rows) {
  if (i == 0) return w * w;
  if (i <= heads * rows) return w * double(Gq[i - 1]);
  const int j = i - 1 - heads * rows, n = rows;  // j = (h rows + r) rows + c
  return (w * double(Gp[j / n])) * double(e_q[j % n]);
}

// ---- the Wishart route (wishart.hpp): the fused sampled step's prompt ---------------------------

// Per-prompt head arrays: g_p = G q_h, g_k = G p_h [H, rows] each.
template <class T>
struct HeadsWork {
  T *g_p, *g_k;
  LSA_HD static index_t size(index_t heads, index_t d) { return 2 * heads * (d + 1); }
  LSA_HD static HeadsWork at(T* base, index_t heads, index_t d) {
    return {base, base + heads * (d + 1)};
  }
};

// The residual r = ŷ − y_q of one Wishart prompt (in double) for H heads, with h.g_p, h.g_k and
// s.e_q = (x_q; 0) for the gradient terms (accumulate). Head 0 is wishart::prompt_residual (which
// draws e_q, the Bartlett factor and y_q into s); heads 1.. add p_hᵀ G q_h on the same factor.
template <class T>
LSA_HD double heads_residual(const linear::Law<T>& P, index_t heads, const T* W_pv, const T* W_kq,
                             const T* z, const T* chi2, const T* w, const T* lam_sqrt,
                             const wishart::Work<T>& s, const HeadsWork<T>& h) {
  const index_t d = P.d, rows = d + 1, n2 = rows * rows;
  double r = wishart::prompt_residual(P, W_kq, W_pv + d * rows, z, chi2, w, lam_sqrt, s);
  for (index_t k = 0; k < rows; ++k) {
    h.g_p[k] = s.g_p[k];
    h.g_k[k] = s.g_k[k];
  }
  const wishart::Prompt<T> pr{d, wishart::noise_dim(P), P.L, P.random_cov() ? lam_sqrt : nullptr,
                              w, P.sigma, s.Tm, T(1) / std::sqrt(T(P.N))};
  const recipe::Mat<T> e_q{s.e_q, 1, 0};  // the query column as a [rows, 1] prompt
  for (index_t k = 1; k < heads; ++k) {
    const recipe::Mat<T> W = recipe::rows_of(W_kq + k * n2, int(rows));
    for (index_t c = 0; c < rows; ++c) s.q[c] = recipe::query_entry(W, e_q, int(rows), 0, int(c));
    r += double(wishart::predict_and_grads(pr, W_pv + k * n2 + d * rows, s.q, s.e_q,
                                           T(1) / T(P.N), h.g_p + k * rows, h.g_k + k * rows,
                                           s.scratch));
  }
  return r;
}

// acc [loss_grad_width] += the prompt's terms for the weight r (acc_term's layout; the last
// column of each d_K block is skipped: e_q[d] = 0 adds nothing).
template <class T>
LSA_HD void accumulate(double r, const T* e_q, const HeadsWork<T>& h, index_t heads, index_t rows,
                       double* acc) {
  acc[0] += r * r;
  double* d_p = acc + 1;
  double* d_K = d_p + heads * rows;
  for (index_t k = 0; k < heads * rows; ++k) {
    d_p[k] += r * double(h.g_p[k]);
    const double rk = r * double(h.g_k[k]);
    for (index_t c = 0; c + 1 < rows; ++c) d_K[k * rows + c] += rk * double(e_q[c]);
  }
}

}  // namespace lsa_native::multihead
