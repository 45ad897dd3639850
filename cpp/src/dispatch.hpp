// The device choice of dispatch.cpp for entry points defined beside their CPU code (the fused
// sampled steps of sampling_cpu.cpp).
#pragma once

#include "lsa_native/device.hpp"

namespace lsa_native::detail {

// True for Device::cuda once CUDA is known to be usable; throws Error (naming device='cuda' and
// what is missing: CUDA kernels in this build, or a visible GPU) otherwise. False for Device::cpu.
bool use_cuda(Device device);

}  // namespace lsa_native::detail
