// CPU kernel attention [CCS (3), (5), (12)] per prompt, included once per instruction set with
// LSA_ISA_NS defined: forward with saved activations, reverse-mode backward. Matrices are
// row-major with the token axis contiguous, so every inner loop is an axpy or a dot product along
// the n+1 tokens; activations run on whole rows (softmax column-wise via row-wise max/sum).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <type_traits>

#include "cpu/kernel_attention_kernels.hpp"
#include "cpu/simd.hpp"
#include "cpu/small_matrix_simd.hpp"

#ifndef LSA_ISA_NS
#error "define LSA_ISA_NS before including kernel_attention_kernels.inl"
#endif

namespace lsa_native::cpu::LSA_ISA_NS {
namespace {

using simd::load;
using simd::store;
using simd::Vec;

template <class T>
inline void axpy(T* __restrict__ y, T a, const T* __restrict__ x, index_t n) {  // y += a x
  for (index_t j = 0; j < n; ++j) y[j] += a * x[j];
}
// Rows of tokens combined, out = [out +] coef · src (the kit's tiles, small_matrix_simd.hpp):
// `rows` rows of out [rows, ld], the coefficient (r, k) at coef[r·crs + k·cks], src [count, ld].
template <class T>
inline void combine_rows(T* out, bool accumulate, const T* coef, index_t crs, index_t cks,
                         const T* src, index_t rows, index_t count, index_t ld) {
  small::combine_rows(out, ld, accumulate ? out : nullptr, coef, crs, cks, src, ld, rows, count, ld);
}

// C [ra, rb] = A B^T for A [ra, ld], B [rb, ld] (ld a multiple of the vector width): dot
// products along the tokens, by the kit's token-axis tiles (small_matrix_simd.hpp).
template <class T>
void products_bt(const T* A, index_t ra, const T* B, index_t rb, index_t ld, T* C) {
  small::token_products(A, ld, ra, B, ld, rb, ld, T(1), C, rb);
}

// The elementwise part of h̃ on one vector: the recipe's value function of the table entry
// (recipe::activation::<name>_value, which the compiler specializes per entry); exp and softmax go
// through the vectorized exp (simd::exp) instead. A column-wise entry receives S minus its column
// max (the recipe's shift, hence shift 0 here; values ≤ 0, so its exp skips the overflow test) and
// is normalized per column by activation_rows. A new activation needs no code in this file.
template <class T, Activation kActivation>
inline Vec<T> activation_vector(Vec<T> x) {
  if constexpr (kActivation == Activation::exp || kActivation == Activation::softmax) {
    constexpr bool kShifted = recipe::column_wise(kActivation);
    return simd::exp</*kMayOverflow=*/!kShifted>(x);  // e^s, or e^(s − shift) ≤ 1
  } else {
    for (index_t k = 0; k < simd::kLanes<T>; ++k) x[k] = recipe::activation_value(kActivation, x[k], T(0));
    return x;
  }
}

// Rows of vectors in flight at once in the exp loops below: four independent exp polynomials
// (a Horner chain of ~15 dependent operations each) overlap in the FMA pipes.
constexpr index_t kExpRows = 4;

// activation_vector on `count` values in place (the tail through a zero-padded vector); the exp
// entries kExpRows vectors at a time, the others as the scalar recipe loop (which vectorizes).
template <class T, Activation kActivation>
void activation_values(T* x, index_t count) {
  constexpr index_t L = simd::kLanes<T>;
  if constexpr (kActivation == Activation::exp || kActivation == Activation::softmax) {
    index_t i = 0;
    for (; i + kExpRows * L <= count; i += kExpRows * L) {
      Vec<T> v[kExpRows];
      for (index_t k = 0; k < kExpRows; ++k) v[k] = load(x + i + k * L);
      for (index_t k = 0; k < kExpRows; ++k) store(x + i + k * L, activation_vector<T, kActivation>(v[k]));
    }
    for (; i + L <= count; i += L) store(x + i, activation_vector<T, kActivation>(load(x + i)));
    if (i < count) {
      T buf[L] = {};
      std::copy(x + i, x + count, buf);
      store(buf, activation_vector<T, kActivation>(load(buf)));
      std::copy(buf, buf + (count - i), x + i);
    }
  } else {
    for (index_t k = 0; k < count; ++k) x[k] = recipe::activation_value(kActivation, x[k], T(0));
  }
}

// The column blocks (kLanes columns each) of a row of Tt values, Tt a whole number of vectors,
// kMaxBlocks at a time, then halving: f(std::integral_constant<index_t, NB>{}, c0) handles the NB
// blocks from column c0. A column reduction (max, sum, Σ H dH) is a chain of n dependent vector
// operations; NB independent chains hide its latency (at n = 30 in float32: 31 blocks a row in the
// lane path, 4 a row per prompt).
template <index_t kMaxBlocks, class T, class F>
inline void for_column_blocks(index_t Tt, F&& f, index_t c0 = 0) {
  constexpr index_t L = simd::kLanes<T>;
  for (; c0 + kMaxBlocks * L <= Tt; c0 += kMaxBlocks * L) f(std::integral_constant<index_t, kMaxBlocks>{}, c0);
  if constexpr (kMaxBlocks > 1) for_column_blocks<kMaxBlocks / 2, T>(Tt, f, c0);
}

// A column-wise activation on S [n, Tt] with Tt a whole number of vectors, NB blocks of kLanes
// columns at a time, fused: the column max, then the shifted values of several rows in registers
// and the column sum (in row order) in the same pass, then the scale. The same operations in the
// same order per value as activation_rows' passes (hence the same results); the blocks' n rows
// stay in L1 between the passes.
template <class T, Activation kActivation>
void columnwise_blocks(T* S, index_t n, index_t Tt) {
  constexpr index_t L = simd::kLanes<T>;
  for_column_blocks<4, T>(Tt, [&](auto blocks_tag, index_t c0) {
    constexpr index_t NB = decltype(blocks_tag)::value;
    constexpr index_t R = NB < kExpRows ? kExpRows / NB : 1;  // rows a step: ≥ kExpRows exps in flight
    auto at = [&](index_t i, index_t b) { return S + i * Tt + c0 + b * L; };
    Vec<T> shift[NB], sum[NB];
    for (index_t b = 0; b < NB; ++b) shift[b] = load(at(0, b));
    for (index_t i = 1; i < n; ++i)
      for (index_t b = 0; b < NB; ++b) {
        const Vec<T> x = load(at(i, b));
        shift[b] = shift[b] < x ? x : shift[b];  // std::max per lane
      }
    for (index_t b = 0; b < NB; ++b) sum[b] = simd::zero<T>();
    index_t i = 0;
    for (; i + R <= n; i += R) {
      Vec<T> v[R][NB];
      for (index_t k = 0; k < R; ++k)
        for (index_t b = 0; b < NB; ++b) v[k][b] = activation_vector<T, kActivation>(load(at(i + k, b)) - shift[b]);
      for (index_t k = 0; k < R; ++k)
        for (index_t b = 0; b < NB; ++b) {
          store(at(i + k, b), v[k][b]);
          sum[b] += v[k][b];
        }
    }
    for (; i < n; ++i)
      for (index_t b = 0; b < NB; ++b) {
        const Vec<T> v = activation_vector<T, kActivation>(load(at(i, b)) - shift[b]);
        store(at(i, b), v);
        sum[b] += v;
      }
    Vec<T> scale[NB];
    for (index_t b = 0; b < NB; ++b) scale[b] = T(1) / sum[b];
    for (index_t r = 0; r < n; ++r)
      for (index_t b = 0; b < NB; ++b) store(at(r, b), load(at(r, b)) * scale[b]);
  });
}

// H = h̃(S) in place on S [n, T] (sources i < n as rows, targets j as columns)   [CCS (12)];
// T = 1 gives one target column stored contiguously. A column-wise activation is shifted by the
// column max (large logits stay finite) before its values and divided by the column sum after.
template <class T, Activation kActivation, bool kColumnWise>
void activation_rows(T* S, index_t n, index_t Tt, T* col) {
  if constexpr (kColumnWise) {
    if (Tt % simd::kLanes<T> == 0) return columnwise_blocks<T, kActivation>(S, n, Tt);
    std::copy(S, S + Tt, col);
    for (index_t i = 1; i < n; ++i)
      for (index_t j = 0; j < Tt; ++j) col[j] = std::max(col[j], S[i * Tt + j]);
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < Tt; ++j) S[i * Tt + j] -= col[j];
  }
  activation_values<T, kActivation>(S, n * Tt);
  if constexpr (kColumnWise) {
    std::fill(col, col + Tt, T(0));
    for (index_t i = 0; i < n; ++i) axpy(col, T(1), S + i * Tt, Tt);
    for (index_t j = 0; j < Tt; ++j) col[j] = T(1) / col[j];
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < Tt; ++j) S[i * Tt + j] *= col[j];
  }
}

