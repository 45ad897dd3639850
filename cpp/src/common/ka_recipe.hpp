// Per-prompt kernel-attention math [CCS (3), (5), (12)], written once for every backend (LSA_HD).
//
// As in lsa_recipe.hpp, a recipe is the list of per-entry formulas of one prompt's computation;
// a backend decides which thread computes which entry and when the inputs of a step are ready (the
// CUDA kernels of cuda/ka_warp_kernels.cuh: a warp per prompt, lanes over tokens, the product
// entries with the inner index in the same order; cuda/ka_kernels.cuh: threads of a block over a
// prompt staged in shared memory; the scalar host driver of cpp/tests/test_ka_recipe.cpp: plain
// loops). Every formula sums in the order written here.
//
// One layer ℓ and head s, for a prompt Z = Z_ℓ [D = d+1, n+1] (columns = tokens, the last one the
// query), X = Z[:d, :], M = diag(1, …, 1, 0):
//   U = B X, W = C X [d, n+1]                         (u_entry)
//   S = Uᵀ W restricted to sources i < n [n, n+1]      (logit_entry)
//   h̃ = activation(S), softmax column-wise with the column max subtracted   [CCS (12)]
//   Y = Z M h̃ [D, n+1]                                (y_entry)
//   Z_{ℓ+1} = Z_ℓ + Σ_s V^s Y^s                        (residual_entry)    [CCS (3)]
// Reverse mode, with dO = ∂ℓ/∂Z_{ℓ+1} (every head's output receives it) and dZ_ℓ starting at dO:
//   dV += dO Yᵀ, dY = Vᵀ dO                           (token_product_entry, dy_entry)
//   dZ[:, i<n] += dY h̃ᵀ,  dh̃ = (Z M)ᵀ dY              (token_product_entry, dh_entry)
//   dS = activation gradient of dh̃                    (activation_gradient)
//   dU[:, i] = W dSᵀ[:, i] (i < n; the query column 0), dW = U[:, :n] dS
//   dB += dU Xᵀ, dC += dW Xᵀ, dX += Bᵀ dU + Cᵀ dW
// Loss, the package's ½·MSE (½ × CCS (5), ZFB (3.7)): (1/(2B)) Σ_b r_b², r = TF + y_q with
// TF = Z_L[d, n]: ∂/∂Z_L = r / B at [d, n] (loss_residual, loss_seed, loss_value).
//
// Matrices are recipe::Mat views (lsa_recipe.hpp), so the same formulas run on the CPU context's
// padded rows and on any staging a backend picks. Indices inside one prompt are int.
#pragma once

#include <cmath>

#include "common/hd.hpp"
#include "common/lsa_recipe.hpp"
#include "lsa_native/kernel_attention.hpp"

