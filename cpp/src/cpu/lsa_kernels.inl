// CPU LSA kernels, included by one translation unit per instruction set with LSA_ISA_NS defined.
//
// Per prompt the work is a handful of small dense products along the tokens (the contiguous axis
// of E). They are written with explicit 32-byte vectors (simd.hpp) and register tiles: several
// independent accumulators hide the FMA latency and each E value loaded is used several times.
// Every prompt is first staged row by row into an L1-resident buffer whose rows are padded with
// zeros to whole vectors (PaddedRows): the copy reads E sequentially, which the hardware
// prefetchers stream at full bandwidth, and the compute loops then have no row tails.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/finite.hpp"
#include "common/lsa_recipe.hpp"
#include "cpu/lsa_kernels.hpp"
#include "cpu/simd.hpp"
#include "cpu/small_matrix_simd.hpp"

#ifndef LSA_ISA_NS
#error "define LSA_ISA_NS before including lsa_kernels.inl"
#endif

namespace lsa_native::cpu::LSA_ISA_NS {
namespace {

using simd::hsum;
using simd::kLanes;
using simd::load;
using simd::store;
using simd::Vec;

inline index_t round_up(index_t n, index_t m) { return (n + m - 1) / m * m; }

// A [rows, ld] block with ld = cols rounded up to whole vectors; the padding stays zero, so padded
// tokens add 0 to every token sum. stage() copies a [rows, cols] prompt in, unstage() copies out.
template <class T>
struct PaddedRows {
  index_t rows, cols, ld;
  std::vector<T> data;
  PaddedRows(index_t rows_, index_t cols_)
      : rows(rows_), cols(cols_), ld(round_up(cols_, kLanes<T>)),
        data(static_cast<size_t>(rows_ * ld), T(0)) {}
  T* get() { return data.data(); }
  void stage(const T* src) {
    for (index_t r = 0; r < rows; ++r) std::memcpy(get() + r * ld, src + r * cols, sizeof(T) * cols);
  }
  void unstage(T* dst) const {
    for (index_t r = 0; r < rows; ++r) std::memcpy(dst + r * cols, data.data() + r * ld, sizeof(T) * cols);
  }
  // unstage() that also adds x − x of every value (padding included, 0 there) into `poison`: the
  // output's finiteness flag, raised in the pass that writes it (the staged rows are L1-resident).
  void unstage(T* dst, Vec<T>& poison) const {
    for (index_t r = 0; r < rows; ++r) {
      const T* row = data.data() + r * ld;
      std::memcpy(dst + r * cols, row, sizeof(T) * cols);
      for (index_t k = 0; k < ld; k += kLanes<T>) {
        const Vec<T> x = load(row + k);
        poison += x - x;
      }
    }
  }
};

// Chunk k (a whole vector) of a padded row.
template <class T>
inline Vec<T> load_chunk(const T* row, index_t k) {
  return load(row + k * kLanes<T>);
}

// ---------------------------------------------------------------------------------------------
// Prediction: t_j = p·e_j, s_j = e_j·q, ŷ = (1/N) Σ_j t_j s_j and the backward sums  [SPEC 3.2].

// NB chunks of tokens starting at chunk c0, all rows: t and s stay in registers (2·NB chains).
template <class T, int NB>
inline Vec<T> token_scalars_block(const T* Eb, index_t rows, index_t ld, index_t c0, const T* p,
                                  const T* q, T* t, T* s) {
  constexpr index_t L = kLanes<T>;
  Vec<T> tv[NB], sv[NB];
  for (int k = 0; k < NB; ++k) tv[k] = sv[k] = simd::zero<T>();
  for (index_t r = 0; r < rows; ++r) {
    const Vec<T> pr = simd::broadcast(p[r]), qr = simd::broadcast(q[r]);
    const T* row = Eb + r * ld;
    for (int k = 0; k < NB; ++k) {
      const Vec<T> e = load_chunk(row, c0 + k);
      tv[k] += pr * e;
      sv[k] += qr * e;
    }
  }
  Vec<T> acc = simd::zero<T>();
  for (int k = 0; k < NB; ++k) {
    store(t + (c0 + k) * L, tv[k]);
    store(s + (c0 + k) * L, sv[k]);
    acc += tv[k] * sv[k];
  }
  return acc;
}

// For a padded prompt Eb [rows, ld]: fills t, s [ld] and returns Σ_j t_j s_j.
template <class T>
T token_scalars(const T* Eb, index_t rows, index_t ld, const T* p, const T* q, T* t, T* s) {
  const index_t n_chunks = ld / kLanes<T>;
  Vec<T> acc = simd::zero<T>();
  index_t c = 0;
  for (; c + 4 <= n_chunks; c += 4) acc += token_scalars_block<T, 4>(Eb, rows, ld, c, p, q, t, s);
  for (; c < n_chunks; ++c) acc += token_scalars_block<T, 1>(Eb, rows, ld, c, p, q, t, s);
  return hsum(acc);
}

// Per-range scratch of the prediction kernels: the staged prompt, W^KQ^T, q, t, s (rows of one
// [2, ld] block) and the backward row sums g [rows, 2]: g[r, 0] = Σ_j t_j E[r, j] (g_k) and
// g[r, 1] = Σ_j s_j E[r, j] (g_p).
template <class T>
struct PredictionScratch {
  index_t rows, cols, ld, ld_rows;
  PaddedRows<T> staged;
  std::vector<T> buffer;
  T *prompt, *W_kq_t, *q, *t, *s, *g;
  PredictionScratch(index_t d, index_t N, const T* W_kq)
      : rows(d + 1), cols(N + 1), ld(round_up(N + 1, kLanes<T>)), ld_rows(round_up(d + 1, kLanes<T>)),
        staged(d + 1, N + 1),
        buffer(static_cast<size_t>(rows * ld_rows + 3 * ld_rows + 2 * ld), T(0)) {
    prompt = staged.get();
    W_kq_t = buffer.data();
    q = W_kq_t + rows * ld_rows;
    g = q + ld_rows;
    t = g + 2 * ld_rows;
    s = t + ld;
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < rows; ++c) W_kq_t[c * ld_rows + r] = W_kq[r * rows + c];
  }
  // Stages prompt Eb [rows, cols] and returns Σ_j t_j s_j with q = W^KQ e_q.
  T load_and_forward(const T* Eb, const T* p) {
    staged.stage(Eb);
    // q = W^KQ e_q = Σ_c e_q[c] · (column c of W^KQ)   [ZFB (3.6)]
    for (index_t k = 0; k < ld_rows; k += kLanes<T>) {
      Vec<T> acc = simd::zero<T>();
      for (index_t c = 0; c < rows; ++c)
        acc += simd::broadcast(prompt[c * ld + cols - 1]) * load(W_kq_t + c * ld_rows + k);
      store(q + k, acc);
    }
    return token_scalars(prompt, rows, ld, p, q, t, s);
  }
  T query_label_slot() const { return prompt[(rows - 1) * ld + cols - 1]; }
  // g = E [t; s]ᵀ: the second (L1) read of the staged prompt, by the kit's token-axis tiles.
  void backward_row_sums() { small::token_products(prompt, ld, rows, t, ld, index_t(2), ld, T(1), g, index_t(2)); }
  T g_k(index_t r) const { return g[2 * r]; }
  T g_p(index_t r) const { return g[2 * r + 1]; }
};

template <class T>
bool predict_range(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, T* y_hat,
                   index_t b0, index_t b1) {
  const index_t d = sh.dim, N = sh.context, rows = d + 1, cols = N + 1;
  PredictionScratch<T> w(d, N, W_kq);
  const T* p = W_pv + d * rows;  // last row of W^PV
  T poison = T(0);
  for (index_t b = b0; b < b1; ++b) {
    const T dot = w.load_and_forward(E + b * rows * cols, p);
    y_hat[b] = recipe::prediction(w.query_label_slot(), dot, N);  // the recipe's epilogue
    poison += detail::poison(y_hat[b]);
  }
  return detail::poison_clear(poison);
}

template <class T>
void loss_grad_range(const LsaShape& sh, const T* E, const T* y_q, const T* W_pv, const T* W_kq,
                     T* y_hat, index_t b0, index_t b1, double* partial) {
  const index_t d = sh.dim, N = sh.context, rows = d + 1, cols = N + 1;
  PredictionScratch<T> w(d, N, W_kq);
  // Double accumulators of Σ r ∂ŷ/∂p and Σ r ∂ŷ/∂W^KQ = Σ r g_k e_q^T, rows padded to whole vectors.
  constexpr index_t LD = kLanes<double>;
  const index_t ld = round_up(rows, LD);
  std::vector<double> acc(static_cast<size_t>((rows + 2) * ld), 0.0);
  double *e_q = acc.data(), *d_p = e_q + ld, *d_K = d_p + ld;
  double loss = 0;
  const T* p = W_pv + d * rows;
  for (index_t b = b0; b < b1; ++b) {
    const T dot = w.load_and_forward(E + b * rows * cols, p);
    const T pred = recipe::prediction(w.query_label_slot(), dot, N);
    if (y_hat) y_hat[b] = pred;
    const double residual = double(pred) - double(y_q[b]);
    loss += residual * residual;
    // g_p = (1/N) Σ_j s_j e_j, g_k = (1/N) Σ_j t_j e_j (the 1/N in `scaled`)
    w.backward_row_sums();
    // d_p += r g_p;  d_K += (r g_k) e_q^T   (SPEC 3.2)
    const double scaled = recipe::residual_scale<T>(residual, N);
    for (index_t r = 0; r < rows; ++r) {
      e_q[r] = double(w.prompt[r * w.ld + N]);
      d_p[r] += scaled * double(w.g_p(r));
    }
    for (index_t r = 0; r < rows; ++r) {
      const Vec<double> coef = simd::broadcast(scaled * double(w.g_k(r)));
      double* row = d_K + r * ld;
      for (index_t c = 0; c < ld; c += LD) store(row + c, load(row + c) + coef * load(e_q + c));
    }
  }
  partial[0] = loss;
  for (index_t r = 0; r < rows; ++r) {
    partial[1 + r] = d_p[r];
    for (index_t c = 0; c < rows; ++c) partial[1 + rows + r * rows + c] = d_K[r * ld + c];
  }
}

// ---------------------------------------------------------------------------------------------
// Full output and its VJP: Gram products along the tokens, small matrix products, row combinations.

// C = scale · A B^T for padded A, B [rows, ld]; C [rows, ldc]: the kit's token-axis tiles
// (small_matrix_simd.hpp). With `symmetric` (A == B) the upper triangle, mirrored.
template <class T>
void token_products(const T* A, const T* B, index_t rows, index_t ld, T scale, T* C,
                    index_t ldc, bool symmetric) {
  small::token_products(A, ld, rows, B, ld, rows, ld, scale, C, ldc, symmetric);
}

// out = base + coef · src for padded base, src, out [rows, ld] and coef [rows, rows]; out aliases
// neither base nor src: the kit's token-axis row combinations (small_matrix_simd.hpp).
template <class T>
void row_combination(const T* base, const T* coef, const T* src, index_t rows, index_t ld, T* out) {
  small::combine_rows(out, ld, base, coef, rows, index_t(1), src, ld, rows, rows, ld);
}

// Small dense matrices [n, ld] of the prompt's dtype S with ld = round_up(n, lanes) and zero
// padding columns, so that products run on whole vectors. C (+)= A B; C aliases neither A nor B.
// (They cost (d+1)^3 per prompt, as much as the token passes at d = 20, N = 100: float inputs
// keep them in float; batch sums of parameter gradients still run in S.)
template <class S>
struct SmallMatrices {
  index_t n, ld;
  std::vector<S> storage;
  SmallMatrices(index_t n_, int count)
      : n(n_), ld(round_up(n_, kLanes<S>)), storage(static_cast<size_t>(count * n_ * ld), S(0)) {}
  S* operator[](int i) { return storage.data() + i * n * ld; }

