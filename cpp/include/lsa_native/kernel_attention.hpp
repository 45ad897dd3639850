// Multi-layer, multi-head kernel attention of Cheng, Chen, Sra [CCS (2)-(5), (12), Appendix D].
//
//   Z_{ℓ+1} = Z_ℓ + Σ_{s<H} V_ℓ^s Z_ℓ M h̃^s(B_ℓ^s X_ℓ, C_ℓ^s X_ℓ),   ℓ = 0..L−1          (3)
// with X_ℓ the first d rows of Z_ℓ, M = diag(1, …, 1, 0) (the query is never a key or value
// source), and for U = B X, W = C X, S = U^T W (S_ij: source token i, target token j):
//   linear h̃ = S;  relu h̃ = max(S, 0);  exp h̃ = exp(S);
//   softmax h̃_ij = exp(S_ij) / Σ_{k<n} exp(S_kj) for i < n, computed with the max subtracted.
// TF = Z_L[d, n] predicts −y_q (4). Loss: the package's ½·MSE, (1/(2B)) Σ_b (TF_b + y_q,b)² — half
// of CCS (5), the convention of ZFB (3.7) (SPEC 3.3) — with its exact gradients.
//
// Layouts (row-major, C-contiguous): Z0 [B, d+1, n+1] (column j = token (x_j; y_j), the last
// column the query (x_q; 0)); V [L, H, d+1, d+1]; Bq, Ck [L, H, d, d]; activations [H] (one per
// head, shared by the layers). T is float or double; parameter-gradient batch sums run in double.
// Cost O(L·H·n²·d) per prompt; backward ≈ 2-3x forward. loss_and_grad is the composition of the
// same per-prompt forward and backward as forward + vjp (without materializing the context).
// Thread-safe. Invalid arguments throw lsa_native::Error.
#pragma once

#include <vector>

#include "lsa_native/array_view.hpp"
#include "lsa_native/device.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native {

// The activation table [CCS (12)], the one list of activations: X(name, column_wise) per entry,
// codes 0, 1, … in this order. It generates the Activation enum, activation_names() (exported to
// Python as lsa_native._core.ACTIVATION_NAMES), the range check activation_from_code(), and the
// per-activation dispatch of the recipe (common/ka_recipe.hpp; each kernel defines one value and one
// gradient function per name). column_wise: h̃ normalizes over the n sources of each target column.
#define LSA_NATIVE_ACTIVATIONS(X) \
  X(linear, false)                \
  X(relu, false)                  \
  X(exp, false)                   \
  X(softmax, true)

enum class Activation : int {
#define LSA_NATIVE_ACTIVATION_ENUM(name, column_wise) name,
  LSA_NATIVE_ACTIVATIONS(LSA_NATIVE_ACTIVATION_ENUM)
#undef LSA_NATIVE_ACTIVATION_ENUM
};

// Number of activations (codes 0 .. kActivationCount − 1) and their names in code order.
inline constexpr int kActivationCount = 0
#define LSA_NATIVE_ACTIVATION_COUNT(name, column_wise) +1
    LSA_NATIVE_ACTIVATIONS(LSA_NATIVE_ACTIVATION_COUNT);
#undef LSA_NATIVE_ACTIVATION_COUNT

inline constexpr const char* activation_names[kActivationCount] = {
#define LSA_NATIVE_ACTIVATION_NAME(name, column_wise) #name,
    LSA_NATIVE_ACTIVATIONS(LSA_NATIVE_ACTIVATION_NAME)
#undef LSA_NATIVE_ACTIVATION_NAME
};

// The activation of `code`; throws Error naming `what` unless 0 <= code < kActivationCount.
inline Activation activation_from_code(int code, const char* what = "activations") {
  detail::require(code >= 0 && code < kActivationCount,
                  std::string(what) + ": unknown activation code " + std::to_string(code) +
                      " (expected 0.." + std::to_string(kActivationCount - 1) + ")");
  return static_cast<Activation>(code);
}

// What the `predictions` output of kernel_attention_forward receives for ℓ = 0..L: TF_ℓ = Z_ℓ[d, n]
// (the model's output, CCS (4)) or ŷ_ℓ = −TF_ℓ, its prediction of y_q (SPEC 3.3: Python's
// predict(..., every_layer=True)), both [B, L+1]; or y_hat_final: ŷ_L = −TF_L alone, [B] (Python's
// predict()). Sign and place are applied as the values are written (recipe::prediction,
// prediction_row and prediction_column: the one place).
enum class PredictionOutput : int { tf, y_hat, y_hat_final };

struct KernelAttentionShape {
  index_t batch;    // B >= 1
  index_t dim;      // d >= 1
  index_t context;  // n >= 1 context tokens (n+1 columns with the query)
  index_t layers;   // L >= 1
  index_t heads;    // H >= 1
};

// Throws Error unless every extent is >= 1 and B·(d+1)·(n+1) fits in index_t.
void validate(const KernelAttentionShape& shape);

