// CPU sampling kernels, included by one translation unit per instruction set with LSA_ISA_NS
// defined: normals through simd_random.hpp, linear-regression prompts written straight into E, and
// the per-prompt Wishart step of common/wishart.hpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <utility>
#include <vector>

#include "common/kernel_gp.hpp"
#include "common/random.hpp"
#include "common/wishart.hpp"
#include "cpu/sampling_kernels.hpp"
#include "cpu/simd_random.hpp"

#ifndef LSA_ISA_NS
#error "define LSA_ISA_NS before including sampling_kernels.inl"
#endif

namespace lsa_native::cpu::LSA_ISA_NS {
namespace {

using simd::I64x4;
using simd::Vec;
using simd::VecBuffer;
constexpr std::uint32_t kX = rng::kStreamX;

// UnitVector's twin for scratch that is written before it is read: no value-initialization (the
// fused tokens step at d = 20, N = 100 zeroed 74 KB of such buffers per 8 prompts while its
// covariates were packed; now a prompt's 8 KB and an E it never uses).
template <class T>
struct ScratchAllocator : simd::UnitAllocator<T> {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = ScratchAllocator<U>;
  };
  ScratchAllocator() = default;
  template <class U>
  constexpr ScratchAllocator(const ScratchAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialization: indeterminate for floats
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
template <class T>
using ScratchVector = std::vector<T, ScratchAllocator<T>>;

template <class T>
void normals_kernel(const rng::StreamAddress& a, std::uint64_t start, index_t n, T* out) {
  simd::fill_normals(a, start, n, out);
}
template <class T>
void gammas_kernel(const rng::StreamAddress& a, std::uint32_t start, index_t n, T shape, T* out) {
  simd::fill_gammas(a, start, n, shape, out);
}
template <class T>
void uniforms_kernel(const rng::StreamAddress& a, std::uint64_t start, index_t n, T* out) {
  simd::fill_uniforms(a, start, n, out);
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

// w of prompt b from the pool of κ = P.tasks > 0 tasks (linear_prompts.hpp). A range of at least κ
// prompts draws the pool once (each task is a pure function of its index, so the cached task is
// the one drawn per prompt otherwise); a shorter range draws each prompt's task.
template <class T>
class TaskPool {
 public:
  TaskPool(const LinearPlan<T>& P, index_t prompts) : P_(P) {
    if (P.tasks == 0 || index_t(P.tasks) > prompts) return;
    cache_.resize(static_cast<size_t>(index_t(P.tasks) * P.d));
    for (index_t j = 0; j < index_t(P.tasks); ++j)
      simd::fill_normals(linear::task_address(P, std::uint32_t(j)), 0, P.d, cache_.data() + j * P.d);
  }
  void draw(index_t b, T* w) const {
    const std::uint32_t j = linear::task_index(P_, b);
    if (cache_.empty()) simd::fill_normals(linear::task_address(P_, j), 0, P_.d, w);
    else std::memcpy(w, cache_.data() + index_t(j) * P_.d, sizeof(T) * P_.d);
  }

 private:
  const LinearPlan<T>& P_;
  simd::UnitVector<T> cache_;
};

// Λ_τ = diag(λ) of prompt b [ZFB 4.3]; lam, lam_sqrt [d] (written).
template <class T>
void draw_lambda(const LinearPlan<T>& P, index_t b, T* lam, T* lam_sqrt) {
  for (index_t k = 0; k < P.d; ++k) {
    lam[k] = linear::lambda_entry<T>(P, b, k);
    lam_sqrt[k] = std::sqrt(lam[k]);
  }
}

template <class T>
inline T dot(const T* a, const T* b, index_t n) {
  T s = T(0);
  for (index_t k = 0; k < n; ++k) s += a[k] * b[k];
  return s;
}

// out[i] = x[i], i < n: whole vectors, the last one overlapping (no call into memcpy for a short
// row, no scalar tail), scalar below one vector. Token rows, and w and x_q (a libc memcpy call each
// for d = 5 floats cost ~13% of draw_prompt's own work at d = 5, N = 20, normals excluded).
template <class T>
void copy_tokens(const T* x, index_t n, T* out) {
  constexpr index_t L = simd::kLanes<T>;
  if (n < L) {
    for (index_t i = 0; i < n; ++i) out[i] = x[i];
    return;
  }
  for (index_t i = 0; i < n - L; i += L) simd::store(out + i, simd::load(x + i));
  simd::store(out + n - L, simd::load(x + n - L));
}

// y_i = Σ_k w_k X[k, i] (k ascending from 0: linear::label's sum per token) for i < N, X's rows
// at stride `cols`: whole vectors of tokens, the last one overlapping the one before it when N is
// not a multiple of the lanes (a token's sum is the same operations whichever vector computes it,
// so the overlap writes the same bits; no scalar tail), scalar below one vector.
template <class T>
void context_labels(const T* w, const T* X, index_t d, index_t N, index_t cols, T* y) {
  constexpr index_t L = simd::kLanes<T>;
  if (N < L) {
    for (index_t i = 0; i < N; ++i) y[i] = linear::label(w, X + i, cols, d);
    return;
  }
  for (index_t i0 = 0;; i0 += L) {
    const index_t i = std::min(i0, N - L);
    Vec<T> acc{};
    for (index_t k = 0; k < d; ++k) acc += w[k] * simd::load(X + k * cols + i);
    simd::store(y + i, acc);
    if (i == N - L) break;
  }
}

template <class T>
struct PromptDraws {
  ScratchVector<T> w, lam, lam_sqrt, inv_norm, x_q, E;
  // E: a prompt's embedding when the caller keeps none (with_E)
  PromptDraws(index_t d, index_t N, bool with_E = true)
      : w(d), lam(d), lam_sqrt(d), inv_norm(N), x_q(d),
        E(with_E ? static_cast<size_t>((d + 1) * (N + 1)) : 0) {}
};

// Writes prompt b into Eb [d+1, N+1] (the rows of its embedding [ZFB (3.4)]) and returns y_q.
// The stream layout and the formulas are linear_prompts.hpp's: covariate normals are feature-major,
// so every row of E is one contiguous range and one range fill draws them all. The context tokens
// are this file's row twin of linear::covariate and linear::label (the same terms in the same order,
// as row operations along the tokens that the compiler vectorizes); the query column calls them.
// Z: prompt b's covariate normals (kStreamX positions 0 .. covariate_normals() − 1; see
// CovariateNormals); eps: its label noise ε_1..ε_N (kStreamNoise positions 0 .. N − 1; see
// PromptNormals), or null: drawn here.
template <class T>
T draw_prompt(const LinearPlan<T>& P, const TaskPool<T>& pool, index_t b, const T* Z, PromptDraws<T>& s,
              T* Eb, const T* eps = nullptr) {
  const index_t d = P.d, N = P.N, cols = N + 1;
  if (P.tasks) pool.draw(b, s.w.data());
  else copy_tokens(Z + (N + 1) * d, d, s.w.data());
  if (P.random_cov()) draw_lambda(P, b, s.lam.data(), s.lam_sqrt.data());
  const T* F = P.L;
  const T* ls = P.random_cov() ? s.lam_sqrt.data() : nullptr;
  T* inv = s.inv_norm.data();
  if (P.sphere) {  // ξ_i = z_i / |z_i|   [CCS H.1]
    for (index_t i = 0; i < N; ++i) inv[i] = T(0);
    for (index_t k = 0; k < d; ++k)
      for (index_t i = 0; i < N; ++i) inv[i] += Z[k * N + i] * Z[k * N + i];
    for (index_t i = 0; i < N; ++i) inv[i] = T(1) / std::sqrt(inv[i]);
  }
  // rows k of X: x_i = F z_i (lower triangular F), or diag(√λ) z_i, or z_i (copied)
  const bool plain = !F && !ls && !P.sphere;
  for (index_t k = 0; plain && k < d; ++k) copy_tokens(Z + k * N, N, Eb + k * cols);
  for (index_t k = 0; !plain && k < d; ++k) {
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
  copy_tokens(Z + N * d, d, x_q);
  if (P.query_factor() || ls || P.sphere) linear::covariate(P, P.query_factor(), ls, x_q, 1);  // else x = z
  for (index_t k = 0; k < d; ++k) Eb[k * cols + N] = x_q[k];
  // labels y_i = <w, x_i> + σ ε_i   [ZFB 3.3; task shift: noise, ZFB 4.2]
  T* y = Eb + d * cols;
  context_labels(s.w.data(), Eb, d, N, cols, y);
  if (P.sigma > T(0)) {
    if (!eps) {
      simd::fill_normals(P.address(b, rng::kStreamNoise), 0, N, s.inv_norm.data());  // free now
      eps = s.inv_norm.data();
    }
    for (index_t i = 0; i < N; ++i) y[i] += P.sigma * eps[i];
  }
  y[N] = T(0);
  T y_q = linear::label(s.w.data(), x_q, 1, d);
  if (linear::query_has_noise(P)) {
    T e;
    simd::fill_normals(P.address(b, rng::kStreamQueryNoise), 0, 1, &e);
    y_q += P.sigma * e;
  }
  return y_q;
}

// n normals per prompt of one stream for a range's prompts (the covariates: kStreamX,
// covariate_normals() per prompt, CovariateNormals below; the label noise: kStreamNoise, N): ranges
// of at most kPackedBytes drawn kPackedPrompts prompts at a time by simd::fill_normals_packed (no
// per-prompt rounding up to 8 blocks, no partial group through a buffer: on Zen 3 at d = 5, N = 20,
// 3.8 instead of 4.4-4.5 cycles per covariate normal (bench/cpp/tokens_step_parts.cpp,
// 2026-11-28); N = 20 noise normals per prompt drawn alone cost ~190 cycles a prompt, a quarter of
// the fused tokens step at d = 5 with noise), longer ones per prompt by simd::fill_normals into a buffer that
// stays in L1 while draw_prompt copies it into E. At d = 20, N = 100 (8160 bytes in float32) the
// packed fill alone is slightly faster, but its 65 KB buffer for 8 prompts leaves L1, and the fused
// tokens step took 5.17-5.19 cycles per normal packed against 4.67 per prompt (kPackedBytes 8192 ->
// 4096, 2026-11-28; the float64 ranges there, 16 KB, were already per prompt: packed gained
// nothing). Only those two sizes decided the threshold: at d = 10 a review measured the step ~1.5%
// faster per prompt just above 4 KB than packed just below, so a lower threshold may pay there
// (not measured). n = 0: the callers draw nothing and never call at() (fill_normals_packed would
// divide by zero).
template <class T>
class PromptNormals {
 public:
  static constexpr index_t kPackedBytes = 4096, kPackedPrompts = 8;
  PromptNormals(const LinearPlan<T>& P, index_t b0, index_t b1, std::uint32_t stream, index_t n)
      : P_(P), b0_(b0), b1_(b1), n_(n), stream_(stream),
        stride_((n_ + rng::NormalsPerBlock<T>::value - 1) / rng::NormalsPerBlock<T>::value *
                rng::NormalsPerBlock<T>::value),
        packed_(n_ * index_t(sizeof(T)) <= kPackedBytes),
        z_(static_cast<size_t>(packed_ ? simd::packed_normals_size<T>(n_, kPackedPrompts) : n_)) {}
  // Prompt b's normals (b ascending from b0: a group is drawn at its first prompt).
  const T* at(index_t b) {
    if (!packed_) {
      simd::fill_normals(P_.address(b, stream_), 0, n_, z_.data());
      return z_.data();
    }
    const index_t g = (b - b0_) % kPackedPrompts;
    if (g == 0)
      simd::fill_normals_packed(P_.address(b, stream_), n_, std::min(kPackedPrompts, b1_ - b), z_.data());
    return z_.data() + g * stride_;
  }

 private:
  const LinearPlan<T>& P_;
  index_t b0_, b1_, n_;
  std::uint32_t stream_;
  index_t stride_;
  bool packed_;
  ScratchVector<T> z_;
};
template <class T>
struct CovariateNormals : PromptNormals<T> {
  CovariateNormals(const LinearPlan<T>& P, index_t b0, index_t b1)
      : PromptNormals<T>(P, b0, b1, kX, P.covariate_normals()) {}
};

template <class T>
void linear_prompts_kernel(const LinearPlan<T>& P, index_t b0, index_t b1,
                           const LinearPromptOutputs<T>& out) {
  const index_t d = P.d, N = P.N, rows = d + 1, cols = N + 1;
  PromptDraws<T> s(d, N, !out.E);
  const TaskPool<T> pool(P, b1 - b0);
  CovariateNormals<T> normals(P, b0, b1);
  const bool noisy = P.sigma > T(0);
  PromptNormals<T> noise(P, b0, b1, rng::kStreamNoise, noisy ? N : 0);
  for (index_t b = b0; b < b1; ++b) {
    const index_t o = b - b0;
    T* Eb = out.E ? out.E + o * rows * cols : s.E.data();
    const T y_q = draw_prompt(P, pool, b, normals.at(b), s, Eb, noisy ? noise.at(b) : nullptr);
    if (out.y_q) out.y_q[o] = y_q;
    if (out.X)
      for (index_t i = 0; i < N; ++i)
        for (index_t k = 0; k < d; ++k) out.X[(o * N + i) * d + k] = Eb[k * cols + i];
    if (out.y) std::memcpy(out.y + o * N, Eb + d * cols, sizeof(T) * N);
    if (out.w) std::memcpy(out.w + o * d, s.w.data(), sizeof(T) * d);
    if (out.x_q) std::memcpy(out.x_q + o * d, s.x_q.data(), sizeof(T) * d);
    if (out.lambda) {
      for (index_t k = 0; k < d; ++k) {
        if (P.random_cov()) out.lambda[o * d + k] = s.lam[k];
        else out.lambda[o * d + k] = P.L ? dot(P.L + k * d, P.L + k * d, k + 1) : T(1);
      }
    }
  }
}

// ---- K-GP prompts ---------------------------------------------------------------------------

// kernel_gp.hpp's ScalarOps in SIMD: the normals by fill_normals; the exp kernel's entries by
// simd.hpp's exp over the packed lower triangle (whole vectors), unpacked in place and mirrored
// (K stays exactly symmetric: each entry is computed once); the other kernels' (K♦ included) by
// the scalar kernel_matrix.
struct KernelGPSimdOps {
  static void normals(const rng::StreamAddress& a, int count, double* z) {
    simd::fill_normals(a, 0, count, z);
  }
  static void kernel_matrix(const detail::kgp::Kernel& kernel, const double* xi, int n1, int d,
                            double* K) {
    if (kernel.code != detail::kgp::kExp) {
      detail::kgp::kernel_matrix(kernel, xi, n1, d, K);
      return;
    }
    index_t p = 0;  // packed position of (i, j), j <= i: i(i+1)/2 + j <= i·n1 + j
    for (int i = 0; i < n1; ++i)
      for (int j = 0; j <= i; ++j) {
        double t = 0;
        for (int k = 0; k < d; ++k) t += xi[i * d + k] * xi[j * d + k];
        K[p++] = t * kernel.inv_bw2;
      }
    simd::exp_inplace(K, p);
    // unpack from the last entry down: (i, j) moves to i·n1 + j >= its packed position, which no
    // entry still packed (all before it) occupies
    for (int i = n1; i-- > 0;)
      for (int j = i + 1; j-- > 0;) K[i * n1 + j] = K[--p];
    for (int i = 0; i < n1; ++i)
      for (int j = 0; j < i; ++j) K[j * n1 + i] = K[i * n1 + j];
  }
};

// detail::cholesky_in_place on 4 matrices at once: lane l of a[i·n + j] holds entry (i, j) of
// matrix l. The same sums in the same order, so a lane's factor is the scalar recipe's (to FMA
// contraction; its strict upper triangle zeroed likewise). ok[l] is false where matrix l has a
// squared pivot a_jj − Σ L_jk² that is not > margin·a_jj or not finite (that lane's entries are
// then junk; margin 0 is the scalar recipe's test). poll() runs before each column.
template <class Poll>
I64x4 cholesky_lanes(Vec<double>* a, int n, double margin, Poll poll) {
  I64x4 ok = ~I64x4{};
  for (int j = 0; j < n; ++j) {
    poll();
    const Vec<double> a_jj = a[j * n + j];
    Vec<double> s = a_jj;
    for (int k = 0; k < j; ++k) s -= a[j * n + k] * a[j * n + k];
    ok &= (s > margin * a_jj) & (s < std::numeric_limits<double>::infinity());
    const Vec<double> pivot = simd::sqrt(s);
    a[j * n + j] = pivot;
    for (int i = j + 1; i < n; ++i) {
      Vec<double> v = a[i * n + j];
      for (int k = 0; k < j; ++k) v -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = v / pivot;
    }
    for (int i = 0; i < j; ++i) a[i * n + j] = Vec<double>{};
  }
  return ok;
}

// The smallest squared Cholesky pivot, relative to its diagonal entry, that the SIMD route takes:
// its draws and K differ from the scalar recipe's by a few ulp, which moves a squared pivot by
// ~n·ε·a_jj; far above that, both routes factor K and Y = L z differs only by rounding (times
// ‖L⁻¹‖ <= 1e4). A prompt below it (K numerically singular: the Cholesky-or-eigen decision and the
// eigen route's Householder signs depend on the last bits) is redone by the scalar recipe.
constexpr double kKernelGPPivotMargin = 1e-8;

// K-GP prompts [b0, b1), outputs as kernel_gp.hpp's sample_prompt with ScalarOps (the CUDA
// kernel's recipe) to rounding, by the kernel's label_route:
//   exp, K♦ with α < 1 (Cholesky route): 4 prompts at a time: KernelGPSimdOps' draws and K per prompt, the Cholesky in SIMD lanes,
//        then Y = L z and write_prompt per prompt; a prompt whose K fails the margin above takes
//        g.scalar_prompt (the scalar recipe's bits);
//   linear, K♦ with α = 1 (Gram route): sample_prompt with KernelGPSimdOps (Y = ΞGθ is continuous
//        in the draws' rounding);
//   relu (eigen route): g.scalar_prompt: its eigen route's Householder signs turn on exact zeros of max(t, 0),
//        so the draws' last bits would change Y by O(1) (same law, other values).
template <class T>
bool kernel_gp_prompts_kernel(const KernelGPBatch<T>& g, index_t b0, index_t b1,
                              const std::function<void()>& poll) {
  namespace kgp = detail::kgp;
  constexpr int L = int(simd::kLanes<double>);
  const int n1 = g.n1, d = g.d;
  const index_t ws = kgp::prompt_workspace(n1, d), prompt_size = index_t(d + 1) * n1;
  const int route = kgp::label_route(g.kernel);
  const bool batched = route == kgp::kMethodCholesky;
  // the lanes' workspaces, then one for whole prompts
  simd::UnitVector<double> work(static_cast<size_t>((batched ? L + 1 : 1) * ws));
  double* const scratch = work.data() + (batched ? L : 0) * ws;
  VecBuffer<double> lanes(batched ? index_t(n1) * n1 : 0);
  const auto poll_fn = [&poll] { poll(); };
  bool converged = true;
  const auto record = [&](index_t b, int method) {
    if (method == kgp::kMethodEigenUnconverged) converged = false;
    if (g.method) g.method[b] = method;
  };
  if (!batched) {
    for (index_t b = b0; b < b1; ++b) {
      poll();
      if (route == kgp::kMethodEigen) {
        record(b, g.scalar_prompt(g, b, scratch, poll));
        continue;
      }
      record(b, kgp::sample_prompt(g.key, static_cast<std::uint32_t>(b), g.step, g.kernel, g.root,
                                   n1, d, scratch, g.Z0 + b * prompt_size, g.y_q + b,
                                   g.xi ? g.xi + b * n1 * d : nullptr, poll_fn, KernelGPSimdOps{}));
    }
    return converged;
  }
  for (index_t b = b0; b < b1; b += L) {
    const int m = int(std::min<index_t>(L, b1 - b));
    for (int l = 0; l < m; ++l) {
      poll();
      const auto prompt = static_cast<std::uint32_t>(b + l);
      double* xi = work.data() + l * ws;
      double* A = xi + n1 * d + n1;  // after ξ and Y: gp_labels' workspace A [n1 x n1], z [n1], ...
      kgp::sphere_points({g.key, prompt, g.step, kgp::kStreamGPPoints}, n1, d, xi, KernelGPSimdOps{});
      KernelGPSimdOps::normals({g.key, prompt, g.step, kgp::kStreamGPLabels}, n1, A + n1 * n1);
      KernelGPSimdOps::kernel_matrix(g.kernel, xi, n1, d, A);
      for (index_t e = 0; e < index_t(n1) * n1; ++e) lanes[size_t(e)][l] = A[e];
    }
    for (int l = m; l < L; ++l)  // idle lanes repeat lane 0
      for (index_t e = 0; e < index_t(n1) * n1; ++e) lanes[size_t(e)][l] = lanes[size_t(e)][0];
    const I64x4 ok = cholesky_lanes(lanes.data(), n1, kKernelGPPivotMargin, poll_fn);
    for (int l = 0; l < m; ++l) {
      if (!ok[l]) {
        record(b + l, g.scalar_prompt(g, b + l, scratch, poll));
        continue;
      }
      double* xi = work.data() + l * ws;
      double* y = xi + n1 * d;
      double* A = y + n1;
      for (index_t e = 0; e < index_t(n1) * n1; ++e) A[e] = lanes[size_t(e)][l];
      detail::lower_matvec(A, n1, A + n1 * n1, y);
      kgp::write_prompt(xi, y, g.root, n1, d, g.Z0 + (b + l) * prompt_size, g.y_q + b + l,
                        g.xi ? g.xi + (b + l) * n1 * d : nullptr);
      record(b + l, kgp::kMethodCholesky);
    }
  }
  return converged;
}

// ---- the Wishart step ----------------------------------------------------------------------

// Prompts whose draws are made together (SIMD lanes over prompts in the fills and the step).
constexpr index_t kWishartGroup = 8;

// Prompts b .. b+m−1's tasks from the pool (w + g·d; with P.tasks) and their Λ_τ (lam_sqrt + g·d;
// random covariance laws; lam [d] scratch). Fresh tasks are slices of the normals (the caller's).
template <class T>
void draw_pool_tasks_and_lambdas(const LinearPlan<T>& P, const TaskPool<T>& pool, index_t b,
                                 index_t m, T* w, T* lam, T* lam_sqrt) {
  for (index_t g = 0; g < m; ++g) {
    if (P.tasks) pool.draw(b + g, w + g * P.d);
    if (P.random_cov()) draw_lambda(P, b + g, lam, lam_sqrt + g * P.d);
  }
}

// The draws of prompts [b0, b1) of the Wishart step by this file's range fills, kWishartGroup
// prompts at a time, handed to visit(b, m, z, chi2, w, lam_sqrt) for prompts b .. b+m−1: prompt
// b + g's draws at z + g·nz (nz = bartlett_normals_used), chi2 + g·dp, w + g·d, lam_sqrt + g·d.
template <class T, class Visit>
void for_each_wishart_group(const LinearPlan<T>& P, index_t b0, index_t b1, Visit&& visit) {
  const index_t d = P.d, N = P.N;
  const index_t dp = wishart::noise_dim(P);
  constexpr index_t kGroup = kWishartGroup;
  const index_t nz = wishart::bartlett_normals_used(P);  // the draws the law needs, no more
  simd::UnitVector<T> lam(d), w(kGroup * d), lam_sqrt(kGroup * d), z(kGroup * nz), chi2(kGroup * dp);
  const TaskPool<T> pool(P, b1 - b0);
  for (index_t b = b0; b < b1; b += kGroup) {
    const index_t m = std::min(kGroup, b1 - b);
    simd::fill_normals_prompts(P.address(b, rng::kStreamBartlettNormal), nz, m, z.data());
    simd::fill_bartlett_chi2(P.address(b, rng::kStreamBartlettChi2), N, dp, m, chi2.data());
    draw_pool_tasks_and_lambdas(P, pool, b, m, w.data(), lam.data(), lam_sqrt.data());
    if (!P.tasks)
      for (index_t g = 0; g < m; ++g)
        std::memcpy(w.data() + g * d, z.data() + g * nz + wishart::fresh_task_offset(d, dp), sizeof(T) * d);
    visit(b, m, z.data(), chi2.data(), w.data(), lam_sqrt.data());
  }
}

// The same draws handed in prompt order to visit(b, z_b, chi2_b, w, lam_sqrt).
template <class T, class Visit>
void for_each_wishart_prompt(const LinearPlan<T>& P, index_t b0, index_t b1, Visit&& visit) {
  const index_t d = P.d, dp = wishart::noise_dim(P), nz = wishart::bartlett_normals_used(P);
  for_each_wishart_group(P, b0, b1, [&](index_t b, index_t m, const T* z, const T* chi2, const T* w,
                                        const T* lam_sqrt) {
    for (index_t g = 0; g < m; ++g)
      visit(b + g, z + g * nz, chi2 + g * dp, w + g * d, lam_sqrt + g * d);
  });
}

// dst[k][l] = src[l'·stride + k] for k < n and the lanes l < L of `lanes` starting at prompt l0
// of a group of m prompts (l' = l0 + l, or 0 for an idle lane l0 + l >= m: valid draws that add
// nothing, see wishart_loss_grad_kernel).
template <class T>
void to_lanes(const T* src, index_t stride, index_t n, index_t l0, index_t m, Vec<T>* dst) {
  constexpr index_t L = simd::kLanes<T>;
  for (index_t l = 0; l < L; ++l) {
    const T* row = src + (l0 + l < m ? l0 + l : 0) * stride;
    for (index_t k = 0; k < n; ++k) dst[k][l] = row[k];
  }
}

// Prompts [b0, b1) of the Wishart step with one prompt per SIMD lane: each group of kWishartGroup
// prompts draws its normals straight into vectors over the prompts (simd::fill_normals_lanes; the
// fresh task w is their slice), its χ², pool tasks and Λ_τ as for_each_wishart_group does (moved
// into lanes by to_lanes); wishart::prompt_prediction (common/wishart.hpp) then runs the scalar
// recipe's operations in every lane, and the residuals and batch sums are accumulated in double
// lanes (wishart::accumulate on vectors; lanes past the last prompt have r = 0), summed over the
// lanes into partial at the end.
template <class T>
void wishart_loss_grad_kernel(const LinearPlan<T>& P, const T* W_pv, const T* W_kq, index_t b0,
                              index_t b1, double* partial) {
  using V = Vec<T>;
  using VD = Vec<double>;
  constexpr index_t kGroup = kWishartGroup, L = simd::kLanes<T>;
  constexpr index_t G = kGroup / L, DH = L / simd::kLanes<double>;  // V per group, VD per V
  static_assert(kGroup % L == 0, "a group is whole vectors of prompts");
  const index_t d = P.d, N = P.N, rows = d + 1;
  const index_t dp = wishart::noise_dim(P), nz = wishart::bartlett_normals_used(P);
  const index_t width = loss_grad_partial_size(d), n_work = wishart::Work<V>::size(d, dp);
  VecBuffer<T> buf(n_work + G * nz + dp + 2 * d + rows);
  V *zl = buf.data() + n_work, *cv = zl + G * nz, *wv = cv + dp, *lv = wv + d, *p = lv + d;
  VecBuffer<double> buf_d(width + 3 * DH * rows);
  VD *acc = buf_d.data(), *gp = acc + width, *gk = gp + DH * rows, *eq = gk + DH * rows;
  const auto s = wishart::Work<V>::at(buf.data(), d, dp);
  for (index_t k = 0; k < rows; ++k) p[k] = simd::broadcast(W_pv[d * rows + k]);
  simd::UnitVector<T> chi2(kGroup * dp), w(kGroup * d), lam(d), lam_sqrt(kGroup * d);
  const TaskPool<T> pool(P, b1 - b0);
  static_assert(simd::kLanes<double> == 4 && kGroup == 8,
                "lane_index and fill_normals_lanes (8 prompts a call) assume 4 double lanes, 8 prompts a group");
  const VD lane_index = {0, 1, 2, 3};
  // the lanes of v[k], k < rows, in double: out[h·rows + k], h < DH
  const auto split = [rows](const V* v, VD* out) {
    for (index_t k = 0; k < rows; ++k) {
      VD t[DH];
      simd::to_double(v[k], t);
      for (index_t h = 0; h < DH; ++h) out[h * rows + k] = t[h];
    }
  };
  for (index_t b = b0; b < b1; b += kGroup) {
    const index_t m = std::min(kGroup, b1 - b);
    simd::fill_normals_lanes<T>(P.address(b, rng::kStreamBartlettNormal), nz, zl);
    simd::fill_bartlett_chi2(P.address(b, rng::kStreamBartlettChi2), N, dp, m, chi2.data());
    draw_pool_tasks_and_lambdas(P, pool, b, m, w.data(), lam.data(), lam_sqrt.data());
    for (index_t l0 = 0; l0 < m; l0 += L) {  // prompts b + l0 .. in the lanes
      const V* zv = zl + (l0 / L) * nz;
      to_lanes(chi2.data(), dp, dp, l0, m, cv);
      const V* w_v = zv + wishart::fresh_task_offset(d, dp);
      if (P.tasks) {
        to_lanes(w.data(), d, d, l0, m, wv);
        w_v = wv;
      }
      if (P.random_cov()) to_lanes(lam_sqrt.data(), d, d, l0, m, lv);
      V y_hat, y_q;
      wishart::prompt_prediction<T, V, simd::SimdMath>(P, W_kq, p, zv, cv, w_v, lv, s, y_hat, y_q);
      VD yh[DH], yq[DH];
      simd::to_double(y_hat, yh);
      simd::to_double(y_q, yq);
      split(s.g_p, gp);
      split(s.g_k, gk);
      split(s.e_q, eq);
      for (index_t h = 0; h < DH; ++h) {
        const VD r = lane_index + double(l0 + 4 * h) < double(m) ? yh[h] - yq[h] : VD{};
        wishart::accumulate(r, gp + h * rows, gk + h * rows, eq + h * rows, rows, acc);
      }
    }
  }
  for (index_t i = 0; i < width; ++i) partial[i] = simd::hsum(acc[i]);
}

template <class T>
void wishart_prompts_kernel(const LinearPlan<T>& P, index_t b0, index_t b1, WishartVisitor<T> visit) {
  for_each_wishart_prompt(P, b0, b1, [&](index_t b, const T* z_b, const T* chi2_b, const T* w,
                                         const T* lam_sqrt) {
    visit.fn(visit.ctx, b, z_b, chi2_b, w, lam_sqrt);
  });
}

}  // namespace

template <class T>
SamplingKernels<T> sampling_kernels() {
  return {&normals_kernel<T>,        &uniforms_kernel<T>,       &gammas_kernel<T>,
          &log_kernel<T>,            &sincos_kernel<T>,         &linear_prompts_kernel<T>,
          &kernel_gp_prompts_kernel<T>, &wishart_loss_grad_kernel<T>, &wishart_prompts_kernel<T>};
}
template SamplingKernels<float> sampling_kernels<float>();
template SamplingKernels<double> sampling_kernels<double>();

}  // namespace lsa_native::cpu::LSA_ISA_NS
