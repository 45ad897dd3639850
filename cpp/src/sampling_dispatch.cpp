// The sampling dispatcher: every public sampler (sampling.hpp, cuda_random.hpp, kernel_gp.hpp)
// checks its arguments here, once, then runs the CPU backend (cpu/sampling_cpu.hpp) or the CUDA one
// (cuda/sampled_cuda.hpp, cuda/random_cuda.hpp, cuda/kernel_gp_cuda.hpp). The linear-prompt sampler
// and the fused sampled step run on the device the caller names (detail::use_cuda, dispatch.hpp); the K-GP sampler runs where
// its output Z0 lives; the cuda_random_* variates always on the GPU.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/kernel_gp.hpp"
#include "common/linear_prompts.hpp"
#include "common/philox.hpp"
#include "common/wishart.hpp"
#include "cpu/sampling_cpu.hpp"
#include "dispatch.hpp"
#include "lsa_native/cuda_random.hpp"
#include "lsa_native/device.hpp"
#include "lsa_native/kernel_gp.hpp"
#include "lsa_native/sampling.hpp"
#if LSA_NATIVE_HAVE_CUDA
#include "cuda/kernel_gp_cuda.hpp"
#include "cuda/random_cuda.hpp"
#include "cuda/sampled_cuda.hpp"
#endif

