// Per-prompt recipe of the linear-regression prompts [ZFB 3.3, 4.2, 4.3; CCS H.1] for CPU and CUDA
// (LSA_HD): where each variate of a prompt comes from in the Philox stream layout (random.hpp), and
// the arithmetic that turns the draws into a prompt's tokens, labels and target.
//
// A prompt b of training step `step` is a pure function of (seed, step, b):
//   kStreamX, feature-major: x_i[k] (before the factor) at position k·N + i, x_q[k] at N·d + k,
//     a fresh task's w_k at (N+1)·d + k (fresh tasks only);
//   task pool (κ > 0): task j = ⌊κ u⌋ from word 0 of block 0 of kStreamTaskChoice, w = the normals
//     of (seed, step 0, prompt j, kStreamTaskPool);
//   Λ_τ = diag(λ) [ZFB 4.3]: λ_k from position k of kStreamCovariance;
//   label noise ε_i at position i of kStreamNoise, query noise ε_q at 0 of kStreamQueryNoise.
// Then, per token (a column of E [d+1, N+1]): x = F z (F lower triangular: Λ's Cholesky factor, or
// the query's), or diag(√λ) z, or z; with sphere covariates x = (F z)/|z| [CCS H.1]; y_i = <w, x_i>
// + σ ε_i [ZFB 3.3]; y_q = <w, x_q> (+ σ ε_q with query noise).
//
// The CUDA kernels call these functions per token; the CPU tokens path applies the same formulas
// row by row (vectorized, cpu/sampling_kernels.inl), in the same order of operations, and is tested
// against them (cpp/tests/test_sampled_step_emulated.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/hd.hpp"
#include "common/random.hpp"
#include "lsa_native/sampling.hpp"

namespace lsa_native::linear {

// The law of one step's prompts as the kernels read it: plain values and pointers (host or device
// memory, wherever the kernel runs).
template <class T>
struct Law {
  index_t d = 1, N = 1;
  rng::PhiloxKey key{0, 0};
  std::uint32_t step = 0;
  const T* L = nullptr;   // [d, d] lower factor of Λ; null: identity (or Λ_τ from `law`)
  const T* Lq = nullptr;  // [d, d] the query's factor (query shift); null: L
  T sigma = T(0);         // label noise σ
  bool query_noise = false;
  std::uint32_t tasks = 0;  // κ; 0: fresh tasks
  CovarianceLaw law = CovarianceLaw::fixed;
  T law_a = T(0), law_b = T(0), law_p = T(0);
  bool sphere = false;

