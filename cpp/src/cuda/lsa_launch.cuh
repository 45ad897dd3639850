// Host-side launch helpers of the LSA kernels, shared by the CUDA backends of the LSA
// (lsa_cuda.cu) and of the fused sampled steps (sampled_cuda.cu): the prompt-size checks, the
// prediction kernels' layout, and the fixed-order reduction + epilogue of a loss or VJP and its
// gradients. Generic launch helpers: launch.cuh. Included by .cu files only.
#pragma once

#include <string>

#include "cuda/launch.cuh"
#include "cuda/lsa_kernels.cuh"

namespace lsa_native::cuda {
namespace {

// prepare_shared (launch.cuh) with the LSA shape in the message.
template <class Kernel>
void prepare(Kernel kernel, std::size_t smem, const DeviceScope& scope, const char* what,
             const LsaShape& sh) {
  prepare_shared(kernel, smem, scope, std::string(what) + ": prompts with d = " +
                                          std::to_string(sh.dim) + ", N = " + std::to_string(sh.context));
}

void check_prompt_size(const LsaShape& sh) {
  // Staged prompts and the [d+1, d+1] matrices are indexed with int inside a kernel (and their
  // shared-memory sizes summed in int by the layouts).
  detail::require((sh.dim + 1) * (sh.context + 1) < (index_t(1) << 30),
                  "CUDA: a prompt (d+1)(N+1) must have fewer than 2^30 entries");
  detail::require((sh.dim + 1) * (sh.dim + 1) < (index_t(1) << 30),
                  "CUDA: (d+1)^2 must be below 2^30 (d <= 32766); use device='cpu'");
}

// The prediction kernels' layout with the largest warps-per-block (<= 4) whose shared memory fits.
template <class T>
kernels::PredictionLayout prediction_layout(const LsaShape& sh, bool sums, const DeviceScope& scope,
                                            int block_extra = 0, int warp_extra = 0) {
  check_prompt_size(sh);
  const int rows = int(sh.dim + 1), cols = int(sh.context + 1);
  kernels::PredictionLayout lay{};
  for (int warps = 4; warps >= 1; warps /= 2) {
    lay = kernels::PredictionLayout::make<T>(rows, cols, warps, sums, block_extra, warp_extra);
    if (lay.total() <= std::size_t(scope.max_shared_bytes()) || warps == 1) break;
  }
  return lay;
}

// d_W_pv, d_W_kq (device pointers) from the per-block partials [blocks, 1 + rows + rows²] of a
// prediction kernel, scaled by `scale` (1/B for a loss, 1 for a VJP); with `loss` (device, a loss
// kernel) also L = ½ Σ res² / B there. Queued on the stream: nothing waits.
template <class T>
void finish_prediction_sums(const Scratch& partial, int blocks, int rows, double scale, T* d_W_pv,
                            T* d_W_kq, double* loss) {
  Scratch total = reduce_partials(static_cast<const double*>(partial.get()), blocks,
                                  1 + rows + rows * rows);
  kernels::prediction_epilogue_kernel<T><<<1, kernels::kReduceThreads, 0, stream()>>>(
      static_cast<const double*>(total.get()), rows, scale, d_W_pv, d_W_kq, loss);
  check_launch("prediction_epilogue_kernel");
}

// The loss of a loss kernel's partials: L = ½ Σ res² / B into `loss` (one double, device or host
// memory) and d_W_pv, d_W_kq into the call's outputs; then the scope's host outputs come back with
// the call's one wait (none when every output is device memory: nothing waits).
template <class T>
void finish_loss_and_grad(DeviceScope& scope, const Scratch& partial, int blocks, int rows,
                          index_t batch, T* d_W_pv, T* d_W_kq, double* loss) {
  DeviceOutput<double> out(scope, loss, 1);
  finish_prediction_sums(partial, blocks, rows, 1.0 / double(batch), d_W_pv, d_W_kq, out.get());
  scope.finish();
}

}  // namespace
}  // namespace lsa_native::cuda
