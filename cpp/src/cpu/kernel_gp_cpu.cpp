// CPU K-GP sampler (kernel_gp.hpp): argument checks, then common/kernel_gp.hpp per prompt, in
// parallel over fixed chunks of prompts.
#include "lsa_native/kernel_gp.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "common/interrupt.hpp"
#include "common/kernel_gp.hpp"
#include "common/parallel.hpp"
#include "common/small_matrix.hpp"
#include "cpu/small_matrix_cpu.hpp"
#include "lsa_native/config.hpp"
#include "lsa_native/device.hpp"
#if LSA_NATIVE_HAVE_CUDA
#include "cuda/kernel_gp_cuda.hpp"
#endif

namespace lsa_native {

void symmetric_sqrt(const double* sigma, index_t d, double* root, const char* name) {
  cpu::require_symmetric_positive_definite(sigma, d, name);
  const std::string nm(name);
  const int n = static_cast<int>(d);
  std::vector<double> a(sigma, sigma + d * d), v(d * d), w(d);
  detail::require(detail::jacobi_eigen(a.data(), n, w.data(), v.data()) >= 0,
                  nm + ": eigensolver did not converge");
  for (int j = 0; j < n; ++j)
    detail::require(w[j] > 0, nm + ": must be positive definite");
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int k = 0; k < n; ++k) s += v[i * n + k] * std::sqrt(w[k]) * v[j * n + k];
      root[i * n + j] = s;
    }
}

namespace {

// Prompts of at least this many points (n + 1) poll for Ctrl-C inside their factorization (every
// O(n²) flops) and before each prompt: one such prompt takes a millisecond or more, so a chunk of
// kPromptsPerChunk of them would outlast the poll interval. Smaller prompts rely on the poll
// between chunks (parallel_for), which keeps the per-prompt cost of tiny contexts unchanged.
constexpr int kPollInsidePromptPoints = 64;

// The poll passed to gp_labels. Only the thread that entered the library runs the host's check
// (detail::poll_interrupt); when it reports an interruption, the other threads stop at their next
// poll too instead of finishing their (possibly long) prompts.
class PromptPoll {
 public:
  explicit PromptPoll(bool active) : active_(active) {}
  void operator()() const {
    if (!active_) return;
    if (stop_.load(std::memory_order_relaxed)) throw Interrupted();
    if (std::this_thread::get_id() != caller_) return;
    try {
      detail::poll_interrupt();
    } catch (const Interrupted&) {
      stop_.store(true, std::memory_order_relaxed);
      throw;
    }
  }

 private:
  bool active_;
  std::thread::id caller_ = std::this_thread::get_id();
  mutable std::atomic<bool> stop_{false};
};

}  // namespace

template <class T>
void sample_kernel_gp(std::uint64_t seed, std::uint64_t step, index_t batch, const KernelGPLaw& law,
                      T* Z0, T* y_q, T* xi_out, std::int32_t* method) {
  const index_t d = law.dim, n = law.context;
  detail::require(batch >= 1, "batch: expected B >= 1, got " + std::to_string(batch));
  detail::require(batch <= (index_t(1) << 32), "batch: at most 2^32 prompts (the prompt counter)");
  detail::require(d >= 1, "dim: expected d >= 1, got " + std::to_string(d));
  detail::require(n >= 1, "context: expected n >= 1, got " + std::to_string(n));
  detail::require(n + 1 <= 4096, "context: expected n + 1 <= 4096, got " + std::to_string(n));
  // The per-prompt recipe indexes a prompt's (d+1) x (n+1) values with int.
  detail::require((d + 1) * (n + 1) < (index_t(1) << 31), "(dim + 1) * (context + 1) too large");
  detail::require(step < (std::uint64_t(1) << 32), "step: expected 0 <= step < 2^32");
  const int kern = static_cast<int>(law.kernel);
  detail::require(kern >= 0 && kern <= 2, "kernel: unknown kernel code " + std::to_string(kern));
  detail::require(std::isfinite(law.bandwidth) && law.bandwidth > 0,
                  "bandwidth: expected a finite number > 0, got " + std::to_string(law.bandwidth));
  const double inv_bw2 = 1.0 / (law.bandwidth * law.bandwidth);
  detail::require(kern != detail::kgp::kExp || inv_bw2 <= kKernelGPMaxExpScale,
                  "bandwidth: the exp kernel needs 1/bandwidth^2 <= " +
                      std::to_string(kKernelGPMaxExpScale) + " (exp overflows), got bandwidth " +
                      std::to_string(law.bandwidth));
  detail::require(Z0 != nullptr && y_q != nullptr, "Z0, y_q must not be null");
  std::vector<double> root;
  if (law.sigma != nullptr) {
    root.resize(static_cast<size_t>(d * d));
    symmetric_sqrt(law.sigma, d, root.data(), "Sigma");
  }
  const double* R = law.sigma != nullptr ? root.data() : nullptr;
  const int di = static_cast<int>(d), n1 = static_cast<int>(n + 1);
  const rng::PhiloxKey key = rng::philox_key(seed);
  const auto st = static_cast<std::uint32_t>(step);
  std::atomic<bool> unconverged{false};
  const PromptPoll poll(n1 >= kPollInsidePromptPoints);
  const auto poll_ref = [&poll] { poll(); };  // the callable gp_labels copies

#if LSA_NATIVE_HAVE_CUDA
  if (cuda_pointer_device(Z0) >= 0) {  // device arrays: the same per-prompt recipe on the GPU
    detail::require(cuda::sample_kernel_gp(key, st, batch, kern, inv_bw2, R, di, n1, Z0, y_q,
                                           xi_out, method),
                    "kernel_gp: the QL eigensolver did not converge on some prompt");
    return;
  }
#endif
  detail::for_each_chunk(batch, [&](index_t, index_t b0, index_t b1) {
    std::vector<double> work(static_cast<size_t>(detail::kgp::prompt_workspace(n1, di)));
    for (index_t b = b0; b < b1; ++b) {
      poll();
      const int m = detail::kgp::sample_prompt(key, static_cast<std::uint32_t>(b), st, kern,
                                               inv_bw2, R, n1, di, work.data(),
                                               Z0 + b * (d + 1) * n1, y_q + b,
                                               xi_out ? xi_out + b * n1 * d : nullptr, poll_ref);
      if (m == detail::kgp::kMethodEigenUnconverged) unconverged = true;
      if (method) method[b] = m;
    }
  });
  detail::require(!unconverged, "kernel_gp: the QL eigensolver did not converge on some prompt");
}

template void sample_kernel_gp<float>(std::uint64_t, std::uint64_t, index_t, const KernelGPLaw&,
                                      float*, float*, float*, std::int32_t*);
template void sample_kernel_gp<double>(std::uint64_t, std::uint64_t, index_t, const KernelGPLaw&,
                                       double*, double*, double*, std::int32_t*);

}  // namespace lsa_native
