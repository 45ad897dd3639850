// Exact Gaussian population loss of H-head linear self-attention and its gradient [Zhang, Singh,
// Latham & Saxe, ICML 2025, in ZFB's embedding]: F = E + Σ_h W^PV_h E (Eᵀ W^KQ_h E)/N, ŷ = F[d, N].
//
// ŷ is linear in T = Σ_h p_h ⊗ K_h (p_h the last row of W^PV_h, K_h the first d columns of
// W^KQ_h), so L = ½ E[(ŷ − y)²] is a quadratic in T: the one-head Isserlis terms made bilinear
// over pairs of heads (docs/population.md, "H heads"), O(H d³ + H² d²) per evaluation, float64.
// Same data, label noise and covariance laws as population.hpp.
//
// Parametrizations: merged, W_kq [H, d+1, d+1] (W^KQ_h full); separate, W^KQ_h = W^K_hᵀ W^Q_h with
// W_k, W_q [H, r, d+1], 1 <= r <= d+1 (keys and queries see the whole token). W_pv [H, d+1, d+1].
// Arrays are row-major. Every argument rule is checked in population_multihead.cpp (errors name the
// argument). Gradients are full-size with exact zeros where a parameter does not affect ŷ; they
// are written when every gradient pointer of the call is not null. Thread-safe.
#pragma once

#include "lsa_native/population.hpp"

namespace lsa_native {

// How Λ is given: fixed Λ [d, d] (symmetric positive definite), or a random diagonal Λτ with
// independent entries by their raw moments [3, d] = (E λ_i, E λ_i², E λ_i³) (exact: L is cubic
// in the λ_i, as for one head).
enum class PopulationCovariance { fixed, random_diagonal };

// `law_checked`: the covariance (Λ symmetric positive definite, or the moments) was checked by
// check_multihead_population_law for this call's d, law and data: the per-call check (a Cholesky
// factorization of Λ) is skipped. The gradient flow checks once per run.
double multihead_population_loss(index_t d, index_t heads, const double* W_pv, const double* W_kq,
                                 PopulationCovariance law, const double* covariance, index_t N,
                                 double* d_W_pv = nullptr, double* d_W_kq = nullptr,
                                 const LabelNoise& noise = {}, bool law_checked = false);

double multihead_population_loss_separate(index_t d, index_t heads, index_t rank,
                                          const double* W_pv, const double* W_k, const double* W_q,
                                          PopulationCovariance law, const double* covariance, index_t N,
                                          double* d_W_pv = nullptr, double* d_W_k = nullptr,
                                          double* d_W_q = nullptr, const LabelNoise& noise = {},
                                          bool law_checked = false);

// Throws Error naming the argument unless d >= 1 and the law's data are valid: Λ [d, d] finite,
// symmetric, positive definite; or moments [3, d] finite with E λ_i > 0 and Var λ_i >= 0.
void check_multihead_population_law(index_t d, PopulationCovariance law, const double* covariance);

}  // namespace lsa_native
