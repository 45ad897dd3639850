// CPU implementations of the kernel-attention API (kernel_attention.hpp); arguments are already
// validated by kernel_attention_dispatch.cpp.
#pragma once

#include "lsa_backend.hpp"
#include "lsa_native/kernel_attention.hpp"

namespace lsa_native::cpu {

LSA_NATIVE_KA_API(LSA_NATIVE_DECLARE_BACKEND, T)

}  // namespace lsa_native::cpu