// h̃ dispatched from the activation table (LSA_NATIVE_ACTIVATIONS): one specialized loop per entry.
template <class T>
void activation_forward(Activation a, T* S, index_t n, index_t Tt, T* col) {
  switch (a) {
#define LSA_NATIVE_ACTIVATION_CASE(name, column_wise)                         \
  case Activation::name:                                                      \
    activation_rows<T, Activation::name, column_wise>(S, n, Tt, col);         \
    break;
    LSA_NATIVE_ACTIVATIONS(LSA_NATIVE_ACTIVATION_CASE)
#undef LSA_NATIVE_ACTIVATION_CASE
  }
}

// dS from dH in place, given H = h̃(S): the recipe's gradient of each activation (ka_recipe.hpp),
// with Σ_i H_ij dH_ij per column first for the column-wise ones (softmax). One loop per entry of
// the activation table, so that each loop is specialized and vectorizes. A column-wise entry on
// rows of whole vectors runs up to 8 blocks of kLanes columns at once (for_column_blocks: each
// block's column sum in a register, the rows still in L1 for the second pass): the same operations
// in the same order per value as the scalar loops.
template <class T>
void activation_backward(Activation a, const T* H, T* dH, index_t n, index_t Tt, T* col) {
  auto apply = [&](auto column_wise_tag, auto gradient) {
    constexpr bool kColumnWise = decltype(column_wise_tag)::value;
    if constexpr (kColumnWise) {
      if (Tt % simd::kLanes<T> == 0) {
        for_column_blocks<8, T>(Tt, [&](auto blocks_tag, index_t c0) {
          constexpr index_t NB = decltype(blocks_tag)::value;
          auto at = [&](index_t i, index_t b) { return i * Tt + c0 + b * simd::kLanes<T>; };
          Vec<T> dot[NB];
          for (index_t b = 0; b < NB; ++b) dot[b] = simd::zero<T>();
          for (index_t i = 0; i < n; ++i)
            for (index_t b = 0; b < NB; ++b) dot[b] += load(H + at(i, b)) * load(dH + at(i, b));
          for (index_t i = 0; i < n; ++i)
            for (index_t b = 0; b < NB; ++b)
              store(dH + at(i, b), gradient(load(H + at(i, b)), load(dH + at(i, b)), dot[b]));
        });
        return;
      }
      std::fill(col, col + Tt, T(0));
      for (index_t i = 0; i < n; ++i)
        for (index_t j = 0; j < Tt; ++j) col[j] += H[i * Tt + j] * dH[i * Tt + j];
    }
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < Tt; ++j) dH[i * Tt + j] = gradient(H[i * Tt + j], dH[i * Tt + j], col[j]);
  };
  switch (a) {
#define LSA_NATIVE_ACTIVATION_CASE(name, column_wise)                                          \
  case Activation::name:                                                                       \
    apply(std::bool_constant<column_wise>{},                                                   \
          [](auto h, auto dh, auto dot) { return recipe::activation::name##_gradient(h, dh, dot); }); \
    break;
    LSA_NATIVE_ACTIVATIONS(LSA_NATIVE_ACTIVATION_CASE)
#undef LSA_NATIVE_ACTIVATION_CASE
  }
}

// Per-prompt state: Z_ℓ for ℓ = 0..L [D, T]; per (ℓ, s) the saved U, W [d, T], H [n, T] and
// Y = Z_ℓ M H [D, T] — the "context" of the forward, ka_context_size(shape, lanes) values laid out
// [Z | U | W | H | Y] — and backward scratch. The context lives in the workspace's own buffer or,
// with use_context, in a caller's slice (a forward that saves it, a VJP that reuses it). Rows are
// padded from n+1 tokens to Tt = a whole number of vectors (short rows would otherwise spend most
// of their time in scalar tails); the padding stays exactly zero: stage() zeroes it in Z_0 and
// H's padding columns are zeroed after every activation.
template <class T>
struct Workspace {
  index_t d, n, D, cols, Tt, L, H;
  simd::UnitVector<T> own, dZ, dZprev, dY, dH, dU, dW, col, prod;
  // The query-column layer (forward_query_layer), per head s: w_q = C x_q and q = Bᵀ w_q [d],
  // h = h̃(S[:, n]) [Tt, zero from n on], y = Z M h [D]; and its backward's scratch.
  simd::UnitVector<T> q_wq, q_q, q_h, q_y, q_dy, q_dh, q_a, q_dwq;
  T* state;
  explicit Workspace(const KernelAttentionShape& s)
      : d(s.dim), n(s.context), D(s.dim + 1), cols(s.context + 1),
        Tt(ka_padded_tokens(s, simd::kLanes<T>)), L(s.layers), H(s.heads),
        own(static_cast<size_t>(ka_context_size(s, simd::kLanes<T>))),
        dZ(static_cast<size_t>(D * Tt)), dZprev(dZ.size()), dY(dZ.size()),
        dH(static_cast<size_t>(n * Tt)), dU(static_cast<size_t>(d * Tt)), dW(dU.size()),
        col(static_cast<size_t>(Tt)), prod(static_cast<size_t>(D * std::max(D, n))),
        q_wq(static_cast<size_t>(H * d)), q_q(q_wq.size()), q_h(static_cast<size_t>(H * Tt)),
        q_y(static_cast<size_t>(H * D)), q_dy(static_cast<size_t>(D)), q_dh(static_cast<size_t>(Tt)),
        q_a(static_cast<size_t>(d)), q_dwq(static_cast<size_t>(d)), state(own.data()) {}
  // Point the context at a caller's slice of ka_context_size values (nullptr: the own buffer).
  // The backward only reads the context, so a const slice may back it there.
  void use_context(T* slice) { state = slice ? slice : own.data(); }
  void use_context(const T* slice) { use_context(const_cast<T*>(slice)); }
  recipe::KaContext layout = recipe::KaContext::make(int(d), int(n), int(L), int(H), int(simd::kLanes<T>));
  static_assert(simd::kLanes<T> == recipe::kContextLanes<T>, "context rows: one padding for CPU and CUDA");
  T* z(index_t l) { return state + layout.z(int(l)); }
  T* u(index_t l, index_t s) { return state + layout.u(int(l), int(s)); }
  T* w(index_t l, index_t s) { return state + layout.w(int(l), int(s)); }
  T* h(index_t l, index_t s) { return state + layout.h(int(l), int(s)); }
  T* y(index_t l, index_t s) { return state + layout.y(int(l), int(s)); }
  // Unpadded [D, n+1] ↔ padded [D, Tt] copies (stage zeroes the padding).
  void stage(const T* src, T* dst) const {
    for (index_t r = 0; r < D; ++r) {
      std::copy(src + r * cols, src + (r + 1) * cols, dst + r * Tt);
      std::fill(dst + r * Tt + cols, dst + (r + 1) * Tt, T(0));
    }
  }
  // Copies out and returns Σ (x − x) over the copied values: NaN iff one was non-finite.
  T unstage(const T* src, T* dst) const {
    T poison = T(0);
    for (index_t r = 0; r < D; ++r)
      for (index_t c = 0; c < cols; ++c) poison += detail::poison(dst[r * cols + c] = src[r * Tt + c]);
    return poison;
  }
  T query_label(index_t l) { return z(l)[d * Tt + n]; }
};

// Layer ℓ in full: Z_{ℓ+1} = Z_ℓ + Σ_s V_s Z_ℓ M h̃(S_s) with S_s = (B_s X)ᵀ (C_s X)   [CCS (3), (12)]
template <class T>
void forward_layer(Workspace<T>& w, index_t l, const T* V, const T* Bq, const T* Ck,
                   const Activation* acts) {
  const index_t d = w.d, n = w.n, D = w.D, Tt = w.Tt;
  const T* Z = w.z(l);
  T* Znext = w.z(l + 1);
  std::copy(Z, Z + D * Tt, Znext);  // residual
  for (index_t s = 0; s < w.H; ++s) {
    const index_t p = l * w.H + s;
    const T* Bm = Bq + p * d * d;
    const T* Cm = Ck + p * d * d;
    const T* Vm = V + p * D * D;
    T *U = w.u(l, s), *Wk = w.w(l, s), *Hs = w.h(l, s), *Y = w.y(l, s);
    // U = B X, W = C X  (X: the first d rows of Z)
    combine_rows(U, false, Bm, d, 1, Z, d, d, Tt);
    combine_rows(Wk, false, Cm, d, 1, Z, d, d, Tt);
    // S_ij = u_i · w_j for sources i < n (M masks the query as a source), then h̃   (12)
    combine_rows(Hs, false, U, 1, Tt, Wk, n, d, Tt);
    activation_forward(acts[s], Hs, n, Tt, w.col.data());
    for (index_t i = 0; i < n; ++i) std::fill(Hs + i * Tt + w.cols, Hs + (i + 1) * Tt, T(0));
    // Y = Z M h̃,  Z_{ℓ+1} += V Y   (3)
    combine_rows(Y, false, Z, Tt, 1, Hs, D, n, Tt);
    combine_rows(Znext, true, Vm, D, 1, Y, D, D, Tt);
  }
}

// Layer ℓ when only the query label TF = Z_{ℓ+1}[d, n] is needed (the last layer under the loss or
// the predictions): per head the query column alone, O(n·d + d²) instead of O(n²·d):
// w_q = C x_q, q = Bᵀ w_q, S[i, n] = u_i · w_q = x_i · q (i < n), h = h̃(S[:, n]), y = Z M h,
// TF = Z[d, n] + Σ_s (V_s y_s)[d]. Only Z_{ℓ+1}[d, n] is written; h, y, w_q, q are kept per head.
template <class T>
void forward_query_layer(Workspace<T>& w, index_t l, const T* V, const T* Bq, const T* Ck,
                         const Activation* acts) {
  const index_t d = w.d, n = w.n, D = w.D, Tt = w.Tt;
  const T* Z = w.z(l);
  T tf = Z[d * Tt + n];
  for (index_t s = 0; s < w.H; ++s) {
    const index_t p = l * w.H + s;
    const T* Bm = Bq + p * d * d;
    const T* Cm = Ck + p * d * d;
    const T* Vm = V + p * D * D;
    T *wq = w.q_wq.data() + s * d, *q = w.q_q.data() + s * d, *h = w.q_h.data() + s * Tt,
      *y = w.q_y.data() + s * D;
    for (index_t a = 0; a < d; ++a) {
      T acc = T(0);
      for (index_t c = 0; c < d; ++c) acc += Cm[a * d + c] * Z[c * Tt + n];
      wq[a] = acc;
    }
    for (index_t c = 0; c < d; ++c) {
      T acc = T(0);
      for (index_t a = 0; a < d; ++a) acc += Bm[a * d + c] * wq[a];
      q[c] = acc;
    }
    combine_rows(h, false, q, 0, 1, Z, 1, d, Tt);  // h[i] = x_i · q for every token
    activation_forward(acts[s], h, n, index_t(1), w.col.data());  // the sources i < n, one column
    std::fill(h + n, h + Tt, T(0));                                // M: the query is no source
    products_bt(Z, D, h, 1, Tt, y);                                // y[r] = Σ_{i<n} Z[r, i] h[i]
    for (index_t r = 0; r < D; ++r) tf += Vm[d * D + r] * y[r];
  }
  w.z(l + 1)[d * Tt + n] = tf;
}

// Z_1 .. Z_L from Z0; with query_only the last layer computes the query label alone.
template <class T>
void forward_prompt(Workspace<T>& w, const T* Z0, const T* V, const T* Bq, const T* Ck,
                    const Activation* acts, bool query_only = false) {
  w.stage(Z0, w.z(0));
  const index_t full = query_only ? w.L - 1 : w.L;
  for (index_t l = 0; l < full; ++l) forward_layer(w, l, V, Bq, Ck, acts);
  if (query_only) forward_query_layer(w, w.L - 1, V, Bq, Ck, acts);
}

// Layer ℓ backward in full: from ∂ℓ/∂Z_{ℓ+1} in w.dZ to ∂ℓ/∂Z_ℓ (left in w.dZ); parameter
// gradients accumulate into gV, gB, gC. Without input_grad (layer 0 when no ∂ℓ/∂Z_0 is asked for)
// the terms of ∂ℓ/∂Z_ℓ are skipped (dY Hᵀ, Bᵀ dU + Cᵀ dW: 28% of the layer's backward FMAs at the
// CCS size, 9% of loss_and_grad's) and w.dZ is left as it was; the parameter gradients are the same,
// bit for bit.
template <class T>
void backward_layer(Workspace<T>& w, index_t l, const T* V, const T* Bq, const T* Ck,
                    const Activation* acts, double* gV, double* gB, double* gC, bool input_grad) {
  const index_t d = w.d, n = w.n, D = w.D, Tt = w.Tt;
  const T* Z = w.z(l);
  const T* dO = w.dZ.data();  // ∂ℓ/∂Z_{ℓ+1}: every head's output receives it
  if (input_grad) std::copy(w.dZ.begin(), w.dZ.end(), w.dZprev.begin());  // residual
  T* dZp = w.dZprev.data();
  for (index_t s = 0; s < w.H; ++s) {
    const index_t p = l * w.H + s;
    const T* Bm = Bq + p * d * d;
    const T* Cm = Ck + p * d * d;
    const T* Vm = V + p * D * D;
    const T *U = w.u(l, s), *Wk = w.w(l, s), *Hs = w.h(l, s), *Y = w.y(l, s);
    T *dY = w.dY.data(), *dH = w.dH.data(), *dU = w.dU.data(), *dW = w.dW.data();
    T* prod = w.prod.data();
    // dV += dO Y^T;  dY = V^T dO
    products_bt(dO, D, Y, D, Tt, prod);
    for (index_t k = 0; k < D * D; ++k) gV[p * D * D + k] += double(prod[k]);
    combine_rows(dY, false, Vm, 1, D, dO, D, D, Tt);
    // Y = Z M H:  dZ[:, i<n] += dY H^T;  dH = (Z M)^T dY
    if (input_grad) {
      products_bt(dY, D, Hs, n, Tt, prod);
      for (index_t r = 0; r < D; ++r)
        for (index_t i = 0; i < n; ++i) dZp[r * Tt + i] += prod[r * n + i];
    }
    combine_rows(dH, false, Z, 1, Tt, dY, n, D, Tt);
    activation_backward(acts[s], Hs, dH, n, Tt, w.col.data());  // dH becomes dS
    // S = U^T W:  dU[:, i] = W dS[i, :]^T for i < n (0 for the query), dW = U[:, :n] dS
    std::fill(dU, dU + d * Tt, T(0));
    products_bt(Wk, d, dH, n, Tt, prod);
    for (index_t a = 0; a < d; ++a) std::copy(prod + a * n, prod + (a + 1) * n, dU + a * Tt);
    combine_rows(dW, false, U, Tt, 1, dH, d, n, Tt);
    // U = B X, W = C X:  dB += dU X^T, dC += dW X^T, dX += B^T dU + C^T dW
    products_bt(dU, d, Z, d, Tt, prod);
    for (index_t k = 0; k < d * d; ++k) gB[p * d * d + k] += double(prod[k]);
    products_bt(dW, d, Z, d, Tt, prod);
    for (index_t k = 0; k < d * d; ++k) gC[p * d * d + k] += double(prod[k]);
    if (!input_grad) continue;
    combine_rows(dZp, true, Bm, 1, d, dU, d, d, Tt);
    combine_rows(dZp, true, Cm, 1, d, dW, d, d, Tt);
  }
  if (input_grad) w.dZ.swap(w.dZprev);
}

// The backward of forward_query_layer: ∂ℓ/∂Z_{ℓ+1} is g at [d, n] alone (the loss seed), so per head
// dV[d, :] += g y, dy = g V[d, :], dZ[:, i<n] += dy h_i, dh_i = (Z M)ᵀ dy, ds = h̃'(dh),
// a = Σ_{i<n} ds_i x_i, dB += w_q aᵀ, dw_q = B a, dC += dw_q x_qᵀ, dX[:, i<n] += q ds_i,
// dX[:, n] += Cᵀ dw_q — O(n·d + d²). Leaves ∂ℓ/∂Z_ℓ (dense) in w.dZ.
template <class T>
void backward_query_layer(Workspace<T>& w, index_t l, const T* V, const T* Bq, const T* Ck,
                          const Activation* acts, double* gV, double* gB, double* gC) {
  const index_t d = w.d, n = w.n, D = w.D, Tt = w.Tt;
  const T* Z = w.z(l);
  const T g = w.dZ[d * Tt + n];
  std::copy(w.dZ.begin(), w.dZ.end(), w.dZprev.begin());  // residual
  T* dZp = w.dZprev.data();
  T *dy = w.q_dy.data(), *dh = w.q_dh.data(), *a = w.q_a.data(), *dwq = w.q_dwq.data();
  for (index_t s = 0; s < w.H; ++s) {
    const index_t p = l * w.H + s;
    const T* Bm = Bq + p * d * d;
    const T* Cm = Ck + p * d * d;
    const T* Vm = V + p * D * D;
    const T *wq = w.q_wq.data() + s * d, *q = w.q_q.data() + s * d, *h = w.q_h.data() + s * Tt,
            *y = w.q_y.data() + s * D;
    for (index_t r = 0; r < D; ++r) {
      gV[p * D * D + d * D + r] += double(g * y[r]);
      dy[r] = g * Vm[d * D + r];
    }
    for (index_t r = 0; r < D; ++r) axpy(dZp + r * Tt, dy[r], h, Tt);  // h is 0 from n on
    combine_rows(dh, false, dy, 0, 1, Z, 1, D, Tt);
    activation_backward(acts[s], h, dh, n, index_t(1), w.col.data());  // dh becomes ds
    std::fill(dh + n, dh + Tt, T(0));
    products_bt(Z, d, dh, 1, Tt, a);  // a[c] = Σ_{i<n} Z[c, i] ds[i]
    for (index_t r = 0; r < d; ++r) {
      T acc = T(0);
      for (index_t c = 0; c < d; ++c) {
        gB[p * d * d + r * d + c] += double(wq[r] * a[c]);
        acc += Bm[r * d + c] * a[c];
      }
      dwq[r] = acc;
    }
    for (index_t r = 0; r < d; ++r)
      for (index_t c = 0; c < d; ++c) gC[p * d * d + r * d + c] += double(dwq[r] * Z[c * Tt + n]);
    for (index_t c = 0; c < d; ++c) {
      axpy(dZp + c * Tt, q[c], dh, Tt);
      T acc = T(0);
      for (index_t r = 0; r < d; ++r) acc += Cm[r * d + c] * dwq[r];
      dZp[c * Tt + n] += acc;
    }
  }
  w.dZ.swap(w.dZprev);
}

// From ∂ℓ/∂Z_L in w.dZ to ∂ℓ/∂Z_0 (left in w.dZ with input_grad; else w.dZ holds ∂ℓ/∂Z_1 when
// L > 1); parameter gradients accumulate into gV, gB, gC. query_only: the forward ran
// forward_query_layer last and w.dZ is nonzero at [d, n] alone.
template <class T>
void backward_prompt(Workspace<T>& w, const T* V, const T* Bq, const T* Ck, const Activation* acts,
                     double* gV, double* gB, double* gC, bool query_only, bool input_grad) {
  index_t l = w.L - 1;
  if (query_only) backward_query_layer(w, l--, V, Bq, Ck, acts, gV, gB, gC);
  for (; l >= 0; --l) backward_layer(w, l, V, Bq, Ck, acts, gV, gB, gC, input_grad || l > 0);
}

// TF_0..TF_L (or ŷ_ℓ = −TF_ℓ, recipe::prediction; or ŷ_L alone, recipe::prediction_column) of
// prompt b; returns the poison.
template <class T>
T store_predictions(Workspace<T>& w, T* predictions, index_t b, PredictionOutput what) {
  T poison = T(0);
  T* row = predictions + recipe::prediction_row(what, b, int(w.L));
  for (index_t l = 0; l <= w.L; ++l) {
    const int at = recipe::prediction_column(what, int(l), int(w.L));
    if (at >= 0) poison += detail::poison(row[at] = recipe::prediction(w.query_label(l), what));
  }
  return poison;
}

template <class T>
bool forward_range(const KernelAttentionShape& sh, const T* Z0, const T* V, const T* Bq,
                   const T* Ck, const Activation* acts, T* Z_out, T* predictions, T* context,
                   PredictionOutput prediction_output, index_t b0, index_t b1) {
  const index_t per = (sh.dim + 1) * (sh.context + 1);
  const index_t ctx = ka_context_size(sh, simd::kLanes<T>);
  Workspace<T> w(sh);
  T poison = T(0);
  // Predictions alone (no Z_L, no saved context) need the last layer's query column only.
  const bool query_only = Z_out == nullptr && context == nullptr;
  for (index_t b = b0; b < b1; ++b) {
    w.use_context(context ? context + b * ctx : nullptr);
    forward_prompt(w, Z0 + b * per, V, Bq, Ck, acts, query_only);
    if (Z_out) poison += w.unstage(w.z(sh.layers), Z_out + b * per);
    if (predictions) poison += store_predictions(w, predictions, b, prediction_output);
  }
  return detail::poison_clear(poison);
}

// ---- loss_and_grad with prompts in the vector lanes ----------------------------------------------
// At the CCS size (n = 30, d = 5) every dot product of the per-prompt path is a few FMAs along 32
// tokens, so its per-block setup and horizontal sums cost as much as the multiplies. Here a group of
// P = kGroupLanes<T> prompts runs at once: every scalar of one prompt's math is one lane of a
// vector (lane p = prompt b + p), so each product above becomes P independent products in one FMA,
// with no horizontal sums and no token padding. A lane matrix M [rows, cols] stores the vector of
// entry (r, j) at M + (r·rs + j·cs) (in values of T; rs, cs multiples of P): for the prompt-shaped
// ones [·, n+1] rs = ld = (n+1)·P and cs = P. The formulas and their order per prompt are those of
// forward_layer / forward_query_layer / backward_layer / backward_query_layer (recipe, ka_recipe.hpp);
// the activations run on the flat rows through the same activation_forward / activation_backward
// (column-wise over the sources i per target j and lane: a lane is one prompt). Parameter gradients:
// per prompt in T (one lane), summed over prompts in double, as the per-prompt path does. The saved
// context is not used (loss_grad saves none). The remainder of a range (fewer than P prompts) runs
// the per-prompt path. LSA_NATIVE_KA_LANES=0 in the environment turns this path off (before/after
// measurements in one build).

#if defined(__AVX512F__)
template <class T>
struct GroupVecTraits;  // 64-byte vectors: 16 float / 8 double lanes
template <>
struct GroupVecTraits<float> {
  typedef float type __attribute__((vector_size(64)));
};
template <>
struct GroupVecTraits<double> {
  typedef double type __attribute__((vector_size(64)));
};
template <class T>
using GroupVec = typename GroupVecTraits<T>::type;
#else
template <class T>
using GroupVec = Vec<T>;  // 8 float / 4 double lanes (pairs of SSE registers on the baseline)
#endif
template <class T>
constexpr index_t kGroupLanes = index_t(sizeof(GroupVec<T>) / sizeof(T));

template <class T>
inline GroupVec<T> gload(const T* p) {
  GroupVec<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
inline void gstore(T* p, GroupVec<T> v) {
  std::memcpy(p, &v, sizeof v);
}

// C[m, k] (+)= Σ_{q < depth} A[m, q] B[q, k] for the tile rows m0.., columns k0.. of lane matrices
// (strides in values of T): RM·RK accumulators (12 for 3 x 4: 7 loads per 12 FMAs).
template <class T, int RM, int RK, bool kAccumulate>
__attribute__((always_inline)) inline void lane_tile(T* C, index_t crs, index_t ccs, const T* A, index_t ars,
                      index_t aqs, const T* B, index_t bqs, index_t bks, index_t depth, index_t m0,
                      index_t k0) {
  GroupVec<T> acc[RM][RK];
  for (int i = 0; i < RM; ++i)
    for (int k = 0; k < RK; ++k)
      acc[i][k] = kAccumulate ? gload(C + (m0 + i) * crs + (k0 + k) * ccs) : GroupVec<T>{};
  for (index_t q = 0; q < depth; ++q) {
    GroupVec<T> a[RM];
    for (int i = 0; i < RM; ++i) a[i] = gload(A + (m0 + i) * ars + q * aqs);
    for (int k = 0; k < RK; ++k) {
      const GroupVec<T> b = gload(B + q * bqs + (k0 + k) * bks);
      for (int i = 0; i < RM; ++i) acc[i][k] += a[i] * b;
    }
  }
  for (int i = 0; i < RM; ++i)
    for (int k = 0; k < RK; ++k) gstore(C + (m0 + i) * crs + (k0 + k) * ccs, acc[i][k]);
}

// The lane product C [m, k] (+)= A [m, depth] · B [depth, k] by tiles of 3 x 4 and their tails
// (the tiles inlined: at the depths 5-6 of S and dH a call's setup costs as much as the FMAs).
template <class T, bool kAccumulate>
void lane_products_(T* C, index_t crs, index_t ccs, const T* A, index_t ars, index_t aqs,
                    const T* B, index_t bqs, index_t bks, index_t m, index_t k, index_t depth) {
  auto row_block = [&](auto rm_tag, index_t m0) {
    constexpr int RM = decltype(rm_tag)::value;
    auto tile = [&](auto rk_tag, index_t k0) {
      lane_tile<T, RM, decltype(rk_tag)::value, kAccumulate>(C, crs, ccs, A, ars, aqs, B, bqs, bks,
                                                             depth, m0, k0);
    };
    using std::integral_constant;
    index_t k0 = 0;
    for (; k0 + 4 <= k; k0 += 4) tile(integral_constant<int, 4>{}, k0);
    switch (k - k0) {
      case 3: tile(integral_constant<int, 3>{}, k0); break;
      case 2: tile(integral_constant<int, 2>{}, k0); break;
      case 1: tile(integral_constant<int, 1>{}, k0); break;
      default: break;
    }
  };
  using std::integral_constant;
  index_t m0 = 0;
  for (; m0 + 3 <= m; m0 += 3) row_block(integral_constant<int, 3>{}, m0);
  if (m - m0 == 2) row_block(integral_constant<int, 2>{}, m0);
  else if (m - m0 == 1) row_block(integral_constant<int, 1>{}, m0);
}
template <class T>
void lane_products(T* C, index_t crs, index_t ccs, bool accumulate, const T* A, index_t ars,
                   index_t aqs, const T* B, index_t bqs, index_t bks, index_t m, index_t k,
                   index_t depth) {
  if (accumulate) lane_products_<T, true>(C, crs, ccs, A, ars, aqs, B, bqs, bks, m, k, depth);
  else lane_products_<T, false>(C, crs, ccs, A, ars, aqs, B, bqs, bks, m, k, depth);
}

// One group's state, every array a lane matrix of P-wide vectors: Z_ℓ [D, n+1] for ℓ = 0..L−1 and
// per (ℓ, s) of the full layers U, W [d, n+1], H [n, n+1], Y [D, n+1] (layout z | u | w | h | y like
// recipe::KaContext, unpadded); the query layer's w_q, q [d], h [n], y [D] per head; the backward's
// scratch; gradient lanes [slots, P] in double.
template <class T>
struct LaneWorkspace {
  static constexpr index_t P = kGroupLanes<T>;
  index_t d, n, D, cols, ld, L, H, nslots;
  simd::UnitVector<T> zs, us, ws, hs, ys, dZ, dZprev, dY, dH, dU, dW, col, prod;
  simd::UnitVector<T> q_wq, q_q, q_h, q_y, q_dy, q_dh, q_a, q_dwq;
  simd::UnitVector<double> grad;  // [ka_partial_size − 1, P]: per-lane sums of the parameter gradients
  explicit LaneWorkspace(const KernelAttentionShape& s)
      : d(s.dim), n(s.context), D(s.dim + 1), cols(s.context + 1), ld((s.context + 1) * P),
        L(s.layers), H(s.heads), nslots(ka_partial_size(s) - 1),
        zs(size_t((L + 1) * D * ld)), us(size_t(L * H * d * ld)), ws(us.size()),
        hs(size_t(L * H * n * ld)), ys(size_t(L * H * D * ld)), dZ(size_t(D * ld)),
        dZprev(dZ.size()), dY(dZ.size()), dH(size_t(n * ld)), dU(size_t(d * ld)), dW(dU.size()),
        col(size_t(ld)), prod(size_t(D * D * P)), q_wq(size_t(H * d * P)), q_q(q_wq.size()),
        q_h(size_t(H * n * P)), q_y(size_t(H * D * P)), q_dy(size_t(D * P)), q_dh(size_t(n * P)),
        q_a(size_t(d * P)), q_dwq(size_t(d * P)), grad(size_t(nslots * P), 0.0) {}
  T* z(index_t l) { return zs.data() + l * D * ld; }
  T* u(index_t l, index_t s) { return us.data() + (l * H + s) * d * ld; }
  T* w(index_t l, index_t s) { return ws.data() + (l * H + s) * d * ld; }
  T* h(index_t l, index_t s) { return hs.data() + (l * H + s) * n * ld; }
  T* y(index_t l, index_t s) { return ys.data() + (l * H + s) * D * ld; }
  // The P prompts from b into lane matrix Z_0 (prompt b + p in lane p).
  // Where P is the vector width (every table but AVX-512's 16 / 8 lanes), kLanes values of the P
  // prompts at a time as a block transposed by simd::transpose; the rest value by value.
  void interleave(const T* Z0, index_t b) {
    const index_t per = D * cols;
    T* z0 = z(0);
    index_t e0 = 0;
    if constexpr (P == simd::kLanes<T>) {
      for (; e0 + P <= per; e0 += P) {
        Vec<T> block[P];
        for (index_t p = 0; p < P; ++p) block[p] = load(Z0 + (b + p) * per + e0);
        simd::transpose(block);  // block[k] lane p = prompt p's value e0 + k
        for (index_t k = 0; k < P; ++k) store(z0 + (e0 + k) * P, block[k]);
      }
    }
    for (index_t p = 0; p < P; ++p) {
      const T* src = Z0 + (b + p) * per;
      for (index_t e = e0; e < per; ++e) z0[e * P + p] = src[e];
    }
  }
  // Lane matrix [D, n+1] back to P prompts from b; returns the poison (NaN iff one was non-finite).
  T deinterleave(const T* src, T* dst, index_t b) const {
    const index_t per = D * cols;
    T poison = T(0);
    for (index_t p = 0; p < P; ++p) {
      T* out = dst + (b + p) * per;
      for (index_t e = 0; e < per; ++e) poison += detail::poison(out[e] = src[e * P + p]);
    }
    return poison;
  }
  // grad[slot..slot+count, :] += vals [count, P] (one prompt's value per lane, in double).
  void add_gradient(index_t slot, const T* vals, index_t count) {
    double* g = grad.data() + slot * P;
    for (index_t k = 0; k < count * P; ++k) g[k] += double(vals[k]);
  }
};

// forward_layer on a group.
template <class T>
void lane_forward_layer(LaneWorkspace<T>& w, index_t l, const T* V, const T* Bq, const T* Ck,
                        const Activation* acts) {
  constexpr index_t P = LaneWorkspace<T>::P;
  const index_t d = w.d, n = w.n, D = w.D, cols = w.cols, ld = w.ld;
  const T* Z = w.z(l);
  T* Znext = w.z(l + 1);
  std::copy(Z, Z + D * ld, Znext);  // residual
  for (index_t s = 0; s < w.H; ++s) {
    const index_t p = l * w.H + s;
    T *U = w.u(l, s), *Wk = w.w(l, s), *Hs = w.h(l, s), *Y = w.y(l, s);
    combine_rows(U, false, Bq + p * d * d, d, 1, Z, d, d, ld);  // U = B X
    combine_rows(Wk, false, Ck + p * d * d, d, 1, Z, d, d, ld);  // W = C X
    // S[i, j] = Σ_a U[a, i] W[a, j] (i < n), then h̃ column-wise per (j, lane)   (12)
    lane_products(Hs, ld, P, false, U, P, ld, Wk, ld, P, n, cols, d);
    activation_forward(acts[s], Hs, n, ld, w.col.data());
    // Y[r, j] = Σ_{i<n} Z[r, i] H[i, j];  Z_{ℓ+1} += V Y   (3)
    lane_products(Y, ld, P, false, Z, ld, P, Hs, ld, P, D, cols, n);
    combine_rows(Znext, true, V + p * D * D, D, 1, Y, D, D, ld);
  }
}

// forward_query_layer on a group: returns TF = Z_{ℓ+1}[d, n] per lane (written there too).
template <class T>
void lane_forward_query_layer(LaneWorkspace<T>& w, index_t l, const T* V, const T* Bq,
                              const T* Ck, const Activation* acts) {
  constexpr index_t P = LaneWorkspace<T>::P;
  const index_t d = w.d, n = w.n, D = w.D, ld = w.ld;
  const T* Z = w.z(l);
  const T* zq = Z + n * P;  // the query column, rows ld apart
  GroupVec<T> tf = gload(zq + d * ld);
  for (index_t s = 0; s < w.H; ++s) {
    const index_t p = l * w.H + s;
    const T* Vm = V + p * D * D;
    T *wq = w.q_wq.data() + s * d * P, *q = w.q_q.data() + s * d * P, *h = w.q_h.data() + s * n * P,
      *y = w.q_y.data() + s * D * P;
    small::combine_rows(wq, P, static_cast<const T*>(nullptr), Ck + p * d * d, d, 1, zq, ld, d, d, P);  // w_q = C x_q
    small::combine_rows(q, P, static_cast<const T*>(nullptr), Bq + p * d * d, 1, d, wq, P, d, d, P);    // q = Bᵀ w_q
    lane_products(h, P, P, false, Z, P, ld, q, P, P, n, 1, d);  // h[i] = x_i · q (i < n)
    activation_forward(acts[s], h, n, P, w.col.data());         // one column over the sources
    lane_products(y, P, P, false, Z, ld, P, h, P, P, D, 1, n);  // y[r] = Σ_{i<n} Z[r, i] h[i]
    for (index_t r = 0; r < D; ++r) tf += Vm[d * D + r] * gload(y + r * P);
  }
  gstore(w.z(l + 1) + d * ld + n * P, tf);
}

// backward_layer on a group: ∂ℓ/∂Z_{ℓ+1} in w.dZ to ∂ℓ/∂Z_ℓ (left in w.dZ); without input_grad
// the terms of ∂ℓ/∂Z_ℓ are skipped as there.
template <class T>
void lane_backward_layer(LaneWorkspace<T>& w, index_t l, const T* V, const T* Bq, const T* Ck,
                         const Activation* acts, index_t sV, index_t sB, index_t sC,
                         bool input_grad) {
  constexpr index_t P = LaneWorkspace<T>::P;
  const index_t d = w.d, n = w.n, D = w.D, cols = w.cols, ld = w.ld;
  const T* Z = w.z(l);
  const T* dO = w.dZ.data();
  if (input_grad) std::copy(w.dZ.begin(), w.dZ.end(), w.dZprev.begin());  // residual
  T *dZp = w.dZprev.data(), *dY = w.dY.data(), *dH = w.dH.data(), *dU = w.dU.data(),
    *dW = w.dW.data(), *prod = w.prod.data();
  for (index_t s = 0; s < w.H; ++s) {
    const index_t p = l * w.H + s;
    const T *Bm = Bq + p * d * d, *Cm = Ck + p * d * d, *Vm = V + p * D * D;
    const T *U = w.u(l, s), *Wk = w.w(l, s), *Hs = w.h(l, s), *Y = w.y(l, s);
    // dV += dO Yᵀ;  dY = Vᵀ dO
    lane_products(prod, D * P, P, false, dO, ld, P, Y, P, ld, D, D, cols);
    w.add_gradient(sV + p * D * D, prod, D * D);
    combine_rows(dY, false, Vm, 1, D, dO, D, D, ld);
    // dZ[:, i<n] += dY Hᵀ;  dH = (Z M)ᵀ dY, then dS
    if (input_grad) lane_products(dZp, ld, P, true, dY, ld, P, Hs, P, ld, D, n, cols);
    lane_products(dH, ld, P, false, Z, P, ld, dY, ld, P, n, cols, D);
    activation_backward(acts[s], Hs, dH, n, ld, w.col.data());
    // dU[:, i] = W dS[i, :]ᵀ (i < n, the query column 0);  dW = U[:, :n] dS
    lane_products(dU, ld, P, false, Wk, ld, P, dH, P, ld, d, n, cols);
    for (index_t a = 0; a < d; ++a) std::fill(dU + a * ld + n * P, dU + (a + 1) * ld, T(0));
    lane_products(dW, ld, P, false, U, ld, P, dH, ld, P, d, cols, n);
    // dB += dU Xᵀ, dC += dW Xᵀ, dX += Bᵀ dU + Cᵀ dW
    lane_products(prod, d * P, P, false, dU, ld, P, Z, P, ld, d, d, cols);
    w.add_gradient(sB + p * d * d, prod, d * d);
    lane_products(prod, d * P, P, false, dW, ld, P, Z, P, ld, d, d, cols);
    w.add_gradient(sC + p * d * d, prod, d * d);
    if (!input_grad) continue;
    combine_rows(dZp, true, Bm, 1, d, dU, d, d, ld);
    combine_rows(dZp, true, Cm, 1, d, dW, d, d, ld);
  }
  if (input_grad) w.dZ.swap(w.dZprev);
}

// backward_query_layer on a group: w.dZ holds the seed at [d, n] alone.
template <class T>
void lane_backward_query_layer(LaneWorkspace<T>& w, index_t l, const T* V, const T* Bq,
                               const T* Ck, const Activation* acts, index_t sV, index_t sB,
                               index_t sC) {
  constexpr index_t P = LaneWorkspace<T>::P;
  const index_t d = w.d, n = w.n, D = w.D, ld = w.ld;
  const T* Z = w.z(l);
  const T* zq = Z + n * P;
  const GroupVec<T> g = gload(w.dZ.data() + d * ld + n * P);
  std::copy(w.dZ.begin(), w.dZ.end(), w.dZprev.begin());  // residual
  T *dZp = w.dZprev.data(), *dy = w.q_dy.data(), *dh = w.q_dh.data(), *a = w.q_a.data(),
    *dwq = w.q_dwq.data(), *prod = w.prod.data();
  for (index_t s = 0; s < w.H; ++s) {
    const index_t p = l * w.H + s;
    const T *Bm = Bq + p * d * d, *Cm = Ck + p * d * d, *Vm = V + p * D * D;
    const T *wq = w.q_wq.data() + s * d * P, *q = w.q_q.data() + s * d * P,
            *h = w.q_h.data() + s * n * P, *y = w.q_y.data() + s * D * P;
    // dV[d, :] += g y;  dy = g V[d, :]
    for (index_t r = 0; r < D; ++r) {
      gstore(prod + r * P, g * gload(y + r * P));
      gstore(dy + r * P, g * Vm[d * D + r]);
    }
    w.add_gradient(sV + p * D * D + d * D, prod, D);
    lane_products(dZp, ld, P, true, dy, P, 0, h, 0, P, D, n, 1);  // dZ[:, i<n] += dy h_i
    lane_products(dh, P, P, false, Z, P, ld, dy, P, 0, n, 1, D);  // dh_i = (Z M)ᵀ dy
    activation_backward(acts[s], h, dh, n, P, w.col.data());       // dh becomes ds
    lane_products(a, P, P, false, Z, ld, P, dh, P, 0, d, 1, n);   // a = Σ_{i<n} ds_i x_i
    lane_products(prod, d * P, P, false, wq, P, 0, a, 0, P, d, d, 1);  // dB += w_q aᵀ
    w.add_gradient(sB + p * d * d, prod, d * d);
    small::combine_rows(dwq, P, static_cast<const T*>(nullptr), Bm, d, 1, a, P, d, d, P);  // dw_q = B a
    lane_products(prod, d * P, P, false, dwq, P, 0, zq, 0, ld, d, d, 1);  // dC += dw_q x_qᵀ
    w.add_gradient(sC + p * d * d, prod, d * d);
    lane_products(dZp, ld, P, true, q, P, 0, dh, 0, P, d, n, 1);  // dX[:, i<n] += q ds_i
    small::combine_rows(dZp + n * P, ld, static_cast<const T*>(dZp + n * P), Cm, 1, d, dwq, P, d, d,
                        P);  // dX[:, n] += Cᵀ dw_q
  }
  w.dZ.swap(w.dZprev);
}

// One group of P prompts from b: forward (the last layer's query column alone), the seed per lane
// (the loss's, or −∂ℓ/∂ŷ: recipe::query_seed), the backward; returns the poison of what it wrote
// to predictions and d_Z0.
template <class T>
T lane_loss_grad_group(LaneWorkspace<T>& w, const KernelAttentionShape& sh, const T* Z0,
                       const T* y, recipe::QuerySeed seed, const T* V, const T* Bq, const T* Ck,
                       const Activation* acts, T* d_Z0, T* predictions, index_t b, double* partial) {
  constexpr index_t P = LaneWorkspace<T>::P;
  const index_t d = w.d, n = w.n, L = w.L, ld = w.ld;
  const index_t sV = 0, sB = L * w.H * w.D * w.D, sC = sB + L * w.H * d * d;
  w.interleave(Z0, b);
  for (index_t l = 0; l + 1 < L; ++l) lane_forward_layer(w, l, V, Bq, Ck, acts);
  lane_forward_query_layer(w, L - 1, V, Bq, Ck, acts);
  T poison = T(0);
  if (predictions)
    for (index_t l = 0; l <= L; ++l)
      for (index_t p = 0; p < P; ++p)
        poison += detail::poison(predictions[(b + p) * (L + 1) + l] =
                                     recipe::prediction(w.z(l)[d * ld + n * P + p], PredictionOutput::tf));
  std::fill(w.dZ.begin(), w.dZ.end(), T(0));
  const T* tf = w.z(L) + d * ld + n * P;
  for (index_t p = 0; p < P; ++p) {
    const double residual = recipe::query_residual(seed, double(tf[p]), double(y[b + p]));
    partial[0] += residual * residual;
    w.dZ[d * ld + n * P + p] = T(recipe::query_seed(seed, residual, double(y[b + p]), sh.batch));
  }
  lane_backward_query_layer(w, L - 1, V, Bq, Ck, acts, sV, sB, sC);
  for (index_t l = L - 2; l >= 0; --l)
    lane_backward_layer(w, l, V, Bq, Ck, acts, sV, sB, sC, /*input_grad=*/l > 0 || d_Z0);
  if (d_Z0) poison += w.deinterleave(w.dZ.data(), d_Z0, b);
  return poison;
}

// Whether loss_grad runs whole groups in the lanes (LSA_NATIVE_KA_LANES=0: the per-prompt path).
inline bool lanes_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("LSA_NATIVE_KA_LANES");
    return !(v && v[0] == '0');
  }();
  return on;
}

