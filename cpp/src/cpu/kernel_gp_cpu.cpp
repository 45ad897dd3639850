// CPU K-GP sampler (cpu/sampling_cpu.hpp; checked and routed by sampling_dispatch.cpp):
// common/kernel_gp.hpp per prompt (with the SIMD normals and exp of the sampling table for this
// CPU, cpu/sampling_kernels.inl), in parallel over fixed chunks of prompts. Also Σ^{1/2}
// (kernel_gp.hpp's symmetric_sqrt).
#include <atomic>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/interrupt.hpp"
#include "common/kernel_gp.hpp"
#include "common/parallel.hpp"
#include "common/small_matrix.hpp"
#include "cpu/isa.hpp"
#include "cpu/sampling_cpu.hpp"
#include "cpu/sampling_kernels.hpp"
#include "cpu/small_matrix_cpu.hpp"
#include "lsa_native/kernel_gp.hpp"

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

}  // namespace lsa_native

namespace lsa_native::cpu {
namespace {

// KernelGPBatch::scalar_prompt: sample_prompt with ScalarOps, compiled without ISA options.
template <class T>
int scalar_prompt(const KernelGPBatch<T>& g, index_t b, double* work,
                  const std::function<void()>& poll) {
  const index_t prompt_size = index_t(g.d + 1) * g.n1;
  return detail::kgp::sample_prompt(g.key, static_cast<std::uint32_t>(b), g.step, g.kernel, g.root,
                                    g.n1, g.d, work, g.Z0 + b * prompt_size, g.y_q + b,
                                    g.xi ? g.xi + b * g.n1 * g.d : nullptr, [&poll] { poll(); });
}

}  // namespace

template <class T>
bool sample_kernel_gp(const rng::PhiloxKey& key, std::uint32_t step, index_t batch,
                      const detail::kgp::Kernel& kernel, const double* root, int d, int n1, T* Z0,
                      T* y_q, T* xi, std::int32_t* method) {
  std::atomic<bool> unconverged{false};
  const PromptPoll poll(n1 >= kPollInsidePromptPoints);
  const std::function<void()> poll_ref = [&poll] { poll(); };
  // the prompts by the sampling table for this CPU (its SIMD normals, exp and batched Cholesky)
  const auto& kernels = LSA_NATIVE_SELECT_KERNELS(cpu::SamplingKernels<T>, sampling_kernels<T>());
  const KernelGPBatch<T> g{key, step, kernel, root, d, n1, Z0, y_q, xi, method, &scalar_prompt<T>};
  detail::for_each_chunk(batch, [&](index_t, index_t b0, index_t b1) {
    if (!kernels.kernel_gp_prompts(g, b0, b1, poll_ref)) unconverged = true;
  });
  return !unconverged;
}

template bool sample_kernel_gp<float>(const rng::PhiloxKey&, std::uint32_t, index_t,
                                      const detail::kgp::Kernel&, const double*, int, int, float*,
                                      float*, float*, std::int32_t*);
template bool sample_kernel_gp<double>(const rng::PhiloxKey&, std::uint32_t, index_t,
                                       const detail::kgp::Kernel&, const double*, int, int,
                                       double*, double*, double*, std::int32_t*);

}  // namespace lsa_native::cpu
