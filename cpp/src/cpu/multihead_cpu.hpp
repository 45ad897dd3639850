// CPU implementations of the multi-head LSA API (multihead.hpp): every entry point of
// LSA_NATIVE_MULTIHEAD_API (the model's for H >= 2, H = 1 running cpu::lsa_*; the separate
// parametrization's merge / chain, the recipe's entries of multihead_recipe.hpp in index order on one
// thread, for every H), arguments validated by multihead_dispatch.cpp.
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

}  // namespace lsa_native::cpu
