// CUDA backend of cuda_random.hpp: staging of host arrays and launch geometry around
// random_kernels.cuh.
#include <algorithm>

#include "cuda/random_cuda.hpp"
#include "cuda/random_kernels.cuh"
#include "cuda/runtime.cuh"

namespace lsa_native::cuda {
namespace {
constexpr int kThreads = 256;

int grid_for(const DeviceScope& scope, index_t n) {
  const index_t blocks = (n + kThreads - 1) / kThreads;
  return int(std::max<index_t>(1, std::min<index_t>(blocks, index_t(scope.sm_count()) * 16)));
}
}  // namespace

void philox4x32_10(const std::uint32_t* counters, index_t n, std::uint64_t seed, std::uint32_t* out) {
  if (n == 0) return;
  DeviceScope scope({counters, out});
  DeviceInput<std::uint32_t> c(scope, counters, 4 * n);
  DeviceOutput<std::uint32_t> o(scope, out, 4 * n);
  kernels::philox_kernel<<<grid_for(scope, n), kThreads, 0, stream()>>>(c.get(), n,
                                                                        rng::philox_key(seed), o.get());
  check_launch("philox_kernel");
  scope.finish();
}

template <class T>
void random_variates(const StreamId& id, std::uint64_t start, index_t n, T* out, bool normal) {
  if (n == 0) return;
  DeviceScope scope({out});
  DeviceOutput<T> o(scope, out, n);
  const rng::StreamAddress a{rng::philox_key(id.seed), id.prompt, id.step, id.stream};
  if (normal)
    kernels::variates_kernel<T, true><<<grid_for(scope, n), kThreads, 0, stream()>>>(a, start, n, o.get());
  else
    kernels::variates_kernel<T, false><<<grid_for(scope, n), kThreads, 0, stream()>>>(a, start, n, o.get());
  check_launch("variates_kernel");
  scope.finish();
}

template void random_variates<float>(const StreamId&, std::uint64_t, index_t, float*, bool);
template void random_variates<double>(const StreamId&, std::uint64_t, index_t, double*, bool);

}  // namespace lsa_native::cuda
