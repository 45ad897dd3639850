// CPU sampling kernels, included by one translation unit per instruction set with LSA_ISA_NS
// defined: normals through simd_random.hpp, linear-regression prompts written straight into E, and
// the per-prompt Wishart step of common/wishart.hpp.
#include <cmath>
#include <cstring>
#include <vector>

#include "common/random.hpp"
#include "common/wishart.hpp"
#include "cpu/sampling_kernels.hpp"
#include "cpu/simd_random.hpp"

#ifndef LSA_ISA_NS
#error "define LSA_ISA_NS before including sampling_kernels.inl"
#endif

namespace lsa_native::cpu::LSA_ISA_NS {
namespace {

using simd::Vec;
constexpr std::uint32_t kX = rng::kStreamX;

template <class T>
void normals_kernel(const rng::StreamAddress& a, std::uint64_t start, index_t n, T* out) {
  simd::fill_normals(a, start, n, out);
}

// Applies a vector function to n values through whole vectors (the tail padded with `pad`).
template <class T, class Fn>
void map_vectors(const T* x, index_t n, T pad, Fn&& fn) {
  constexpr index_t L = simd::kLanes<T>;
  for (index_t i = 0; i < n; i += L) {
    T buf[L];
    for (index_t k = 0; k < L; ++k) buf[k] = i + k < n ? x[i + k] : pad;
    fn(i, std::min(L, n - i), simd::load(buf));
  }
}

template <class T>
void log_kernel(const T* x, index_t n, T* out) {
  map_vectors(x, n, T(1), [&](index_t i, index_t m, Vec<T> v) {
    const Vec<T> r = simd::log(v);
    for (index_t k = 0; k < m; ++k) out[i + k] = r[k];
  });
}

template <class T>
void sincos_kernel(const T* u, index_t n, T* s, T* c) {
  map_vectors(u, n, T(0), [&](index_t i, index_t m, Vec<T> v) {
    Vec<T> sv, cv;
    simd::sincos_2pi(v, sv, cv);
    for (index_t k = 0; k < m; ++k) {
      s[i + k] = sv[k];
      c[i + k] = cv[k];
    }
  });
}

// ---- per-prompt draws (the same for the tokens and the Wishart paths) ------------------------

// w of prompt b from the pool (tasks κ > 0): task j = ⌊κ u⌋, whose w is the normals of
// (seed, step 0, prompt j, kStreamTaskPool). Fresh tasks are drawn with the prompt's other normals.
template <class T>
void draw_task(const LinearPlan<T>& P, index_t b, T* w) {
  std::uint32_t words[4];
  rng::stream_block(P.address(b, rng::kStreamTaskChoice), 0, words);
  const std::uint32_t j = rng::index_from_word(words[0], P.tasks);
  simd::fill_normals(rng::StreamAddress{P.key, j, 0, rng::kStreamTaskPool}, 0, P.d, w);
}

// Λ_τ = diag(λ) of prompt b [ZFB 4.3] from the law; lam [d] (written).
template <class T>
void draw_lambda(const LinearPlan<T>& P, index_t b, T* lam) {
  const rng::StreamAddress a = P.address(b, rng::kStreamCovariance);
  for (index_t k = 0; k < P.d; ++k) {
    switch (P.law) {
      case CovarianceLaw::exponential:
        lam[k] = -P.law_a * std::log(rng::uniform_at<T>(a, static_cast<std::uint64_t>(k)));
        break;
      case CovarianceLaw::gamma:
        lam[k] = P.law_b * rng::gamma_variate<T>(a, static_cast<std::uint32_t>(k), P.law_a);
        break;
      case CovarianceLaw::uniform:
        lam[k] = P.law_a + (P.law_b - P.law_a) * rng::uniform_at<T>(a, static_cast<std::uint64_t>(k));
        break;
      case CovarianceLaw::two_point:
        lam[k] = rng::uniform_at<T>(a, static_cast<std::uint64_t>(k)) < P.law_p ? P.law_a : P.law_b;
        break;
      default:
        lam[k] = T(1);
    }
  }
}

// z <- F z for the lower-triangular factor F [d, d] (k descending, in place).
template <class T>
inline void apply_lower(const T* F, index_t d, T* z) {
  for (index_t k = d; k-- > 0;) {
    T acc = T(0);
    for (index_t m = 0; m <= k; ++m) acc += F[k * d + m] * z[m];
    z[k] = acc;
  }
}

template <class T>
inline void normalize(T* z, index_t d) {
  T s = T(0);
  for (index_t k = 0; k < d; ++k) s += z[k] * z[k];
  const T inv = T(1) / std::sqrt(s);
  for (index_t k = 0; k < d; ++k) z[k] *= inv;
}

template <class T>
inline T dot(const T* a, const T* b, index_t n) {
  T s = T(0);
  for (index_t k = 0; k < n; ++k) s += a[k] * b[k];
  return s;
}

// One prompt's covariates from standard normals z [d]: sphere direction, then the factor
// (F when not null, else diag(lam_sqrt) when not null, else identity).
template <class T>
inline void covariate(const LinearPlan<T>& P, const T* F, const T* lam_sqrt, T* z) {
  if (P.sphere) normalize(z, P.d);
  if (F) apply_lower(F, P.d, z);
  else if (lam_sqrt)
    for (index_t k = 0; k < P.d; ++k) z[k] *= lam_sqrt[k];
}

template <class T>
struct PromptDraws {
  std::vector<T> w, lam, lam_sqrt, z, inv_norm, x_q, E;
  PromptDraws(index_t d, index_t N)
      : w(d), lam(d), lam_sqrt(d), z(static_cast<size_t>((N + 2) * d)), inv_norm(N), x_q(d),
        E(static_cast<size_t>((d + 1) * (N + 1))) {}
};

// Writes prompt b into Eb [d+1, N+1] (the rows of its embedding [ZFB (3.4)]) and returns y_q.
// Covariate normals are feature-major, so that every row of E is one contiguous range: x_i[k]
// (before the factor) is position k·N + i of kStreamX, x_q[k] position N·d + k and a fresh task's
// w_k position (N+1)·d + k; one range fill draws them all. The factor, the sphere normalization and the labels are then row operations
// along the tokens (vectorized by the compiler).
template <class T>
T draw_prompt(const LinearPlan<T>& P, index_t b, PromptDraws<T>& s, T* Eb) {
  const index_t d = P.d, N = P.N, cols = N + 1;
  simd::fill_normals(P.address(b, kX), 0, (N + 1 + (P.tasks ? 0 : 1)) * d, s.z.data());
  if (P.tasks) draw_task(P, b, s.w.data());
  else std::memcpy(s.w.data(), s.z.data() + (N + 1) * d, sizeof(T) * d);
  const bool random_cov = P.law != CovarianceLaw::fixed;
  if (random_cov) {
    draw_lambda(P, b, s.lam.data());
    for (index_t k = 0; k < d; ++k) s.lam_sqrt[k] = std::sqrt(s.lam[k]);
  }
  const T* F = P.L.empty() ? nullptr : P.L.data();
  const T* Fq = P.Lq.empty() ? F : P.Lq.data();
  const T* ls = random_cov ? s.lam_sqrt.data() : nullptr;
  const T* Z = s.z.data();
  T* inv = s.inv_norm.data();
  if (P.sphere) {  // ξ_i = z_i / |z_i|   [CCS H.1]
    for (index_t i = 0; i < N; ++i) inv[i] = T(0);
    for (index_t k = 0; k < d; ++k)
      for (index_t i = 0; i < N; ++i) inv[i] += Z[k * N + i] * Z[k * N + i];
    for (index_t i = 0; i < N; ++i) inv[i] = T(1) / std::sqrt(inv[i]);
  }
  // rows k of X: x_i = F z_i (lower triangular F), or diag(√λ) z_i, or z_i
  for (index_t k = 0; k < d; ++k) {
    T* row = Eb + k * cols;
    if (F) {
      for (index_t i = 0; i < N; ++i) row[i] = T(0);
      for (index_t m = 0; m <= k; ++m) {
        const T c = F[k * d + m];
        const T* zm = Z + m * N;
        for (index_t i = 0; i < N; ++i) row[i] += c * zm[i];
      }
    } else {
      const T c = ls ? ls[k] : T(1);
      const T* zk = Z + k * N;
      for (index_t i = 0; i < N; ++i) row[i] = c * zk[i];
    }
    if (P.sphere)
      for (index_t i = 0; i < N; ++i) row[i] *= inv[i];
  }
  // the query column
  T* x_q = s.x_q.data();
  std::memcpy(x_q, Z + N * d, sizeof(T) * d);
  covariate(P, Fq, ls, x_q);
  for (index_t k = 0; k < d; ++k) Eb[k * cols + N] = x_q[k];
  // labels y_i = <w, x_i> + σ ε_i   [ZFB 3.3; task shift: noise, ZFB 4.2]
  T* y = Eb + d * cols;
  for (index_t i = 0; i < N; ++i) y[i] = T(0);
  for (index_t k = 0; k < d; ++k) {
    const T c = s.w[k];
    const T* row = Eb + k * cols;
    for (index_t i = 0; i < N; ++i) y[i] += c * row[i];
  }
  if (P.sigma > T(0)) {
    T* eps = s.inv_norm.data();  // free now
    simd::fill_normals(P.address(b, rng::kStreamNoise), 0, N, eps);
    for (index_t i = 0; i < N; ++i) y[i] += P.sigma * eps[i];
  }
  y[N] = T(0);
  T y_q = dot(s.w.data(), x_q, d);
  if (P.query_noise && P.sigma > T(0)) {
    T e;
    simd::fill_normals(P.address(b, rng::kStreamQueryNoise), 0, 1, &e);
    y_q += P.sigma * e;
  }
  return y_q;
}

template <class T>
void linear_prompts_kernel(const LinearPlan<T>& P, index_t b0, index_t b1,
                           const LinearPromptOutputs<T>& out) {
  const index_t d = P.d, N = P.N, rows = d + 1, cols = N + 1;
  PromptDraws<T> s(d, N);
  for (index_t b = b0; b < b1; ++b) {
    const index_t o = b - b0;
    T* Eb = out.E ? out.E + o * rows * cols : s.E.data();
    const T y_q = draw_prompt(P, b, s, Eb);
    if (out.y_q) out.y_q[o] = y_q;
    if (out.X)
      for (index_t i = 0; i < N; ++i)
        for (index_t k = 0; k < d; ++k) out.X[(o * N + i) * d + k] = Eb[k * cols + i];
    if (out.y) std::memcpy(out.y + o * N, Eb + d * cols, sizeof(T) * N);
    if (out.w) std::memcpy(out.w + o * d, s.w.data(), sizeof(T) * d);
    if (out.x_q) std::memcpy(out.x_q + o * d, s.x_q.data(), sizeof(T) * d);
    if (out.lambda) {
      for (index_t k = 0; k < d; ++k) {
        if (P.law != CovarianceLaw::fixed) out.lambda[o * d + k] = s.lam[k];
        else out.lambda[o * d + k] = P.L.empty() ? T(1) : dot(P.L.data() + k * d, P.L.data() + k * d, k + 1);
      }
    }
  }
}

// ---- the Wishart step ----------------------------------------------------------------------

template <class T>
void wishart_loss_grad_kernel(const LinearPlan<T>& P, const T* W_pv, const T* W_kq, index_t b0,
                              index_t b1, double* partial) {
  const index_t d = P.d, N = P.N, rows = d + 1;
  const index_t dp = P.sigma > T(0) ? d + 1 : d;  // d' (noise coordinate)
  const index_t n_off = dp * (dp - 1) / 2;
  std::vector<T> w(d), lam(d), lam_sqrt(d), x_q(d), e_q(rows), q(rows), Tm(dp * dp), z(n_off + 2 * d + 1),
      g_p(rows), g_k(rows), scratch(3 * dp), chi2(dp);
  std::vector<double> acc(static_cast<size_t>(fused_partial_size(d)), 0.0);
  double *d_p = acc.data() + 1, *d_K = d_p + rows;
  const T* p = W_pv + d * rows;
  const T* F = P.L.empty() ? nullptr : P.L.data();
  const T* Fq = P.Lq.empty() ? F : P.Lq.data();
  const bool random_cov = P.law != CovarianceLaw::fixed;
  const T inv_n = T(1) / T(N);
  wishart::Prompt<T> pr{d, dp, F, random_cov ? lam_sqrt.data() : nullptr, w.data(), P.sigma,
                        Tm.data(), T(1) / std::sqrt(T(N))};
  for (index_t b = b0; b < b1; ++b) {
    // One range fill of the prompt's normals (stream kStreamBartlettNormal): x_q at positions
    // 0..d−1, the T_ij (i > j, row-major) at d.., w at d + n_off.. (fresh tasks; unused with a task
    // pool), the query noise ε_q last. The same law as the tokens path, other draws.
    simd::fill_normals(P.address(b, rng::kStreamBartlettNormal), 0, 2 * d + n_off + 1, z.data());
    if (P.tasks) draw_task(P, b, w.data());
    else
      for (index_t k = 0; k < d; ++k) w[k] = z[d + n_off + k];
    if (random_cov) {
      draw_lambda(P, b, lam.data());
      for (index_t k = 0; k < d; ++k) lam_sqrt[k] = std::sqrt(lam[k]);
    }
    for (index_t k = 0; k < d; ++k) x_q[k] = z[k];
    covariate(P, Fq, pr.lam_sqrt, x_q.data());
    for (index_t k = 0; k < d; ++k) e_q[k] = x_q[k];
    e_q[d] = T(0);
    // q = W^KQ e_q
    for (index_t r = 0; r < rows; ++r) q[r] = dot(W_kq + r * rows, e_q.data(), rows);
    // Bartlett factor: T_ij ~ N(0,1) below the diagonal (row-major order), T_ii = sqrt(χ²_{N−i})
    simd::fill_bartlett_chi2(P.address(b, rng::kStreamBartlettChi2), N, dp, chi2.data());
    index_t next = d;
    for (index_t i = 0; i < dp; ++i) {
      for (index_t j = 0; j < i; ++j) Tm[i * dp + j] = z[next++];
      Tm[i * dp + i] = std::sqrt(chi2[i]);
      for (index_t j = i + 1; j < dp; ++j) Tm[i * dp + j] = T(0);
    }
    const T y_hat = wishart::predict_and_grads(pr, p, q.data(), e_q.data(), inv_n, g_p.data(),
                                               g_k.data(), scratch.data());
    T y_q = dot(w.data(), x_q.data(), d);
    if (P.query_noise && P.sigma > T(0)) y_q += P.sigma * z[2 * d + n_off];
    const double r = double(y_hat) - double(y_q);
    acc[0] += r * r;
    // d_p += r G q;  d_K += r (G p) e_qᵀ   (SPEC 3.2)
    for (index_t k = 0; k < rows; ++k) {
      d_p[k] += r * double(g_p[k]);
      const double rk = r * double(g_k[k]);
      for (index_t c = 0; c < d; ++c) d_K[k * rows + c] += rk * double(e_q[c]);
    }
  }
  std::memcpy(partial, acc.data(), sizeof(double) * acc.size());
}

}  // namespace

template <class T>
SamplingKernels<T> sampling_kernels() {
  return {&normals_kernel<T>, &log_kernel<T>, &sincos_kernel<T>, &linear_prompts_kernel<T>,
          &wishart_loss_grad_kernel<T>};
}
template SamplingKernels<float> sampling_kernels<float>();
template SamplingKernels<double> sampling_kernels<double>();

}  // namespace lsa_native::cpu::LSA_ISA_NS
