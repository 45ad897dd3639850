// Per-entry activation math of kernel attention [CCS (12)], shared by the CPU and CUDA kernels.
#pragma once

#include <cmath>

#include "common/lsa_math.hpp"
#include "lsa_native/kernel_attention.hpp"

namespace lsa_native::detail {

// h̃ for elementwise activations (softmax is column-wise: see softmax_column).
template <class T>
LSA_HD inline T activate(Activation a, T s) {
  switch (a) {
    case Activation::relu: return s > T(0) ? s : T(0);
    case Activation::exp: return std::exp(s);
    default: return s;  // linear
  }
}

// ∂ℓ/∂S from ∂ℓ/∂H for elementwise activations, using H = h̃(S) (relu' = [H > 0], exp' = H).
template <class T>
LSA_HD inline T activation_backward(Activation a, T h, T d_h) {
  switch (a) {
    case Activation::relu: return h > T(0) ? d_h : T(0);
    case Activation::exp: return h * d_h;
    default: return d_h;
  }
}

// Softmax over the sources i < n of one target column, max subtracted so that large logits stay
// finite: h_i = exp(s_i − max) / Σ_k exp(s_k − max). s, h strided by `stride`.
template <class T>
LSA_HD inline void softmax_column(const T* s, T* h, index_t n, index_t stride) {
  T m = s[0];
  for (index_t i = 1; i < n; ++i) m = s[i * stride] > m ? s[i * stride] : m;
  T total = 0;
  for (index_t i = 0; i < n; ++i) {
    const T e = std::exp(s[i * stride] - m);
    h[i * stride] = e;
    total += e;
  }
  const T inv = T(1) / total;
  for (index_t i = 0; i < n; ++i) h[i * stride] *= inv;
}

// Softmax backward for one column: d_s_i = h_i (d_h_i − Σ_k h_k d_h_k).
template <class T>
LSA_HD inline void softmax_column_backward(const T* h, const T* d_h, T* d_s, index_t n,
                                           index_t stride) {
  T dot = 0;
  for (index_t i = 0; i < n; ++i) dot += h[i * stride] * d_h[i * stride];
  for (index_t i = 0; i < n; ++i) d_s[i * stride] = h[i * stride] * (d_h[i * stride] - dot);
}

}  // namespace lsa_native::detail
