// Host-side launch helpers shared by the CUDA backends of the LSA (lsa_cuda.cu) and of the fused
// sampled steps (sampled_cuda.cu): shared-memory checks, occupancy, the prediction kernels' layout,
// and the fixed-order reduction + epilogue of a loss and its gradients. Included by .cu files only.
#pragma once

#include <algorithm>
#include <string>

#include "cuda/lsa_kernels.cuh"
#include "cuda/runtime.cuh"

namespace lsa_native::cuda {
namespace {

// Refuses a block needing more shared memory than the device allows (naming the prompt size),
// else opts the kernel in to `smem` bytes of dynamic shared memory.
template <class Kernel>
void prepare(Kernel kernel, std::size_t smem, const DeviceScope& scope, const char* what,
             const LsaShape& sh) {
  if (smem > std::size_t(scope.max_shared_bytes()))
    throw Error(std::string(what) + ": prompts with d = " + std::to_string(sh.dim) + ", N = " +
                std::to_string(sh.context) + " need " + std::to_string(smem) +
                " bytes of shared memory per block; the CUDA device allows " +
                std::to_string(scope.max_shared_bytes()) + " (use device='cpu' for such prompts)");
  LSA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
}

// As many blocks as are resident at once, capped by the work.
template <class Kernel>
int resident_blocks(Kernel kernel, int threads, std::size_t smem, const DeviceScope& scope,
                    index_t work_blocks) {
  int per_sm = 0;
  LSA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  const index_t resident = index_t(std::max(per_sm, 1)) * scope.sm_count();
  return int(std::max<index_t>(1, std::min(resident, work_blocks)));
}

void check_prompt_size(const LsaShape& sh) {
  // Staged prompts are indexed with int inside a kernel.
  detail::require((sh.dim + 1) * (sh.context + 1) < (index_t(1) << 30),
                  "CUDA: a prompt (d+1)(N+1) must have fewer than 2^30 entries");
}

// The prediction kernels' layout with the largest warps-per-block (<= 4) whose shared memory fits.
template <class T>
kernels::PredictionLayout prediction_layout(const LsaShape& sh, bool loss, const DeviceScope& scope,
                                            int block_extra = 0, int warp_extra = 0) {
  check_prompt_size(sh);
  const int rows = int(sh.dim + 1), cols = int(sh.context + 1);
  kernels::PredictionLayout lay{};
  for (int warps = 4; warps >= 1; warps /= 2) {
    lay = kernels::PredictionLayout::make<T>(rows, cols, warps, loss, block_extra, warp_extra);
    if (lay.total() <= std::size_t(scope.max_shared_bytes()) || warps == 1) break;
  }
  return lay;
}

// Fixed-order reduction of [count, width] partials into a fresh device array [width].
Scratch reduce_partials(const double* partial, int count, int width) {
  Scratch total(sizeof(double) * std::size_t(width));
  kernels::reduce_partials_kernel<<<width, kernels::kReduceThreads, 0, stream()>>>(
      partial, count, width, static_cast<double*>(total.get()));
  check_launch("reduce_partials_kernel");
  return total;
}

// The loss L = ½ Σ res² / B and d_W_pv, d_W_kq (device pointers) from the per-block partials
// [blocks, 1 + rows + rows²] of a loss kernel; waits for the result.
template <class T>
double finish_loss_and_grad(const Scratch& partial, int blocks, int rows, index_t batch, T* d_W_pv,
                            T* d_W_kq) {
  Scratch total = reduce_partials(static_cast<const double*>(partial.get()), blocks,
                                  1 + rows + rows * rows);
  Scratch loss_dev(sizeof(double));
  kernels::loss_grad_epilogue_kernel<T><<<1, kernels::kReduceThreads, 0, stream()>>>(
      static_cast<const double*>(total.get()), rows, batch, d_W_pv, d_W_kq,
      static_cast<double*>(loss_dev.get()));
  check_launch("loss_grad_epilogue_kernel");
  double loss = 0;
  LSA_CUDA_CHECK(cudaMemcpyAsync(&loss, loss_dev.get(), sizeof(double), cudaMemcpyDeviceToHost, stream()));
  LSA_CUDA_CHECK(cudaStreamSynchronize(stream()));  // the loss is returned: wait (reports faults)
  return loss;
}

}  // namespace
}  // namespace lsa_native::cuda
