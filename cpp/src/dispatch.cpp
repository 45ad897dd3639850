// Public LSA entry points: argument checks once, then the backend the caller asked for. The only
// place that asks "was CUDA compiled, is a GPU there?" (population and kernel attention are
// CPU-only and check their own arguments).
#include <limits>
#include <string>

#include "cpu/lsa_cpu.hpp"
#include "lsa_native/device.hpp"
#include "lsa_native/lsa.hpp"
#if LSA_NATIVE_HAVE_CUDA
#include "cuda/lsa_cuda.hpp"
#endif

namespace lsa_native {

#if !LSA_NATIVE_HAVE_CUDA
// No CUDA kernels in this build (cuda_compiled() == false): the device-memory API refuses.
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
#endif

void validate(const LsaShape& s) {
  detail::require(s.batch >= 1, "batch B must be >= 1, got " + std::to_string(s.batch));
  detail::require(s.dim >= 1, "dimension d must be >= 1, got " + std::to_string(s.dim));
  detail::require(s.context >= 1,
                  "context length N must be >= 1 (E needs N+1 >= 2 columns), got " +
                      std::to_string(s.context));
  const index_t max = std::numeric_limits<index_t>::max();
  const index_t per_prompt_rows = s.dim + 1, cols = s.context + 1;
  detail::require(per_prompt_rows <= max / cols && per_prompt_rows * cols <= max / s.batch,
                  "B*(d+1)*(N+1) overflows a 64-bit index");
}

namespace {
void require_pointer(const void* p, const char* name) {
  detail::require(p != nullptr, std::string(name) + " must not be null");
}

// True for Device::cuda once CUDA is known to be usable; throws a clear Error otherwise.
bool use_cuda(Device device) {
  if (device == Device::cpu) return false;
  detail::require(cuda_compiled(),
                  "device='cuda': this build of lsa_native has no CUDA kernels (built without nvcc "
                  "or with LSA_NATIVE_CUDA=OFF); use device='cpu'");
  detail::require(cuda_available(),
                  "device='cuda': no CUDA device is visible (no GPU or no NVIDIA driver); use "
                  "device='cpu'");
  return true;
}
}  // namespace

// Backend call: CUDA when requested and compiled, else the CPU. CALL is the function name.
#if LSA_NATIVE_HAVE_CUDA
#define LSA_NATIVE_BACKEND(device, CALL, ...) \
  (use_cuda(device) ? cuda::CALL(__VA_ARGS__) : cpu::CALL(__VA_ARGS__))
#else
#define LSA_NATIVE_BACKEND(device, CALL, ...) (use_cuda(device), cpu::CALL(__VA_ARGS__))
#endif

template <class T>
void lsa_predict(const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, T* y_hat,
                 Device device) {
  validate(shape);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(y_hat, "y_hat");
  LSA_NATIVE_BACKEND(device, lsa_predict, shape, E, W_pv, W_kq, y_hat);
}

template <class T>
double lsa_loss_and_grad(const LsaShape& shape, const T* E, const T* y_q, const T* W_pv,
                         const T* W_kq, T* d_W_pv, T* d_W_kq, T* y_hat, Device device) {
  validate(shape);
  require_pointer(E, "E");
  require_pointer(y_q, "y_q");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(d_W_pv, "d_W_pv");
  require_pointer(d_W_kq, "d_W_kq");
  return LSA_NATIVE_BACKEND(device, lsa_loss_and_grad, shape, E, y_q, W_pv, W_kq, d_W_pv, d_W_kq,
                            y_hat);
}

template <class T>
void lsa_forward(const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, T* F,
                 Device device) {
  validate(shape);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(F, "F");
  LSA_NATIVE_BACKEND(device, lsa_forward, shape, E, W_pv, W_kq, F);
}

template <class T>
void lsa_vjp(const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, const T* d_F,
             T* d_W_pv, T* d_W_kq, T* d_E, Device device) {
  validate(shape);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(d_F, "d_F");
  require_pointer(d_W_pv, "d_W_pv");
  require_pointer(d_W_kq, "d_W_kq");
  LSA_NATIVE_BACKEND(device, lsa_vjp, shape, E, W_pv, W_kq, d_F, d_W_pv, d_W_kq, d_E);
}
#undef LSA_NATIVE_BACKEND

#define LSA_NATIVE_INSTANTIATE(T)                                                                  \
  template void lsa_predict<T>(const LsaShape&, const T*, const T*, const T*, T*, Device);         \
  template double lsa_loss_and_grad<T>(const LsaShape&, const T*, const T*, const T*, const T*,    \
                                       T*, T*, T*, Device);                                        \
  template void lsa_forward<T>(const LsaShape&, const T*, const T*, const T*, T*, Device);         \
  template void lsa_vjp<T>(const LsaShape&, const T*, const T*, const T*, const T*, T*, T*, T*,    \
                           Device);
LSA_NATIVE_INSTANTIATE(float)
LSA_NATIVE_INSTANTIATE(double)
#undef LSA_NATIVE_INSTANTIATE

}  // namespace lsa_native