// Parameter-gradient slots of a chunk's partial sums (slot 0 is the loss).
inline void gradient_slots(const KernelAttentionShape& sh, double* partial, double*& gV,
                           double*& gB, double*& gC) {
  const index_t d = sh.dim;
  const index_t nV = sh.layers * sh.heads * (d + 1) * (d + 1), nB = sh.layers * sh.heads * d * d;
  gV = partial + 1;
  gB = gV + nV;
  gC = gB + nB;
}

// loss_and_grad = forward_prompt, then backward_prompt seeded with ∂f/∂Z_L = r/B at [d, n] for the
// loss f = (1/(2B)) Σ r², r = TF + y_q (recipe::loss_seed; partial[0] collects Σ r²); predict_vjp
// the same with the seed −∂ℓ/∂ŷ (recipe::query_seed). Both need the last layer's query column alone.
template <class T>
bool loss_grad_range(const KernelAttentionShape& sh, const T* Z0, const T* y, recipe::QuerySeed seed,
                     const T* V, const T* Bq, const T* Ck, const Activation* acts, T* d_Z0,
                     T* predictions, index_t b0, index_t b1, double* partial) {
  const index_t d = sh.dim, per = (d + 1) * (sh.context + 1);
  std::fill(partial, partial + ka_partial_size(sh), 0.0);
  double *gV, *gB, *gC;
  gradient_slots(sh, partial, gV, gB, gC);
  T poison = T(0);
  constexpr index_t P = kGroupLanes<T>;
  if (lanes_enabled() && b1 - b0 >= P) {  // whole groups in the lanes, the rest below
    LaneWorkspace<T> lw(sh);
    for (; b0 + P <= b1; b0 += P)
      poison += lane_loss_grad_group(lw, sh, Z0, y, seed, V, Bq, Ck, acts, d_Z0, predictions, b0,
                                     partial);
    for (index_t k = 0; k < lw.nslots; ++k)
      for (index_t p = 0; p < P; ++p) partial[1 + k] += lw.grad[k * P + p];
  }
  Workspace<T> w(sh);
  for (index_t b = b0; b < b1; ++b) {
    forward_prompt(w, Z0 + b * per, V, Bq, Ck, acts, /*query_only=*/true);
    const T tf = w.query_label(sh.layers);
    if (predictions) poison += store_predictions(w, predictions, b, PredictionOutput::tf);
    std::fill(w.dZ.begin(), w.dZ.end(), T(0));
    const double residual = recipe::query_residual(seed, double(tf), double(y[b]));
    partial[0] += residual * residual;
    w.dZ[d * w.Tt + sh.context] = T(recipe::query_seed(seed, residual, double(y[b]), sh.batch));
    backward_prompt(w, V, Bq, Ck, acts, gV, gB, gC, /*query_only=*/true, d_Z0 != nullptr);
    if (d_Z0) poison += w.unstage(w.dZ.data(), d_Z0 + b * per);
  }
  return detail::poison_clear(poison);
}

