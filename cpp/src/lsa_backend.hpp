// Declarations of the backends (cpu::, cuda::) from the lists of entry points (LSA_NATIVE_LSA_API
// of lsa.hpp, LSA_NATIVE_KA_API of kernel_attention.hpp): every backend function is R name(params)
// for an entry of a list, i.e. the public signature without the Device. Arguments are validated by
// the dispatchers (dispatch.cpp, kernel_attention_dispatch.cpp) before a backend runs.
#pragma once

#include "lsa_native/lsa.hpp"

// In a backend's namespace: LIST(LSA_NATIVE_DECLARE_BACKEND, T) declares its functions, and
// LIST(LSA_NATIVE_INSTANTIATE_BACKEND, float) (and double) in its source file instantiates them.
#define LSA_NATIVE_DECLARE_BACKEND(R, name, params) \
  template <class T>                                \
  R name(LSA_NATIVE_UNPAREN params);
#define LSA_NATIVE_INSTANTIATE_BACKEND(R, name, params) template R name(LSA_NATIVE_UNPAREN params);
