// CUDA kernels of the fused sampled LSA steps (sampling.hpp: linear_prompts_lsa_loss_and_grad),
// included by sampled_cuda.cu and by the CPU emulation test (cpp/tests/test_sampled_step_emulated.cpp).
// Every draw and every formula is an LSA_HD recipe (common/random.hpp, linear_prompts.hpp,
// wishart.hpp, lsa_recipe.hpp), the same stream as the CPU step: a GPU step equals the CPU step on
// the same (seed, step) up to rounding. No prompt is ever written to global memory.
//
// tokens:  one warp per prompt (grid-stride). The warp generates its prompt into shared memory
//          (lanes over Philox blocks, then over tokens) and consumes it with the prediction
//          kernel's per-prompt code (lsa_kernels.cuh: warp_prompt), so the loss terms are those of
//          lsa_loss_and_grad on the sampled batch.
// wishart: one thread per prompt, O(d²) work (Bartlett factor, wishart::prompt_residual); each
//          warp adds its 32 prompts' terms to a per-warp double accumulator in lane order.
// Batch sums: per warp in double, per block in warp order, across blocks by
// reduce_partials_kernel in a fixed order (no atomics): two runs on one device are bitwise equal.
#pragma once

#include <cstddef>

#include "common/linear_prompts.hpp"
#include "common/random.hpp"
#include "common/wishart.hpp"
#include "cuda/lsa_kernels.cuh"

