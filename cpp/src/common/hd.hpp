// LSA_HD marks per-prompt math written once for both backends: plain inline functions on the CPU,
// __host__ __device__ functions when a .cu file includes them. Headers using it include nothing of
// CUDA, so the CPU build (and its tests) compile the very arithmetic the GPU kernels run.
#pragma once

#if defined(__CUDACC__)
#define LSA_HD __host__ __device__ __forceinline__
#else
#define LSA_HD inline
#endif

// LSA_HD with internal linkage, for the recipes the CPU also instantiates on its SIMD lane types
// (a builtin vector type, so the instantiation's name is the same in every ISA unit): without it
// the linker keeps one unit's copy for all, e.g. the baseline's, whose vector arguments and results
// travel in memory where an AVX caller passes registers.
#define LSA_HD_LOCAL static LSA_HD
