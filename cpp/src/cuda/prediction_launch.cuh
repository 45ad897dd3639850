// Host side of the prediction kernels (lsa_kernels.cuh), shared by the LSA backend (lsa_cuda.cu)
// and the fused sampled step (sampled_cuda.cu): the shape checks, the layout that fits, the
// launch, and the fixed-order reduction + epilogue of a loss and its gradients. .cu files only.
#pragma once

#include <string>

#include "cuda/launch.cuh"
#include "cuda/lsa_kernels.cuh"
#include "cuda/runtime.cuh"

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
  // Staged prompts are indexed with int inside a kernel.
  detail::require((sh.dim + 1) * (sh.context + 1) < (index_t(1) << 30),
                  "CUDA: a prompt (d+1)(N+1) must have fewer than 2^30 entries");
}

// lsa_prediction_kernel<T, kMode, Source> over sh.batch prompts from `src`, with the largest
// warps-per-block (<= 4) whose shared memory (warp_extra T values per warp for the source) fits.
// kMode != predict: *partial = [blocks, 1 + rows + rows²] and *blocks_out = blocks.
template <class T, kernels::PredictionMode kMode, class Source>
void launch_prediction_kernel(const LsaShape& sh, const DeviceScope& scope, const Source& src,
                              const char* what, int warp_extra, const T* W_pv, const T* W_kq,
                              T* y_hat, T* d_E, Scratch* partial, int* blocks_out) {
  using namespace kernels;  // NOLINT: the kernels and their layout helpers
  constexpr bool kSums = kMode != PredictionMode::predict;
  check_prompt_size(sh);
  const int rows = int(sh.dim + 1), cols = int(sh.context + 1);
  auto kernel = lsa_prediction_kernel<T, kMode, Source>;
  PredictionLayout lay{};
  for (int warps = 4; warps >= 1; warps /= 2) {
    lay = PredictionLayout::make<T>(rows, cols, warps, kSums, warp_extra);
    if (lay.total() <= std::size_t(scope.max_shared_bytes()) || warps == 1) break;
  }
  prepare(kernel, lay.total(), scope, what, sh);
  const int threads = lay.warps * kWarp;
  const int blocks = resident_blocks(kernel, threads, lay.total(), scope,
                                     (sh.batch + lay.warps - 1) / lay.warps);
  double* partial_ptr = nullptr;
  if (kSums) {
    *partial = Scratch(sizeof(double) * std::size_t(blocks) * std::size_t(lay.acc_width()));
    partial_ptr = static_cast<double*>(partial->get());
    *blocks_out = blocks;
  }
  kernel<<<blocks, threads, lay.total(), stream()>>>(sh, lay, src, W_pv, W_kq, y_hat, partial_ptr, d_E);
  check_launch("lsa_prediction_kernel");
}

// The loss L = ½ Σ res² / B and d_W_pv, d_W_kq (device pointers) from the per-block partials
// [blocks, 1 + rows + rows²] of a loss kernel; waits for the result.
template <class T>
double finish_loss_and_grad(const Scratch& partial, int blocks, int rows, index_t batch, T* d_W_pv,
                            T* d_W_kq) {
  Scratch total = reduce_partials(static_cast<const double*>(partial.get()), blocks,
                                  1 + rows + rows * rows);
  Scratch loss_dev(sizeof(double));
  kernels::prediction_epilogue_kernel<T><<<1, kernels::kReduceThreads, 0, stream()>>>(
      static_cast<const double*>(total.get()), rows, 1.0 / double(batch), d_W_pv, d_W_kq,
      static_cast<double*>(loss_dev.get()));
  check_launch("prediction_epilogue_kernel");
  double loss = 0;
  LSA_CUDA_CHECK(cudaMemcpyAsync(&loss, loss_dev.get(), sizeof(double), cudaMemcpyDeviceToHost, stream()));
  LSA_CUDA_CHECK(cudaStreamSynchronize(stream()));  // the loss is returned: wait (reports faults)
  return loss;
}

}  // namespace
}  // namespace lsa_native::cuda
