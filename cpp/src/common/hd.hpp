// LSA_HD marks per-prompt math written once for both backends: plain inline functions on the CPU,
// __host__ __device__ functions when a .cu file includes them. Headers using it include nothing of
// CUDA, so the CPU build (and its tests) compile the very arithmetic the GPU kernels run.
#pragma once

#if defined(__CUDACC__)
#define LSA_HD __host__ __device__ __forceinline__
#else
#define LSA_HD inline
#endif
