// CPU kernels of the H-head LSA (multihead.hpp) over a range of prompts, compiled once per
// instruction set (multihead_kernels.inl, included by lsa_kernels_{base,avx2,avx512}.cpp beside the
// one-head kernels whose token-axis tiles it reuses) and chosen at run time; drivers in
// multihead_cpu.cpp.
#pragma once

#include "common/multihead_recipe.hpp"
#include "cpu/isa.hpp"
#include "lsa_native/multihead.hpp"

namespace lsa_native::cpu {

// Widths of the per-chunk double partial sums (reduced in chunk order by the driver).
// loss_grad: L, then d_p [H, d+1] (∂/∂ last rows of W^PV_h), then d_K [H, d+1, d+1] (∂/∂W^KQ_h).
static inline index_t multihead_loss_grad_partial_size(index_t d, index_t heads) {
  return multihead::loss_grad_width(heads, d + 1);
}
// predict_vjp: d_p [H, d+1], d_K [H, d+1, d+1].
static inline index_t multihead_predict_vjp_partial_size(index_t d, index_t heads) {
  return heads * (d + 1) + heads * (d + 1) * (d + 1);
}
// vjp: dW_pv [H, d+1, d+1], dW_kq [H, d+1, d+1].
static inline index_t multihead_vjp_partial_size(index_t d, index_t heads) {
  return 2 * heads * (d + 1) * (d + 1);
}

// Prompts of the fused Wishart step computed together, one per SIMD lane (32-byte vectors).
template <class T>
constexpr index_t kWishartLanes = index_t(32 / sizeof(T));

// Entries of WishartHeads::lanes: per lane a prompt's e_q [rows], M [rows, dp], y_q, and the group's
// work arrays Q [rows, H], A [dp, 2H], GX [rows, 2H], ex [2H], y_hat (multihead_kernels.inl).
template <class T>
index_t wishart_lane_values(index_t d, index_t dp, index_t heads) {
  const index_t rows = d + 1, w = 2 * heads;
  return kWishartLanes<T> * (rows + rows * dp + 1 + rows * heads + dp * w + rows * w + w + 1);
}

// Entries of WishartHeads::lane_acc: acc's terms per lane, then one prompt group's e_q in double.
template <class T>
index_t wishart_lane_sums(index_t d, index_t heads) {
  return kWishartLanes<T> * (multihead_loss_grad_partial_size(d, heads) + d + 1);
}

// The state of the fused Wishart step over one range of prompts (multihead_cpu.cpp): the law, the
// heads arranged by multihead::heads_inner, the per-prompt work arrays, the lanes of the prompts
// staged so far (`filled` of kWishartLanes) and the range's sums acc [multihead_loss_grad_partial_size].
template <class T>
struct WishartHeads {
  const linear::Law<T>* P;
  index_t H;
  const T *p_t, *W_kq_t;
  wishart::Work<T> s;
  multihead::HeadsWork<T> h;
  double* acc;
  T* lanes;  // [wishart_lane_values]
  index_t filled;
  double* lane_acc;  // [wishart_lane_sums]: the sums of acc per lane, then e_q's lanes in double
};

// Kernels over prompts [b0, b1); arrays as in multihead.hpp. The bool ones return false when a
// value they wrote to y_hat, F or d_E was non-finite (tested in the writing pass).
template <class T>
struct MultiHeadKernels {
  bool (*predict)(const LsaShape&, index_t heads, const T* E, const T* W_pv, const T* W_kq,
                  T* y_hat, index_t b0, index_t b1);
  // partial [multihead_loss_grad_partial_size] (written): Σ r², Σ r ∂ŷ/∂p_h, Σ r ∂ŷ/∂W^KQ_h.
  void (*loss_grad)(const LsaShape&, index_t heads, const T* E, const T* y_q, const T* W_pv,
                    const T* W_kq, T* y_hat, index_t b0, index_t b1, double* partial);
  // partial [multihead_predict_vjp_partial_size] (written): Σ dŷ ∂ŷ/∂p_h, Σ dŷ ∂ŷ/∂W^KQ_h.
  bool (*predict_vjp)(const LsaShape&, index_t heads, const T* E, const T* W_pv, const T* W_kq,
                      const T* d_y, T* d_E, index_t b0, index_t b1, double* partial);
  bool (*forward)(const LsaShape&, index_t heads, const T* E, const T* W_pv, const T* W_kq, T* F,
                  index_t b0, index_t b1);
  // partial [multihead_vjp_partial_size] (written): Σ_b dW_pv, Σ_b dW_kq.
  bool (*vjp)(const LsaShape&, index_t heads, const T* E, const T* W_pv, const T* W_kq,
              const T* d_F, T* d_E, index_t b0, index_t b1, double* partial);
  // The Wishart step's per-prompt visitor (sampling_kernels.hpp's WishartVisitor, ctx a
  // WishartHeads<T>): multihead::heads_residual's arithmetic, accumulated into ctx's acc in prompt
  // order; compiled per ISA.
  // Prompts are staged into ctx's lanes and computed kWishartLanes at a time (the SIMD lanes over
  // prompts); wishart_flush computes the staged rest (call it after the range's last prompt).
  void (*wishart_prompt)(void* ctx, index_t b, const T* z, const T* chi2, const T* w,
                         const T* lam_sqrt);
  void (*wishart_flush)(void* ctx);
};

LSA_NATIVE_DECLARE_PER_ISA(template <class T> MultiHeadKernels<T> multihead_kernels();)

}  // namespace lsa_native::cpu