  LSA_HD rng::StreamAddress address(index_t prompt, std::uint32_t stream) const {
    return {key, static_cast<std::uint32_t>(prompt), step, stream};
  }
  LSA_HD bool random_cov() const { return law != CovarianceLaw::fixed; }
  LSA_HD const T* query_factor() const { return Lq ? Lq : L; }
  // Normals of kStreamX a prompt uses: x_i, x_q, and w for fresh tasks.
  LSA_HD index_t covariate_normals() const { return (N + 1 + (tasks ? 0 : 1)) * d; }
};

// Where normal number p of kStreamX goes: E [d+1, N+1] row-major (row stride cols) or w [d].
// (32-bit division: the callers' prompts have fewer than 2^30 entries.)
template <class T>
LSA_HD_LOCAL T* covariate_slot(const Law<T>& P, index_t p, T* E, T* w) {
  const index_t nd = P.N * P.d, cols = P.N + 1;
  if (p < nd) {  // x_i[k], k = p / N, i = p % N
    const auto k = static_cast<std::uint32_t>(p) / static_cast<std::uint32_t>(P.N);
    return E + index_t(k) * cols + (p - index_t(k) * P.N);
  }
  if (p < nd + P.d) return E + (p - nd) * cols + P.N;  // x_q[k]
  return w + (p - nd - P.d);                           // fresh w_k
}

// Index j of prompt b's task in the pool of κ = P.tasks > 0 tasks (multiply-shift, random.hpp).
template <class T>
LSA_HD_LOCAL std::uint32_t task_index(const Law<T>& P, index_t b) {
  std::uint32_t words[4];
  rng::stream_block(P.address(b, rng::kStreamTaskChoice), 0, words);
  return rng::index_from_word(words[0], P.tasks);
}

// The stream whose normals 0..d−1 are task j of the pool.
template <class T>
LSA_HD_LOCAL rng::StreamAddress task_address(const Law<T>& P, std::uint32_t j) {
  return {P.key, j, 0, rng::kStreamTaskPool};
}

// λ_k of prompt b's Λ_τ = diag(λ) [ZFB 4.3] (P.law != fixed), from position k of kStreamCovariance:
// exponential a·(−log u), gamma b·Gamma(a), uniform a + (b − a) u, two-point (u < p ? a : b).
// One case per row of LSA_NATIVE_COVARIANCE_LAWS (sampling.hpp); no default, so that -Wswitch
// names a law of the table without its draw.
template <class T, class Math = rng::ScalarMath>
LSA_HD_LOCAL T lambda_entry(const Law<T>& P, index_t b, index_t k) {
  const rng::StreamAddress a = P.address(b, rng::kStreamCovariance);
  const auto pos = static_cast<std::uint64_t>(k);
  switch (P.law) {
    case CovarianceLaw::fixed:
      break;
    case CovarianceLaw::exponential:
      return -P.law_a * Math::log(rng::uniform_at<T>(a, pos));
    case CovarianceLaw::gamma:
      return P.law_b * rng::gamma_variate<T, Math>(a, static_cast<std::uint32_t>(k), P.law_a);
    case CovarianceLaw::uniform:
      return P.law_a + (P.law_b - P.law_a) * rng::uniform_at<T>(a, pos);
    case CovarianceLaw::two_point:
      return rng::uniform_at<T>(a, pos) < P.law_p ? P.law_a : P.law_b;
  }
  return T(1);
}

// Entry k of the diagonal of prompt b's covariance (sample_linear_prompts' `lambda` output): λ_k of
// Λ_τ for a random law, else Λ_kk = Σ_{m<=k} L_km² (m ascending) of the fixed Λ = L Lᵀ, or 1.
template <class T>
LSA_HD_LOCAL T lambda_diagonal(const Law<T>& P, index_t b, index_t k) {
  if (P.random_cov()) return lambda_entry<T>(P, b, k);
  if (!P.L) return T(1);
  T s = T(0);
  for (index_t m = 0; m <= k; ++m) s += P.L[k * P.d + m] * P.L[k * P.d + m];
  return s;
}

// One covariate in place: v[k·stride] (k < d) holds z ~ N(0, I) and becomes
//   x = F z (F lower triangular, k descending so that row k reads only z_m, m <= k),
//   or diag(lam_sqrt) z, or z;  then, for sphere covariates, x · (1/|z|)   [CCS H.1: Σ^{1/2} ξ].
// Sums run m ascending from 0 (the CPU row twin adds the same terms in the same order).
// V: T, or a SIMD vector of T with one prompt per lane (F shared; Math's sqrt takes V).
template <class T, class V = T, class Math = rng::ScalarMath>
LSA_HD_LOCAL void covariate(const Law<T>& P, const T* F, const V* lam_sqrt, V* v, index_t stride) {
  const index_t d = P.d;
  V inv = V{} + T(1);
  if (P.sphere) {
    V s{};
    for (index_t k = 0; k < d; ++k) s += v[k * stride] * v[k * stride];
    inv = T(1) / Math::sqrt(s);
  }
  for (index_t k = d; k-- > 0;) {
    V x;
    if (F) {
      x = V{};
      for (index_t m = 0; m <= k; ++m) x += F[k * d + m] * v[m * stride];
    } else {
      x = (lam_sqrt ? lam_sqrt[k] : V{} + T(1)) * v[k * stride];
    }
    v[k * stride] = P.sphere ? x * inv : x;
  }
}

// <w, x> with x[k·stride], k ascending from 0: the noiseless label [ZFB 3.3].
template <class T>
LSA_HD_LOCAL T label(const T* w, const T* x, index_t stride, index_t d) {
  T y{};  // T: a scalar, or a vector of prompts in lanes
  for (index_t k = 0; k < d; ++k) y += w[k] * x[k * stride];
  return y;
}

// y_i = <w, x_i> + σ ε_i [ZFB 3.3]; *eps is read only when the law has label noise (σ > 0).
template <class T>
LSA_HD_LOCAL T noisy_label(const Law<T>& P, const T* w, const T* x, index_t stride, const T* eps) {
  const T y = label(w, x, stride, P.d);
  return P.sigma > T(0) ? y + P.sigma * *eps : y;
}

// The query target y_q = <w, x_q> (+ σ ε_q with query noise; ε_q passed by the caller, who draws it
// only when query_has_noise()).
template <class T>
LSA_HD_LOCAL bool query_has_noise(const Law<T>& P) {
  return P.query_noise && P.sigma > T(0);
}

// ---- host side: a validated spec converted for the kernels ----------------------------------

// A LinearPromptSpec of step `step` as a Law<T> (the factors converted to T, stored here). Not
// copyable: its L and Lq point into the plan.
template <class T>
class Plan : public Law<T> {
 public:
  Plan(const LinearPromptSpec& s, std::uint32_t step_index) {
    validate(s);
    this->d = s.dim;
    this->N = s.context;
    this->key = rng::philox_key(s.seed);
    this->step = step_index;
    auto lower = [d = s.dim](const double* F, std::vector<T>& out) {
      out.assign(static_cast<std::size_t>(d * d), T(0));
      for (index_t k = 0; k < d; ++k)
        for (index_t m = 0; m <= k; ++m) out[k * d + m] = T(F[k * d + m]);
    };
    if (s.chol) {
      lower(s.chol, L_);
      this->L = L_.data();
    }
    if (s.query_chol) {
      lower(s.query_chol, Lq_);
      this->Lq = Lq_.data();
    }
    this->sigma = T(s.noise_std);
    this->query_noise = s.query_noise;
    this->tasks = static_cast<std::uint32_t>(s.tasks);
    this->law = s.law;
    this->law_a = T(s.law_a);
    this->law_b = T(s.law_b);
    this->law_p = T(s.law_p);
    this->sphere = s.covariates == Covariates::sphere;
  }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

 private:
  std::vector<T> L_, Lq_;
};

}  // namespace lsa_native::linear