// Every function below validates its arguments once (kernel_attention_dispatch.cpp), then runs
// where `device` says (device.hpp): Device::cpu over num_threads() threads, results independent of
// the thread count; Device::cuda on a GPU with pointers to device or host memory (`activations`
// is always host memory), batch sums reduced in a fixed order (two runs are bitwise equal), and
// a clear Error where no GPU can run it or a shape exceeds what the kernels index.

// Size, in values of T, of one prompt's saved forward context (the whole context is
// batch · this): Z_0..Z_L, and per layer and head U = B X, W = C X, h̃ and Y = Z_ℓ M h̃, each row
// padded from n+1 to Tt = n+1 rounded up to 8 floats / 4 doubles (layout recipe::KaContext, the
// same for both devices, so a context saved on one device serves a VJP on the other):
//   Tt · ((L+1)(d+1) + L·H·(2d + n + d+1)).
// E.g. d = 5, n = 30, L = 3, H = 1, float: 32 · (24 + 138) = 5184 floats = 20.3 KiB per prompt.
template <class T>
index_t kernel_attention_context_size(const KernelAttentionShape& shape);

// Forward pass. Z_out [B, d+1, n+1] receives Z_L when not null; predictions [B, L+1] receives
// TF_ℓ = Z_ℓ[d, n] for ℓ = 0..L (or ŷ_ℓ = −TF_ℓ with PredictionOutput::y_hat; predictions [B]
// receives ŷ_L alone with PredictionOutput::y_hat_final) when not null;
// context (batch · kernel_attention_context_size values) receives the per-prompt state for
// kernel_attention_vjp when not null.
template <class T>
void kernel_attention_forward(const KernelAttentionShape& shape, const T* Z0, const T* V,
                              const T* Bq, const T* Ck, const Activation* activations, T* Z_out,
                              T* predictions, T* context = nullptr,
                              PredictionOutput prediction_output = PredictionOutput::tf,
                              Device device = Device::cpu);

// Vector-Jacobian product of Z_L = forward(Z0, V, B, C) for the upstream d_Z_out = ∂ℓ/∂Z_L
// [B, d+1, n+1]: d_V, d_B, d_C (written, batch sums in double, fixed order) and d_Z0
// (written when not null). With context (from the saving forward with the same inputs) only the
// backward runs; with context = nullptr the forward is recomputed per prompt, ≈ 1/3 more time
// and no extra memory. Results are bitwise identical either way (on one device).
template <class T>
void kernel_attention_vjp(const KernelAttentionShape& shape, const T* Z0, const T* V, const T* Bq,
                          const T* Ck, const Activation* activations, const T* d_Z_out, T* d_V,
                          T* d_B, T* d_C, T* d_Z0, const T* context, Device device = Device::cpu);

// Loss (1/(2B)) Σ_b (TF_b + y_q,b)² (½·MSE; ½ × CCS (5)) and its gradients d_V [L, H, d+1, d+1],
// d_B, d_C [L, H, d, d] (written), d_Z0 [B, d+1, n+1] (written when not null), predictions
// TF_ℓ [B, L+1] (when not null).
template <class T>
double kernel_attention_loss_and_grad(const KernelAttentionShape& shape, const T* Z0, const T* y_q,
                                      const T* V, const T* Bq, const T* Ck,
                                      const Activation* activations, T* d_V, T* d_B, T* d_C,
                                      T* d_Z0, T* predictions, Device device = Device::cpu);

// VJP of the predictions ŷ_L = −TF_L = −Z_L[d, n] [B] (CCS (4); kernel_attention_forward with
// PredictionOutput::y_hat_final) for the upstream d_y = ∂ℓ/∂ŷ_L [B]: the gradients of
// Σ_b d_y[b] ŷ_b, d_V, d_B, d_C (written, batch sums in double, fixed order) and d_Z0 (written when
// not null). It runs loss_and_grad's query backward with the seed −d_y[b] at [d, n]: the forward is
// recomputed per prompt and the last layer is its query column alone (O(H·n·d) per prompt where
// kernel_attention_vjp with d_Z_out zero but at [d, n] spends O(H·n²·d)), so nothing is saved
// between the calls. Equal to that vjp to rounding.
template <class T>
void kernel_attention_predict_vjp(const KernelAttentionShape& shape, const T* Z0, const T* V,
                                  const T* Bq, const T* Ck, const Activation* activations,
                                  const T* d_y, T* d_V, T* d_B, T* d_C, T* d_Z0,
                                  Device device = Device::cpu);

// ---- the same entry points on array views (array_view.hpp): what the Python bindings call ----
// The activations of a call as the caller named them: one per head, or one for every head.
struct ActivationChoice {
  std::vector<Activation> activations;
  bool shared = false;  // one activation names every head's
  const char* name = "activation";
};
// Throws Error unless `choice` gives one activation per head (or one shared); returns one per head.
std::vector<Activation> activations_per_head(const ActivationChoice& choice, index_t heads);

