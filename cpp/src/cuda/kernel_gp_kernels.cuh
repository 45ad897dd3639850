// CUDA kernel of the K-GP sampler: one thread per prompt runs common/kernel_gp.hpp's
// sample_prompt (the CPU driver's per-prompt code) in its own slice of a global-memory workspace.
// Included by kernel_gp_cuda.cu and by the CPU emulation test.
#pragma once

#include <cstdint>

#include "common/kernel_gp.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native::cuda::kernels {
namespace {

constexpr int kKernelGPThreads = 64;

// Prompts first .. first+count−1; kernel.composite (K♦'s parameters, if any) and root in device
// memory; work: count × prompt_workspace(n1, d) doubles; *unconverged is
// set to 1 when a QL eigensolve hit its iteration limit.
template <class T>
__global__ void __launch_bounds__(kKernelGPThreads)
    kernel_gp_kernel(rng::PhiloxKey key, std::uint32_t step, index_t first, index_t count,
                     detail::kgp::Kernel kernel, const double* __restrict__ root, int d, int n1,
                     double* __restrict__ work, T* __restrict__ Z0, T* __restrict__ y_q,
                     T* __restrict__ xi, std::int32_t* __restrict__ method,
                     int* __restrict__ unconverged) {
  const index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const index_t b = first + i;
  const int m = detail::kgp::sample_prompt(
      key, static_cast<std::uint32_t>(b), step, kernel, root, n1, d,
      work + i * detail::kgp::prompt_workspace(n1, d), Z0 + b * (d + 1) * n1, y_q + b,
      xi ? xi + b * n1 * d : nullptr);
  if (method) method[b] = m;
  if (m == detail::kgp::kMethodEigenUnconverged) *unconverged = 1;
}

}  // namespace
}  // namespace lsa_native::cuda::kernels
