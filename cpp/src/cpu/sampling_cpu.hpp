// CPU backend of the samplers (sampling.hpp, kernel_gp.hpp): the arguments are validated by the
// sampling dispatcher (sampling_dispatch.cpp), which also chooses between these and the CUDA
// twins (cuda/sampled_cuda.hpp, cuda/kernel_gp_cuda.hpp, cuda/random_cuda.hpp).
#pragma once

#include <cstdint>

#include "common/linear_prompts.hpp"
#include "common/philox.hpp"
#include "lsa_native/sampling.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native::detail::kgp {
struct Kernel;  // common/kernel_gp.hpp
}

namespace lsa_native::cpu {

// sampling.hpp's functions of the same names (sampling_cpu.cpp).
void philox4x32_10(const std::uint32_t* counters, index_t n, std::uint64_t seed, std::uint32_t* out);
template <class T>
void random_normals(const StreamId& id, std::uint64_t start, index_t n, T* out);
template <class T>
void random_uniforms(const StreamId& id, std::uint64_t start, index_t n, T* out);
template <class T>
void random_gammas(const StreamId& id, std::uint64_t start, index_t n, T shape, T* out);
template <class T>
void simd_log(const T* x, index_t n, T* out);
template <class T>
void simd_sincos_2pi(const T* u, index_t n, T* s, T* c);

// Prompts 0..batch−1 of law P (a validated linear::Plan) into the non-null outputs.
template <class T>
void sample_linear_prompts(const linear::Law<T>& P, index_t batch, const LinearPromptOutputs<T>& out);

// The fused sampled step on the prompts 0..batch−1 of law P (the method's conditions checked):
// L and d_W_pv, d_W_kq [d+1, d+1] (the signature of cuda::linear_prompts_lsa_loss_and_grad).
template <class T>
double linear_prompts_lsa_loss_and_grad(const linear::Law<T>& P, index_t batch, FusedMethod method,
                                        const T* W_pv, const T* W_kq, T* d_W_pv, T* d_W_kq);

// K-GP prompts 0..batch−1 of `step` (kernel_gp_cpu.cpp; the signature of cuda::sample_kernel_gp):
// root Σ^{1/2} [d, d] or nullptr, n1 = n + 1 points. Returns false when the QL eigensolver hit its
// iteration limit on a prompt.
template <class T>
bool sample_kernel_gp(const rng::PhiloxKey& key, std::uint32_t step, index_t batch,
                      const detail::kgp::Kernel& kernel, const double* root, int d, int n1, T* Z0,
                      T* y_q, T* xi, std::int32_t* method);

}  // namespace lsa_native::cpu
