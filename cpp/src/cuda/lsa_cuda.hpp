// CUDA implementations of the LSA API (lsa.hpp); arguments are already validated by dispatch.cpp.
// No CUDA header here: dispatch.cpp includes it. Each pointer may be device memory of the device
// the call runs on (used in place) or host memory (copied in, and out for outputs, by the call).
#pragma once

#include "lsa_native/lsa.hpp"

namespace lsa_native::cuda {

template <class T>
void lsa_predict(const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, T* y_hat);
template <class T>
double lsa_loss_and_grad(const LsaShape& shape, const T* E, const T* y_q, const T* W_pv,
                         const T* W_kq, T* d_W_pv, T* d_W_kq, T* y_hat);
template <class T>
void lsa_forward(const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, T* F);
template <class T>
void lsa_vjp(const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, const T* d_F,
             T* d_W_pv, T* d_W_kq, T* d_E);

}  // namespace lsa_native::cuda