namespace lsa_native {
namespace {

using detail::require;

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

// A range of n variates from position `start` of a stream of T (normals or uniforms) on the CPU.
template <class T>
void require_cpu_stream_range(std::uint64_t start, index_t n) {
  require(n >= 0, "n: expected >= 0");
  const std::uint64_t per = 4 / (sizeof(T) / 4);  // variates per block: 4 (float), 2 (double)
  require((start + std::uint64_t(n)) <= (std::uint64_t(1) << 32) * per, "start + n: beyond the stream");
}

}  // namespace

// ---- counter-based variates on the CPU (sampling.hpp) ----

void philox4x32_10(const std::uint32_t* counters, index_t n, std::uint64_t seed, std::uint32_t* out) {
  require(n >= 0, "n: expected >= 0");
  require(n == 0 || (counters && out), "counters, out: null pointer");
  cpu::philox4x32_10(counters, n, seed, out);
}

template <class T>
void random_normals(const StreamId& id, std::uint64_t start, index_t n, T* out) {
  require_cpu_stream_range<T>(start, n);
  cpu::random_normals(id, start, n, out);
}

template <class T>
void random_uniforms(const StreamId& id, std::uint64_t start, index_t n, T* out) {
  require_cpu_stream_range<T>(start, n);
  cpu::random_uniforms(id, start, n, out);
}

template <class T>
void random_gammas(const StreamId& id, std::uint64_t start, index_t n, T shape, T* out) {
  require(n >= 0, "n: expected >= 0");
  require(std::isfinite(double(shape)) && shape > T(0), "shape: expected > 0");
  require(start + std::uint64_t(n) <= (std::uint64_t(1) << 25), "start + n: expected <= 2^25");
  cpu::random_gammas(id, start, n, shape, out);
}

template <class T>
void simd_log(const T* x, index_t n, T* out) {
  cpu::simd_log(x, n, out);
}
template <class T>
void simd_sincos_2pi(const T* u, index_t n, T* s, T* c) {
  cpu::simd_sincos_2pi(u, n, s, c);
}

// ---- counter-based variates on the GPU (cuda_random.hpp) ----
namespace {
void require_stream_range(std::uint64_t start, index_t n, std::uint64_t per_block) {
  detail::require(n >= 0, "n: expected >= 0, got " + std::to_string(n));
  detail::require(start + std::uint64_t(n) <= (std::uint64_t(1) << 32) * per_block,
                  "start + n: beyond the stream");
}
}  // namespace

void cuda_philox4x32_10(const std::uint32_t* counters, index_t n, std::uint64_t seed,
                        std::uint32_t* out) {
  detail::require(n >= 0, "n: expected >= 0, got " + std::to_string(n));
  detail::require(n == 0 || (counters != nullptr && out != nullptr), "counters, out: null pointer");
  detail::use_cuda(Device::cuda);
#if LSA_NATIVE_HAVE_CUDA
  cuda::philox4x32_10(counters, n, seed, out);
#else
  (void)seed;
#endif
}

namespace {
// Normals or uniforms of one stream on the GPU: checks, then the kernel.
template <class T>
void cuda_variates(const StreamId& id, std::uint64_t start, index_t n, T* out, bool normal) {
  require_stream_range(start, n, 16 / sizeof(T));  // variates per block: 4 (float), 2 (double)
  detail::require(n == 0 || out != nullptr, "out: null pointer");
  detail::use_cuda(Device::cuda);
#if LSA_NATIVE_HAVE_CUDA
  cuda::random_variates(id, start, n, out, normal);
#else
  (void)id;
  (void)normal;
#endif
}
}  // namespace

template <class T>
void cuda_random_normals(const StreamId& id, std::uint64_t start, index_t n, T* out) {
  cuda_variates(id, start, n, out, true);
}

template <class T>
void cuda_random_uniforms(const StreamId& id, std::uint64_t start, index_t n, T* out) {
  cuda_variates(id, start, n, out, false);
}

// ---- linear-regression prompts and the fused sampled steps (sampling.hpp) ----

void validate(const LinearPromptSpec& s) {
  require(s.dim >= 1, "dim: expected >= 1, got " + std::to_string(s.dim));
  require(s.context >= 1, "context: expected N >= 1, got " + std::to_string(s.context));
  require(std::isfinite(s.noise_std) && s.noise_std >= 0, "noise_std: expected sigma >= 0");
  require(s.tasks >= 0 && s.tasks <= (index_t(1) << 32),
          "tasks: expected kappa >= 1 (or 0 for fresh tasks) and <= 2^32");
  if (s.chol) check_lower_factor(s.chol, s.dim, "Lambda");
  if (s.query_chol) check_lower_factor(s.query_chol, s.dim, "query_Lambda");
  const double a = s.law_a, b = s.law_b, p = s.law_p;
  switch (s.law) {  // the checks of the table LSA_NATIVE_COVARIANCE_LAWS (sampling.hpp)
    case CovarianceLaw::fixed:
      break;
#define LSA_NATIVE_COVARIANCE_LAW_CHECK(name, check, message, ...) \
  case CovarianceLaw::name:                                         \
    require(check, "covariance_law: " message);                     \
    break;
      LSA_NATIVE_COVARIANCE_LAWS(LSA_NATIVE_COVARIANCE_LAW_CHECK)
#undef LSA_NATIVE_COVARIANCE_LAW_CHECK
    default:
      throw Error("covariance_law: unknown law");
  }
  require(s.law == CovarianceLaw::fixed || !s.chol,
          "Lambda: a random covariance law replaces Lambda; pass one or the other");
}

template <class T>
void sample_linear_prompts(const LinearPromptSpec& spec, index_t batch, std::uint32_t step,
                           const LinearPromptOutputs<T>& out, Device device) {
  check_batch(batch, spec);
  const linear::Plan<T> P(spec, step);  // validates the spec
  LSA_NATIVE_BACKEND(device, sample_linear_prompts<T>, P, batch, out);
}

void detail::validate_fused_step(const LinearPromptSpec& spec, index_t batch, FusedMethod method) {
  check_batch(batch, spec);
  require(method == FusedMethod::tokens || method == FusedMethod::wishart,
          "method: expected tokens or wishart");
  if (method != FusedMethod::wishart) return;
  require(spec.covariates == Covariates::gaussian,
          "method: 'wishart' needs Gaussian covariates (use method='tokens')");
  const index_t dp = spec.dim + (spec.noise_std > 0 ? 1 : 0);  // wishart::noise_dim
  require(spec.context >= dp, "method: 'wishart' needs context N >= " + std::to_string(dp) +
                                  " (Bartlett); use method='tokens' for shorter prompts");
}

template <class T>
double linear_prompts_lsa_loss_and_grad(const LinearPromptSpec& spec, index_t batch,
                                        std::uint32_t step, FusedMethod method, const T* W_pv,
                                        const T* W_kq, T* d_W_pv, T* d_W_kq, Device device,
                                        double* loss) {
  detail::validate_fused_step(spec, batch, method);
  require(W_pv && W_kq && d_W_pv && d_W_kq, "W_pv, W_kq, d_W_pv, d_W_kq: null pointer");
  const linear::Plan<T> P(spec, step);  // validates the spec
#if LSA_NATIVE_HAVE_CUDA
  if (loss != nullptr && detail::use_cuda(device)) {  // written where it is: no wait on a GPU
    cuda::linear_prompts_lsa_loss_and_grad(P, batch, method, W_pv, W_kq, d_W_pv, d_W_kq, loss);
    return std::numeric_limits<double>::quiet_NaN();
  }
#endif
  const double L = LSA_NATIVE_BACKEND(device, linear_prompts_lsa_loss_and_grad<T>, P, batch, method,
                                      W_pv, W_kq, d_W_pv, d_W_kq);
  if (loss == nullptr) return L;
  *loss = L;
  return std::numeric_limits<double>::quiet_NaN();
}

// ---- K-GP prompts (kernel_gp.hpp): on the GPU when Z0 is device memory ----

namespace {

// K♦'s parameters [α, g1 [d], g2 [d]] (common/kernel_gp.hpp's Kernel::composite), checked.
std::vector<double> composite_parameters(const KernelGPLaw& law) {
  require(std::isfinite(law.alpha) && law.alpha >= 0 && law.alpha <= 1,
          "alpha: expected a number in [0, 1], got " + std::to_string(law.alpha));
  require(law.g1 != nullptr && law.g2 != nullptr,
          "g1, g2: the composite kernel needs both diagonals (length dim)");
  std::vector<double> p{law.alpha};
  p.insert(p.end(), law.g1, law.g1 + law.dim);
  p.insert(p.end(), law.g2, law.g2 + law.dim);
  double max_w2 = 0;
  for (index_t k = 0; k < law.dim; ++k) {
    require(std::isfinite(law.g1[k]) && std::isfinite(law.g2[k]),
            "g1, g2: expected finite numbers, got a non-finite entry at " + std::to_string(k));
    max_w2 = std::max(max_w2, law.g2[k] * law.g2[k]);
  }
  require(max_w2 <= kKernelGPMaxExpScale,
          "g2: the composite kernel needs max g2_k^2 <= " + std::to_string(kKernelGPMaxExpScale) +
              " (exp overflows), got " + std::to_string(max_w2));
  return p;
}

}  // namespace

template <class T>
void sample_kernel_gp(std::uint64_t seed, std::uint64_t step, index_t batch, const KernelGPLaw& law,
                      T* Z0, T* y_q, T* xi_out, std::int32_t* method) {
  const index_t d = law.dim, n = law.context;
  require(batch >= 1, "batch: expected B >= 1, got " + std::to_string(batch));
  require(batch <= (index_t(1) << 32), "batch: at most 2^32 prompts (the prompt counter)");
  require(d >= 1, "dim: expected d >= 1, got " + std::to_string(d));
  require(n >= 1, "context: expected n >= 1, got " + std::to_string(n));
  require(n + 1 <= 4096, "context: expected n + 1 <= 4096, got " + std::to_string(n));
  // The per-prompt recipe indexes a prompt's (d+1) x (n+1) values with int.
  require((d + 1) * (n + 1) < (index_t(1) << 31), "(dim + 1) * (context + 1) too large");
  require(step < (std::uint64_t(1) << 32), "step: expected 0 <= step < 2^32");
  const int kern = static_cast<int>(law.kernel);
  require(kern >= 0 && kern <= detail::kgp::kComposite,
          "kernel: unknown kernel code " + std::to_string(kern));
  require(std::isfinite(law.bandwidth) && law.bandwidth > 0,
          "bandwidth: expected a finite number > 0, got " + std::to_string(law.bandwidth));
  const double inv_bw2 = 1.0 / (law.bandwidth * law.bandwidth);
  require(kern != detail::kgp::kExp || inv_bw2 <= kKernelGPMaxExpScale,
          "bandwidth: the exp kernel needs 1/bandwidth^2 <= " +
              std::to_string(kKernelGPMaxExpScale) + " (exp overflows), got bandwidth " +
              std::to_string(law.bandwidth));
  const std::vector<double> composite =
      kern == detail::kgp::kComposite ? composite_parameters(law) : std::vector<double>{};
  const detail::kgp::Kernel kernel{kern, inv_bw2, composite.empty() ? nullptr : composite.data()};
  require(Z0 != nullptr && y_q != nullptr, "Z0, y_q must not be null");
  std::vector<double> root;
  if (law.sigma != nullptr) {
    root.resize(static_cast<size_t>(d * d));
    symmetric_sqrt(law.sigma, d, root.data(), "Sigma");
  }
  const double* R = law.sigma != nullptr ? root.data() : nullptr;
  const int di = static_cast<int>(d), n1 = static_cast<int>(n + 1);
  const rng::PhiloxKey key = rng::philox_key(seed);
  const auto st = static_cast<std::uint32_t>(step);
  // Device arrays: the same per-prompt recipe on the GPU (without CUDA no pointer is device memory).
  const bool converged =
#if LSA_NATIVE_HAVE_CUDA
      cuda_pointer_device(Z0) >= 0
          ? cuda::sample_kernel_gp(key, st, batch, kernel, R, di, n1, Z0, y_q, xi_out, method)
          :
#endif
          cpu::sample_kernel_gp(key, st, batch, kernel, R, di, n1, Z0, y_q, xi_out, method);
  require(converged, "kernel_gp: the QL eigensolver did not converge on some prompt");
}

#define LSA_NATIVE_INSTANTIATE(T)                                                                  \
  template void random_normals<T>(const StreamId&, std::uint64_t, index_t, T*);                   \
  template void random_uniforms<T>(const StreamId&, std::uint64_t, index_t, T*);                  \
  template void random_gammas<T>(const StreamId&, std::uint64_t, index_t, T, T*);                 \
  template void simd_log<T>(const T*, index_t, T*);                                               \
  template void simd_sincos_2pi<T>(const T*, index_t, T*, T*);                                    \
  template void cuda_random_normals<T>(const StreamId&, std::uint64_t, index_t, T*);              \
  template void cuda_random_uniforms<T>(const StreamId&, std::uint64_t, index_t, T*);             \
  template void sample_linear_prompts<T>(const LinearPromptSpec&, index_t, std::uint32_t,         \
                                         const LinearPromptOutputs<T>&, Device);                  \
  template double linear_prompts_lsa_loss_and_grad<T>(const LinearPromptSpec&, index_t,           \
                                                      std::uint32_t, FusedMethod, const T*,       \
                                                      const T*, T*, T*, Device, double*);         \
  template void sample_kernel_gp<T>(std::uint64_t, std::uint64_t, index_t, const KernelGPLaw&, T*, \
                                    T*, T*, std::int32_t*);
LSA_NATIVE_INSTANTIATE(float)
LSA_NATIVE_INSTANTIATE(double)
#undef LSA_NATIVE_INSTANTIATE

}  // namespace lsa_native
