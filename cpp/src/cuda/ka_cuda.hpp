// CUDA implementations of the kernel-attention API (kernel_attention.hpp); arguments are already
// validated by the dispatcher (kernel_attention_dispatch.cpp). No CUDA header here. Each pointer may
// be device memory of the device the call runs on (used in place) or host memory (copied in, and
// out for outputs, by the call); `activations` is host memory.
#pragma once

#include "lsa_native/kernel_attention.hpp"

namespace lsa_native::cuda {

template <class T>
void kernel_attention_forward(const KernelAttentionShape& shape, const T* Z0, const T* V,
                              const T* Bq, const T* Ck, const Activation* activations, T* Z_out,
                              T* predictions, T* context);
template <class T>
void kernel_attention_vjp(const KernelAttentionShape& shape, const T* Z0, const T* V, const T* Bq,
                          const T* Ck, const Activation* activations, const T* d_Z_out, T* d_V,
                          T* d_B, T* d_C, T* d_Z0, const T* context);
template <class T>
double kernel_attention_loss_and_grad(const KernelAttentionShape& shape, const T* Z0, const T* y_q,
                                      const T* V, const T* Bq, const T* Ck,
                                      const Activation* activations, T* d_V, T* d_B, T* d_C,
                                      T* d_Z0, T* predictions);

}  // namespace lsa_native::cuda
