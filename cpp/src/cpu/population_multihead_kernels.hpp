// The hot part of the exact H-head population loss (population_multihead_cpu.cpp): 2L for fixed Λ
// and its gradient, compiled once per instruction set (population_multihead_kernels.inl) and chosen
// at run time (cpu/isa.hpp).
#pragma once

#include "cpu/isa.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native::cpu {

// The parts of H heads that reach ŷ, flattened: p1 [H, d], p2 [H], K1 [H, d, d], k2 [H, d]
// (p_h = (p1_h; p2_h) the last row of W^PV_h, K_h = [K1_h; k2_hᵀ] the first d columns of W^KQ_h).
struct PopulationMultiheadKernels {
  // 2L at fixed Λ [d, d] (symmetric positive definite, checked by the caller) with label noise of
  // standard deviation noise_std (query_noise: also on the target); when grad is not null,
  // ∂(2L)/∂parts written into grad [H (d+1)²] (the same layout).
  double (*twice_loss)(index_t d, index_t H, const double* parts, const double* Lambda, index_t N,
                       double noise_std, bool query_noise, double* grad);
  // Separate heads W^KQ_h = W^K_hᵀ W^Q_h (W_k, W_q [H, r, d+1]): K_h = (W^K_hᵀ W^Q_h)[:, :d] written
  // into parts' K1_h, k2_h (p1, p2 are the caller's).
  void (*separate_keys)(index_t d, index_t H, index_t rank, const double* W_k, const double* W_q,
                        double* parts);
  // Their chain rule from grad = ∂(2L)/∂parts: with G_h = ½ ∂(2L)/∂K_h [d+1, d],
  // d_W_q[h][:, :d] = W^K_h G_h (d_W_q[h][:, d] = 0) and d_W_k[h] = W^Q_h[:, :d] G_hᵀ (written).
  void (*separate_gradient)(index_t d, index_t H, index_t rank, const double* W_k, const double* W_q,
                            const double* grad, double* d_W_k, double* d_W_q);
};

LSA_NATIVE_DECLARE_PER_ISA(PopulationMultiheadKernels population_multihead_kernels();)

// The table for this CPU (population_multihead_cpu.cpp).
const PopulationMultiheadKernels& population_multihead_kernels();

}  // namespace lsa_native::cpu
