// CUDA runtime glue (runtime.cuh) and the device-memory part of the public API (device.hpp).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "cuda/runtime.cuh"
#include "lsa_native/device.hpp"

namespace lsa_native {
namespace cuda {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so later calls start clean
  throw Error(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(status) + " (" +
              cudaGetErrorString(status) + ")");
}

void throw_out_of_memory(cudaError_t status, std::size_t bytes, int device, const char* what) {
  cudaGetLastError();  // not sticky: the context stays usable
  std::size_t free = 0, total = 0;
  const bool known = cudaMemGetInfo(&free, &total) == cudaSuccess;
  cudaGetLastError();
  throw DeviceMemoryError(
      std::string("CUDA out of memory: ") + what + " of " + std::to_string(bytes) +
      " bytes on device " + std::to_string(device) +
      (known ? " (" + std::to_string(free) + " of " + std::to_string(total) + " bytes free)" : "") +
      " [" + cudaGetErrorName(status) + "]; use a smaller batch, free device memory "
      "(lsa_native.cuda.release_memory(), torch.cuda.empty_cache()) or device='cpu'");
}

// Device of p when the kernels can address it in place, else -1 (host memory).
int device_of(const void* p) {
  cudaPointerAttributes a{};
  const cudaError_t status = cudaPointerGetAttributes(&a, p);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) return a.device;
  return -1;
}

DeviceScope::DeviceScope(std::initializer_list<const void*> pointers) {
  LSA_CUDA_CHECK(cudaGetDevice(&previous_));
  device_ = -1;
  for (const void* p : pointers) {
    if (p == nullptr) continue;
    const int dev = device_of(p);
    if (dev < 0) continue;
    if (device_ >= 0 && dev != device_)
      throw Error("arrays on different CUDA devices (" + std::to_string(device_) + " and " +
                  std::to_string(dev) + "); move them to one device");
    device_ = dev;
  }
  if (device_ < 0) device_ = previous_;
  if (device_ != previous_) LSA_CUDA_CHECK(cudaSetDevice(device_));
  LSA_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_));
  LSA_CUDA_CHECK(cudaDeviceGetAttribute(&max_shared_, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_));
}

DeviceScope::~DeviceScope() {
  if (device_ != previous_) cudaSetDevice(previous_);
}

bool DeviceScope::on_device(const void* p) const { return device_of(p) == device_; }

void* DeviceScope::host_output(void* host, std::size_t bytes) {
  host_outputs_.push_back({host, Scratch(bytes), bytes});
  return host_outputs_.back().device.get();
}

bool old_kernels_requested() {
  const char* v = std::getenv("LSA_NATIVE_CUDA_OLD_KERNELS");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

namespace {

// Pinned host memory for the small outputs of a call (one per host thread, never shrunk; pinned
// so that the copies are queued without blocking and one wait covers them all).
constexpr std::size_t kPinnedBytes = std::size_t(1) << 20;

// Null when pinned memory cannot be had (e.g. a low memlock limit): finish() then copies straight
// into the caller's memory.
unsigned char* pinned_buffer() {
  struct Pinned {
    void* p = nullptr;
    bool failed = false;
    ~Pinned() {
      if (p != nullptr) cudaFreeHost(p);  // at thread exit; errors (runtime gone) are moot
    }
  };
  thread_local Pinned pinned;
  if (pinned.p == nullptr && !pinned.failed && cudaMallocHost(&pinned.p, kPinnedBytes) != cudaSuccess) {
    cudaGetLastError();
    pinned.p = nullptr;
    pinned.failed = true;
  }
  return static_cast<unsigned char*>(pinned.p);
}

constexpr std::size_t aligned(std::size_t bytes) { return (bytes + 15) / 16 * 16; }  // 16-byte slots

}  // namespace

void DeviceScope::finish() {
  if (host_outputs_.empty()) return;
  std::size_t total = 0;
  for (const HostOutput& o : host_outputs_) total += aligned(o.bytes);
  unsigned char* stage = total <= kPinnedBytes ? pinned_buffer() : nullptr;
  if (stage != nullptr) {
    std::size_t offset = 0;
    for (const HostOutput& o : host_outputs_) {
      LSA_CUDA_CHECK(cudaMemcpyAsync(stage + offset, o.device.get(), o.bytes, cudaMemcpyDeviceToHost, stream()));
      offset += aligned(o.bytes);
    }
    LSA_CUDA_CHECK(cudaStreamSynchronize(stream()));  // one wait (reports kernel faults)
    offset = 0;
    for (const HostOutput& o : host_outputs_) {
      std::memcpy(o.host, stage + offset, o.bytes);
      offset += aligned(o.bytes);
    }
  } else {  // large outputs (or no pinned memory): straight into the caller's pageable memory
    for (const HostOutput& o : host_outputs_)
      LSA_CUDA_CHECK(cudaMemcpyAsync(o.host, o.device.get(), o.bytes, cudaMemcpyDeviceToHost, stream()));
    LSA_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }
  host_outputs_.clear();
}

namespace {

// One stream-ordered memory pool per device, private to lsa_native, that keeps up to kPoolKeepBytes
// of what scratch frees across synchronisations (the default pool keeps nothing: every call of a
// training loop would map its scratch again); more is handed back at the next synchronisation,
// so a rare large workspace does not stay reserved next to PyTorch's allocator.
// cuda_release_memory() trims them to zero.
constexpr std::uint64_t kPoolKeepBytes = std::uint64_t(256) << 20;
constexpr int kMaxDevices = 64;
std::mutex pools_mutex;
cudaMemPool_t pools[kMaxDevices] = {};

cudaMemPool_t pool_of(int device) {
  if (device < 0 || device >= kMaxDevices) throw Error("CUDA device index out of range");
  std::lock_guard<std::mutex> lock(pools_mutex);
  if (pools[device] == nullptr) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t pool = nullptr;
    LSA_CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
    std::uint64_t keep = kPoolKeepBytes;
    LSA_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    pools[device] = pool;
  }
  return pools[device];
}

}  // namespace

