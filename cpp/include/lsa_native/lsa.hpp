// Batched one-layer linear self-attention (LSA) of Zhang, Frei, Bartlett [ZFB (3.3)-(3.7)].
//
// Layout contract shared by every function here:
//   E      [B, d+1, N+1]  C-contiguous; column j of prompt b is token e_j = (x_j; y_j), the last
//                         column is the query token (x_q; 0)            [ZFB (3.4)]
//   W_pv   [d+1, d+1]     C-contiguous, W^PV
//   W_kq   [d+1, d+1]     C-contiguous, W^KQ
// T is float or double. Outputs never alias inputs. All functions are thread-safe and run where
// `device` says (device.hpp): Device::cpu (default) over num_threads() threads, with results that
// do not depend on the thread count; Device::cuda on a GPU, with pointers to device or host memory,
// batch sums reduced in a fixed order (two runs give bitwise equal results). Invalid shapes or null
// pointers throw lsa_native::Error, and so does Device::cuda where no GPU can run it.
//
// Accuracy: per-prompt sums over tokens run in T with SIMD partial sums; sums over the batch
// (losses, parameter gradients) run in double for both T, in a fixed chunk order.
#pragma once

#include "lsa_native/array_view.hpp"
#include "lsa_native/device.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native {

struct LsaShape {
  index_t batch;    // B >= 1 prompts
  index_t dim;      // d >= 1; E has d+1 rows
  index_t context;  // N >= 1 context tokens; E has N+1 columns; ρ = N   [ZFB 3.2]
};

// Throws Error (naming E) unless every extent is >= 1 and B·(d+1)·(N+1) fits in index_t. Every
// entry point calls it: the one place of these rules.
void validate(const LsaShape& shape);

// ŷ_b = [f_LSA(E_b)]_{d+1,N+1} = p^T G q with p = last row of W^PV, K = first d columns of W^KQ,
// q = K x_q, G = E E^T / N                                                [ZFB (3.6)]
// (Exact for any E: q = W^KQ e_q and the query's label slot E[d, N] is added; both reduce to (3.6)
// when the slot is 0, as in (3.4).)
// One pass over the tokens: O(N d) per prompt.
//   y_hat [B] (written)
template <class T>
void lsa_predict(const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, T* y_hat,
                 Device device = Device::cpu);

// L = (1/(2B)) Σ_b (ŷ_b − y_q,b)^2  [ZFB (3.7)] and its full-size gradients. Only the last row of
// dW_pv (∂L/∂p) can be nonzero, the rest is written as 0; the last column of dW_kq is exactly 0
// when the query label slots E[b, d, N] are 0 (prompts of (3.4)).
// Forward and backward read each prompt once from memory: O(N d) per prompt.
//   y_q [B], d_W_pv [d+1, d+1] (written), d_W_kq [d+1, d+1] (written),
//   y_hat [B] (written when not null)
// Returns L.
template <class T>
double lsa_loss_and_grad(const LsaShape& shape, const T* E, const T* y_q, const T* W_pv,
                         const T* W_kq, T* d_W_pv, T* d_W_kq, T* y_hat = nullptr,
                         Device device = Device::cpu);

// Full output f(E) = E + W^PV E (E^T W^KQ E)/N = E + (W^PV G W^KQ) E, Gram-first: O(N d^2).
//   F [B, d+1, N+1] (written)
template <class T>
void lsa_forward(const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, T* F,
                 Device device = Device::cpu);

// Vector-Jacobian product of lsa_forward for an upstream gradient d_F = ∂ℓ/∂F:
// with P = W^PV G W^KQ and dP = d_F E^T (summed over the batch where it is a parameter),
//   dW^PV = Σ_b dP (G W^KQ)^T,  dW^KQ = Σ_b (W^PV G)^T dP,
//   dE = d_F + P^T d_F + (dG + dG^T) E / N,  dG = W^PV^T dP W^KQ^T.    (SPEC 3.2)
//   d_F [B, d+1, N+1], d_W_pv, d_W_kq [d+1, d+1] (written), d_E [B, d+1, N+1] (written if not null)
template <class T>
void lsa_vjp(const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, const T* d_F,
             T* d_W_pv, T* d_W_kq, T* d_E = nullptr, Device device = Device::cpu);

