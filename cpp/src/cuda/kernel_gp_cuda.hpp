// CUDA route of the K-GP sampler (kernel_gp.hpp): the arguments are validated and Σ^{1/2} is
// computed by the dispatcher (sampling_dispatch.cpp), which takes this route when Z0 is device
// memory. No CUDA header here.
#pragma once

#include <cstdint>

#include "common/philox.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native::detail::kgp {
struct Kernel;  // common/kernel_gp.hpp
}

namespace lsa_native::cuda {

// Prompts 0..batch−1 of `step` by common/kernel_gp.hpp's sample_prompt, one GPU thread per prompt
// (so each equals the CPU's prompt up to the rounding of the device's exp/log/sqrt/sin/cos).
// kernel: its composite parameters (if any) on the host; root: Σ^{1/2} [d, d] on the host, or
// nullptr. Z0, y_q (device), xi, method (nullable) may be
// device or host memory. Returns false when the QL eigensolver hit its iteration limit on a prompt.
template <class T>
bool sample_kernel_gp(const rng::PhiloxKey& key, std::uint32_t step, index_t batch,
                      const detail::kgp::Kernel& kernel, const double* root, int d, int n1, T* Z0,
                      T* y_q, T* xi, std::int32_t* method);

}  // namespace lsa_native::cuda
