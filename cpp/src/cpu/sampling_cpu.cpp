// The sampling API (sampling.hpp): validation, plans, ISA dispatch, chunking and the fused steps.
#include <cmath>
#include <string>
#include <vector>

#include "common/parallel.hpp"
#include "common/philox.hpp"
#include "common/wishart.hpp"
#include "cpu/isa.hpp"
#include "cpu/lsa_kernels.hpp"
#include "cpu/sampling_kernels.hpp"
#include "dispatch.hpp"
#include "lsa_native/sampling.hpp"
#if LSA_NATIVE_HAVE_CUDA
#include "cuda/sampled_cuda.hpp"
#endif

namespace lsa_native {
namespace {

using detail::require;

template <class T>
const cpu::SamplingKernels<T>& sampling() {
  return LSA_NATIVE_SELECT_KERNELS(cpu::SamplingKernels<T>, sampling_kernels<T>());
}

template <class T>
const cpu::LsaKernels<T>& lsa() {
  return LSA_NATIVE_SELECT_KERNELS(cpu::LsaKernels<T>, lsa_kernels<T>());
}

rng::StreamAddress address(const StreamId& id) {
  return {rng::philox_key(id.seed), id.prompt, id.step, id.stream};
}

void check_lower_factor(const double* L, index_t d, const char* name) {
  for (index_t k = 0; k < d; ++k) {
    require(std::isfinite(L[k * d + k]) && L[k * d + k] > 0,
            std::string(name) + ": expected a Cholesky factor with a positive diagonal (Λ positive definite)");
    for (index_t m = 0; m < d; ++m)
      require(std::isfinite(L[k * d + m]), std::string(name) + ": contains non-finite values");
  }
}

void check_batch(index_t batch, const LinearPromptSpec& s) {
  require(batch >= 1, "batch: expected >= 1, got " + std::to_string(batch));
  require(batch <= (index_t(1) << 32), "batch: expected <= 2^32 (prompt index field of the counter)");
  require(s.context * s.dim <= (index_t(1) << 33),
          "context * dim: too many covariates per prompt for one stream (max 2^33)");
}

// Prompts generated per call of the LSA kernel in the fused tokens step (a per-thread scratch of
// a few prompts stays in L1/L2).
constexpr index_t kFusedPrompts = 8;

}  // namespace

void philox4x32_10(const std::uint32_t* counters, index_t n, std::uint64_t seed, std::uint32_t* out) {
  require(n >= 0, "n: expected >= 0");
  require(n == 0 || (counters && out), "counters, out: null pointer");
  const rng::PhiloxKey key = rng::philox_key(seed);
  for (index_t i = 0; i < n; ++i) {
    std::uint32_t c[4] = {counters[4 * i], counters[4 * i + 1], counters[4 * i + 2], counters[4 * i + 3]};
    rng::philox4x32_10(c, key.k0, key.k1);
    for (int j = 0; j < 4; ++j) out[4 * i + j] = c[j];
  }
}

template <class T>
void random_normals(const StreamId& id, std::uint64_t start, index_t n, T* out) {
  require(n >= 0, "n: expected >= 0");
  const std::uint64_t per = 4 / (sizeof(T) / 4);  // normals per block: 4 (float), 2 (double)
  require((start + std::uint64_t(n)) <= (std::uint64_t(1) << 32) * per, "start + n: beyond the stream");
  const auto& k = sampling<T>();
  const rng::StreamAddress a = address(id);
  // Ranges of 4096 normals per task; each is a pure function of its positions.
  constexpr index_t kPer = 4096;
  detail::parallel_for((n + kPer - 1) / kPer, [&](index_t t) {
    const index_t i0 = t * kPer, m = std::min(kPer, n - i0);
    k.normals(a, start + std::uint64_t(i0), m, out + i0);
  });
}

template <class T>
void random_uniforms(const StreamId& id, std::uint64_t start, index_t n, T* out) {
  require(n >= 0, "n: expected >= 0");
  const std::uint64_t per = 4 / (sizeof(T) / 4);
  require((start + std::uint64_t(n)) <= (std::uint64_t(1) << 32) * per, "start + n: beyond the stream");
  const auto& k = sampling<T>();
  const rng::StreamAddress a = address(id);
  constexpr index_t kPer = 4096;  // as random_normals: each range a pure function of its positions
  detail::parallel_for((n + kPer - 1) / kPer, [&](index_t t) {
    const index_t i0 = t * kPer, m = std::min(kPer, n - i0);
    k.uniforms(a, start + std::uint64_t(i0), m, out + i0);
  });
}

template <class T>
void random_gammas(const StreamId& id, std::uint64_t start, index_t n, T shape, T* out) {
  require(n >= 0, "n: expected >= 0");
  require(std::isfinite(double(shape)) && shape > T(0), "shape: expected > 0");
  require(start + std::uint64_t(n) <= (std::uint64_t(1) << 25), "start + n: expected <= 2^25");
  const auto& k = sampling<T>();
  const rng::StreamAddress a = address(id);
  constexpr index_t kPer = 4096;  // as random_normals: each range a pure function of its positions
  detail::parallel_for((n + kPer - 1) / kPer, [&](index_t t) {
    const index_t i0 = t * kPer, m = std::min(kPer, n - i0);
    k.gammas(a, static_cast<std::uint32_t>(start + std::uint64_t(i0)), m, shape, out + i0);
  });
}

template <class T>
void simd_log(const T* x, index_t n, T* out) {
  sampling<T>().log(x, n, out);
}
template <class T>
void simd_sincos_2pi(const T* u, index_t n, T* s, T* c) {
  sampling<T>().sincos_2pi(u, n, s, c);
}

void validate(const LinearPromptSpec& s) {
  require(s.dim >= 1, "dim: expected >= 1, got " + std::to_string(s.dim));
  require(s.context >= 1, "context: expected N >= 1, got " + std::to_string(s.context));
  require(std::isfinite(s.noise_std) && s.noise_std >= 0, "noise_std: expected sigma >= 0");
  require(s.tasks >= 0 && s.tasks <= (index_t(1) << 32),
          "tasks: expected kappa >= 1 (or 0 for fresh tasks) and <= 2^32");
  if (s.chol) check_lower_factor(s.chol, s.dim, "Lambda");
  if (s.query_chol) check_lower_factor(s.query_chol, s.dim, "query_Lambda");
  const double a = s.law_a, b = s.law_b, p = s.law_p;
  switch (s.law) {
    case CovarianceLaw::fixed:
      break;
    case CovarianceLaw::exponential:
      require(std::isfinite(a) && a > 0, "covariance_law: exponential scale must be > 0");
      break;
    case CovarianceLaw::gamma:
      require(std::isfinite(a) && a > 0 && std::isfinite(b) && b > 0,
              "covariance_law: gamma shape and scale must be > 0");
      break;
    case CovarianceLaw::uniform:
      require(std::isfinite(a) && std::isfinite(b) && a >= 0 && a < b,
              "covariance_law: uniform needs 0 <= lo < hi");
      break;
    case CovarianceLaw::two_point:
      require(std::isfinite(a) && std::isfinite(b) && a >= 0 && b >= 0 && p >= 0 && p <= 1,
              "covariance_law: two_point needs values >= 0 and 0 <= p <= 1");
      break;
    default:
      throw Error("covariance_law: unknown law");
  }
  require(s.law == CovarianceLaw::fixed || !s.chol,
          "Lambda: a random covariance law replaces Lambda; pass one or the other");
}

template <class T>
void sample_linear_prompts(const LinearPromptSpec& spec, index_t batch, std::uint32_t step,
                           const LinearPromptOutputs<T>& out) {
  check_batch(batch, spec);
  const linear::Plan<T> P(spec, step);
  const auto& k = sampling<T>();
  const index_t d = P.d, N = P.N;
  detail::for_each_chunk(batch, [&](index_t, index_t b0, index_t b1) {
    LinearPromptOutputs<T> o;
    auto at = [b0](T* base, index_t stride) { return base ? base + b0 * stride : nullptr; };
    o.E = at(out.E, (d + 1) * (N + 1));
    o.y_q = at(out.y_q, 1);
    o.X = at(out.X, N * d);
    o.y = at(out.y, N);
    o.w = at(out.w, d);
    o.x_q = at(out.x_q, d);
    o.lambda = at(out.lambda, d);
    k.linear_prompts(P, b0, b1, o);
  });
}

template <class T>
double linear_prompts_lsa_loss_and_grad(const LinearPromptSpec& spec, index_t batch,
                                        std::uint32_t step, FusedMethod method, const T* W_pv,
                                        const T* W_kq, T* d_W_pv, T* d_W_kq, Device device) {
  check_batch(batch, spec);
  require(W_pv && W_kq && d_W_pv && d_W_kq, "W_pv, W_kq, d_W_pv, d_W_kq: null pointer");
  require(method == FusedMethod::tokens || method == FusedMethod::wishart,
          "method: expected tokens or wishart");
  const linear::Plan<T> P(spec, step);
  const index_t d = P.d, N = P.N, rows = d + 1, cols = N + 1;
  if (method == FusedMethod::wishart) {
    require(!P.sphere, "method: 'wishart' needs Gaussian covariates (use method='tokens')");
    const index_t dp = wishart::noise_dim(P);
    require(N >= dp, "method: 'wishart' needs context N >= " + std::to_string(dp) +
                         " (Bartlett); use method='tokens' for shorter prompts");
  }
  if (detail::use_cuda(device)) {
#if LSA_NATIVE_HAVE_CUDA
    return cuda::linear_prompts_lsa_loss_and_grad<T>(P, batch, method, W_pv, W_kq, d_W_pv, d_W_kq);
#endif
  }
  const index_t width = cpu::loss_grad_partial_size(d);
  std::vector<double> partials(static_cast<size_t>(detail::chunk_count(batch) * width));
  if (method == FusedMethod::wishart) {
    const auto& k = sampling<T>();
    detail::for_each_chunk(batch, [&](index_t c, index_t b0, index_t b1) {
      k.wishart_loss_grad(P, W_pv, W_kq, b0, b1, partials.data() + c * width);
    });
  } else {
    const auto& k = sampling<T>();
    const auto& l = lsa<T>();
    detail::for_each_chunk(batch, [&](index_t c, index_t b0, index_t b1) {
      // Per-task scratch: kFusedPrompts prompts generated in cache, consumed by the LSA kernel.
      std::vector<T> E(static_cast<size_t>(kFusedPrompts * rows * cols)), y_q(kFusedPrompts);
      std::vector<double> part(static_cast<size_t>(width));
      double* acc = partials.data() + c * width;
      for (index_t i = 0; i < width; ++i) acc[i] = 0;
      for (index_t s0 = b0; s0 < b1; s0 += kFusedPrompts) {
        const index_t s1 = std::min(b1, s0 + kFusedPrompts), m = s1 - s0;
        LinearPromptOutputs<T> o;
        o.E = E.data();
        o.y_q = y_q.data();
        k.linear_prompts(P, s0, s1, o);
        l.loss_grad(LsaShape{m, d, N}, E.data(), y_q.data(), W_pv, W_kq, nullptr, 0, m, part.data());
        for (index_t i = 0; i < width; ++i) acc[i] += part[i];
      }
    });
  }
  const std::vector<double> total = detail::reduce_partials(partials, width);
  return cpu::finish_loss_and_grad(total.data(), d, batch, d_W_pv, d_W_kq);
}

#define LSA_NATIVE_INSTANTIATE(T)                                                                  \
  template void random_normals<T>(const StreamId&, std::uint64_t, index_t, T*);                   \
  template void random_uniforms<T>(const StreamId&, std::uint64_t, index_t, T*);                  \
  template void random_gammas<T>(const StreamId&, std::uint64_t, index_t, T, T*);                 \
  template void simd_log<T>(const T*, index_t, T*);                                               \
  template void simd_sincos_2pi<T>(const T*, index_t, T*, T*);                                    \
  template void sample_linear_prompts<T>(const LinearPromptSpec&, index_t, std::uint32_t,         \
                                         const LinearPromptOutputs<T>&);                          \
  template double linear_prompts_lsa_loss_and_grad<T>(const LinearPromptSpec&, index_t,           \
                                                      std::uint32_t, FusedMethod, const T*,       \
                                                      const T*, T*, T*, Device);
LSA_NATIVE_INSTANTIATE(float)
LSA_NATIVE_INSTANTIATE(double)
#undef LSA_NATIVE_INSTANTIATE

}  // namespace lsa_native
