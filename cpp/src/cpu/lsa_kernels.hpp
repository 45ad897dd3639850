// CPU LSA kernels over a range of prompts, compiled once per instruction set (see lsa_kernels.inl).
#pragma once

#include "cpu/isa.hpp"
#include "lsa_native/lsa.hpp"

namespace lsa_native::cpu {

// Sizes of the per-chunk partial sums the range kernels write (double, reduced in chunk order).
static inline index_t loss_grad_partial_size(index_t d) { return 1 + (d + 1) + (d + 1) * (d + 1); }  // L, d_p, d_W_kq
static inline index_t vjp_partial_size(index_t d) { return 2 * (d + 1) * (d + 1); }          // dW_pv, dW_kq

// Gradients of the prediction's parameters from batch sums d_p [d+1] (∂/∂p) and d_K [(d+1)²]
// (∂/∂W^KQ), times `scale`: d_W_pv is zero but its last row (p is the last row of W^PV).
template <class T>
void write_prediction_gradients(index_t d, const double* d_p, const double* d_K, double scale,
                                T* d_W_pv, T* d_W_kq) {
  const index_t rows = d + 1;
  for (index_t i = 0; i < rows * rows; ++i) d_W_pv[i] = T(0);
  for (index_t c = 0; c < rows; ++c) d_W_pv[d * rows + c] = T(d_p[c] * scale);
  for (index_t i = 0; i < rows * rows; ++i) d_W_kq[i] = T(d_K[i] * scale);
}

// The loss L = Σ r² / (2B) [ZFB (3.7)] and its gradients d_W_pv, d_W_kq (= Σ r ∂ŷ/∂θ / B) from the
// batch total [loss_grad_partial_size(d)] of loss_grad partials (also the fused sampled steps').
template <class T>
double finish_loss_and_grad(const double* total, index_t d, index_t batch, T* d_W_pv, T* d_W_kq) {
  const double inv_b = 1.0 / double(batch);
  write_prediction_gradients(d, total + 1, total + 1 + (d + 1), inv_b, d_W_pv, d_W_kq);
  return 0.5 * total[0] * inv_b;
}

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

LSA_NATIVE_DECLARE_PER_ISA(template <class T> LsaKernels<T> lsa_kernels();)

}  // namespace lsa_native::cpu
