// Which backends this build has and how many CPU threads the kernels use.
#pragma once

#include "lsa_native/config.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native {

// True when CUDA kernels were compiled into this library.
constexpr bool cuda_compiled() { return LSA_NATIVE_HAVE_CUDA != 0; }
// True when CUDA kernels were compiled and a CUDA device is visible at run time.
bool cuda_available();

// Number of CPU threads the batched kernels use (default: std::thread::hardware_concurrency()).
// Results never depend on it: batch reductions run over fixed-size chunks combined in a fixed order.
int num_threads();
// Sets the thread count; n < 1 restores the default. Thread-safe; affects later calls only.
void set_num_threads(int n);

// Name of the instruction set the CPU kernels dispatch to at run time ("avx2-fma" or "baseline").
const char* cpu_kernel_isa();

}  // namespace lsa_native