namespace lsa_native::cuda::kernels {
namespace {

// T values per warp after the prediction scratch: w [d], √λ [d], y_q [1].
inline int tokens_warp_extra(index_t d) { return int(2 * d + 1); }

// The lanes of one warp write prompt b of law P into a.prompt [d+1, N+1] (its embedding
// [ZFB (3.4)]) and return its target y_q (on every lane). a.t holds the label noise meanwhile.
template <class T>
__device__ __forceinline__ T warp_generate(const linear::Law<T>& P, index_t b,
                                           const WarpArea<T>& a, int lane) {
  constexpr int per = rng::NormalsPerBlock<T>::value;
  const index_t d = P.d, N = P.N, cols = N + 1;
  T* w = a.extra;          // [d]
  T* lam_sqrt = w + d;     // [d]
  T* y_q = lam_sqrt + d;   // [1]
  // Covariate normals (and a fresh w): lanes over Philox blocks, each normal to its slot.
  const rng::StreamAddress ax = P.address(b, rng::kStreamX);
  const index_t n = P.covariate_normals();
  for (index_t blk = lane; blk * per < n; blk += kWarp) {
    std::uint32_t words[4];
    rng::stream_block(ax, static_cast<std::uint32_t>(blk), words);
    T z[per];
    rng::normals_from_block(words, z);
    for (int j = 0; j < per; ++j) {
      const index_t p = blk * per + j;
      if (p < n) *linear::covariate_slot(P, p, a.prompt, w) = z[j];
    }
  }
  if (P.tasks) {
    const rng::StreamAddress at = linear::task_address(P, linear::task_index(P, b));
    for (index_t k = lane; k < d; k += kWarp) w[k] = rng::normal_at<T>(at, std::uint64_t(k));
  }
  if (P.random_cov())
    for (index_t k = lane; k < d; k += kWarp) lam_sqrt[k] = std::sqrt(linear::lambda_entry<T>(P, b, k));
  if (P.sigma > T(0)) {  // ε_i into t (free until the prediction)
    const rng::StreamAddress an = P.address(b, rng::kStreamNoise);
    for (index_t blk = lane; blk * per < N; blk += kWarp)
      rng::normals_range(an, std::uint64_t(blk * per), blk * per + per <= N ? per : N - blk * per,
                         a.t + blk * per);
  }
  __syncwarp();
  // Tokens: lanes over columns, each transformed in place (linear::covariate), then its label.
  const T* ls = P.random_cov() ? lam_sqrt : nullptr;
  for (index_t i = lane; i < cols; i += kWarp) {
    T* col = a.prompt + i;
    if (i < N) {
      linear::covariate(P, P.L, ls, col, cols);
      col[d * cols] = linear::noisy_label(P, w, col, cols, a.t + i);
    } else {
      linear::covariate(P, P.query_factor(), ls, col, cols);
      col[d * cols] = T(0);
      T target = linear::label(w, col, cols, d);
      if (linear::query_has_noise(P))
        target += P.sigma * rng::normal_at<T>(P.address(b, rng::kStreamQueryNoise), 0);
      *y_q = target;
    }
  }
  __syncwarp();
  return *y_q;
}

// The prompts 0..batch−1 of law P written out (sampling.hpp: sample_linear_prompts on the GPU):
// one warp per prompt (grid-stride) generates it into shared memory by warp_generate — the fused
// step's generator — and copies it to the non-null outputs of `out` (E [B, d+1, N+1] row by row,
// coalesced; y_q [B]; X [B, N, d] transposed from the staged rows; y [B, N]; w [B, d]; x_q [B, d];
// lambda [B, d]), each the value the CPU sampler writes there up to rounding.
// lay: PredictionLayout without sums, warp_extra = tokens_warp_extra(d).
template <class T>
__global__ void linear_prompts_kernel(linear::Law<T> P, index_t batch, PredictionLayout lay,
                                      LinearPromptOutputs<T> out) {
  LSA_DYNAMIC_SHARED(smem);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const WarpArea<T> a = warp_area<T>(lay, smem, warp);
  const index_t d = P.d, N = P.N, cols = N + 1, size = (d + 1) * cols;
  const index_t n_warps = index_t(gridDim.x) * lay.warps;
  for (index_t b = index_t(blockIdx.x) * lay.warps + warp; b < batch; b += n_warps) {
    const T target = warp_generate(P, b, a, lane);
    if (out.E)
      for (index_t i = lane; i < size; i += kWarp) out.E[b * size + i] = a.prompt[i];
    if (out.y_q && lane == 0) out.y_q[b] = target;
    if (out.X)  // x_i[k] at (i, k): one 32-bit division per entry (N·d < 2^30, check_prompt_size)
      for (index_t j = lane; j < N * d; j += kWarp) {
        const auto i = static_cast<std::uint32_t>(j) / static_cast<std::uint32_t>(d);
        out.X[b * N * d + j] = a.prompt[(j - index_t(i) * d) * cols + index_t(i)];
      }
    if (out.y)
      for (index_t i = lane; i < N; i += kWarp) out.y[b * N + i] = a.prompt[d * cols + i];
    for (index_t k = lane; k < d; k += kWarp) {
      if (out.w) out.w[b * d + k] = a.extra[k];  // warp_generate's w
      if (out.x_q) out.x_q[b * d + k] = a.prompt[k * cols + N];
      if (out.lambda) out.lambda[b * d + k] = linear::lambda_diagonal(P, b, k);
    }
    __syncwarp();  // the next prompt overwrites the staged one
  }
}

// Fused tokens step: partial [gridDim.x, 1 + rows + rows²] as lsa_prediction_kernel<T, PredictionMode::loss>.
// lay: PredictionLayout with warp_extra = tokens_warp_extra(d).
template <class T>
__global__ void sampled_tokens_kernel(linear::Law<T> P, index_t batch, PredictionLayout lay,
                                      const T* __restrict__ W_pv, const T* __restrict__ W_kq,
                                      double* __restrict__ partial) {
  LSA_DYNAMIC_SHARED(smem);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  load_parameters(lay, smem, W_pv, W_kq);
  __syncthreads();
  const WarpArea<T> a = warp_area<T>(lay, smem, warp);
  double loss = 0;
  const index_t n_warps = index_t(gridDim.x) * lay.warps;
  for (index_t b = index_t(blockIdx.x) * lay.warps + warp; b < batch; b += n_warps) {
    const T target = warp_generate(P, b, a, lane);
    warp_prompt<T, PredictionMode::loss>(lay, a, smem, target, lane, loss);
  }
  block_partial<T>(lay, smem, loss, partial);
}

// ---- Wishart: one thread per prompt --------------------------------------------------------

// Shared memory of sampled_wishart_kernel: per warp the double accumulator [acc_width] and the 32
// residuals; per thread `thread_values` T (the draws and wishart::Work), in shared memory when
// work_in_shared, else in a global scratch [gridDim.x · blockDim.x, thread_values].
struct WishartLayout {
  int d, dp, warps;
  bool work_in_shared;
  __host__ __device__ int rows() const { return d + 1; }
  __host__ __device__ int acc_width() const { return 1 + rows() + rows() * rows(); }
  __host__ __device__ index_t draws() const { return wishart::bartlett_normals(d, dp) + dp + 2 * d; }
  __host__ __device__ index_t thread_values() const { return draws() + wishart::Work<double>::size(d, dp); }
  __host__ __device__ std::size_t warp_bytes() const { return align16(sizeof(double) * std::size_t(acc_width() + kWarp)); }
  template <class T>
  std::size_t shared_bytes() const {
    return std::size_t(warps) * warp_bytes() +
           (work_in_shared ? sizeof(T) * std::size_t(warps * kWarp) * std::size_t(thread_values()) : 0);
  }
};

// Draws of prompt b into z [bartlett_normals], chi2 [dp], w [d], lam_sqrt [d] (wishart.hpp), by the
// scalar recipes of random.hpp and linear_prompts.hpp.
template <class T>
__device__ __forceinline__ void wishart_draws(const linear::Law<T>& P, index_t b, index_t dp, T* z,
                                              T* chi2, T* w, T* lam_sqrt) {
  const index_t d = P.d;
  rng::normals_range(P.address(b, rng::kStreamBartlettNormal), 0, wishart::bartlett_normals(d, dp), z);
  if (P.tasks)
    rng::normals_range(linear::task_address(P, linear::task_index(P, b)), 0, d, w);
  else
    for (index_t k = 0; k < d; ++k) w[k] = z[wishart::fresh_task_offset(d, dp) + k];
  if (P.random_cov())
    for (index_t k = 0; k < d; ++k) lam_sqrt[k] = std::sqrt(linear::lambda_entry<T>(P, b, k));
  const rng::StreamAddress ac = P.address(b, rng::kStreamBartlettChi2);
  for (index_t i = 0; i < dp; ++i)  // χ²_{N−i}   [Bartlett 1933]
    chi2[i] = rng::chi_square_variate<T>(ac, static_cast<std::uint32_t>(i), T(P.N - i));
}

// Fused Wishart step: partial [gridDim.x, acc_width]. blockDim.x = 32 · lay.warps.
template <class T>
__global__ void sampled_wishart_kernel(linear::Law<T> P, index_t batch, WishartLayout lay,
                                       const T* __restrict__ W_pv, const T* __restrict__ W_kq,
                                       T* __restrict__ global_work, double* __restrict__ partial) {
  LSA_DYNAMIC_SHARED(smem);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int rows = lay.rows(), width = lay.acc_width();
  const index_t d = P.d, dp = lay.dp, values = lay.thread_values();
  double* acc = reinterpret_cast<double*>(smem + std::size_t(warp) * lay.warp_bytes());
  double* res = acc + width;  // [32] the residuals of the warp's current prompts
  T* work_base = lay.work_in_shared
                     ? reinterpret_cast<T*>(smem + std::size_t(lay.warps) * lay.warp_bytes())
                     : global_work + index_t(blockIdx.x) * blockDim.x * values;
  auto work_of = [&](int thread) { return work_base + index_t(thread) * values; };
  T* z = work_of(int(threadIdx.x));
  T* chi2 = z + wishart::bartlett_normals(d, dp);
  T* w = chi2 + dp;
  T* lam_sqrt = w + d;
  auto work_at = [&](int thread) {
    return wishart::Work<T>::at(work_of(thread) + lay.draws(), d, dp);
  };
  for (int i = lane; i < width; i += kWarp) acc[i] = 0;
  const T* p = W_pv + d * rows;
  const index_t stride = index_t(gridDim.x) * blockDim.x;
  for (index_t base = index_t(blockIdx.x) * blockDim.x + warp * kWarp; base < batch; base += stride) {
    const index_t b = base + lane;
    double r = 0;
    if (b < batch) {
      wishart_draws(P, b, dp, z, chi2, w, lam_sqrt);
      r = wishart::prompt_residual(P, W_kq, p, z, chi2, w, lam_sqrt, work_at(int(threadIdx.x)));
    }
    res[lane] = r;
    __syncwarp();
    // The warp's prompts in lane order; lanes over the accumulator entries.
    for (int l = 0; l < kWarp && base + l < batch; ++l) {
      const wishart::Work<T> s = work_at(warp * kWarp + l);
      for (int i = lane; i < width; i += kWarp) acc[i] += wishart::acc_term(index_t(i), res[l], s, rows);
    }
    __syncwarp();
  }
  __syncthreads();
  for (int i = threadIdx.x; i < width; i += blockDim.x) {  // warps in order 0, 1, ...
    double sum = 0;
    for (int v = 0; v < lay.warps; ++v)
      sum += reinterpret_cast<const double*>(smem + std::size_t(v) * lay.warp_bytes())[i];
    partial[index_t(blockIdx.x) * width + i] = sum;
  }
}

}  // namespace
}  // namespace lsa_native::cuda::kernels
