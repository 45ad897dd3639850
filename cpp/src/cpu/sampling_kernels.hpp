// CPU sampling kernels over ranges of prompts, compiled once per instruction set (see
// sampling_kernels.inl), and the plan they read.
#pragma once

#include <cstdint>
#include <functional>

#include "cpu/isa.hpp"
#include "common/kernel_gp.hpp"
#include "common/linear_prompts.hpp"
#include "common/random.hpp"
#include "cpu/lsa_kernels.hpp"
#include "lsa_native/sampling.hpp"

namespace lsa_native::cpu {

// The law the kernels read (common/linear_prompts.hpp; a linear::Plan owns its factors).
template <class T>
using LinearPlan = linear::Law<T>;

// Called once per prompt b of a Wishart range, in prompt order, with its draws in wishart.hpp's
// layout: z [bartlett_normals_used], chi2 [dp], w [d], lam_sqrt [d] (random covariance laws only).
template <class T>
struct WishartVisitor {
  void (*fn)(void* ctx, index_t b, const T* z, const T* chi2, const T* w, const T* lam_sqrt);
  void* ctx;
};

// A K-GP batch (sample_kernel_gp's arguments): root = Σ^{1/2} [d, d] or null; Z0 [B, d+1, n1],
// y_q [B], xi [B, n1, d] (nullable), method [B] (nullable).
template <class T>
struct KernelGPBatch {
  rng::PhiloxKey key;
  std::uint32_t step;
  detail::kgp::Kernel kernel;
  const double* root;
  int d, n1;
  T *Z0, *y_q, *xi;
  std::int32_t* method;
  // Prompt b by kernel_gp.hpp's sample_prompt with ScalarOps, compiled without ISA options like the
  // CUDA kernel's host emulation (kernel_gp_cpu.cpp): the scalar recipe's bits. work: its workspace.
  int (*scalar_prompt)(const KernelGPBatch& batch, index_t b, double* work,
                       const std::function<void()>& poll);
};

template <class T>
struct SamplingKernels {
  void (*normals)(const rng::StreamAddress&, std::uint64_t start, index_t n, T* out);
  void (*uniforms)(const rng::StreamAddress&, std::uint64_t start, index_t n, T* out);  // bitwise rng::uniform_at
  // Gamma(shape) variates start .. start+n−1 (rng::gamma_variate's, to rounding).
  void (*gammas)(const rng::StreamAddress&, std::uint32_t start, index_t n, T shape, T* out);
  void (*log)(const T* x, index_t n, T* out);
  void (*sincos_2pi)(const T* u, index_t n, T* s, T* c);
  // Prompts [b0, b1): prompt b is written at offset b − b0 of each non-null output.
  void (*linear_prompts)(const LinearPlan<T>& plan, index_t b0, index_t b1,
                         const LinearPromptOutputs<T>& out);
  // K-GP prompts [b0, b1) of a step (common/kernel_gp.hpp's recipe; prompt b at b's offsets of
  // the batch's outputs); poll() before each prompt and inside long factorizations. Returns false
  // when a prompt's eigen route did not converge.
  bool (*kernel_gp_prompts)(const KernelGPBatch<T>& batch, index_t b0, index_t b1,
                            const std::function<void()>& poll);
  // Wishart step over prompts [b0, b1): partial [loss_grad_partial_size(d)] (written: the LSA loss_grad layout).
  void (*wishart_loss_grad)(const LinearPlan<T>& plan, const T* W_pv, const T* W_kq, index_t b0,
                            index_t b1, double* partial);
  // The draws of the Wishart step over prompts [b0, b1), handed to `visit` (the H-head step).
  void (*wishart_prompts)(const LinearPlan<T>& plan, index_t b0, index_t b1, WishartVisitor<T> visit);
};

LSA_NATIVE_DECLARE_PER_ISA(template <class T> SamplingKernels<T> sampling_kernels();)

}  // namespace lsa_native::cpu