// One validate() per entry point checks every operand (Z0 float32/float64 [B, d+1, n+1]; V
// [L, H, d+1, d+1], B, C [L, H, d, d], y_q [B], d_Z_out [B, d+1, n+1] in Z0's dtype, C-contiguous;
// the activations; a saved context for (B, d, n, L, H) = `context_shape` and Z0's dtype), with
// messages naming the argument. The views' devices and `device` pick the backend, Z0's dtype picks
// T; outputs absent with `make` set are made by `site` like Z0 (absent without it: not computed).
void kernel_attention_forward(const ArrayView& Z0, const ArrayView& V, const ArrayView& Bq,
                              const ArrayView& Ck, const ActivationChoice& activations,
                              ArrayView& Z_out, ArrayView& predictions, ArrayView& context,
                              PredictionOutput prediction_output, DeviceChoice device,
                              CallSite& site);
void kernel_attention_vjp(const ArrayView& Z0, const ArrayView& V, const ArrayView& Bq,
                          const ArrayView& Ck, const ActivationChoice& activations,
                          const ArrayView& d_Z_out, ArrayView& d_V, ArrayView& d_B, ArrayView& d_C,
                          ArrayView& d_Z0, const ArrayView& context,
                          const std::vector<index_t>& context_shape, DeviceChoice device,
                          CallSite& site);
double kernel_attention_loss_and_grad(const ArrayView& Z0, const ArrayView& y_q, const ArrayView& V,
                                      const ArrayView& Bq, const ArrayView& Ck,
                                      const ActivationChoice& activations, ArrayView& d_V,
                                      ArrayView& d_B, ArrayView& d_C, ArrayView& d_Z0,
                                      ArrayView& predictions, DeviceChoice device, CallSite& site);
// d_y [B] in Z0's dtype (any values, as d_Z_out).
void kernel_attention_predict_vjp(const ArrayView& Z0, const ArrayView& V, const ArrayView& Bq,
                                  const ArrayView& Ck, const ActivationChoice& activations,
                                  const ArrayView& d_y, ArrayView& d_V, ArrayView& d_B,
                                  ArrayView& d_C, ArrayView& d_Z0, DeviceChoice device,
                                  CallSite& site);
// The same with the loss written into `loss` (float64 [1] on Z0's side) when it is present: on
// the GPU the call then queues its kernels and returns without waiting (NaN returned for a CUDA
// `loss`), so a training loop keeps θ, gradients and losses on the device.
double kernel_attention_loss_and_grad(const ArrayView& Z0, const ArrayView& y_q, const ArrayView& V,
                                      const ArrayView& Bq, const ArrayView& Ck,
                                      const ActivationChoice& activations, ArrayView& d_V,
                                      ArrayView& d_B, ArrayView& d_C, ArrayView& d_Z0,
                                      ArrayView& predictions, ArrayView& loss, DeviceChoice device,
                                      CallSite& site);

// The list of kernel-attention entry points with two backends, as lsa.hpp's LSA_NATIVE_LSA_API:
// X(R, name, params) with params the parameter list without the trailing `Device device` (the
// backend functions cpu::name / cuda::name take exactly params). The explicit instantiations (here,
// kernel_attention_dispatch.cpp, cpu/kernel_attention_cpu.cpp, cuda/ka_cuda.cu) and the backend
// declarations (cpu/kernel_attention_cpu.hpp, cuda/ka_cuda.hpp) are generated from it.
#define LSA_NATIVE_KA_API(X, T)                                                                   \
  X(void, kernel_attention_forward,                                                              \
    (const KernelAttentionShape& shape, const T* Z0, const T* V, const T* Bq, const T* Ck,      \
     const Activation* activations, T* Z_out, T* predictions, T* context,                       \
     PredictionOutput prediction_output))                                                        \
  X(void, kernel_attention_vjp,                                                                  \
    (const KernelAttentionShape& shape, const T* Z0, const T* V, const T* Bq, const T* Ck,      \
     const Activation* activations, const T* d_Z_out, T* d_V, T* d_B, T* d_C, T* d_Z0,          \
     const T* context))                                                                          \
  X(double, kernel_attention_loss_and_grad,                                                      \
    (const KernelAttentionShape& shape, const T* Z0, const T* y_q, const T* V, const T* Bq,     \
     const T* Ck, const Activation* activations, T* d_V, T* d_B, T* d_C, T* d_Z0,               \
     T* predictions))                                                                            \
  X(void, kernel_attention_predict_vjp,                                                          \
    (const KernelAttentionShape& shape, const T* Z0, const T* V, const T* Bq, const T* Ck,      \
     const Activation* activations, const T* d_y, T* d_V, T* d_B, T* d_C, T* d_Z0))

#define LSA_NATIVE_KA_EXTERN(R, name, params) \
  extern template R name(LSA_NATIVE_UNPAREN params, Device);
LSA_NATIVE_KA_API(LSA_NATIVE_KA_EXTERN, float)
LSA_NATIVE_KA_API(LSA_NATIVE_KA_EXTERN, double)
#undef LSA_NATIVE_KA_EXTERN
extern template index_t kernel_attention_context_size<float>(const KernelAttentionShape&);
extern template index_t kernel_attention_context_size<double>(const KernelAttentionShape&);


}  // namespace lsa_native