  void multiply(const S* A, const S* B, S* C, bool accumulate = false) const {
    small::multiply_padded(A, B, C, n, ld, accumulate);  // the kit's register tiles
  }
  template <class T>
  void set(S* M, const T* W, bool transpose) const {  // W [n, n] row-major
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < n; ++j) M[i * ld + j] = S(transpose ? W[j * n + i] : W[i * n + j]);
  }
  template <class T>
  void get(T* W, const S* M) const {  // W [n, n] row-major
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < n; ++j) W[i * n + j] = T(M[i * ld + j]);
  }
};

// acc [n, n] += M [n, ld] in double.
template <class S>
inline void accumulate(const S* M, index_t ld, index_t n, double* acc) {
  for (index_t r = 0; r < n; ++r)
    for (index_t c = 0; c < n; ++c) acc[r * n + c] += double(M[r * ld + c]);
}

template <class T>
bool forward_range(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, T* F, index_t b0,
                   index_t b1) {
  const index_t d = sh.dim, N = sh.context, rows = d + 1, cols = N + 1;
  enum { kWpv, kWkq, kG, kGW, kP, kCount };
  SmallMatrices<T> m(rows, kCount);
  m.set(m[kWpv], W_pv, false);
  m.set(m[kWkq], W_kq, false);
  std::vector<T> P(static_cast<size_t>(rows * rows));
  PaddedRows<T> e(rows, cols), f(rows, cols);
  Vec<T> poison = simd::zero<T>();
  for (index_t b = b0; b < b1; ++b) {
    e.stage(E + b * rows * cols);
    token_products(e.get(), e.get(), rows, e.ld, T(1) / T(N), m[kG], m.ld, true);  // G = E E^T / N
    m.multiply(m[kG], m[kWkq], m[kGW]);  // G W^KQ
    m.multiply(m[kWpv], m[kGW], m[kP]);  // P = W^PV G W^KQ
    m.get(P.data(), m[kP]);
    row_combination(e.get(), P.data(), e.get(), rows, e.ld, f.get());  // F = E + P E
    f.unstage(F + b * rows * cols, poison);
  }
  return detail::poison_clear(hsum(poison));
}

