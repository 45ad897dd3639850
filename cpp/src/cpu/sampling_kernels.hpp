// CPU sampling kernels over ranges of prompts, compiled once per instruction set (see
// sampling_kernels.inl), and the plan they read.
#pragma once

#include <cstdint>
#include <vector>

#include "common/random.hpp"
#include "lsa_native/sampling.hpp"

namespace lsa_native::cpu {

// A validated LinearPromptSpec converted for the kernels (factors in T, the step's key and step).
template <class T>
struct LinearPlan {
  index_t d = 1, N = 1;
  rng::PhiloxKey key{0, 0};
  std::uint32_t step = 0;
  std::vector<T> L, Lq;  // [d, d] lower factors of Λ and of the query's law; empty: identity / = L
  T sigma = T(0);
  bool query_noise = false;
  std::uint32_t tasks = 0;
  CovarianceLaw law = CovarianceLaw::fixed;
  T law_a = T(0), law_b = T(0), law_p = T(0);
  bool sphere = false;
  rng::StreamAddress address(index_t prompt, std::uint32_t stream) const {
    return {key, static_cast<std::uint32_t>(prompt), step, stream};
  }
};

// Partial sums of a fused step per chunk: L·2B, d_p [d+1], d_K [(d+1)^2] (as lsa_kernels.hpp).
inline index_t fused_partial_size(index_t d) { return 1 + (d + 1) + (d + 1) * (d + 1); }

template <class T>
struct SamplingKernels {
  void (*normals)(const rng::StreamAddress&, std::uint64_t start, index_t n, T* out);
  void (*log)(const T* x, index_t n, T* out);
  void (*sincos_2pi)(const T* u, index_t n, T* s, T* c);
  // Prompts [b0, b1): prompt b is written at offset b − b0 of each non-null output.
  void (*linear_prompts)(const LinearPlan<T>& plan, index_t b0, index_t b1,
                         const LinearPromptOutputs<T>& out);
  // Wishart step over prompts [b0, b1): partial [fused_partial_size(d)] (written).
  void (*wishart_loss_grad)(const LinearPlan<T>& plan, const T* W_pv, const T* W_kq, index_t b0,
                            index_t b1, double* partial);
};

namespace isa_baseline {
template <class T>
SamplingKernels<T> sampling_kernels();
}
namespace isa_avx2 {
template <class T>
SamplingKernels<T> sampling_kernels();
}

}  // namespace lsa_native::cpu
