// Public kernel-attention entry points (kernel_attention.hpp): argument checks once, then the
// backend the caller asked for (cpu/kernel_attention_cpu.cpp, cuda/ka_cuda.cu) via dispatch.hpp.
#include <limits>
#include <string>

#include "common/ka_recipe.hpp"
#include "cpu/kernel_attention_cpu.hpp"
#include "dispatch.hpp"
#include "lsa_native/kernel_attention.hpp"
#if LSA_NATIVE_HAVE_CUDA
#include "cuda/ka_cuda.hpp"
#endif

namespace lsa_native {

void validate(const KernelAttentionShape& s) {
  detail::require(s.batch >= 1, "batch B must be >= 1, got " + std::to_string(s.batch));
  detail::require(s.dim >= 1, "dimension d must be >= 1, got " + std::to_string(s.dim));
  detail::require(s.context >= 1, "context length n must be >= 1, got " + std::to_string(s.context));
  detail::require(s.layers >= 1, "layers L must be >= 1, got " + std::to_string(s.layers));
  detail::require(s.heads >= 1, "heads H must be >= 1, got " + std::to_string(s.heads));
  // Per-prompt extents are int in the per-prompt code (recipe::KaContext); whole prompts use
  // 64-bit offsets.
  const index_t max_extent = index_t(1) << 20;
  detail::require(s.dim <= max_extent && s.context <= max_extent && s.layers <= max_extent &&
                      s.heads <= max_extent && s.layers * s.heads <= max_extent,
                  "kernel attention: d, n and L·H must be <= 2^20");
  detail::require((s.dim + 1) * (s.context + 1) <= std::numeric_limits<index_t>::max() / s.batch,
                  "B*(d+1)*(n+1) overflows a 64-bit index");
}

namespace {

// Shape, pointers and activation codes, checked once for every entry point.
template <class T>
void check_arguments(const KernelAttentionShape& s, const T* Z0, const T* V, const T* Bq,
                     const T* Ck, const Activation* acts) {
  validate(s);
  detail::require(Z0 && V && Bq && Ck && acts, "Z0, V, B, C and activations must not be null");
  for (index_t h = 0; h < s.heads; ++h) activation_from_code(static_cast<int>(acts[h]));
}

}  // namespace

template <class T>
index_t kernel_attention_context_size(const KernelAttentionShape& sh) {
  validate(sh);
  return recipe::context_layout<T>(sh).size();
}

template <class T>
void kernel_attention_forward(const KernelAttentionShape& sh, const T* Z0, const T* V, const T* Bq,
                              const T* Ck, const Activation* acts, T* Z_out, T* predictions,
                              T* context, PredictionOutput prediction_output, Device device) {
  check_arguments(sh, Z0, V, Bq, Ck, acts);
  detail::require(prediction_output == PredictionOutput::tf || prediction_output == PredictionOutput::y_hat,
                  "prediction_output: expected PredictionOutput::tf or PredictionOutput::y_hat");
  LSA_NATIVE_BACKEND(device, kernel_attention_forward, sh, Z0, V, Bq, Ck, acts, Z_out, predictions,
                     context, prediction_output);
}

template <class T>
void kernel_attention_vjp(const KernelAttentionShape& sh, const T* Z0, const T* V, const T* Bq,
                          const T* Ck, const Activation* acts, const T* d_Z_out, T* d_V, T* d_B,
                          T* d_C, T* d_Z0, const T* context, Device device) {
  check_arguments(sh, Z0, V, Bq, Ck, acts);
  detail::require(d_Z_out && d_V && d_B && d_C, "d_Z_out, d_V, d_B and d_C must not be null");
  LSA_NATIVE_BACKEND(device, kernel_attention_vjp, sh, Z0, V, Bq, Ck, acts, d_Z_out, d_V, d_B, d_C,
                     d_Z0, context);
}

template <class T>
double kernel_attention_loss_and_grad(const KernelAttentionShape& sh, const T* Z0, const T* y_q,
                                      const T* V, const T* Bq, const T* Ck, const Activation* acts,
                                      T* d_V, T* d_B, T* d_C, T* d_Z0, T* predictions,
                                      Device device) {
  check_arguments(sh, Z0, V, Bq, Ck, acts);
  detail::require(y_q && d_V && d_B && d_C, "y_q, d_V, d_B and d_C must not be null");
  return LSA_NATIVE_BACKEND(device, kernel_attention_loss_and_grad, sh, Z0, y_q, V, Bq, Ck, acts,
                            d_V, d_B, d_C, d_Z0, predictions);
}
#undef LSA_NATIVE_BACKEND

// The public functions, for float and double (kernel_attention.hpp).
#define LSA_NATIVE_KA_INSTANTIATE(R, name, params) template R name(LSA_NATIVE_UNPAREN params, Device);
LSA_NATIVE_KA_API(LSA_NATIVE_KA_INSTANTIATE, float)
LSA_NATIVE_KA_API(LSA_NATIVE_KA_INSTANTIATE, double)
#undef LSA_NATIVE_KA_INSTANTIATE
template index_t kernel_attention_context_size<float>(const KernelAttentionShape&);
template index_t kernel_attention_context_size<double>(const KernelAttentionShape&);

}  // namespace lsa_native
