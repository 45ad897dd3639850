// CPU kernel-attention kernels over a range of prompts, compiled once per instruction set.
#pragma once

#include "common/ka_recipe.hpp"
#include "lsa_native/kernel_attention.hpp"

namespace lsa_native::cpu {

// Per-chunk partial sums of loss_grad: [1 + L·H·(d+1)² + 2·L·H·d²] = Σ r², Σ dV, Σ dB, Σ dC.
inline index_t ka_partial_size(const KernelAttentionShape& s) {
  return 1 + s.layers * s.heads * ((s.dim + 1) * (s.dim + 1) + 2 * s.dim * s.dim);
}

// Tokens per padded row: n+1 rounded up to a whole number of `lanes`-wide vectors.
inline index_t ka_padded_tokens(const KernelAttentionShape& s, index_t lanes) {
  return recipe::KaContext::make(int(s.dim), int(s.context), int(s.layers), int(s.heads), int(lanes)).Tt;
}
// Values of T in one prompt's saved forward context (layout: recipe::KaContext, shared with CUDA).
inline index_t ka_context_size(const KernelAttentionShape& s, index_t lanes) {
  return recipe::KaContext::make(int(s.dim), int(s.context), int(s.layers), int(s.heads), int(lanes)).size();
}

template <class T>
struct KaKernels {
  index_t lanes;  // vector width of the padded rows (fixes the context layout)
  // context: null, or B · ka_context_size values to save the forward state into.
  void (*forward)(const KernelAttentionShape&, const T* Z0, const T* V, const T* Bq, const T* Ck,
                  const Activation* acts, T* Z_out, T* predictions, T* context, index_t b0,
                  index_t b1);
  void (*loss_grad)(const KernelAttentionShape&, const T* Z0, const T* y_q, const T* V,
                    const T* Bq, const T* Ck, const Activation* acts, T* d_Z0, T* predictions,
                    index_t b0, index_t b1, double* partial);
  // partial: as loss_grad's with slot 0 (the loss) left 0. context: null (recompute) or saved.
  void (*vjp)(const KernelAttentionShape&, const T* Z0, const T* V, const T* Bq, const T* Ck,
              const Activation* acts, const T* d_Z_out, T* d_Z0, const T* context, index_t b0,
              index_t b1, double* partial);
};

namespace isa_baseline {
template <class T>
KaKernels<T> ka_kernels();
}
namespace isa_avx2 {
template <class T>
KaKernels<T> ka_kernels();
}

}  // namespace lsa_native::cpu
