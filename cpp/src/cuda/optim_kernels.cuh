// CUDA kernel of optimizer_step: one block of optim::kNormLanes threads, lane j owning the
// parameters i ≡ j (mod kNormLanes); the norm's partials summed by the halving tree of
// common/optim_recipe.hpp (the CPU backend's order, level by level), then the per-element update
// of the recipe. The status record is read first and written by thread 0 only. Compiled without
// FMA contraction (CMakeLists.txt), so the step equals the CPU backend's bit for bit.
#pragma once

#include "common/optim_recipe.hpp"
#if defined(__CUDACC__)
#include "cuda/kernel_common.cuh"  // the device keywords (the emulator defines its own)
#endif

namespace lsa_native::cuda::kernels {
namespace {

// Halving tree over the block's partials in shared memory; `combine` a sum or a max.
template <class Combine>
__device__ __forceinline__ double block_halving(double* p, int lane, Combine combine) {
  __syncthreads();
  for (int s = optim::kNormLanes / 2; s > 0; s /= 2) {
    if (lane < s) p[lane] = combine(p[lane], p[lane + s]);
    __syncthreads();
  }
  const double total = p[0];
  __syncthreads();  // p is reused by the next reduction
  return total;
}

template <class T>
__global__ void __launch_bounds__(optim::kNormLanes)
optimizer_step_kernel(OptimizerStep s, index_t n, const double* theta_in, double* theta_out,
                      const T* grad, OptimizerState st, double norm, double* status,
                      T* model_copy) {
  LSA_STATIC_SHARED(double, p, optim::kNormLanes);
  const int lane = int(threadIdx.x);
  if (status[optim::kStatusCode] != optim::kOk) return;  // the same value for every thread
  if (optim::loss_fails(st)) {  // the same value for every thread too
    if (lane == 0) {
      status[optim::kStatusCode] = optim::kBadLoss;
      status[optim::kStatusStep] = s.step_index;
    }
    return;
  }
  auto add = [](double a, double b) { return a + b; };
  if (norm < 0) {
    p[lane] = optim::norm_partial(st, grad, n, lane);
    const double sq = block_halving(p, lane, add);
    norm = sqrt(sq);
    if (!optim::finite(sq)) {  // Σ g² overflowed (or a NaN/inf entry): rescale by max |g|
      p[lane] = optim::abs_max_partial(st, grad, n, lane);
      const double big = block_halving(p, lane, optim::max_propagating_nan);
      if (optim::finite(big)) {
        p[lane] = optim::scaled_partial(st, grad, n, lane, big);
        norm = big * sqrt(block_halving(p, lane, add));
      } else {
        norm = big;
      }
    }
  }
  if (!optim::finite(norm)) {
    if (lane == 0) {
      status[optim::kStatusNorm] = norm;
      status[optim::kStatusCode] = optim::kBadGradient;
      status[optim::kStatusStep] = s.step_index;
    }
    return;
  }
  const double coef = optim::clip_coefficient(s, norm);
  double bad = 0;
  for (index_t i = lane; i < n; i += optim::kNormLanes) {
    const double next = optim::step_element(s, st, i, theta_in[i], grad, coef);
    theta_out[i] = next;
    if (model_copy) model_copy[i] = static_cast<T>(next);
    if (!optim::finite(next)) bad = 1;
  }
  p[lane] = bad;
  bad = block_halving(p, lane, add);
  if (lane == 0) {
    status[optim::kStatusNorm] = norm;
    if (bad != 0) {
      status[optim::kStatusCode] = optim::kBadParameters;
      status[optim::kStatusStep] = s.step_index;
    }
  }
}

}  // namespace
}  // namespace lsa_native::cuda::kernels
