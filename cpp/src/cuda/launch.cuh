// Host side of the CUDA launches shared by the backends (lsa_cuda.cu, ka_cuda.cu): shared-memory
// checks, grid sizes, the fixed-order reduction of per-block partial sums. Included by .cu files.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

#include "cuda/kernel_common.cuh"
#include "cuda/runtime.cuh"

namespace lsa_native::cuda {
namespace {

// Opts `kernel` in to `smem` bytes of dynamic shared memory, or throws Error when the device
// allows less: `what` names the call and the shape ("lsa_forward: prompts with d = 5, N = 30").
template <class Kernel>
void prepare_shared(Kernel kernel, std::size_t smem, const DeviceScope& scope, const std::string& what) {
  if (smem > std::size_t(scope.max_shared_bytes()))
    throw Error(what + " need " + std::to_string(smem) +
                " bytes of shared memory per block; the CUDA device allows " +
                std::to_string(scope.max_shared_bytes()) + " (use device='cpu' for such shapes)");
  LSA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
}

// As many blocks as are resident at once (capped by the work): grid-stride kernels.
template <class Kernel>
int resident_blocks(Kernel kernel, int threads, std::size_t smem, const DeviceScope& scope,
                    index_t work_blocks) {
  int per_sm = 0;
  LSA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  const index_t resident = index_t(std::max(per_sm, 1)) * scope.sm_count();
  return int(std::max<index_t>(1, std::min(resident, work_blocks)));
}

// Fixed-order reduction of [count, width] partials into a fresh device array [width].
Scratch reduce_partials(const double* partial, int count, int width) {
  Scratch total(sizeof(double) * std::size_t(width));
  kernels::reduce_partials_kernel<<<width, kernels::kReduceThreads, 0, stream()>>>(
      partial, count, width, static_cast<double*>(total.get()));
  check_launch("reduce_partials_kernel");
  return total;
}

}  // namespace
}  // namespace lsa_native::cuda
