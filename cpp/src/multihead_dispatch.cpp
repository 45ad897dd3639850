// The multi-head LSA dispatcher (multihead.hpp): every entry point checks its arguments once,
// here; H = 1 runs the one-head LSA entry points (lsa.hpp, any device: bitwise the one-head model),
// H >= 2 the CPU kernels (cpu/multihead_cpu.cpp).
#include <limits>
#include <string>

#include "cpu/multihead_cpu.hpp"
#include "dispatch.hpp"
#include "lsa_native/lsa.hpp"
#include "lsa_native/multihead.hpp"

namespace lsa_native {

void validate_heads(const LsaShape& s, index_t heads) {
  validate(s);
  detail::require(heads >= 1, "H: expected at least one head (H >= 1), got H = " +
                                  std::to_string(heads));
  const index_t n2 = (s.dim + 1) * (s.dim + 1);
  detail::require(heads <= std::numeric_limits<index_t>::max() / (2 * n2),
                  "H: H*(d+1)^2 overflows a 64-bit index");
}

namespace {
// The H >= 2 kernels run on the CPU only.
void require_cpu(Device device) {
  detail::require(device == Device::cpu,
                  "device='cuda': the multi-head model (H >= 2) has no CUDA kernels yet; use "
                  "device='cpu'");
}
}  // namespace
using detail::require_pointer;

template <class T>
void multihead_lsa_predict(const LsaShape& shape, index_t heads, const T* E, const T* W_pv,
                           const T* W_kq, T* y_hat, Device device) {
  validate_heads(shape, heads);
  if (heads == 1) return lsa_predict(shape, E, W_pv, W_kq, y_hat, device);
  require_cpu(device);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(y_hat, "y_hat");
  cpu::multihead_lsa_predict(shape, heads, E, W_pv, W_kq, y_hat);
}

template <class T>
double multihead_lsa_loss_and_grad(const LsaShape& shape, index_t heads, const T* E, const T* y_q,
                                   const T* W_pv, const T* W_kq, T* d_W_pv, T* d_W_kq, T* y_hat,
                                   Device device) {
  validate_heads(shape, heads);
  if (heads == 1) return lsa_loss_and_grad(shape, E, y_q, W_pv, W_kq, d_W_pv, d_W_kq, y_hat, device);
  require_cpu(device);
  require_pointer(E, "E");
  require_pointer(y_q, "y_q");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(d_W_pv, "d_W_pv");
  require_pointer(d_W_kq, "d_W_kq");
  return cpu::multihead_lsa_loss_and_grad(shape, heads, E, y_q, W_pv, W_kq, d_W_pv, d_W_kq, y_hat);
}

template <class T>
void multihead_lsa_forward(const LsaShape& shape, index_t heads, const T* E, const T* W_pv,
                           const T* W_kq, T* F, Device device) {
  validate_heads(shape, heads);
  if (heads == 1) return lsa_forward(shape, E, W_pv, W_kq, F, device);
  require_cpu(device);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(F, "F");
  cpu::multihead_lsa_forward(shape, heads, E, W_pv, W_kq, F);
}

template <class T>
void multihead_lsa_vjp(const LsaShape& shape, index_t heads, const T* E, const T* W_pv,
                       const T* W_kq, const T* d_F, T* d_W_pv, T* d_W_kq, T* d_E, Device device) {
  validate_heads(shape, heads);
  if (heads == 1) return lsa_vjp(shape, E, W_pv, W_kq, d_F, d_W_pv, d_W_kq, d_E, device);
  require_cpu(device);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(d_F, "d_F");
  require_pointer(d_W_pv, "d_W_pv");
  require_pointer(d_W_kq, "d_W_kq");
  cpu::multihead_lsa_vjp(shape, heads, E, W_pv, W_kq, d_F, d_W_pv, d_W_kq, d_E);
}

template <class T>
void multihead_lsa_predict_vjp(const LsaShape& shape, index_t heads, const T* E, const T* W_pv,
                               const T* W_kq, const T* d_y, T* d_W_pv, T* d_W_kq, T* d_E,
                               Device device) {
  validate_heads(shape, heads);
  if (heads == 1) return lsa_predict_vjp(shape, E, W_pv, W_kq, d_y, d_W_pv, d_W_kq, d_E, device);
  require_cpu(device);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(d_y, "d_y");
  require_pointer(d_W_pv, "d_W_pv");
  require_pointer(d_W_kq, "d_W_kq");
  cpu::multihead_lsa_predict_vjp(shape, heads, E, W_pv, W_kq, d_y, d_W_pv, d_W_kq, d_E);
}

#define LSA_NATIVE_MULTIHEAD_INSTANTIATE(R, name, params) \
  template R name(LSA_NATIVE_UNPAREN params, Device);
LSA_NATIVE_MULTIHEAD_API(LSA_NATIVE_MULTIHEAD_INSTANTIATE, float)
LSA_NATIVE_MULTIHEAD_API(LSA_NATIVE_MULTIHEAD_INSTANTIATE, double)
#undef LSA_NATIVE_MULTIHEAD_INSTANTIATE

}  // namespace lsa_native
