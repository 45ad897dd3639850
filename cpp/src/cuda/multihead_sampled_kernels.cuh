// CUDA kernels of the H-head fused sampled step's Wishart route and of the separate
// parametrization's merge and chain rule (multihead.hpp), included by multihead_cuda.cu and by the
// CPU emulation test cpp/tests/test_multihead_sampled_emulated.cpp. Every draw and formula is an
// LSA_HD recipe shared with the CPU (random.hpp, linear_prompts.hpp, wishart.hpp,
// multihead_recipe.hpp): the GPU step equals the CPU step on the same (seed, step) to rounding.
//
// Wishart: one thread per prompt (O(H d²) work, wishart_draws of sampled_kernels.cuh, then
// multihead::heads_residual), the heads' parameters arranged heads-inner once per block in shared
// memory (multihead::heads_inner_entry). The block's batch sums [loss_grad_width] live in shared
// memory (double); after each round of blockDim.x prompts, threads over the entries add the round's
// prompts' terms (multihead::accumulate_term) in thread order. Blocks' partials are reduced in a
// fixed order by reduce_partials_kernel (no atomics): two runs on one device are bitwise equal.
#pragma once

#include <cstddef>

#include "common/multihead_recipe.hpp"
#include "common/wishart.hpp"
#include "cuda/sampled_kernels.cuh"

namespace lsa_native::cuda::kernels {
namespace {

// Shared memory of multihead_wishart_kernel: the block's sums acc [width] and the round's residuals
// [threads] (double), the heads-inner parameters [heads_inner_size] (T), and per thread
// `thread_values` T (draws, wishart::Work, multihead::HeadsWork) in shared memory when
// work_in_shared, else in a global scratch [gridDim.x · threads, thread_values].
struct HeadsWishartLayout {
  int d, dp, heads, threads;
  bool work_in_shared;
  __host__ __device__ int rows() const { return d + 1; }
  __host__ __device__ index_t width() const { return multihead::loss_grad_width(heads, rows()); }
  __host__ __device__ index_t params() const { return multihead::heads_inner_size(heads, rows()); }
  __host__ __device__ index_t draws() const { return wishart::bartlett_normals(d, dp) + dp + 2 * d; }
  __host__ __device__ index_t thread_values() const {
    return draws() + wishart::Work<double>::size(d, dp) + multihead::HeadsWork<double>::size(heads, d, dp);
  }
  __host__ __device__ std::size_t sums_bytes() const {
    return align16(sizeof(double) * std::size_t(width() + threads));
  }
  template <class T>
  __host__ __device__ std::size_t base_bytes() const {
    return sums_bytes() + align16(sizeof(T) * std::size_t(params()));
  }
  template <class T>
  std::size_t shared_bytes() const {
    return base_bytes<T>() +
           (work_in_shared ? sizeof(T) * std::size_t(threads) * std::size_t(thread_values()) : 0);
  }
};

// Fused H-head Wishart step: partial [gridDim.x, width]. blockDim.x = lay.threads.
template <class T>
__global__ void multihead_wishart_kernel(linear::Law<T> P, index_t batch, HeadsWishartLayout lay,
                                         const T* __restrict__ W_pv, const T* __restrict__ W_kq,
                                         T* __restrict__ global_work, double* __restrict__ partial) {
  LSA_DYNAMIC_SHARED(smem);
  const index_t H = lay.heads, rows = lay.rows(), width = lay.width(), d = P.d, dp = lay.dp;
  const index_t values = lay.thread_values();
  double* acc = reinterpret_cast<double*>(smem);
  double* res = acc + width;  // [threads] the residuals of the round's prompts
  T* params = reinterpret_cast<T*>(smem + lay.sums_bytes());
  T* work_base = lay.work_in_shared ? reinterpret_cast<T*>(smem + lay.base_bytes<T>())
                                    : global_work + index_t(blockIdx.x) * blockDim.x * values;
  auto work_of = [&](index_t thread) { return work_base + thread * values; };
  auto draws_work = [&](index_t thread) {
    return wishart::Work<T>::at(work_of(thread) + lay.draws(), d, dp);
  };
  auto heads_work = [&](index_t thread) {
    return multihead::HeadsWork<T>::at(work_of(thread) + lay.draws() + wishart::Work<T>::size(d, dp),
                                       H, d, dp);
  };
  for (index_t i = threadIdx.x; i < width; i += blockDim.x) acc[i] = 0;
  for (index_t i = threadIdx.x; i < lay.params(); i += blockDim.x)
    params[i] = multihead::heads_inner_entry(H, rows, W_pv, W_kq, i);
  __syncthreads();
  const T* p_t = params;
  const T* W_kq_t = params + rows * H;
  T* z = work_of(threadIdx.x);
  T* chi2 = z + wishart::bartlett_normals(d, dp);
  T* w = chi2 + dp;
  T* lam_sqrt = w + d;
  const index_t stride = index_t(gridDim.x) * blockDim.x;
  for (index_t base = index_t(blockIdx.x) * blockDim.x; base < batch; base += stride) {
    const index_t b = base + threadIdx.x;
    double r = 0;
    if (b < batch) {
      wishart_draws(P, b, dp, z, chi2, w, lam_sqrt);
      r = multihead::heads_residual(P, H, p_t, W_kq_t, z, chi2, w, lam_sqrt, draws_work(threadIdx.x),
                                    heads_work(threadIdx.x));
    }
    res[threadIdx.x] = r;
    __syncthreads();
    // The round's prompts in thread order; threads over the entries of the sums.
    const index_t count = batch - base < index_t(blockDim.x) ? batch - base : index_t(blockDim.x);
    for (index_t i = threadIdx.x; i < width; i += blockDim.x) {
      double a = acc[i];
      for (index_t l = 0; l < count; ++l)
        a += multihead::accumulate_term(i, res[l], draws_work(l).e_q, heads_work(l), H, rows);
      acc[i] = a;
    }
    __syncthreads();
  }
  for (index_t i = threadIdx.x; i < width; i += blockDim.x) partial[index_t(blockIdx.x) * width + i] = acc[i];
}

// ---- the separate parametrization (multihead_recipe.hpp): one thread per entry (grid-stride) ----

// W_kq [H, rows, rows] = W^K_hᵀ W^Q_h from W_k, W_q [H, rank, rows].
template <class T>
__global__ void merge_kq_kernel(index_t heads, index_t rank, index_t rows, const T* __restrict__ W_k,
                                const T* __restrict__ W_q, T* __restrict__ W_kq) {
  const index_t n = heads * rows * rows, stride = index_t(gridDim.x) * blockDim.x;
  for (index_t e = index_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride)
    W_kq[e] = multihead::merged_kq_entry(W_k, W_q, rank, rows, e);
}

// d_W_k = W^Q_h dW^KQ_hᵀ, d_W_q = W^K_h dW^KQ_h [H, rank, rows].
template <class T>
__global__ void chain_kq_kernel(index_t heads, index_t rank, index_t rows, const T* __restrict__ W_k,
                                const T* __restrict__ W_q, const T* __restrict__ d_W_kq,
                                T* __restrict__ d_W_k, T* __restrict__ d_W_q) {
  const index_t n = heads * rank * rows, stride = index_t(gridDim.x) * blockDim.x;
  for (index_t e = index_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    d_W_k[e] = multihead::key_grad_entry(W_q, d_W_kq, rank, rows, e);
    d_W_q[e] = multihead::query_grad_entry(W_k, d_W_kq, rank, rows, e);
  }
}

}  // namespace
}  // namespace lsa_native::cuda::kernels
