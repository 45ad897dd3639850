// Building blocks shared by the CUDA kernels (lsa_kernels.cuh, ka_kernels.cuh, ka_warp_kernels.cuh):
// the device keywords the CPU emulation (cpp/tests/cuda_emulation.hpp) redefines, staging of
// contiguous values (stage, stage_all, copy_async), L2 prefetch, 16-byte shared loads (load8), warp
// sums and the fixed-order reduction of per-block partial sums (no atomics: two runs with the same
// launch geometry — the same GPU model and settings — give bitwise equal results).
#pragma once

#include <cstddef>

#include "lsa_native/types.hpp"

#if defined(__CUDACC__)
#define LSA_UNROLL _Pragma("unroll")
#define LSA_DYNAMIC_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#define LSA_STATIC_SHARED(type, name, n) __shared__ type name[n]
#endif

// Internal linkage: each including translation unit (the CUDA backend, the emulation test) has
// its own copy.
namespace lsa_native::cuda::kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kReduceThreads = 256;

__host__ __device__ inline std::size_t align16(std::size_t bytes) { return (bytes + 15) / 16 * 16; }

// Copies n contiguous values src → dst with the threads [0, nthreads) of a warp or block,
// kUnroll independent streaming loads in flight per thread (E is read once: evict-first).
template <class T>
__device__ __forceinline__ void stage(const T* __restrict__ src, T* __restrict__ dst, int n,
                                      int tid, int nthreads) {
  constexpr int kUnroll = 128 / sizeof(T);  // 128 bytes in flight per thread (memory parallelism)
  int i = tid;
  for (; i + (kUnroll - 1) * nthreads < n; i += kUnroll * nthreads) {
    T v[kUnroll];
LSA_UNROLL
    for (int u = 0; u < kUnroll; ++u) v[u] = __ldcs(src + i + u * nthreads);
LSA_UNROLL
    for (int u = 0; u < kUnroll; ++u) dst[i + u * nthreads] = v[u];
  }
  for (; i < n; i += nthreads) dst[i] = __ldcs(src + i);
}

// stage for a block whose prompt takes fewer than kUnroll rounds (the tiled LSA kernels: 17 rounds
// of 128 threads at d = 20, N = 100 in float): every load in flight together, predicated in groups
// of 4 rounds, a group past the end skipped whole (stage's tail would wait for each load in turn).
template <class T>
__device__ __forceinline__ void stage_all(const T* __restrict__ src, T* __restrict__ dst, int n,
                                          int tid, int nthreads) {
  constexpr int kUnroll = 128 / sizeof(T), kGroup = 4;
  for (int i = tid; i < n; i += kUnroll * nthreads) {
    T v[kUnroll];
LSA_UNROLL
    for (int c = 0; c < kUnroll; c += kGroup) {
      if (i + c * nthreads < n) {
LSA_UNROLL
        for (int u = c; u < c + kGroup; ++u)
          v[u] = i + u * nthreads < n ? __ldcs(src + i + u * nthreads) : T(0);
      } else {
LSA_UNROLL
        for (int u = c; u < c + kGroup; ++u) v[u] = T(0);  // never stored
      }
    }
LSA_UNROLL
    for (int c = 0; c < kUnroll; c += kGroup) {
      if (i + c * nthreads >= n) break;
LSA_UNROLL
      for (int u = c; u < c + kGroup; ++u)
        if (i + u * nthreads < n) dst[i + u * nthreads] = v[u];
    }
  }
}

// *dst = *src for a shared-memory dst and a global src without a register round trip: on sm_80+
// an asynchronous copy (cp.async), so a thread can have hundreds in flight; the data is there after
// copy_async_wait() (this thread) and a barrier (the others). Plain copy elsewhere (the emulator).
template <class T>
__device__ __forceinline__ void copy_async(T* dst, const T* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "cp.async copies 4, 8 or 16 bytes");
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(
                   static_cast<unsigned>(__cvta_generic_to_shared(dst))),
               "l"(src), "n"(int(sizeof(T))));
#else
  *dst = *src;
#endif
}

__device__ __forceinline__ void copy_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Asks L2 for the n values at src (a 128-byte line per thread and step, no registers, no wait),
// spread over the threads [0, nthreads): the next prompt of a grid-stride loop arrives while this
// one computes. No-op in the emulator.
template <class T>
__device__ __forceinline__ void prefetch_l2(const T* src, index_t n, int tid, int nthreads) {
#if defined(__CUDA_ARCH__)
  const char* p = reinterpret_cast<const char*>(src);
  const index_t bytes = n * index_t(sizeof(T));
  for (index_t off = index_t(tid) * 128; off < bytes; off += index_t(nthreads) * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p + off));
  if (tid == 0 && bytes > 0) asm volatile("prefetch.global.L2 [%0];" ::"l"(p + bytes - 1));  // last line
#else
  (void)src, (void)n, (void)tid, (void)nthreads;
#endif
}

// v[i] = p[i] for i < 8, p 16-byte aligned (shared memory): 128-bit loads on the GPU (2 for float,
// 4 for double) — one instruction, a broadcast when the lanes share p, per 4 or 2 values.
template <class T>
__device__ __forceinline__ void load8(const T* p, T (&v)[8]) {
#if defined(__CUDACC__)
  if constexpr (sizeof(T) == 4) {
    const float4* q = reinterpret_cast<const float4*>(p);
    const float4 a = q[0], b = q[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    const double2* q = reinterpret_cast<const double2*>(p);
LSA_UNROLL
    for (int i = 0; i < 4; ++i) {
      const double2 a = q[i];
      v[2 * i] = a.x;
      v[2 * i + 1] = a.y;
    }
  }
#else
  for (int i = 0; i < 8; ++i) v[i] = p[i];
#endif
}

// Sum over aligned groups of g adjacent lanes (g a power of two <= 32; every lane of the warp
// calls): every lane of a group gets the group's sum, bitwise equal across the group.
template <class T>
__device__ __forceinline__ T group_sum(T v, int g) {
  for (int offset = 1; offset < g; offset *= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
LSA_UNROLL
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;  // every lane holds the sum (same order on every lane)
}

// total[i] = Σ_k partial[k, i] over count rows, in a fixed order (one block per column i):
// thread t sums rows t, t + 256, ... in order, then a fixed binary tree.
__global__ void reduce_partials_kernel(const double* __restrict__ partial, int count, int width,
                                       double* __restrict__ total) {
  LSA_STATIC_SHARED(double, buf, kReduceThreads);
  const int i = int(blockIdx.x), tid = int(threadIdx.x);
  double s = 0;
  for (int k = tid; k < count; k += kReduceThreads) s += partial[index_t(k) * width + i];
  buf[tid] = s;
  __syncthreads();
  for (int h = kReduceThreads / 2; h > 0; h /= 2) {
    if (tid < h) buf[tid] += buf[tid + h];
    __syncthreads();
  }
  if (tid == 0) total[i] = buf[0];
}

}  // namespace
}  // namespace lsa_native::cuda::kernels