// Vector-Jacobian product of lsa_predict for an upstream d_y = ∂ℓ/∂ŷ [B] (cpu/lsa_predict_vjp.inl; CUDA: the VJP mode of the prediction kernel):
//   d_W_pv [d+1, d+1] (written; only the last row, Σ_b dŷ_b G_b q_b, is nonzero),
//   d_W_kq [d+1, d+1] (written; Σ_b dŷ_b (G_b p) e_q,bᵀ, exact for any E),
//   d_E [B, d+1, N+1] (written when not null; (1/N)(s_j p + t_j q) dŷ per column j, plus
//   W^KQᵀ G p dŷ on the query column and dŷ on the query-label slot).  O(N d) per prompt.
template <class T>
void lsa_predict_vjp(const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq,
                     const T* d_y, T* d_W_pv, T* d_W_kq, T* d_E = nullptr,
                     Device device = Device::cpu);

// ---- the same entry points on array views (array_view.hpp): what the Python bindings call ----
// One validate() per entry point checks every operand (E float32/float64 [B, d+1, N+1] with the
// rules of validate(LsaShape); the other inputs in E's dtype with their shapes; C-contiguous
// layouts; outputs passed by the caller on E's side, writeable, overlapping no input), with
// messages naming the argument (Error; ArgumentTypeError for a wrong dtype or side). The views'
// devices and `device` pick the backend (a CUDA array anywhere, or DeviceChoice::cuda: the GPU),
// E's dtype picks T. Outputs absent with `make` set are made by `site` like E; outputs absent
// without it are not computed (y_hat of lsa_loss_and_grad, d_E of the VJPs).
void lsa_predict(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq, ArrayView& y_hat,
                 DeviceChoice device, CallSite& site);
double lsa_loss_and_grad(const ArrayView& E, const ArrayView& y_q, const ArrayView& W_pv,
                         const ArrayView& W_kq, ArrayView& d_W_pv, ArrayView& d_W_kq,
                         ArrayView& y_hat, DeviceChoice device, CallSite& site);
// The same with the loss written into `loss` (float64 [1] on E's side) when it is present: on the
// GPU the call then queues its kernels and returns without waiting (the return value is NaN for a
// CUDA `loss`; read it when needed), so a training loop keeps θ, gradients and losses on the device.
double lsa_loss_and_grad(const ArrayView& E, const ArrayView& y_q, const ArrayView& W_pv,
                         const ArrayView& W_kq, ArrayView& d_W_pv, ArrayView& d_W_kq,
                         ArrayView& y_hat, ArrayView& loss, DeviceChoice device, CallSite& site);
void lsa_forward(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq, ArrayView& F,
                 DeviceChoice device, CallSite& site);
void lsa_vjp(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq, const ArrayView& d_F,
             ArrayView& d_W_pv, ArrayView& d_W_kq, ArrayView& d_E, DeviceChoice device,
             CallSite& site);
void lsa_predict_vjp(const ArrayView& E, const ArrayView& W_pv, const ArrayView& W_kq,
                     const ArrayView& d_y, ArrayView& d_W_pv, ArrayView& d_W_kq, ArrayView& d_E,
                     DeviceChoice device, CallSite& site);

// ---- the one list of LSA entry points ----
// X(R, name, params) for every entry point: R its return type, params its parenthesized parameter
// list without the trailing `Device device` (the backend functions cpu::name / cuda::name take
// exactly params); every entry point has both backends. The explicit instantiations (here, dispatch.cpp, cpu/lsa_cpu.cpp,
// cuda/lsa_cuda.cu) and the backend declarations (cpu/lsa_cpu.hpp, cuda/lsa_cuda.hpp) are generated
// from it; the compiler checks it against the
// documented declarations above (an instantiation that matches no template does not compile).
#define LSA_NATIVE_LSA_API(X, T)                                                                 \
  X(void, lsa_predict,                                                                          \
    (const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, T* y_hat))                \
  X(double, lsa_loss_and_grad,                                                                  \
    (const LsaShape& shape, const T* E, const T* y_q, const T* W_pv, const T* W_kq, T* d_W_pv,  \
     T* d_W_kq, T* y_hat))                                                                      \
  X(void, lsa_forward, (const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, T* F)) \
  X(void, lsa_vjp,                                                                              \
    (const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, const T* d_F, T* d_W_pv,  \
     T* d_W_kq, T* d_E))                                                                        \
  X(void, lsa_predict_vjp,                                                                      \
    (const LsaShape& shape, const T* E, const T* W_pv, const T* W_kq, const T* d_y, T* d_W_pv,  \
     T* d_W_kq, T* d_E))

// Explicit instantiation R name(params..., Device) for T = float and double (deduced from params).
#define LSA_NATIVE_LSA_EXTERN(R, name, params) \
  extern template R name(LSA_NATIVE_UNPAREN params, Device);
LSA_NATIVE_LSA_API(LSA_NATIVE_LSA_EXTERN, float)
LSA_NATIVE_LSA_API(LSA_NATIVE_LSA_EXTERN, double)
#undef LSA_NATIVE_LSA_EXTERN

}  // namespace lsa_native
