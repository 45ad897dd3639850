// Batched one-layer H-head linear self-attention in the embedding of Zhang, Frei, Bartlett
// [ZFB (3.3)-(3.4)], the model of Zhang, Singh, Latham & Saxe (ICML 2025, arXiv 2501.16265):
//
//   F = E + Σ_h W^PV_h E (Eᵀ W^KQ_h E) / N = E + P E,   P = Σ_h W^PV_h G W^KQ_h,   G = E Eᵀ / N.
//
// Layout contract (as lsa.hpp, with a head axis on the parameters):
//   E      [B, d+1, N+1]  C-contiguous prompts, the last column the query token (x_q; 0)
//   W_pv   [H, d+1, d+1]  C-contiguous, W^PV_h
//   W_kq   [H, d+1, d+1]  C-contiguous, W^KQ_h (merged key-query). The separate parametrization
//                         W^KQ_h = W^K_hᵀ W^Q_h (W^K_h, W^Q_h of shape [r, d+1]) is formed by the
//                         caller (lsa_native.multihead), its gradient chained from dW^KQ_h.
// H = 1 runs the one-head kernels of lsa.hpp (token scalars, O(N d) per prompt) and equals them
// bitwise. H >= 2 is computed Gram-first: G once per prompt (O(N d²)), then each head from G and the
// query column only, O(d²) per head: never the O(N²) attention matrix.
//
// Threads, determinism, accuracy, error handling and Device as in lsa.hpp: Device::cuda runs the
// LSA kernels for H = 1 and the H-head CUDA kernels (cuda/multihead_kernels.cuh) for H >= 2.
#pragma once

#include "lsa_native/array_view.hpp"
#include "lsa_native/device.hpp"
#include "lsa_native/lsa.hpp"
#include "lsa_native/sampling.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native {

// Throws Error (naming W_pv, whose first axis H is) unless H >= 1 and H·(d+1)² fits in index_t
// (after validate(shape)).
void validate_heads(const LsaShape& shape, index_t heads);

// ŷ_b = F_b[d, N] = E_b[d, N] + Σ_h p_hᵀ G_b q_h with p_h the last row of W^PV_h and
// q_h = W^KQ_h e_q (the query token; exact for any label slot).          [ZFB (3.6), per head]
//   y_hat [B] (written)
template <class T>
void multihead_lsa_predict(const LsaShape& shape, index_t heads, const T* E, const T* W_pv,
                           const T* W_kq, T* y_hat, Device device = Device::cpu);

// L = (1/(2B)) Σ_b (ŷ_b − y_q,b)²  [ZFB (3.7)] and its gradients: dW_pv [H, d+1, d+1] nonzero only
// in the last row of each head (Σ_b r_b G_b q_h / B), dW_kq[h] = Σ_b r_b (G_b p_h) e_qᵀ / B.
// Returns L; y_hat [B] written when not null.
template <class T>
double multihead_lsa_loss_and_grad(const LsaShape& shape, index_t heads, const T* E, const T* y_q,
                                   const T* W_pv, const T* W_kq, T* d_W_pv, T* d_W_kq,
                                   T* y_hat = nullptr, Device device = Device::cpu);

// Full output F = E + P E, P = Σ_h W^PV_h G W^KQ_h.   F [B, d+1, N+1] (written)
template <class T>
void multihead_lsa_forward(const LsaShape& shape, index_t heads, const T* E, const T* W_pv,
                           const T* W_kq, T* F, Device device = Device::cpu);

// VJP of multihead_lsa_forward for d_F = ∂ℓ/∂F, with dP = d_F Eᵀ:
//   dW^PV_h = Σ_b dP (G W^KQ_h)ᵀ,  dW^KQ_h = Σ_b (W^PV_h G)ᵀ dP,
//   dE = d_F + Pᵀ d_F + (dG + dGᵀ) E / N,  dG = Σ_h W^PV_hᵀ dP W^KQ_hᵀ.
//   d_W_pv, d_W_kq [H, d+1, d+1] (written), d_E [B, d+1, N+1] (written when not null)
template <class T>
void multihead_lsa_vjp(const LsaShape& shape, index_t heads, const T* E, const T* W_pv,
                       const T* W_kq, const T* d_F, T* d_W_pv, T* d_W_kq, T* d_E = nullptr,
                       Device device = Device::cpu);

