// The CPU kernel of lsa_predict_vjp (lsa.hpp) over a range of prompts, compiled once per
// instruction set (lsa_predict_vjp.inl, included by lsa_kernels_{base,avx2,avx512}.cpp) and chosen at run
// time by select_kernels (isa.hpp); the driver is in lsa_cpu.cpp.
#pragma once

#include "cpu/isa.hpp"
#include "lsa_native/lsa.hpp"

namespace lsa_native::cpu {

// Width of the per-chunk double partial sums: the last row of dW^PV [d+1], then dW^KQ [(d+1)²].
inline index_t predict_vjp_partial_size(index_t d) { return (d + 1) + (d + 1) * (d + 1); }

template <class T>
struct LsaPredictVjpKernels {
  // Prompts [b0, b1): d_E rows written (when not null), partial [predict_vjp_partial_size(d)]
  // written with Σ_b dŷ_b G_b q_b and Σ_b dŷ_b (G_b p) e_q,bᵀ. Returns false when a d_E value it
  // wrote was non-finite (flag raised while writing).
  bool (*range)(const LsaShape&, const T* E, const T* W_pv, const T* W_kq, const T* d_y, T* d_E,
                index_t b0, index_t b1, double* partial);
};

LSA_NATIVE_DECLARE_PER_ISA(template <class T> LsaPredictVjpKernels<T> lsa_predict_vjp_kernels();)

}  // namespace lsa_native::cpu