Scratch::Scratch(std::size_t bytes) {
  if (bytes == 0) return;
  int device = 0;
  LSA_CUDA_CHECK(cudaGetDevice(&device));  // the call's DeviceScope made it current
  cudaMemPool_t pool = pool_of(device);
  cudaError_t status = cudaMallocFromPoolAsync(&ptr_, bytes, pool, stream());
  if (status == cudaErrorMemoryAllocation) {  // give back what the pool keeps, then try once more
    cudaGetLastError();
    LSA_CUDA_CHECK(cudaStreamSynchronize(stream()));
    LSA_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
    status = cudaMallocFromPoolAsync(&ptr_, bytes, pool, stream());
  }
  if (status == cudaErrorMemoryAllocation) throw_out_of_memory(status, bytes, device, "scratch");
  check(status, "cudaMallocFromPoolAsync");
}

void Scratch::release() noexcept {
  if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream());
  ptr_ = nullptr;
}

}  // namespace cuda

bool cuda_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error for the caller
    return false;
  }
  return n > 0;
}

void* cuda_allocate(std::size_t bytes, int device) {
  int previous = 0;
  LSA_CUDA_CHECK(cudaGetDevice(&previous));
  if (device < 0) device = previous;
  if (device != previous) LSA_CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  const cudaError_t status = bytes > 0 ? cudaMalloc(&p, bytes) : cudaSuccess;
  if (device != previous) cudaSetDevice(previous);
  if (status == cudaErrorMemoryAllocation)
    cuda::throw_out_of_memory(status, bytes, device, "an array");
  cuda::check(status, "cudaMalloc");
  return p;
}

int cuda_pointer_device(const void* p) { return p == nullptr ? -1 : cuda::device_of(p); }

void cuda_free(void* p) noexcept {
  if (p != nullptr) cudaFree(p);
}

void cuda_copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  LSA_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

int cuda_current_device() {
  int dev = 0;
  LSA_CUDA_CHECK(cudaGetDevice(&dev));
  return dev;
}

void cuda_synchronize() { LSA_CUDA_CHECK(cudaDeviceSynchronize()); }

void cuda_release_memory() {
  std::lock_guard<std::mutex> lock(cuda::pools_mutex);
  for (int device = 0; device < cuda::kMaxDevices; ++device) {
    if (cuda::pools[device] == nullptr) continue;
    int previous = 0;
    LSA_CUDA_CHECK(cudaGetDevice(&previous));
    LSA_CUDA_CHECK(cudaSetDevice(device));
    const cudaError_t status = cudaDeviceSynchronize();  // frees queued on the stream are done
    cudaSetDevice(previous);
    cuda::check(status, "cudaDeviceSynchronize");
    LSA_CUDA_CHECK(cudaMemPoolTrimTo(cuda::pools[device], 0));
  }
}

}  // namespace lsa_native
