// The device choice of dispatch.cpp, shared by the other dispatchers (kernel_attention_dispatch.cpp,
// sampling_dispatch.cpp).
#pragma once

#include "lsa_native/device.hpp"
#include "lsa_native/sampling.hpp"

namespace lsa_native::detail {

// True for Device::cuda once CUDA is known to be usable; throws Error (naming device='cuda' and
// what is missing: CUDA kernels in this build, or a visible GPU) otherwise. False for Device::cpu.
bool use_cuda(Device device);

// Tests only (lsa_native._core.emulate_cuda_on_cpu_for_tests): with `on`, use_cuda(Device::cuda)
// returns false without asking for a GPU, so a call routed to CUDA runs the CPU kernels on the same
// pointers (host memory presented as CUDA arrays): the route of a GPU call (array views, outputs
// made on the prompts' side, checks of host results) is tested on machines without a GPU.
void emulate_cuda_on_cpu(bool on);

// The checks of a fused sampled step (sampling_dispatch.cpp), shared by the one-head and the H-head
// steps: the batch, the method, and for 'wishart' the law's Bartlett conditions (Gaussian
// covariates, N >= d, or d + 1 with label noise). The spec itself is checked by linear::Plan.
void validate_fused_step(const LinearPromptSpec& spec, index_t batch, FusedMethod method);

}  // namespace lsa_native::detail

// Backend call: cuda::CALL when the device is CUDA (compiled in and available), else cpu::CALL.
#if LSA_NATIVE_HAVE_CUDA
#define LSA_NATIVE_BACKEND(device, CALL, ...) \
  (::lsa_native::detail::use_cuda(device) ? cuda::CALL(__VA_ARGS__) : cpu::CALL(__VA_ARGS__))
#else
#define LSA_NATIVE_BACKEND(device, CALL, ...) \
  (::lsa_native::detail::use_cuda(device), cpu::CALL(__VA_ARGS__))
#endif