// VJP of multihead_lsa_predict for d_y = ∂ℓ/∂ŷ [B]:
//   dW^PV_h last row Σ_b dŷ_b G_b q_h (the rest 0),  dW^KQ_h = Σ_b dŷ_b (G_b p_h) e_q,bᵀ,
//   dE_b = (dŷ_b / N) S_b E_b with S_b = Σ_h (p_h q_hᵀ + q_h p_hᵀ), + dŷ_b Σ_h W^KQ_hᵀ G_b p_h on
//   the query column, + dŷ_b on the query-label slot.
template <class T>
void multihead_lsa_predict_vjp(const LsaShape& shape, index_t heads, const T* E, const T* W_pv,
                               const T* W_kq, const T* d_y, T* d_W_pv, T* d_W_kq, T* d_E = nullptr,
                               Device device = Device::cpu);

// ---- the same entry points on array views (array_view.hpp): what the Python bindings call ----
// One validate() per entry point, with the operand rules of the LSA view entry points (lsa.hpp) and
// W_pv [H, d+1, d+1] (H >= 1), W_kq of W_pv's shape; d_W_pv, d_W_kq are made [H, d+1, d+1] when
// absent. The views' devices and `device` pick the backend as for LSA; H = 1 runs the LSA backends.
// multihead_lsa_loss_and_grad writes the loss into `loss` (float64 [1] on E's side) when present,
// as lsa_loss_and_grad's loss overload: on the GPU it queues its kernels and returns NaN unwaited.
void multihead_lsa_predict(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
                           ArrayView& y_hat, DeviceChoice device, CallSite& site);
double multihead_lsa_loss_and_grad(const ArrayView& E, const ArrayView& y_q, const ArrayView& W_pv,
                                   const ArrayView& W_kq, ArrayView& d_W_pv, ArrayView& d_W_kq,
                                   ArrayView& y_hat, ArrayView& loss, DeviceChoice device,
                                   CallSite& site);
void multihead_lsa_forward(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
                           ArrayView& F, DeviceChoice device, CallSite& site);
void multihead_lsa_vjp(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
                       const ArrayView& d_F, ArrayView& d_W_pv, ArrayView& d_W_kq, ArrayView& d_E,
                       DeviceChoice device, CallSite& site);
void multihead_lsa_predict_vjp(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
                               const ArrayView& d_y, ArrayView& d_W_pv, ArrayView& d_W_kq,
                               ArrayView& d_E, DeviceChoice device, CallSite& site);

// The fused sampled training step of the H-head model on the prompts of step `step` of a linear
// law (sampling.hpp): L = (1/(2B)) Σ_b (ŷ_b − y_q,b)² and dW_pv, dW_kq [H, d+1, d+1] (written), as
// multihead_lsa_loss_and_grad would give on those prompts, E never materialized.
//   tokens:  a few prompts at a time drawn in cache (the draws of sample_linear_prompts) and
//            consumed by the H-head kernel;
//   wishart: the prompt enters only through G (and x_q, y_q): G = M Mᵀ + e_q e_qᵀ/N from a
//            Bartlett draw (wishart.hpp, as linear_prompts_lsa_loss_and_grad's wishart), each head
//            O(d²) per prompt whatever N. Same law as tokens, other draws; Gaussian covariates and
//            N >= d (d + 1 with label noise).
// H = 1 is linear_prompts_lsa_loss_and_grad (bitwise). Device::cpu: num_threads() threads.
// Device::cuda: wishart — one GPU thread per prompt on the CPU step's Philox streams and recipe
// (equal to the CPU step to rounding: float64 ~1e-12 relative), batch sums reduced in a fixed
// order (bitwise reproducible); tokens — the GPU sampler's prompts into a scratch, then the H-head
// loss kernel. W_pv, W_kq and the gradients may then be device memory (used in place). With `loss`
// (one double, device or host memory) L is written there and NaN returned: with device outputs the
// GPU call only queues kernels (nothing waits).
template <class T>
double linear_prompts_multihead_loss_and_grad(const LinearPromptSpec& spec, index_t batch,
                                              std::uint32_t step, FusedMethod method, index_t heads,
                                              const T* W_pv, const T* W_kq, T* d_W_pv, T* d_W_kq,
                                              Device device = Device::cpu, double* loss = nullptr);

