// CUDA implementations of the multi-head LSA API (multihead.hpp), H >= 2 (H = 1 runs cuda::lsa_*):
// every entry point of LSA_NATIVE_MULTIHEAD_API. No CUDA header here: multihead_dispatch.cpp
// includes it. Each pointer may be device memory of the device the call runs on (used in place)
// or host memory (copied in, and out for outputs, by the call).
#pragma once

#include "lsa_backend.hpp"
#include "lsa_native/multihead.hpp"

namespace lsa_native::cuda {

LSA_NATIVE_MULTIHEAD_API(LSA_NATIVE_DECLARE_BACKEND, T)

}  // namespace lsa_native::cuda