namespace lsa_native::recipe {

// ---- the saved forward context of one prompt (shared by the CPU and CUDA backends) -------------
// Rows of n+1 tokens padded to Tt = n+1 rounded up to kContextLanes<T> (the CPU's 32-byte vectors:
// 8 floats / 4 doubles), padding exactly 0. Layout [Z_0..Z_L | U | W | h̃ | Y]: Z_ℓ [D, Tt] for
// ℓ = 0..L, then per (ℓ, s) in order ℓ·H + s: U, W [d, Tt] (all U first, then all W), h̃ [n, Tt],
// Y = Z_ℓ M h̃ [D, Tt]. Offsets in values of T.
template <class T>
inline constexpr int kContextLanes = int(32 / sizeof(T));

struct KaContext {
  int d, n, D, L, H, Tt;
  LSA_HD static KaContext make(int d, int n, int L, int H, int lanes) {
    return {d, n, d + 1, L, H, (n + lanes) / lanes * lanes};
  }
  LSA_HD long long z(int l) const { return (long long)l * D * Tt; }
  LSA_HD long long u(int l, int s) const { return z(L + 1) + (long long)(l * H + s) * d * Tt; }
  LSA_HD long long w(int l, int s) const { return u(L, 0) + (long long)(l * H + s) * d * Tt; }
  LSA_HD long long h(int l, int s) const { return w(L, 0) + (long long)(l * H + s) * n * Tt; }
  LSA_HD long long y(int l, int s) const { return h(L, 0) + (long long)(l * H + s) * D * Tt; }
  LSA_HD long long size() const { return y(L, 0); }  // Tt ((L+1) D + L H (2d + n + D))
};

template <class T>
KaContext context_layout(const KernelAttentionShape& s) {
  return KaContext::make(int(s.dim), int(s.context), int(s.layers), int(s.heads), kContextLanes<T>);
}

// ---- the activations h̃ of CCS (12), one value and one gradient function per table entry -------
// Element-wise, given the column's shift (softmax: the max over the n sources, else unused):
//   value: linear s, relu max(s, 0), exp e^s, softmax e^(s − shift) (normalized afterwards: times
//   the column's inverse(Σ_i e^(S_ij − shift))).
//   gradient ∂ℓ/∂S from h = h̃ and dh = ∂ℓ/∂h̃, given the column's Σ_i h_ij dh_ij (softmax only):
//   linear dh, relu [h > 0] dh, exp h dh, softmax h (dh − Σ_i h_ij dh_ij).
namespace activation {
template <class T>
LSA_HD_LOCAL T exp_of(T x) {
  using std::exp;
  return exp(x);
}
template <class T> LSA_HD_LOCAL T linear_value(T s, T) { return s; }
template <class T> LSA_HD_LOCAL T relu_value(T s, T) { return s < T(0) ? T(0) : s; }  // NaN stays NaN
template <class T> LSA_HD_LOCAL T exp_value(T s, T) { return exp_of(s); }
template <class T> LSA_HD_LOCAL T softmax_value(T s, T shift) { return exp_of(s - shift); }
template <class T> LSA_HD_LOCAL T linear_gradient(T, T dh, T) { return dh; }
template <class T> LSA_HD_LOCAL T relu_gradient(T h, T dh, T) { return h > T(0) ? dh : T(0); }
template <class T> LSA_HD_LOCAL T exp_gradient(T h, T dh, T) { return h * dh; }
template <class T> LSA_HD_LOCAL T softmax_gradient(T h, T dh, T column_dot) { return h * (dh - column_dot); }
}  // namespace activation

// Dispatch generated from the activation table (kernel_attention.hpp): one case per entry.
template <class T>
LSA_HD_LOCAL T activation_value(Activation a, T s, T shift) {
  switch (a) {
#define LSA_NATIVE_ACTIVATION_CASE(name, column_wise) \
  case Activation::name:                              \
    return activation::name##_value(s, shift);
    LSA_NATIVE_ACTIVATIONS(LSA_NATIVE_ACTIVATION_CASE)
#undef LSA_NATIVE_ACTIVATION_CASE
  }
  return s;  // unreachable: codes are checked at the API boundary
}

template <class T>
LSA_HD_LOCAL T activation_gradient(Activation a, T h, T dh, T column_dot) {
  switch (a) {
#define LSA_NATIVE_ACTIVATION_CASE(name, column_wise) \
  case Activation::name:                              \
    return activation::name##_gradient(h, dh, column_dot);
    LSA_NATIVE_ACTIVATIONS(LSA_NATIVE_ACTIVATION_CASE)
#undef LSA_NATIVE_ACTIVATION_CASE
  }
  return dh;
}

// Whether h̃ normalizes each target column over the sources (the table's column_wise flag).
LSA_HD_LOCAL constexpr bool column_wise(Activation a) {
  switch (a) {
#define LSA_NATIVE_ACTIVATION_CASE(name, is_column_wise) \
  case Activation::name:                                 \
    return is_column_wise;
    LSA_NATIVE_ACTIVATIONS(LSA_NATIVE_ACTIVATION_CASE)
#undef LSA_NATIVE_ACTIVATION_CASE
  }
  return false;
}

// ---- forward, per entry ----------------------------------------------------------------------

// U[a, j] = Σ_c B[a, c] Z[c, j] over the d input rows (W = C X likewise).
template <class T>
LSA_HD_LOCAL T u_entry(Mat<T> Bm, Mat<T> Z, int d, int a, int j) {
  return product_entry(Bm, Z, d, a, j);
}

// S[i, j] = Σ_a U[a, i] W[a, j]: source token i < n, target token j.
template <class T>
LSA_HD_LOCAL T logit_entry(Mat<T> U, Mat<T> W, int d, int i, int j) {
  return product_entry(U.transposed(), W, d, i, j);
}

// One step of a running maximum (column_max; a backend streaming the column calls it directly).
template <class T>
LSA_HD_LOCAL T max_step(T m, T s) {
  return s > m ? s : m;
}

// max_{i<n} S[i, j]: the shift of a softmax column (S's first n rows).
template <class T>
LSA_HD_LOCAL T column_max(Mat<T> S, int n, int j) {
  T m = S(0, j);
  for (int i = 1; i < n; ++i) m = max_step(m, S(i, j));
  return m;
}

// Σ_{i<n} A[i, j] (the softmax normalizer of the shifted exponentials A = e^(S − max)).
template <class T>
LSA_HD_LOCAL T column_sum(Mat<T> A, int n, int j) {
  T acc = T(0);
  for (int i = 0; i < n; ++i) acc += A(i, j);
  return acc;
}

// Σ_{i<n} H[i, j] dH[i, j] (softmax backward).
template <class T>
LSA_HD_LOCAL T column_dot(Mat<T> H, Mat<T> dH, int n, int j) {
  T acc = T(0);
  for (int i = 0; i < n; ++i) acc += H(i, j) * dH(i, j);
  return acc;
}

// 1 / Σ: softmax's column scale; h̃_ij = e^(S_ij − max) · scale.
template <class T>
LSA_HD_LOCAL T inverse(T sum) {
  return T(1) / sum;
}

// Y[r, j] = Σ_{i<n} Z[r, i] h̃[i, j]  (M drops the query as a source).
template <class T>
LSA_HD_LOCAL T y_entry(Mat<T> Z, Mat<T> H, int n, int r, int j) {
  return product_entry(Z, H, n, r, j);
}

// Z_{ℓ+1}[r, j] after head s: base[r, j] + Σ_q V[r, q] Y[q, j]; base = Z_ℓ for the first head,
// the previous head's result after it   [CCS (3)].
template <class T>
LSA_HD_LOCAL T residual_entry(T base, Mat<T> V, Mat<T> Y, int D, int r, int j) {
  return row_combination_entry(base, V, Y, D, r, j);
}

// ---- backward, per entry ---------------------------------------------------------------------

// Σ_j A[r, j] B[c, j] over the n+1 tokens: dV = dO Yᵀ, the dY h̃ᵀ term of dZ, dU = W dSᵀ,
// dB = dU Xᵀ, dC = dW Xᵀ.
template <class T>
LSA_HD_LOCAL T token_product_entry(Mat<T> A, Mat<T> B, int cols, int r, int c) {
  return token_product(A, B, cols, r, c);
}

// dY[q, j] = Σ_r V[r, q] dO[r, j]  (Vᵀ dO).
template <class T>
LSA_HD_LOCAL T dy_entry(Mat<T> V, Mat<T> dO, int D, int q, int j) {
  return product_entry(V.transposed(), dO, D, q, j);
}

// dh̃[i, j] = Σ_r Z[r, i] dY[r, j]  ((Z M)ᵀ dY, sources i < n).
template <class T>
LSA_HD_LOCAL T dh_entry(Mat<T> Z, Mat<T> dY, int D, int i, int j) {
  return product_entry(Z.transposed(), dY, D, i, j);
}

// dW[a, j] = Σ_{i<n} U[a, i] dS[i, j].
template <class T>
LSA_HD_LOCAL T dw_entry(Mat<T> U, Mat<T> dS, int n, int a, int j) {
  return product_entry(U, dS, n, a, j);
}

// dX[b, j] += Σ_a B[a, b] dU[a, j] (then the same with C, dW): base + (Bᵀ dU)[b, j].
template <class T>
LSA_HD_LOCAL T input_gradient_entry(T base, Mat<T> Bm, Mat<T> dU, int d, int b, int j) {
  return row_combination_entry(base, Bm.transposed(), dU, d, b, j);
}

// ---- the query layer: the last layer when only TF = Z_{ℓ+1}[d, n] is needed -------------------
// Under the loss and the predictions the last layer feeds only its query label forward, so per head
// the query column alone, O(n·d + d²) instead of O(n²·d) (the CPU's forward_query_layer and
// backward_query_layer, cpu/kernel_attention_kernels.inl, compute the same quantities):
//   w_q = C x_q, q = Bᵀ w_q [d];  s_i = S[i, n] = u_i · w_q = x_i · q (i < n);  h = h̃(s) [n]
//   y = Z M h [D];  TF = Z[d, n] + Σ_s V_s[d, :] y_s                                    [CCS (3), (12)]
// Reverse mode from g = ∂ℓ/∂TF (the loss seed; every other entry of ∂ℓ/∂Z_{ℓ+1} is 0), per head:
//   dV[d, :] += g y,  dy = g V[d, :],  dZ[:, i<n] += dy h_i,  dh_i = x̄_iᵀ dy (x̄ = Z's column i)
//   ds = activation gradient of dh (softmax: with Σ_i h_i dh_i),  a = Σ_{i<n} ds_i x_i [d]
//   dB += w_q aᵀ,  dw_q = B a,  dC += dw_q x_qᵀ,  dX[:, i<n] += q ds_i,  dX[:, n] += Cᵀ dw_q.
// Vectors are Mat views of one column (column(p, stride)); every sum runs over its index ascending.

// A vector v [rows] as a one-column matrix: v(r, ·) = p[r · stride].
template <class T>
LSA_HD_LOCAL Mat<T> column(const T* p, int stride = 1) {
  return {p, stride, 0};
}

// (A v)[r] = Σ_m A[r, m] v[m]: w_q = C x_q, q = Bᵀ w_q, dw_q = B a (A transposed where needed).
template <class T>
LSA_HD_LOCAL T matvec_entry(Mat<T> A, Mat<T> v, int inner, int r) {
  return product_entry(A, v, inner, r, 0);
}

// s_i = Σ_c q[c] Z[c, i] (the logit of source i against the query), and dh_i = Σ_r Z[r, i] dy[r]
// (rows = D) likewise: (Zᵀ v)[i] over the first `rows` rows.
template <class T>
LSA_HD_LOCAL T column_dot_entry(Mat<T> Z, Mat<T> v, int rows, int i) {
  return product_entry(Z.transposed(), v, rows, i, 0);
}

// y[r] = Σ_{i<n} Z[r, i] h[i] (Y's query column, M drops the query as a source), and a[c] = Σ_{i<n}
// Z[c, i] ds[i] likewise.
template <class T>
LSA_HD_LOCAL T source_sum_entry(Mat<T> Z, Mat<T> v, int n, int r) {
  return product_entry(Z, v, n, r, 0);
}

// TF after head s: tf + Σ_r V[d, r] y[r] (the first head starts from Z_ℓ[d, n])   [CCS (3)]
template <class T>
LSA_HD_LOCAL T query_label_step(T tf, Mat<T> V, Mat<T> y, int D, int d) {
  return row_combination_entry(tf, V, y, D, d, 0);
}

// dy[r] = g V[d, r]: the only nonzero row of Vᵀ dO, dO = g at [d, n].
template <class T>
LSA_HD_LOCAL T query_dy(T g, Mat<T> V, int d, int r) {
  return g * V(d, r);
}

// ---- the loss and the prediction sign (the package's conventions, SPEC 3.3) -------------------

// The loss ½·MSE of the prediction ŷ = −TF of y_q: f = (1/(2B)) Σ_b r_b², r = TF + y_q = y_q − ŷ
// (half of CCS (5), whose loss has no ½; ZFB (3.7)'s convention).
LSA_HD_LOCAL double loss_residual(double tf, double y_q) { return tf + y_q; }
// f from Σ_b r_b² (any summation order a backend picks).
LSA_HD_LOCAL double loss_value(double sum_of_squares, long long batch) { return 0.5 * sum_of_squares / double(batch); }
// Seed of the loss's backward: ∂f/∂TF_b = r_b / B.
LSA_HD_LOCAL double loss_seed(double residual, long long batch) { return residual * (1.0 / double(batch)); }

// What the per-prompt value y of the query backward (loss_and_grad's kernels) holds: the label
// y_q (the loss above), or the upstream gradient ∂ℓ/∂ŷ_b of the predictions ŷ = −TF (4)
// (predict_vjp: the gradients of Σ_b y_b ŷ_b, no loss).
enum class QuerySeed { labels, prediction_gradient };
// Prompt b's residual, whose square the caller adds to the loss sum (`sum += r * r`, one expression
// that a backend may fuse): r_b = TF_b + y_b (labels), or 0 (prediction_gradient: nothing added).
LSA_HD_LOCAL double query_residual(QuerySeed what, double tf, double y) {
  return what == QuerySeed::labels ? loss_residual(tf, y) : 0.0;
}
// The seed ∂ℓ/∂TF_b at Z_L[d, n] from that residual: r_b / B (labels), or −y_b
// (prediction_gradient).
LSA_HD_LOCAL double query_seed(QuerySeed what, double residual, double y, long long batch) {
  return what == QuerySeed::labels ? loss_seed(residual, batch) : -y;
}

// One value of the `predictions` output: TF_ℓ, or ŷ_ℓ = −TF_ℓ (kernel_attention.hpp).
template <class T>
LSA_HD_LOCAL T prediction(T tf, PredictionOutput what) {
  return what == PredictionOutput::tf ? tf : -tf;
}

// Where prompt b's values start in the `predictions` output ([B, L+1], or [B] for
// PredictionOutput::y_hat_final, which keeps ℓ = L alone), and where layer ℓ's goes from there
// (-1: not written).
LSA_HD_LOCAL long long prediction_row(PredictionOutput what, long long b, int L) {
  return what == PredictionOutput::y_hat_final ? b : b * (L + 1);
}
// Values of the whole `predictions` output of B prompts (one past the last prompt's row): what a
// host output staged through the device holds and is copied back.
LSA_HD_LOCAL long long prediction_count(PredictionOutput what, long long B, int L) {
  return prediction_row(what, B, L);
}
LSA_HD_LOCAL int prediction_column(PredictionOutput what, int l, int L) {
  if (what == PredictionOutput::y_hat_final) return l == L ? 0 : -1;
  return l;
}

}  // namespace lsa_native::recipe
