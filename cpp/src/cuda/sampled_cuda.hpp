// CUDA implementation of the fused sampled LSA steps (sampling.hpp); the law is already validated
// (a linear::Plan) and the method's conditions checked by sampling_dispatch.cpp. No CUDA header here.
#pragma once

#include "common/linear_prompts.hpp"
#include "lsa_native/sampling.hpp"

namespace lsa_native::cuda {

// Prompts 0..batch−1 of law P (host factors) into the non-null outputs (device memory of one
// device, or host memory: copied back and waited for): the CPU sampler's values up to the rounding
// of the device's log/sin/cos. With device outputs the call only queues the kernel.
template <class T>
void sample_linear_prompts(const linear::Law<T>& P, index_t batch, const LinearPromptOutputs<T>& out);

// L and d_W_pv, d_W_kq [d+1, d+1] of the prompts 0..batch−1 of law P (host factors); W_pv, W_kq
// and the gradients may be host or device memory of the device the call runs on. With `loss`
// (one double, device or host memory) L is written there and NaN returned: with device outputs
// the call only queues kernels (nothing waits).
template <class T>
double linear_prompts_lsa_loss_and_grad(const linear::Law<T>& P, index_t batch, FusedMethod method,
                                        const T* W_pv, const T* W_kq, T* d_W_pv, T* d_W_kq,
                                        double* loss = nullptr);

}  // namespace lsa_native::cuda
