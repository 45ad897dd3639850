// CPU kernel-attention kernels over a range of prompts, compiled once per instruction set.
#pragma once

#include "common/finite.hpp"
#include "common/ka_recipe.hpp"
#include "cpu/isa.hpp"
#include "lsa_native/kernel_attention.hpp"

namespace lsa_native::cpu {

// Per-chunk partial sums of loss_grad: [1 + L·H·(d+1)² + 2·L·H·d²] = Σ r², Σ dV, Σ dB, Σ dC
// (r = TF + y_q; the loss is recipe::loss_value of the total Σ r²).
static inline index_t ka_partial_size(const KernelAttentionShape& s) {
  return 1 + s.layers * s.heads * ((s.dim + 1) * (s.dim + 1) + 2 * s.dim * s.dim);
}

// Tokens per padded row: n+1 rounded up to a whole number of `lanes`-wide vectors.
static inline index_t ka_padded_tokens(const KernelAttentionShape& s, index_t lanes) {
  return recipe::KaContext::make(int(s.dim), int(s.context), int(s.layers), int(s.heads), int(lanes)).Tt;
}
// Values of T in one prompt's saved forward context (layout: recipe::KaContext, shared with CUDA).
static inline index_t ka_context_size(const KernelAttentionShape& s, index_t lanes) {
  return recipe::KaContext::make(int(s.dim), int(s.context), int(s.layers), int(s.heads), int(lanes)).size();
}

// The entry points' one-line output check: nothing when `finite`, else Error naming the first of
// Z0, V, B, C, `extra` holding NaN/inf, or NonFiniteError naming `output` (see common/finite.hpp).
template <class T>
void ka_check_output(bool finite, const char* output, const KernelAttentionShape& s, const T* Z0,
                     const T* V, const T* Bq, const T* Ck, const char* extra_name = nullptr,
                     const T* extra = nullptr, index_t extra_size = 0) {
  if (finite) return;
  const index_t D = s.dim + 1, LH = s.layers * s.heads;
  detail::check_output<T>(false, output,
                          {{"Z0", Z0, s.batch * D * (s.context + 1)}, {"V", V, LH * D * D},
                           {"B", Bq, LH * s.dim * s.dim}, {"C", Ck, LH * s.dim * s.dim},
                           {extra_name ? extra_name : "", extra, extra_size}});
}

// Kernels over prompts [b0, b1); each returns false when a value it wrote to Z_out, d_Z0 or
// predictions was non-finite (flag raised while writing them).
template <class T>
struct KaKernels {
  index_t lanes;  // vector width of the padded rows (fixes the context layout)
  // context: null, or B · ka_context_size values to save the forward state into.
  bool (*forward)(const KernelAttentionShape&, const T* Z0, const T* V, const T* Bq, const T* Ck,
                  const Activation* acts, T* Z_out, T* predictions, T* context,
                  PredictionOutput prediction_output, index_t b0, index_t b1);
  // y: labels, or ∂ℓ/∂ŷ of the predictions (seed, recipe::QuerySeed; the loss slot then stays 0).
  bool (*loss_grad)(const KernelAttentionShape&, const T* Z0, const T* y, recipe::QuerySeed seed,
                    const T* V, const T* Bq, const T* Ck, const Activation* acts, T* d_Z0,
                    T* predictions, index_t b0, index_t b1, double* partial);
  // partial: as loss_grad's with slot 0 (the loss) left 0. context: null (recompute) or saved.
  bool (*vjp)(const KernelAttentionShape&, const T* Z0, const T* V, const T* Bq, const T* Ck,
              const Activation* acts, const T* d_Z_out, T* d_Z0, const T* context, index_t b0,
              index_t b1, double* partial);
};

LSA_NATIVE_DECLARE_PER_ISA(template <class T> KaKernels<T> ka_kernels();)

}  // namespace lsa_native::cpu
