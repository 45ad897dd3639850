// Per-prompt math of the sufficient-statistics ("wishart") LSA step, for CPU and CUDA (LSA_HD).
//
// For Gaussian linear prompts the one-layer LSA sees a prompt only through G = (1/N) Σ_{j<=N+1}
// e_j e_jᵀ, x_q and y_q (SPEC 3.4a). With z_i = (x_i; ε_i) (ε_i only when σ > 0, d' = d + 1;
// else z_i = x_i, d' = d), e_i = Ã z_i with Ã = [[I, 0], [wᵀ, σ]], and
//   G = Ã S̃ Ãᵀ + e_q e_qᵀ/N,  S̃ = (1/N) Σ_i z_i z_iᵀ = L̃ T Tᵀ L̃ᵀ / N   (Bartlett),
// L̃ = diag(L, 1) the Cholesky factor of Cov z, T lower triangular with T_ii = sqrt(χ²_{N−i})
// (0-based i) and T_ij ~ N(0, 1) for i > j [Bartlett 1933; valid for N >= d']. With
// M = Ã L̃ T / √N (a (d+1) x d' product of triangular factors, never formed):
//   ŷ = pᵀ G q = (Mᵀp)·(Mᵀq) + (p·e_q)(q·e_q)/N                                    [ZFB (3.6)]
//   ∂ŷ/∂p = G q = M (Mᵀq) + e_q (q·e_q)/N,   ∂ŷ/∂W^KQ = (G p) e_qᵀ,  G p = M (Mᵀp) + e_q (p·e_q)/N
// Each product with M or Mᵀ is two triangular mat-vecs: O(d²) per prompt, independent of N.
//
// The per-prompt recipes are templates over the element type T and a value type V (default T): V
// may be a SIMD vector of T whose lanes are prompts (the CPU's prompts-in-lanes step); the factors
// shared by every prompt of a step (L, σ, 1/√N, W^KQ) stay T and broadcast over the lanes. Each lane
// does the scalar recipe's operations in the same order.
#pragma once

#include "common/hd.hpp"
#include "common/linear_prompts.hpp"
#include "common/random.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native::wishart {

// One prompt's factors. Arrays are row-major; `L` (lower, [d, d]) or `lam_sqrt` ([d], a diagonal
// factor) or neither (identity) gives L; `Tm` is [dp, dp] lower triangular. V: see the header.
template <class T, class V = T>
struct Prompt {
  index_t d, dp;        // d' = dp = d or d + 1 (noise coordinate)
  const T* L;           // [d, d] or null
  const V* lam_sqrt;    // [d] or null
  const V* w;           // [d]
  T sigma;              // noise scale (used when dp == d + 1)
  const V* Tm;          // [dp, dp]
  T inv_sqrt_n;         // 1/√N
};

// out = Mᵀ u = Tᵀ L̃ᵀ Ãᵀ u / √N.   u [d+1], out [dp], tmp [dp]
template <class T, class V>
LSA_HD_LOCAL void mt_times(const Prompt<T, V>& P, const V* u, V* out, V* tmp) {
  const index_t d = P.d;
  // Ãᵀ u = (u_x + u_y w; σ u_y)
  for (index_t k = 0; k < d; ++k) tmp[k] = u[k] + u[d] * P.w[k];
  if (P.dp > d) tmp[d] = P.sigma * u[d];
  // L̃ᵀ: (Lᵀ a)_m = Σ_{k>=m} L_km a_k (in place, m ascending reads only k >= m)
  if (P.L) {
    for (index_t m = 0; m < d; ++m) {
      V acc = V{};
      for (index_t k = m; k < d; ++k) acc += P.L[k * d + m] * tmp[k];
      tmp[m] = acc;
    }
  } else if (P.lam_sqrt) {
    for (index_t k = 0; k < d; ++k) tmp[k] *= P.lam_sqrt[k];
  }
  // Tᵀ: (Tᵀ b)_m = Σ_{i>=m} T_im b_i
  for (index_t m = 0; m < P.dp; ++m) {
    V acc = V{};
    for (index_t i = m; i < P.dp; ++i) acc += P.Tm[i * P.dp + m] * tmp[i];
    out[m] = acc * P.inv_sqrt_n;
  }
}

// out = M c = Ã L̃ T c / √N.   c [dp], out [d+1], tmp [dp]
template <class T, class V>
LSA_HD_LOCAL void m_times(const Prompt<T, V>& P, const V* c, V* out, V* tmp) {
  const index_t d = P.d;
  // T c (lower triangular)
  for (index_t i = 0; i < P.dp; ++i) {
    V acc = V{};
    for (index_t m = 0; m <= i; ++m) acc += P.Tm[i * P.dp + m] * c[m];
    tmp[i] = acc * P.inv_sqrt_n;
  }
  // L̃ (lower): (L a)_k = Σ_{m<=k} L_km a_m, computed k descending in place
  if (P.L) {
    for (index_t k = d; k-- > 0;) {
      V acc = V{};
      for (index_t m = 0; m <= k; ++m) acc += P.L[k * d + m] * tmp[m];
      tmp[k] = acc;
    }
  } else if (P.lam_sqrt) {
    for (index_t k = 0; k < d; ++k) tmp[k] *= P.lam_sqrt[k];
  }
  // Ã: (x; wᵀx + σ ε)
  V y = V{};
  if (P.dp > d) y = P.sigma * tmp[d];
  for (index_t k = 0; k < d; ++k) {
    out[k] = tmp[k];
    y += P.w[k] * tmp[k];
  }
  out[d] = y;
}

