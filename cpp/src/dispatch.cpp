// Public LSA entry points: argument checks, then the backend. With no CUDA kernels compiled every
// call runs on the CPU (population and kernel attention are CPU-only and check their own arguments).
#include <limits>
#include <string>

#include "cpu/lsa_cpu.hpp"
#include "lsa_native/device.hpp"
#include "lsa_native/lsa.hpp"

namespace lsa_native {

bool cuda_available() { return false; }  // no CUDA kernels in this build (cuda_compiled() == false)

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
}  // namespace

template <class T>
void lsa_predict(const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, T* y_hat) {
  validate(shape);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(y_hat, "y_hat");
  cpu::lsa_predict(shape, E, W_pv, W_kq, y_hat);
}

template <class T>
double lsa_loss_and_grad(const LsaShape& shape, const T* E, const T* y_q, const T* W_pv,
                         const T* W_kq, T* d_W_pv, T* d_W_kq, T* y_hat) {
  validate(shape);
  require_pointer(E, "E");
  require_pointer(y_q, "y_q");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(d_W_pv, "d_W_pv");
  require_pointer(d_W_kq, "d_W_kq");
  return cpu::lsa_loss_and_grad(shape, E, y_q, W_pv, W_kq, d_W_pv, d_W_kq, y_hat);
}

template <class T>
void lsa_forward(const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, T* F) {
  validate(shape);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(F, "F");
  cpu::lsa_forward(shape, E, W_pv, W_kq, F);
}

template <class T>
void lsa_vjp(const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, const T* d_F,
             T* d_W_pv, T* d_W_kq, T* d_E) {
  validate(shape);
  require_pointer(E, "E");
  require_pointer(W_pv, "W_pv");
  require_pointer(W_kq, "W_kq");
  require_pointer(d_F, "d_F");
  require_pointer(d_W_pv, "d_W_pv");
  require_pointer(d_W_kq, "d_W_kq");
  cpu::lsa_vjp(shape, E, W_pv, W_kq, d_F, d_W_pv, d_W_kq, d_E);
}

#define LSA_NATIVE_INSTANTIATE(T)                                                                   \
  template void lsa_predict<T>(const LsaShape&, const T*, const T*, const T*, T*);                  \
  template double lsa_loss_and_grad<T>(const LsaShape&, const T*, const T*, const T*, const T*, T*, \
                                       T*, T*);                                                     \
  template void lsa_forward<T>(const LsaShape&, const T*, const T*, const T*, T*);                  \
  template void lsa_vjp<T>(const LsaShape&, const T*, const T*, const T*, const T*, T*, T*, T*);
LSA_NATIVE_INSTANTIATE(float)
LSA_NATIVE_INSTANTIATE(double)
#undef LSA_NATIVE_INSTANTIATE

}  // namespace lsa_native
