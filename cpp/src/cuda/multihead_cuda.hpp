// CUDA implementations of the multi-head LSA API (multihead.hpp): every entry point of
// LSA_NATIVE_MULTIHEAD_API (the model's for H >= 2, H = 1 running cuda::lsa_*; merge / chain for
// every H). No CUDA header here: multihead_dispatch.cpp includes it. Each pointer may be device
// memory of the device the call runs on (used in place; device outputs only queued) or host memory
// (copied in, and out for outputs, by the call).
#pragma once

#include "common/linear_prompts.hpp"
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

// The fused H-head sampled step on the GPU (linear_prompts_multihead_loss_and_grad of multihead.hpp,
// H >= 2, arguments validated; P with host factors): wishart — one thread per prompt on the CPU
// step's Philox streams (multihead_sampled_kernels.cuh); tokens — the prompts drawn on the GPU into
// a scratch (sample_linear_prompts) and consumed by the H-head loss kernel. Parameters and outputs
// host or device memory of one device; with `loss` (device or host) L is written there and NaN
// returned: with device outputs the call only queues kernels.
template <class T>
double linear_prompts_multihead_loss_and_grad(const linear::Law<T>& P, index_t batch,
                                              FusedMethod method, index_t heads, const T* W_pv,
                                              const T* W_kq, T* d_W_pv, T* d_W_kq,
                                              double* loss = nullptr);

}  // namespace lsa_native::cuda
