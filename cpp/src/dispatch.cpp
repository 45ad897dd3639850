// The LSA dispatcher: every public LSA entry point (the list LSA_NATIVE_LSA_API of lsa.hpp) checks
// its arguments once, here, then runs the backend the caller asked for through detail::use_cuda
// (dispatch.hpp: the one place that asks "was CUDA compiled, is a GPU there?"). Kernel attention
// dispatches in kernel_attention_dispatch.cpp; population's dispatcher is population.cpp (CPU only).
#include <limits>
#include <string>

#include "cpu/lsa_cpu.hpp"
#include "dispatch.hpp"
#include "lsa_native/device.hpp"
#include "lsa_native/lsa.hpp"
#if LSA_NATIVE_HAVE_CUDA
#include "cuda/lsa_cuda.hpp"
#endif

namespace lsa_native {

// The one place of the rules on E's extents (the bindings and Python only read E's shape).
void validate(const LsaShape& s) {
  detail::require(s.batch >= 1, "E: expected at least one prompt (B >= 1), got B = " +
                                    std::to_string(s.batch));
  detail::require(s.dim >= 1, "E: expected d+1 >= 2 rows (d >= 1), got d = " +
                                  std::to_string(s.dim));
  detail::require(s.context >= 1,
                  "E: expected N+1 >= 2 columns (context length N >= 1 plus the query), got N = " +
                      std::to_string(s.context));
  const index_t max = std::numeric_limits<index_t>::max();
  const index_t per_prompt_rows = s.dim + 1, cols = s.context + 1;
  detail::require(per_prompt_rows <= max / cols && per_prompt_rows * cols <= max / s.batch,
                  "E: B*(d+1)*(N+1) overflows a 64-bit index");
}

namespace detail {
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
}  // namespace detail
using detail::require_pointer;

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

template <class T>
void lsa_predict_vjp(const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq,
                     const T* d_y, T* d_W_pv, T* d_W_kq, T* d_E, Device device) {
  validate(shape);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(d_y, "d_y");
  require_pointer(d_W_pv, "d_W_pv");
  require_pointer(d_W_kq, "d_W_kq");
  LSA_NATIVE_BACKEND(device, lsa_predict_vjp, shape, E, W_pv, W_kq, d_y, d_W_pv, d_W_kq, d_E);
}
#undef LSA_NATIVE_BACKEND

// The public functions: every entry point of the list, for float and double (lsa.hpp).
#define LSA_NATIVE_LSA_INSTANTIATE(R, name, params) template R name(LSA_NATIVE_UNPAREN params, Device);
LSA_NATIVE_LSA_API(LSA_NATIVE_LSA_INSTANTIATE, float)
LSA_NATIVE_LSA_API(LSA_NATIVE_LSA_INSTANTIATE, double)
#undef LSA_NATIVE_LSA_INSTANTIATE


}  // namespace lsa_native
