// CPU implementations of the LSA API (lsa.hpp): every entry point of LSA_NATIVE_LSA_API.
#pragma once

#include "lsa_backend.hpp"

namespace lsa_native::cpu {

LSA_NATIVE_LSA_API(LSA_NATIVE_DECLARE_BACKEND, T)

}  // namespace lsa_native::cpu
