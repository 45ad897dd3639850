// device.hpp's device-memory API in a build without CUDA kernels (cuda_compiled() == false): it
// refuses, or reports no device. A CUDA build defines the same functions in cuda/runtime.cu.
#include <cstddef>

#include "lsa_native/device.hpp"
#include "lsa_native/types.hpp"

#if !LSA_NATIVE_HAVE_CUDA
namespace lsa_native {
namespace {
[[noreturn]] void no_cuda() {
  throw Error("CUDA: this build of lsa_native has no CUDA kernels (built without nvcc or with "
              "LSA_NATIVE_CUDA=OFF)");
}
}  // namespace
bool cuda_available() { return false; }
void* cuda_allocate(std::size_t, int) { no_cuda(); }
int cuda_pointer_device(const void*) { return -1; }
void cuda_free(void*) noexcept {}
void cuda_copy(void*, const void*, std::size_t) { no_cuda(); }
int cuda_current_device() { no_cuda(); }
void cuda_synchronize() { no_cuda(); }
void cuda_release_memory() {}
}  // namespace lsa_native
#endif
