// The backend choice shared by the dispatchers (dispatch.cpp, kernel_attention_dispatch.cpp): the
// only place that asks "was CUDA compiled, is a GPU there?".
#pragma once

#include "lsa_native/device.hpp"

namespace lsa_native::detail {

// True for Device::cuda once CUDA is known to be usable; throws a clear Error otherwise (no CUDA
// kernels in this build, or no visible GPU); false for Device::cpu.
bool use_cuda(Device device);

}  // namespace lsa_native::detail

// Backend call: cuda::CALL when the device is CUDA (compiled in and available), else cpu::CALL.
#if LSA_NATIVE_HAVE_CUDA
#define LSA_NATIVE_BACKEND(device, CALL, ...) \
  (::lsa_native::detail::use_cuda(device) ? cuda::CALL(__VA_ARGS__) : cpu::CALL(__VA_ARGS__))
#else
#define LSA_NATIVE_BACKEND(device, CALL, ...) \
  (::lsa_native::detail::use_cuda(device), cpu::CALL(__VA_ARGS__))
#endif
