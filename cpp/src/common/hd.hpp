// LSA_HD marks per-prompt math written once for both backends: plain inline functions on the CPU,
// __host__ __device__ functions when a .cu file includes them. Headers using it include nothing of
// CUDA, so the CPU build (and its tests) compile the very arithmetic the GPU kernels run.
#pragma once

#if defined(__CUDACC__)
#define LSA_HD __host__ __device__ __forceinline__
#else
#define LSA_HD inline
#endif

// LSA_HD with internal linkage: every namespace-scope recipe in common/ (LSA_HD itself is for
// member functions; an explicit specialization takes its primary template's linkage). The CPU
// compiles these headers once per ISA (the kernel tables) and instantiates some on its SIMD lane
// types: an inline function with external linkage that two units emit out of line is one weak
// symbol, and the linker keeps one unit's copy for all — AVX-512 code for the baseline callers,
// or a copy passing vector arguments in memory where an AVX caller passes registers. Internal
// linkage gives each unit its own (cmake/CheckIsaSymbols.cmake, a ctest, checks the result).
#define LSA_HD_LOCAL static LSA_HD
