// CPU implementations of the LSA API (lsa.hpp): every entry point of LSA_NATIVE_LSA_API.
#pragma once

#include "lsa_backend.hpp"

namespace lsa_native::cpu {

LSA_NATIVE_LSA_API(LSA_NATIVE_LSA_DECLARE_BACKEND, T)

// Prompts [b0, b1) of lsa_predict_vjp (lsa_predict_vjp.cpp): d_E rows written when not null;
// partial [d+1 + (d+1)²] = [Σ dŷ G q, Σ dŷ (G p) e_qᵀ] of the chunk.
template <class T>
void predict_vjp_range(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, const T* d_y,
                       T* d_E, index_t b0, index_t b1, double* partial);

}  // namespace lsa_native::cpu
