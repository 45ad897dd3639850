// CPU implementations of the multi-head LSA API (multihead.hpp), H >= 2 (H = 1 runs cpu::lsa_*).
#pragma once

#include "lsa_backend.hpp"
#include "lsa_native/multihead.hpp"

namespace lsa_native::cpu {

LSA_NATIVE_MULTIHEAD_API(LSA_NATIVE_DECLARE_BACKEND, T)

}  // namespace lsa_native::cpu
