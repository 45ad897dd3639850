// CPU implementations of the multi-head LSA API (multihead.hpp), H >= 2 (H = 1 runs cpu::lsa_*).
#pragma once

#include "common/linear_prompts.hpp"
#include "lsa_backend.hpp"
#include "lsa_native/multihead.hpp"

namespace lsa_native::cpu {

LSA_NATIVE_MULTIHEAD_API(LSA_NATIVE_DECLARE_BACKEND, T)

// The fused sampled step of H >= 2 heads on the prompts of law P (linear_prompts_multihead_loss_and_grad
// of multihead.hpp, arguments validated): tokens (kFusedPrompts prompts at a time drawn in cache by
// the sampling kernels and consumed by the H-head kernel) or wishart (multihead_recipe.hpp's Gram
// route on the sampling kernels' Bartlett draws).
template <class T>
double linear_prompts_multihead_loss_and_grad(const linear::Law<T>& P, index_t batch,
                                              FusedMethod method, index_t heads, const T* W_pv,
                                              const T* W_kq, T* d_W_pv, T* d_W_kq);

// The separate parametrization (multihead_merge_kq / multihead_chain_kq of multihead.hpp, arguments
// validated): the recipe's entries (multihead_recipe.hpp) in index order, one thread.
template <class T>
void multihead_merge_kq(index_t heads, index_t rank, index_t rows, const T* W_k, const T* W_q,
                        T* W_kq);
template <class T>
void multihead_chain_kq(index_t heads, index_t rank, index_t rows, const T* W_k, const T* W_q,
                        const T* d_W_kq, T* d_W_k, T* d_W_q);

}  // namespace lsa_native::cpu
