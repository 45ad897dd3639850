// CUDA runtime glue of the kernels: error checks, the device a call runs on, host/device staging.
// Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <initializer_list>
#include <utility>
#include <vector>

#include "lsa_native/types.hpp"

namespace lsa_native::cuda {

// Every CUDA runtime call goes through check(): a failure becomes lsa_native::Error naming the call.
void check(cudaError_t status, const char* what);
// DeviceMemoryError (MemoryError in Python) for a failed allocation of `bytes` on `device`, naming
// `what`, the free memory and the ways out; the error is cleared first (the process stays usable).
[[noreturn]] void throw_out_of_memory(cudaError_t status, std::size_t bytes, int device,
                                      const char* what);
#define LSA_CUDA_CHECK(call) ::lsa_native::cuda::check((call), #call)

// The device owning p when the kernels can address it in place (device or managed memory), else -1.
int device_of(const void* p);

// Kernels run on the legacy default stream: ordered after the work PyTorch and CuPy queue on their
// default streams, so device inputs produced there are ready without extra synchronisation.
inline cudaStream_t stream() { return cudaStreamLegacy; }

// Stream-ordered scratch memory on stream(), from lsa_native's pool of the current device (kept
// between calls up to a threshold; cuda_release_memory() trims it).
class Scratch {
 public:
  Scratch() = default;
  explicit Scratch(std::size_t bytes);
  ~Scratch() { release(); }
  Scratch(Scratch&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)) {}
  Scratch& operator=(Scratch&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
    }
    return *this;
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }

 private:
  void release() noexcept;
  void* ptr_ = nullptr;
};

// The device of a call: the device owning the device pointers among the arguments (they must all
// live on one device), else the current device. It is current for the scope's lifetime.
// The call's host outputs (DeviceOutput over host memory) register here; finish() copies them all
// back with one wait.
class DeviceScope {
 public:
  explicit DeviceScope(std::initializer_list<const void*> pointers);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  int device() const { return device_; }
  int sm_count() const { return sm_count_; }
  int max_shared_bytes() const { return max_shared_; }  // opt-in dynamic shared memory per block
  // Whether the kernels can use p in place (device or managed memory of this device).
  bool on_device(const void* p) const;
  // Device memory for `bytes` of host output `host`, owned by the scope (so it outlives every
  // DeviceOutput) and copied to `host` by finish().
  void* host_output(void* host, std::size_t bytes);
  // Copies the host outputs back after the call's kernels and waits once (small outputs through a
  // per-thread pinned buffer: a pageable device-to-host copy would block once per output). With
  // no host outputs it returns at once: the kernels may still be running.
  void finish();

 private:
  struct HostOutput {
    void* host;
    Scratch device;
    std::size_t bytes;
  };
  int device_ = 0, previous_ = 0, sm_count_ = 0, max_shared_ = 0;
  std::vector<HostOutput> host_outputs_;
};


// An input array [count] as a device pointer: itself when it is on the device, else a device copy.
template <class T>
class DeviceInput {
 public:
  DeviceInput(const DeviceScope& scope, const T* p, index_t count) : ptr_(p) {
    if (p == nullptr || scope.on_device(p)) return;
    const std::size_t bytes = sizeof(T) * static_cast<std::size_t>(count);
    copy_ = Scratch(bytes);
    LSA_CUDA_CHECK(cudaMemcpyAsync(copy_.get(), p, bytes, cudaMemcpyHostToDevice, stream()));
    ptr_ = static_cast<const T*>(copy_.get());
  }
  const T* get() const { return ptr_; }

 private:
  const T* ptr_;
  Scratch copy_;
};

// An output array [count] as a device pointer: itself when it is on the device, else device
// memory of the scope that its finish() copies to the host pointer.
template <class T>
class DeviceOutput {
 public:
  DeviceOutput(DeviceScope& scope, T* p, index_t count) : ptr_(p) {
    if (p != nullptr && !scope.on_device(p))
      ptr_ = static_cast<T*>(scope.host_output(p, sizeof(T) * static_cast<std::size_t>(count)));
  }
  T* get() const { return ptr_; }

 private:
  T* ptr_;
};

// LSA_NATIVE_CUDA_OLD_KERNELS=1 (read at every launch) forces the general block-per-prompt kernels
// of the full LSA output and of kernel attention (the fallbacks for shapes the fast kernels do not
// fit) for every shape, so that tests and benchmarks cover both.
bool old_kernels_requested();

// Launch check: configuration errors now, execution errors at the next synchronising call.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

}  // namespace lsa_native::cuda
