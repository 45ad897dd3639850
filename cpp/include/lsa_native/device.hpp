// Which backends this build has and how many CPU threads the kernels use.
#pragma once

#include <cstddef>

#include "lsa_native/config.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native {

// True when CUDA kernels were compiled into this library.
constexpr bool cuda_compiled() { return LSA_NATIVE_HAVE_CUDA != 0; }
// True when CUDA kernels were compiled and a CUDA device is visible at run time (false without a
// driver or a GPU: a CUDA build runs everywhere, on the CPU).
bool cuda_available();

// Where a call runs. Device::cpu: every pointer is host memory. Device::cuda: each pointer may be
// device (or managed) memory of one CUDA device, used in place, or host memory, which the call
// copies to the device (and back for outputs); the kernels run on that device's legacy default
// stream. A call whose outputs are all device memory may return before its kernels finish (as any
// CUDA library call); a call that returns a value (a loss) or writes host outputs waits for them.
// Device::cuda without CUDA kernels or without a GPU throws Error.
enum class Device { cpu, cuda };

// Device memory for callers without a CUDA array library (the Python lsa_native.cuda module).
// All throw Error when CUDA was not compiled in, or on any CUDA failure.
void* cuda_allocate(std::size_t bytes, int device = -1);  // cudaMalloc on `device` (-1: current)
void cuda_free(void* p) noexcept;                              // cudaFree; null is a no-op
void cuda_copy(void* dst, const void* src, std::size_t bytes);  // any direction, synchronous
int cuda_current_device();
int cuda_pointer_device(const void* p);  // the device owning p (device/managed memory), else -1
void cuda_synchronize();  // waits for all work on the current device
// Returns the scratch memory lsa_native keeps for reuse (its stream-ordered pools) to the driver;
// waits for the devices first. Without CUDA kernels: a no-op.
void cuda_release_memory();

// Number of CPU threads the batched kernels use (default: the CPUs this process may run on —
// sched_getaffinity on Linux, so taskset and cpusets count — else hardware_concurrency()).
// Results never depend on it: batch reductions run over fixed-size chunks combined in a fixed order.
int num_threads();
// Sets the thread count; n < 1 restores the default. Thread-safe; affects later calls only.
// Returns the count now in use: less than n when the system refused to start more threads (an
// address-space or process limit); the pool then runs with the threads it could start.
int set_num_threads(int n);

// Name of the instruction set the CPU kernels dispatch to at run time ("avx512", "avx2-fma" or
// "baseline"; the best this CPU supports unless the environment variable LSA_NATIVE_CPU_ISA names
// a lower one at the first kernel call).
const char* cpu_kernel_isa();

}  // namespace lsa_native
