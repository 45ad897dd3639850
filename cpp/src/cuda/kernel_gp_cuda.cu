// CUDA route of the K-GP sampler (kernel_gp_cuda.hpp): staging and launches around
// kernel_gp_kernels.cuh, the batch in chunks whose per-prompt workspaces fit kWorkspaceBytes.
#include <algorithm>

#include "cuda/kernel_gp_cuda.hpp"
#include "cuda/kernel_gp_kernels.cuh"
#include "cuda/runtime.cuh"

namespace lsa_native::cuda {
namespace {
// Scratch per launch: 30000 prompts of n = 30, d = 5 (17 KB each) take two launches.
constexpr std::size_t kWorkspaceBytes = std::size_t(256) << 20;
}  // namespace

template <class T>
bool sample_kernel_gp(const rng::PhiloxKey& key, std::uint32_t step, index_t batch,
                      const detail::kgp::Kernel& kernel, const double* root, int d, int n1, T* Z0,
                      T* y_q, T* xi, std::int32_t* method) {
  DeviceScope scope({Z0, y_q, xi, method});
  DeviceInput<double> r(scope, root, index_t(d) * d),
      params(scope, kernel.composite, detail::kgp::composite_size(d));
  const detail::kgp::Kernel device_kernel{kernel.code, kernel.inv_bw2, params.get()};
  DeviceOutput<T> z(scope, Z0, batch * (d + 1) * n1), yq(scope, y_q, batch),
      x(scope, xi, batch * n1 * d);
  DeviceOutput<std::int32_t> me(scope, method, batch);
  int unconverged = 0;
  DeviceOutput<int> flag(scope, &unconverged, 1);
  LSA_CUDA_CHECK(cudaMemsetAsync(flag.get(), 0, sizeof(int), stream()));
  const index_t per_prompt = detail::kgp::prompt_workspace(n1, d);
  const index_t chunk = std::max<index_t>(
      1, std::min<index_t>(batch, index_t(kWorkspaceBytes / (sizeof(double) * per_prompt))));
  Scratch work(sizeof(double) * std::size_t(chunk * per_prompt));
  for (index_t first = 0; first < batch; first += chunk) {
    const index_t count = std::min(chunk, batch - first);
    const auto blocks = unsigned((count + kernels::kKernelGPThreads - 1) / kernels::kKernelGPThreads);
    kernels::kernel_gp_kernel<T><<<blocks, kernels::kKernelGPThreads, 0, stream()>>>(
        key, step, first, count, device_kernel, r.get(), d, n1,
        static_cast<double*>(work.get()), z.get(), yq.get(), x.get(), me.get(), flag.get());
    check_launch("kernel_gp_kernel");
  }
  scope.finish();  // the flag is a host output: one wait
  return unconverged == 0;
}

template bool sample_kernel_gp<float>(const rng::PhiloxKey&, std::uint32_t, index_t,
                                      const detail::kgp::Kernel&, const double*, int, int, float*,
                                      float*, float*, std::int32_t*);
template bool sample_kernel_gp<double>(const rng::PhiloxKey&, std::uint32_t, index_t,
                                       const detail::kgp::Kernel&, const double*, int, int,
                                       double*, double*, double*, std::int32_t*);

}  // namespace lsa_native::cuda
