// Kernel attention entry points [CCS (3), (5)]: argument checks, ISA dispatch, chunks of prompts
// over threads, parameter-gradient partials reduced in chunk order (thread-count independent).
#include <string>
#include <vector>

#include "common/parallel.hpp"
#include "cpu/isa.hpp"
#include "cpu/kernel_attention_kernels.hpp"
#include "lsa_native/kernel_attention.hpp"

namespace lsa_native {
namespace {

template <class T>
const cpu::KaKernels<T>& kernels() {
  return cpu::select_kernels<cpu::KaKernels<T>>(
#if defined(LSA_NATIVE_X86_DISPATCH)
      [] { return cpu::isa_avx2::ka_kernels<T>(); },
#else
      [] { return cpu::isa_baseline::ka_kernels<T>(); },
#endif
      [] { return cpu::isa_baseline::ka_kernels<T>(); });
}

template <class T>
void check_arguments(const KernelAttentionShape& s, const T* Z0, const T* V, const T* Bq,
                     const T* Ck, const Activation* acts) {
  validate(s);
  detail::require(Z0 && V && Bq && Ck && acts, "Z0, V, B, C and activations must not be null");
  for (index_t h = 0; h < s.heads; ++h) activation_from_code(static_cast<int>(acts[h]));
}

}  // namespace

void validate(const KernelAttentionShape& s) {
  detail::require(s.batch >= 1, "batch B must be >= 1, got " + std::to_string(s.batch));
  detail::require(s.dim >= 1, "dimension d must be >= 1, got " + std::to_string(s.dim));
  detail::require(s.context >= 1, "context length n must be >= 1, got " + std::to_string(s.context));
  detail::require(s.layers >= 1, "layers L must be >= 1, got " + std::to_string(s.layers));
  detail::require(s.heads >= 1, "heads H must be >= 1, got " + std::to_string(s.heads));
}

template <class T>
index_t kernel_attention_context_size(const KernelAttentionShape& sh) {
  validate(sh);
  return cpu::ka_context_size(sh, kernels<T>().lanes);
}

template <class T>
void kernel_attention_forward(const KernelAttentionShape& sh, const T* Z0, const T* V, const T* Bq,
                              const T* Ck, const Activation* acts, T* Z_out, T* predictions,
                              T* context) {
  check_arguments(sh, Z0, V, Bq, Ck, acts);
  const auto& k = kernels<T>();
  detail::for_each_chunk(sh.batch, [&](index_t, index_t b0, index_t b1) {
    k.forward(sh, Z0, V, Bq, Ck, acts, Z_out, predictions, context, b0, b1);
  });
}

template <class T>
void kernel_attention_forward(const KernelAttentionShape& sh, const T* Z0, const T* V, const T* Bq,
                              const T* Ck, const Activation* acts, T* Z_out, T* predictions) {
  kernel_attention_forward(sh, Z0, V, Bq, Ck, acts, Z_out, predictions, static_cast<T*>(nullptr));
}

namespace {

// Chunked parameter-gradient partials reduced in chunk order into d_V, d_B, d_C; returns the
// reduced slot 0 (the loss sum for loss_and_grad).
template <class T, class Chunk>
double reduce_gradients(const KernelAttentionShape& sh, T* d_V, T* d_B, T* d_C, Chunk chunk) {
  const index_t d = sh.dim, width = cpu::ka_partial_size(sh);
  const index_t nV = sh.layers * sh.heads * (d + 1) * (d + 1), nB = sh.layers * sh.heads * d * d;
  std::vector<double> partials(static_cast<size_t>(detail::chunk_count(sh.batch) * width));
  detail::for_each_chunk(sh.batch, [&](index_t c, index_t b0, index_t b1) {
    chunk(b0, b1, partials.data() + c * width);
  });
  const std::vector<double> total = detail::reduce_partials(partials, width);
  for (index_t i = 0; i < nV; ++i) d_V[i] = T(total[1 + i]);
  for (index_t i = 0; i < nB; ++i) {
    d_B[i] = T(total[1 + nV + i]);
    d_C[i] = T(total[1 + nV + nB + i]);
  }
  return total[0];
}

}  // namespace

template <class T>
void kernel_attention_vjp(const KernelAttentionShape& sh, const T* Z0, const T* V, const T* Bq,
                          const T* Ck, const Activation* acts, const T* d_Z_out, T* d_V, T* d_B,
                          T* d_C, T* d_Z0, const T* context) {
  check_arguments(sh, Z0, V, Bq, Ck, acts);
  detail::require(d_Z_out && d_V && d_B && d_C, "d_Z_out, d_V, d_B and d_C must not be null");
  const auto& k = kernels<T>();
  reduce_gradients(sh, d_V, d_B, d_C, [&](index_t b0, index_t b1, double* partial) {
    k.vjp(sh, Z0, V, Bq, Ck, acts, d_Z_out, d_Z0, context, b0, b1, partial);
  });
}

template <class T>
double kernel_attention_loss_and_grad(const KernelAttentionShape& sh, const T* Z0, const T* y_q,
                                      const T* V, const T* Bq, const T* Ck, const Activation* acts,
                                      T* d_V, T* d_B, T* d_C, T* d_Z0, T* predictions) {
  check_arguments(sh, Z0, V, Bq, Ck, acts);
  detail::require(y_q && d_V && d_B && d_C, "y_q, d_V, d_B and d_C must not be null");
  const auto& k = kernels<T>();
  const double sum = reduce_gradients(sh, d_V, d_B, d_C, [&](index_t b0, index_t b1, double* partial) {
    k.loss_grad(sh, Z0, y_q, V, Bq, Ck, acts, d_Z0, predictions, b0, b1, partial);
  });
  return sum / double(sh.batch);
}

#define LSA_NATIVE_INSTANTIATE(T)                                                                  \
  template void kernel_attention_forward<T>(const KernelAttentionShape&, const T*, const T*,       \
                                            const T*, const T*, const Activation*, T*, T*);        \
  template double kernel_attention_loss_and_grad<T>(const KernelAttentionShape&, const T*,         \
                                                    const T*, const T*, const T*, const T*,        \
                                                    const Activation*, T*, T*, T*, T*, T*);        \
  template index_t kernel_attention_context_size<T>(const KernelAttentionShape&);                 \
  template void kernel_attention_forward<T>(const KernelAttentionShape&, const T*, const T*,       \
                                            const T*, const T*, const Activation*, T*, T*, T*);    \
  template void kernel_attention_vjp<T>(const KernelAttentionShape&, const T*, const T*, const T*, \
                                        const T*, const Activation*, const T*, T*, T*, T*, T*,     \
                                        const T*);
LSA_NATIVE_INSTANTIATE(float)
LSA_NATIVE_INSTANTIATE(double)
#undef LSA_NATIVE_INSTANTIATE

}  // namespace lsa_native
