// CPU LSA kernels over a range of prompts, compiled once per instruction set (see lsa_kernels.inl).
#pragma once

#include "lsa_native/lsa.hpp"

namespace lsa_native::cpu {

// Sizes of the per-chunk partial sums the range kernels write (double, reduced in chunk order).
inline index_t loss_grad_partial_size(index_t d) { return 1 + (d + 1) + (d + 1) * (d + 1); }  // L, d_p, d_W_kq
inline index_t vjp_partial_size(index_t d) { return 2 * (d + 1) * (d + 1); }          // dW_pv, dW_kq

// Kernels over prompts [b0, b1). Array shapes as in lsa.hpp. predict, forward and vjp return
// false when a value they wrote to y_hat, F or d_E was non-finite (tested in the writing pass).
template <class T>
struct LsaKernels {
  bool (*predict)(const LsaShape&, const T* E, const T* W_pv, const T* W_kq, T* y_hat, index_t b0,
                  index_t b1);
  // partial [loss_grad_partial_size(d)] (written): Σ r^2, Σ r ∂ŷ/∂p, Σ r ∂ŷ/∂K with r = ŷ − y.
  void (*loss_grad)(const LsaShape&, const T* E, const T* y_q, const T* W_pv, const T* W_kq,
                    T* y_hat, index_t b0, index_t b1, double* partial);
  bool (*forward)(const LsaShape&, const T* E, const T* W_pv, const T* W_kq, T* F, index_t b0,
                  index_t b1);
  // partial [vjp_partial_size(d)] (written): Σ_b dW_pv, Σ_b dW_kq.
  bool (*vjp)(const LsaShape&, const T* E, const T* W_pv, const T* W_kq, const T* d_F, T* d_E,
              index_t b0, index_t b1, double* partial);
};

namespace isa_baseline {
template <class T>
LsaKernels<T> lsa_kernels();
}
namespace isa_avx2 {
template <class T>
LsaKernels<T> lsa_kernels();
}

}  // namespace lsa_native::cpu
