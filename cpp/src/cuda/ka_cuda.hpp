// CUDA implementations of the kernel-attention API (kernel_attention.hpp); arguments are already
// validated by the dispatcher (kernel_attention_dispatch.cpp). No CUDA header here. Each pointer may
// be device memory of the device the call runs on (used in place) or host memory (copied in, and
// out for outputs, by the call); `activations` is host memory.
#pragma once

#include "lsa_backend.hpp"
#include "lsa_native/kernel_attention.hpp"

namespace lsa_native::cuda {

LSA_NATIVE_KA_API(LSA_NATIVE_DECLARE_BACKEND, T)

// kernel_attention_loss_and_grad with the loss written to `loss` (one double, device or host
// memory) instead of returned: with every output in device memory nothing waits.
template <class T>
void kernel_attention_loss_and_grad_into(const KernelAttentionShape& sh, const T* Z0, const T* y_q,
                                         const T* V, const T* Bq, const T* Ck,
                                         const Activation* acts, T* d_V, T* d_B, T* d_C, T* d_Z0,
                                         T* predictions, double* loss);

}  // namespace lsa_native::cuda
