// CPU kernel-attention kernels over a range of prompts, compiled once per instruction set.
#pragma once

#include "lsa_native/kernel_attention.hpp"

namespace lsa_native::cpu {

// Per-chunk partial sums of loss_grad: [1 + L·H·(d+1)² + 2·L·H·d²] = Σ r², Σ dV, Σ dB, Σ dC.
inline index_t ka_partial_size(const KernelAttentionShape& s) {
  return 1 + s.layers * s.heads * ((s.dim + 1) * (s.dim + 1) + 2 * s.dim * s.dim);
}

template <class T>
struct KaKernels {
  void (*forward)(const KernelAttentionShape&, const T* Z0, const T* V, const T* Bq, const T* Ck,
                  const Activation* acts, T* Z_out, T* predictions, index_t b0, index_t b1);
  void (*loss_grad)(const KernelAttentionShape&, const T* Z0, const T* y_q, const T* V,
                    const T* Bq, const T* Ck, const Activation* acts, T* d_Z0, T* predictions,
                    index_t b0, index_t b1, double* partial);
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
