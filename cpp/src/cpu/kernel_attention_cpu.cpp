// CPU backend of kernel attention [CCS (3), (5)]: ISA dispatch, chunks of prompts over threads,
// parameter-gradient partials reduced in chunk order (thread-count independent). Arguments are
// validated by kernel_attention_dispatch.cpp.
#include <vector>

#include "common/parallel.hpp"
#include "cpu/isa.hpp"
#include "cpu/kernel_attention_cpu.hpp"
#include "cpu/kernel_attention_kernels.hpp"

namespace lsa_native::cpu {
namespace {

template <class T>
const KaKernels<T>& kernels() {
  return select_kernels<KaKernels<T>>(
#if defined(LSA_NATIVE_X86_DISPATCH)
      [] { return isa_avx2::ka_kernels<T>(); },
#else
      [] { return isa_baseline::ka_kernels<T>(); },
#endif
      [] { return isa_baseline::ka_kernels<T>(); });
}

// Chunked parameter-gradient partials reduced in chunk order into d_V, d_B, d_C; returns the
// reduced slot 0 (the loss sum for loss_and_grad).
template <class T, class Chunk>
double reduce_gradients(const KernelAttentionShape& sh, T* d_V, T* d_B, T* d_C, Chunk chunk) {
  const index_t d = sh.dim, width = ka_partial_size(sh);
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
void kernel_attention_forward(const KernelAttentionShape& sh, const T* Z0, const T* V, const T* Bq,
                              const T* Ck, const Activation* acts, T* Z_out, T* predictions,
                              T* context) {
  const auto& k = kernels<T>();
  detail::for_each_chunk(sh.batch, [&](index_t, index_t b0, index_t b1) {
    k.forward(sh, Z0, V, Bq, Ck, acts, Z_out, predictions, context, b0, b1);
  });
}

template <class T>
void kernel_attention_vjp(const KernelAttentionShape& sh, const T* Z0, const T* V, const T* Bq,
                          const T* Ck, const Activation* acts, const T* d_Z_out, T* d_V, T* d_B,
                          T* d_C, T* d_Z0, const T* context) {
  const auto& k = kernels<T>();
  reduce_gradients(sh, d_V, d_B, d_C, [&](index_t b0, index_t b1, double* partial) {
    k.vjp(sh, Z0, V, Bq, Ck, acts, d_Z_out, d_Z0, context, b0, b1, partial);
  });
}

template <class T>
double kernel_attention_loss_and_grad(const KernelAttentionShape& sh, const T* Z0, const T* y_q,
                                      const T* V, const T* Bq, const T* Ck, const Activation* acts,
                                      T* d_V, T* d_B, T* d_C, T* d_Z0, T* predictions) {
  const auto& k = kernels<T>();
  const double sum = reduce_gradients(sh, d_V, d_B, d_C, [&](index_t b0, index_t b1, double* partial) {
    k.loss_grad(sh, Z0, y_q, V, Bq, Ck, acts, d_Z0, predictions, b0, b1, partial);
  });
  return sum / double(sh.batch);
}

#define LSA_NATIVE_INSTANTIATE(T)                                                                  \
  template void kernel_attention_forward<T>(const KernelAttentionShape&, const T*, const T*,       \
                                            const T*, const T*, const Activation*, T*, T*, T*);    \
  template void kernel_attention_vjp<T>(const KernelAttentionShape&, const T*, const T*, const T*, \
                                        const T*, const Activation*, const T*, T*, T*, T*, T*,     \
                                        const T*);                                                 \
  template double kernel_attention_loss_and_grad<T>(const KernelAttentionShape&, const T*,         \
                                                    const T*, const T*, const T*, const T*,        \
                                                    const Activation*, T*, T*, T*, T*, T*);
LSA_NATIVE_INSTANTIATE(float)
LSA_NATIVE_INSTANTIATE(double)
#undef LSA_NATIVE_INSTANTIATE

}  // namespace lsa_native::cpu