template <class T>
bool vjp_range(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, const T* d_F, T* d_E,
               index_t b0, index_t b1, double* partial) {
  const index_t d = sh.dim, N = sh.context, rows = d + 1, cols = N + 1, n2 = rows * rows;
  enum { kWpvT, kWkqT, kG, kT1, kT2, kPt, kdP, kTmp, kdG, kProduct, kCount };
  SmallMatrices<T> m(rows, kCount);
  std::vector<double> d_W(static_cast<size_t>(2 * n2), 0.0);  // Σ_b dW^PV, Σ_b dW^KQ in double
  m.set(m[kWpvT], W_pv, true);
  m.set(m[kWkqT], W_kq, true);
  std::vector<T> coef(static_cast<size_t>(n2));
  PaddedRows<T> e(rows, cols), df(rows, cols), tmp(rows, cols), de(rows, cols);
  Vec<T> poison = simd::zero<T>();  // of d_E (the parameter gradients are checked when reduced)
  for (index_t b = b0; b < b1; ++b) {
    e.stage(E + b * rows * cols);
    df.stage(d_F + b * rows * cols);
    const index_t ld = e.ld;
    token_products(e.get(), e.get(), rows, ld, T(1) / T(N), m[kG], m.ld, true);  // G = E E^T / N
    token_products(df.get(), e.get(), rows, ld, T(1), m[kdP], m.ld, false);           // dP = d_F E^T
    m.multiply(m[kWkqT], m[kG], m[kT1]);         // T1 = W^KQ^T G = (G W^KQ)^T
    m.multiply(m[kG], m[kWpvT], m[kT2]);         // T2 = G W^PV^T = (W^PV G)^T
    m.multiply(m[kdP], m[kT1], m[kProduct]);  // dW^PV += dP (G W^KQ)^T
    accumulate(m[kProduct], m.ld, rows, d_W.data());
    m.multiply(m[kT2], m[kdP], m[kProduct]);  // dW^KQ += (W^PV G)^T dP
    accumulate(m[kProduct], m.ld, rows, d_W.data() + n2);
    if (!d_E) continue;
    // dE = d_F + P^T d_F + (dG + dG^T) E / N with dG = W^PV^T dP W^KQ^T
    m.multiply(m[kWkqT], m[kT2], m[kPt]);  // P^T = W^KQ^T G W^PV^T
    m.get(coef.data(), m[kPt]);
    row_combination(df.get(), coef.data(), df.get(), rows, ld, tmp.get());
    m.multiply(m[kWpvT], m[kdP], m[kTmp]);
    m.multiply(m[kTmp], m[kWkqT], m[kdG]);
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < rows; ++c)
        coef[r * rows + c] = (m[kdG][r * m.ld + c] + m[kdG][c * m.ld + r]) / T(N);
    row_combination(tmp.get(), coef.data(), e.get(), rows, ld, de.get());
    de.unstage(d_E + b * rows * cols, poison);
  }
  std::copy(d_W.begin(), d_W.end(), partial);
  return detail::poison_clear(hsum(poison));
}

}  // namespace

template <class T>
LsaKernels<T> lsa_kernels() {
  return {&predict_range<T>, &loss_grad_range<T>, &forward_range<T>, &vjp_range<T>};
}
template LsaKernels<float> lsa_kernels<float>();
template LsaKernels<double> lsa_kernels<double>();

}  // namespace lsa_native::cpu::LSA_ISA_NS