// ŷ and the two backward vectors g_p = G q, g_k = G p for p, q [d+1], e_q = (x_q; 0) [d+1].
//   g_p, g_k [d+1] (written), scratch [3·dp]
template <class T, class V>
LSA_HD_LOCAL V predict_and_grads(const Prompt<T, V>& P, const V* p, const V* q, const V* e_q, T inv_n,
                           V* g_p, V* g_k, V* scratch) {
  const index_t rows = P.d + 1;
  V *a = scratch, *c = scratch + P.dp, *tmp = scratch + 2 * P.dp;
  mt_times(P, p, a, tmp);
  mt_times(P, q, c, tmp);
  V pe = V{}, qe = V{}, ac = V{};
  for (index_t k = 0; k < rows; ++k) {
    pe += p[k] * e_q[k];
    qe += q[k] * e_q[k];
  }
  for (index_t m = 0; m < P.dp; ++m) ac += a[m] * c[m];
  m_times(P, c, g_p, tmp);
  m_times(P, a, g_k, tmp);
  for (index_t k = 0; k < rows; ++k) {
    g_p[k] += e_q[k] * qe * inv_n;
    g_k[k] += e_q[k] * pe * inv_n;
  }
  return ac + pe * qe * inv_n;
}

// ---- one prompt of the fused Wishart step ----------------------------------------------------
//
// Draws of prompt b (backends fill them: the CPU with its SIMD range fills, CUDA with the scalar
// recipes of random.hpp):
//   z [bartlett_normals]: normals 0.. of kStreamBartlettNormal: x_q at 0..d−1, the T_ij (i > j,
//     row-major) at d.., a fresh w at d + n_off.. (unused with a task pool), ε_q last;
//   chi2 [dp]: chi2[i] = χ²_{N−i}, variate i of kStreamBartlettChi2 (rng::chi_square_variate);
//   w [d] (z's slice or the pool task), lam_sqrt [d] (√λ of Λ_τ; random covariance laws only).
// Same law as the tokens path, other draws.

// d' of the law: d, or d + 1 with label noise (the noise coordinate of z_i).
template <class T>
LSA_HD_LOCAL index_t noise_dim(const linear::Law<T>& P) {
  return P.sigma > T(0) ? P.d + 1 : P.d;
}
LSA_HD_LOCAL index_t off_diagonal(index_t dp) { return dp * (dp - 1) / 2; }
LSA_HD_LOCAL index_t bartlett_normals(index_t d, index_t dp) { return 2 * d + off_diagonal(dp) + 1; }
// The normals of z a prompt reads (a prefix of bartlett_normals: positions are fixed, so drawing
// fewer changes none of them): ε_q only with query noise, the fresh w only without a task pool.
template <class T>
LSA_HD_LOCAL index_t bartlett_normals_used(const linear::Law<T>& P) {
  const index_t d = P.d, dp = noise_dim(P);
  if (linear::query_has_noise(P)) return bartlett_normals(d, dp);
  return P.tasks ? d + off_diagonal(dp) : 2 * d + off_diagonal(dp);
}
// Offset of a fresh task's w in z.
LSA_HD_LOCAL index_t fresh_task_offset(index_t d, index_t dp) { return d + off_diagonal(dp); }

// Per-prompt work arrays, carved from one T buffer of size(d, dp) entries.
template <class T>
struct Work {
  T *e_q, *q, *Tm, *g_p, *g_k, *scratch;  // [d+1], [d+1], [dp, dp], [d+1], [d+1], [3 dp]
  LSA_HD static index_t size(index_t d, index_t dp) { return 4 * (d + 1) + dp * dp + 3 * dp; }
  LSA_HD static Work at(T* base, index_t d, index_t dp) {
    Work s;
    s.e_q = base;
    s.q = s.e_q + (d + 1);
    s.Tm = s.q + (d + 1);
    s.g_p = s.Tm + dp * dp;
    s.g_k = s.g_p + (d + 1);
    s.scratch = s.g_k + (d + 1);
    return s;
  }
};

