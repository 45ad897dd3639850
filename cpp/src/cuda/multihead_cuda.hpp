// CUDA implementations of the multi-head LSA API (multihead.hpp), H >= 2 (H = 1 runs cuda::lsa_*):
// every entry point of LSA_NATIVE_MULTIHEAD_API. No CUDA header here: multihead_dispatch.cpp
// includes it. Each pointer may be device memory of the device the call runs on (used in place)
// or host memory (copied in, and out for outputs, by the call).
#pragma once

#include "lsa_backend.hpp"
#include "lsa_native/multihead.hpp"

namespace lsa_native::cuda {

LSA_NATIVE_MULTIHEAD_API(LSA_NATIVE_DECLARE_BACKEND, T)

// multihead_lsa_loss_and_grad with the loss written to `loss` (one double, device or host memory)
// instead of returned: with every output in device memory the call only queues kernels (nothing
// waits), as lsa_loss_and_grad_into.
template <class T>
void multihead_lsa_loss_and_grad_into(const LsaShape& shape, index_t heads, const T* E,
                                      const T* y_q, const T* W_pv, const T* W_kq, T* d_W_pv,
                                      T* d_W_kq, T* y_hat, double* loss);

}  // namespace lsa_native::cuda
