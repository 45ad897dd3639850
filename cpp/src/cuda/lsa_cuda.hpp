// CUDA implementations of the LSA API (lsa.hpp): every entry point of LSA_NATIVE_LSA_API.
// No CUDA header here: dispatch.cpp includes it. Each pointer may be device memory of the device
// the call runs on (used in place) or host memory (copied in, and out for outputs, by the call).
#pragma once

#include "lsa_backend.hpp"

namespace lsa_native::cuda {

LSA_NATIVE_LSA_API(LSA_NATIVE_DECLARE_BACKEND, T)

}  // namespace lsa_native::cuda