// VJP for an upstream ∂ℓ/∂Z_L [B, d+1, n+1]: the context saved by forward_range, or the forward
// recomputed per prompt when context is null; then the same backward_prompt.
template <class T>
bool vjp_range(const KernelAttentionShape& sh, const T* Z0, const T* V, const T* Bq, const T* Ck,
               const Activation* acts, const T* d_Z_out, T* d_Z0, const T* context, index_t b0,
               index_t b1, double* partial) {
  const index_t per = (sh.dim + 1) * (sh.context + 1);
  const index_t ctx = ka_context_size(sh, simd::kLanes<T>);
  std::fill(partial, partial + ka_partial_size(sh), 0.0);
  double *gV, *gB, *gC;
  gradient_slots(sh, partial, gV, gB, gC);
  Workspace<T> w(sh);
  T poison = T(0);
  for (index_t b = b0; b < b1; ++b) {
    if (context) {
      w.use_context(context + b * ctx);
    } else {
      forward_prompt(w, Z0 + b * per, V, Bq, Ck, acts);
    }
    w.stage(d_Z_out + b * per, w.dZ.data());
    backward_prompt(w, V, Bq, Ck, acts, gV, gB, gC, /*query_only=*/false, d_Z0 != nullptr);
    if (d_Z0) poison += w.unstage(w.dZ.data(), d_Z0 + b * per);
  }
  return detail::poison_clear(poison);
}

}  // namespace

template <class T>
KaKernels<T> ka_kernels() {
  return {simd::kLanes<T>, &forward_range<T>, &loss_grad_range<T>, &vjp_range<T>};
}
template KaKernels<float> ka_kernels<float>();
template KaKernels<double> ka_kernels<double>();

}  // namespace lsa_native::cpu::LSA_ISA_NS
