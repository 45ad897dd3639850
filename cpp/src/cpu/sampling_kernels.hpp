// CPU sampling kernels over ranges of prompts, compiled once per instruction set (see
// sampling_kernels.inl), and the plan they read.
#pragma once

#include <cstdint>
#include <functional>

#include "cpu/isa.hpp"
#include "common/linear_prompts.hpp"
#include "common/random.hpp"
#include "cpu/lsa_kernels.hpp"
#include "lsa_native/sampling.hpp"

namespace lsa_native::cpu {

// The law the kernels read (common/linear_prompts.hpp; a linear::Plan owns its factors).
template <class T>
using LinearPlan = linear::Law<T>;

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
  // One K-GP prompt: common/kernel_gp.hpp's sample_prompt (its arguments) with this table's SIMD
  // normals and exp (the scalar recipe's values to rounding); poll as sample_prompt's.
  int (*kernel_gp_prompt)(const rng::PhiloxKey& key, std::uint32_t prompt, std::uint32_t step,
                          int kernel, double inv_bw2, const double* R, int n1, int d, double* work,
                          T* z, T* y_q, T* xi, const std::function<void()>& poll);
  // Wishart step over prompts [b0, b1): partial [loss_grad_partial_size(d)] (written: the LSA loss_grad layout).
  void (*wishart_loss_grad)(const LinearPlan<T>& plan, const T* W_pv, const T* W_kq, index_t b0,
                            index_t b1, double* partial);
};

LSA_NATIVE_DECLARE_PER_ISA(template <class T> SamplingKernels<T> sampling_kernels();)

}  // namespace lsa_native::cpu
