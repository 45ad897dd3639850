// CUDA implementations of the kernel-attention API (kernel_attention.hpp); arguments are already
// validated by the dispatcher (kernel_attention_dispatch.cpp). No CUDA header here. Each pointer may
// be device memory of the device the call runs on (used in place) or host memory (copied in, and
// out for outputs, by the call); `activations` is host memory.
#pragma once

#include "lsa_backend.hpp"
#include "lsa_native/kernel_attention.hpp"

namespace lsa_native::cuda {

LSA_NATIVE_KA_API(LSA_NATIVE_DECLARE_BACKEND, T)

}  // namespace lsa_native::cuda