// The separate parametrization's key-query product and chain rule, on the device `device` names
// (the pointers host or, with Device::cuda, device memory of one device; device outputs only queued):
//   multihead_merge_kq: W_kq [H, rows, rows] = W^K_hᵀ W^Q_h from W_k, W_q [H, rank, rows];
//   multihead_chain_kq: d_W_k = W^Q_h dW^KQ_hᵀ, d_W_q = W^K_h dW^KQ_h [H, rank, rows] from d_W_kq.
// 1 <= rank <= rows, rows >= 2, H >= 1 (Error otherwise). Sums in T in index order (the same
// recipe on both devices: multihead_recipe.hpp); the two devices are equal to rounding, not bitwise
// (nvcc contracts the sums' multiply-adds to FMA).
template <class T>
void multihead_merge_kq(index_t heads, index_t rank, index_t rows, const T* W_k, const T* W_q,
                        T* W_kq, Device device = Device::cpu);
template <class T>
void multihead_chain_kq(index_t heads, index_t rank, index_t rows, const T* W_k, const T* W_q,
                        const T* d_W_kq, T* d_W_k, T* d_W_q, Device device = Device::cpu);

// ---- the one list of multi-head entry points (as LSA_NATIVE_LSA_API; the CPU and CUDA backends) ----
// X(R, name, params) with params the parameter list without the trailing `Device device`: the
// backend functions cpu::name / cuda::name take exactly params (the model's entries run there for
// H >= 2, H = 1 going to the LSA backends; merge / chain for every H). The explicit instantiations
// (here, multihead_dispatch.cpp, cpu/multihead_cpu.cpp, cuda/multihead_cuda.cu) and the backend
// declarations (cpu/multihead_cpu.hpp, cuda/multihead_cuda.hpp) are generated from it.
#define LSA_NATIVE_MULTIHEAD_API(X, T)                                                          \
  X(void, multihead_lsa_predict,                                                               \
    (const LsaShape& shape, index_t heads, const T* E, const T* W_pv, const T* W_kq, T* y_hat)) \
  X(double, multihead_lsa_loss_and_grad,                                                       \
    (const LsaShape& shape, index_t heads, const T* E, const T* y_q, const T* W_pv,            \
     const T* W_kq, T* d_W_pv, T* d_W_kq, T* y_hat))                                           \
  X(void, multihead_lsa_forward,                                                               \
    (const LsaShape& shape, index_t heads, const T* E, const T* W_pv, const T* W_kq, T* F))     \
  X(void, multihead_lsa_vjp,                                                                   \
    (const LsaShape& shape, index_t heads, const T* E, const T* W_pv, const T* W_kq,           \
     const T* d_F, T* d_W_pv, T* d_W_kq, T* d_E))                                              \
  X(void, multihead_lsa_predict_vjp,                                                           \
    (const LsaShape& shape, index_t heads, const T* E, const T* W_pv, const T* W_kq,           \
     const T* d_y, T* d_W_pv, T* d_W_kq, T* d_E))                                              \
  X(void, multihead_merge_kq,                                                                  \
    (index_t heads, index_t rank, index_t rows, const T* W_k, const T* W_q, T* W_kq))           \
  X(void, multihead_chain_kq,                                                                  \
    (index_t heads, index_t rank, index_t rows, const T* W_k, const T* W_q, const T* d_W_kq,   \
     T* d_W_k, T* d_W_q))

#define LSA_NATIVE_MULTIHEAD_EXTERN(R, name, params) \
  extern template R name(LSA_NATIVE_UNPAREN params, Device);
LSA_NATIVE_MULTIHEAD_API(LSA_NATIVE_MULTIHEAD_EXTERN, float)
LSA_NATIVE_MULTIHEAD_API(LSA_NATIVE_MULTIHEAD_EXTERN, double)
#undef LSA_NATIVE_MULTIHEAD_EXTERN

}  // namespace lsa_native
