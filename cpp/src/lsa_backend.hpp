// Declarations of the LSA backends (cpu::, cuda::) from the one list of entry points (lsa.hpp):
// every backend function is R name(params) for an entry in LSA_NATIVE_LSA_API, i.e. the public
// signature without the Device. Arguments are validated by dispatch.cpp before a backend runs.
#pragma once

#include "lsa_native/lsa.hpp"

// In a backend's namespace: LIST(LSA_NATIVE_LSA_DECLARE_BACKEND, T) declares its functions, and
// LIST(LSA_NATIVE_LSA_INSTANTIATE_BACKEND, float) (and double) in its source file instantiates them.
#define LSA_NATIVE_LSA_DECLARE_BACKEND(R, name, params) \
  template <class T>                                    \
  R name(LSA_NATIVE_UNPAREN params);
#define LSA_NATIVE_LSA_INSTANTIATE_BACKEND(R, name, params) template R name(LSA_NATIVE_UNPAREN params);