// One prompt's query and Bartlett factor from its draws: s.e_q = (x_q; 0), s.Tm (T_ij ~ N(0,1)
// below the diagonal in row-major order, T_ii = sqrt(χ²_{N−i})); returns the factors of M.
// Math: sqrt on V (rng::ScalarMath for scalars).
template <class T, class V = T, class Math = rng::ScalarMath>
LSA_HD_LOCAL Prompt<T, V> prompt_factors(const linear::Law<T>& P, const V* z, const V* chi2, const V* w,
                                   const V* lam_sqrt, const Work<V>& s) {
  const index_t d = P.d, dp = noise_dim(P);
  const V* ls = P.random_cov() ? lam_sqrt : nullptr;
  for (index_t k = 0; k < d; ++k) s.e_q[k] = z[k];
  s.e_q[d] = V{};
  linear::covariate<T, V, Math>(P, P.query_factor(), ls, s.e_q, 1);  // x_q
  index_t next = d;
  for (index_t i = 0; i < dp; ++i) {
    for (index_t j = 0; j < i; ++j) s.Tm[i * dp + j] = z[next++];
    s.Tm[i * dp + i] = Math::sqrt(chi2[i]);
    for (index_t j = i + 1; j < dp; ++j) s.Tm[i * dp + j] = V{};
  }
  return {d, dp, P.L, ls, w, P.sigma, s.Tm, T(1) / std::sqrt(T(P.N))};
}

// The target y_q = <w, x_q> (+ σ ε_q with query noise) of a prompt with s.e_q set.
template <class T, class V = T>
LSA_HD_LOCAL V query_target(const linear::Law<T>& P, const V* w, const V* e_q, const V* z) {
  const index_t d = P.d;
  V y_q = linear::label(w, e_q, 1, d);
  if (linear::query_has_noise(P)) y_q += P.sigma * z[bartlett_normals(d, noise_dim(P)) - 1];
  return y_q;
}

// The prediction ŷ and the target y_q of one prompt, with s.g_p = G q, s.g_k = G p and s.e_q =
// (x_q; 0) for the gradient terms (acc_term). p = last row of W^PV [d+1] (V: broadcast over the
// lanes), W_kq [d+1, d+1].
template <class T, class V = T, class Math = rng::ScalarMath>
LSA_HD_LOCAL void prompt_prediction(const linear::Law<T>& P, const T* W_kq, const V* p, const V* z,
                              const V* chi2, const V* w, const V* lam_sqrt, const Work<V>& s,
                              V& y_hat, V& y_q) {
  const index_t rows = P.d + 1;
  const Prompt<T, V> pr = prompt_factors<T, V, Math>(P, z, chi2, w, lam_sqrt, s);
  for (index_t r = 0; r < rows; ++r) {  // q = W^KQ e_q
    V acc = V{};
    for (index_t c = 0; c < rows; ++c) acc += W_kq[r * rows + c] * s.e_q[c];
    s.q[r] = acc;
  }
  y_hat = predict_and_grads(pr, p, s.q, s.e_q, T(1) / T(P.N), s.g_p, s.g_k, s.scratch);
  y_q = query_target(P, w, s.e_q, z);
}

// The residual r = ŷ − y_q of one prompt (in double); s as prompt_prediction leaves it.
template <class T>
LSA_HD_LOCAL double prompt_residual(const linear::Law<T>& P, const T* W_kq, const T* p, const T* z,
                              const T* chi2, const T* w, const T* lam_sqrt, const Work<T>& s) {
  T y_hat, y_q;
  prompt_prediction(P, W_kq, p, z, chi2, w, lam_sqrt, s, y_hat, y_q);
  return double(y_hat) - double(y_q);
}

// Term i of one prompt's contribution to the batch sums [1 + rows + rows²] = [Σ r², Σ r G q,
// Σ r (G p) e_qᵀ] (SPEC 3.2): the per-entry form (CUDA lanes take entries); accumulate() adds all
// of them with the same products, in loops without index arithmetic (the CPU).
template <class T>
LSA_HD_LOCAL double acc_term(index_t i, double r, const Work<T>& s, index_t rows) {
  if (i == 0) return r * r;
  if (i <= rows) return r * double(s.g_p[i - 1]);
  const int j = int(i - 1 - rows), n = int(rows);  // 32-bit division: rows² < 2^31
  return (r * double(s.g_k[j / n])) * double(s.e_q[j % n]);
}

// acc[i] += acc_term(i, r, s, rows) for every i < 1 + rows + rows² (the last column of the last
// block is skipped: e_q[d] = 0 adds nothing). A: the accumulator's type (double, or a vector of
// doubles whose lanes are prompts, with g_p, g_k, e_q already in A).
template <class A, class T>
LSA_HD_LOCAL void accumulate(A r, const T* g_p, const T* g_k, const T* e_q, index_t rows, A* acc) {
  acc[0] += r * r;
  A* d_p = acc + 1;
  A* d_K = d_p + rows;
  for (index_t k = 0; k < rows; ++k) {
    d_p[k] += r * A(g_p[k]);
    const A rk = r * A(g_k[k]);
    for (index_t c = 0; c + 1 < rows; ++c) d_K[k * rows + c] += rk * A(e_q[c]);
  }
}
template <class T>
LSA_HD_LOCAL void accumulate(double r, const Work<T>& s, index_t rows, double* acc) {
  accumulate(r, s.g_p, s.g_k, s.e_q, rows, acc);
}

}  // namespace lsa_native::wishart
