// CPU LSA kernels, included by one translation unit per instruction set with LSA_ISA_NS defined.
//
// Per prompt the work is a handful of small dense products along the tokens (the contiguous axis
// of E). They are written with explicit 32-byte vectors (simd.hpp) and register tiles: several
// independent accumulators hide the FMA latency, each E value loaded is used several times, and
// row tails are read with partial loads (never past the end of a row).
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/lsa_math.hpp"
#include "cpu/lsa_kernels.hpp"
#include "cpu/simd.hpp"

#ifndef LSA_ISA_NS
#error "define LSA_ISA_NS before including lsa_kernels.inl"
#endif

namespace lsa_native::cpu::LSA_ISA_NS {
namespace {

using simd::hsum;
using simd::kLanes;
using simd::load;
using simd::load_partial;
using simd::store;
using simd::store_partial;
using simd::Vec;

inline index_t round_up(index_t n, index_t m) { return (n + m - 1) / m * m; }

// Loads chunk k of a row: a full vector, or (Tail) the zero-padded last `tail` values. The flag is
// a template parameter so that the hot loops over full chunks carry no branch.
template <bool Tail, class T>
inline Vec<T> load_chunk(const T* row, index_t k, index_t tail) {
  if constexpr (Tail) return load_partial(row + k * kLanes<T>, tail);
  else return load(row + k * kLanes<T>);
}

// ---------------------------------------------------------------------------------------------
// Prediction: t_j = p·e_j, s_j = e_j·q, ŷ = (1/N) Σ_j t_j s_j and the backward sums  [SPEC 3.2].

// NB chunks of tokens starting at chunk c0, all rows: t and s stay in registers (2·NB chains).
template <class T, int NB, bool Tail = false>
inline Vec<T> token_scalars_block(const T* Eb, index_t rows, index_t cols, index_t c0, index_t tail,
                                  const T* p, const T* q, T* t, T* s) {
  constexpr index_t L = kLanes<T>;
  Vec<T> tv[NB], sv[NB];
  for (int k = 0; k < NB; ++k) tv[k] = sv[k] = simd::zero<T>();
  for (index_t r = 0; r < rows; ++r) {
    const Vec<T> pr = simd::broadcast(p[r]), qr = simd::broadcast(q[r]);
    const T* row = Eb + r * cols;
    for (int k = 0; k < NB; ++k) {
      const Vec<T> e = load_chunk<Tail>(row, c0 + k, tail);
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

// Fills t, s [round_up(N+1, lanes)] (zeros past N+1) and returns Σ_j t_j s_j.
template <class T>
T token_scalars(const T* Eb, index_t rows, index_t cols, const T* p, const T* q, T* t, T* s) {
  const index_t n_full = cols / kLanes<T>, tail = cols % kLanes<T>;
  Vec<T> acc = simd::zero<T>();
  index_t c = 0;
  for (; c + 4 <= n_full; c += 4) acc += token_scalars_block<T, 4>(Eb, rows, cols, c, 0, p, q, t, s);
  for (; c < n_full; ++c) acc += token_scalars_block<T, 1>(Eb, rows, cols, c, 0, p, q, t, s);
  if (tail) acc += token_scalars_block<T, 1, true>(Eb, rows, cols, n_full, tail, p, q, t, s);
  return hsum(acc);
}

// g_p[r] = Σ_j s_j E[r, j] and g_k[r] = Σ_j t_j E[r, j] for RB rows from r0 (2·RB chains).
template <class T, int RB>
inline void weighted_row_sums_block(const T* Eb, index_t cols, index_t r0, const T* t, const T* s,
                                    T* g_p, T* g_k) {
  constexpr index_t L = kLanes<T>;
  const index_t n_full = cols / L, tail = cols % L;
  Vec<T> ap[RB], ak[RB];
  for (int i = 0; i < RB; ++i) ap[i] = ak[i] = simd::zero<T>();
  auto step = [&](index_t c, auto tail_tag) {
    const Vec<T> sv = load(s + c * L), tv = load(t + c * L);  // zero past N+1
    for (int i = 0; i < RB; ++i) {
      const Vec<T> e = load_chunk<decltype(tail_tag)::value>(Eb + (r0 + i) * cols, c, tail);
      ap[i] += sv * e;
      ak[i] += tv * e;
    }
  };
  for (index_t c = 0; c < n_full; ++c) step(c, std::false_type{});
  if (tail) step(n_full, std::true_type{});
  for (int i = 0; i < RB; ++i) {
    g_p[r0 + i] = hsum(ap[i]);
    g_k[r0 + i] = hsum(ak[i]);
  }
}

template <class T>
void weighted_row_sums(const T* Eb, index_t rows, index_t cols, const T* t, const T* s, T* g_p,
                       T* g_k) {
  index_t r = 0;
  for (; r + 3 <= rows; r += 3) weighted_row_sums_block<T, 3>(Eb, cols, r, t, s, g_p, g_k);
  for (; r < rows; ++r) weighted_row_sums_block<T, 1>(Eb, cols, r, t, s, g_p, g_k);
}

// Per-range scratch of the prediction kernels. Each prompt is first copied row by row into
// `prompt` [rows, ld] (ld = N+1 rounded up to whole vectors, zero padding): the copy reads E
// sequentially, which the hardware prefetchers stream at full bandwidth, and the compute passes
// then run from L1 on whole vectors (padding tokens contribute 0 to every sum).
template <class T>
struct PredictionScratch {
  index_t rows, cols, ld, ld_rows;
  std::vector<T> buffer;
  T *prompt, *W_kq_t, *q, *t, *s, *g_p, *g_k;
  PredictionScratch(index_t d, index_t N, const T* W_kq)
      : rows(d + 1), cols(N + 1), ld(round_up(N + 1, kLanes<T>)), ld_rows(round_up(d + 1, kLanes<T>)),
        buffer(static_cast<size_t>(rows * ld + rows * ld_rows + 3 * ld_rows + 2 * ld), T(0)) {
    prompt = buffer.data();
    W_kq_t = prompt + rows * ld;
    q = W_kq_t + rows * ld_rows;
    g_p = q + ld_rows;
    g_k = g_p + ld_rows;
    t = g_k + ld_rows;
    s = t + ld;
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < rows; ++c) W_kq_t[c * ld_rows + r] = W_kq[r * rows + c];
  }
  // Copies prompt Eb [rows, cols] into `prompt` and returns Σ_j t_j s_j with q = W^KQ e_q.
  T load_and_forward(const T* Eb, const T* p) {
    for (index_t r = 0; r < rows; ++r) std::memcpy(prompt + r * ld, Eb + r * cols, sizeof(T) * cols);
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
};

template <class T>
void predict_range(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, T* y_hat,
                   index_t b0, index_t b1) {
  const index_t d = sh.dim, N = sh.context, rows = d + 1, cols = N + 1;
  PredictionScratch<T> w(d, N, W_kq);
  const T* p = W_pv + d * rows;  // last row of W^PV
  const T inv_n = T(1) / T(N);
  for (index_t b = b0; b < b1; ++b) {
    const T dot = w.load_and_forward(E + b * rows * cols, p);
    y_hat[b] = w.query_label_slot() + dot * inv_n;
  }
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
  const T inv_n = T(1) / T(N);
  for (index_t b = b0; b < b1; ++b) {
    const T dot = w.load_and_forward(E + b * rows * cols, p);
    const T pred = w.query_label_slot() + dot * inv_n;
    if (y_hat) y_hat[b] = pred;
    const double residual = double(pred) - double(y_q[b]);
    loss += residual * residual;
    // g_p = (1/N) Σ_j s_j e_j, g_k = (1/N) Σ_j t_j e_j: the second (L1) read of the prompt.
    weighted_row_sums(w.prompt, rows, w.ld, w.t, w.s, w.g_p, w.g_k);
    // d_p += r g_p;  d_K += (r g_k) e_q^T   (SPEC 3.2)
    const double scaled = residual * double(inv_n);
    for (index_t r = 0; r < rows; ++r) {
      e_q[r] = double(w.prompt[r * w.ld + N]);
      d_p[r] += scaled * double(w.g_p[r]);
    }
    for (index_t r = 0; r < rows; ++r) {
      const Vec<double> coef = simd::broadcast(scaled * double(w.g_k[r]));
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

// C[ra+i, rb+k] = scale · Σ_j A[ra+i, j] B[rb+k, j] for an RA x RB tile (RA·RB chains).
template <class T, int RA, int RB>
inline void token_products_tile(const T* A, const T* B, index_t cols, index_t ra, index_t rb,
                                double scale, double* C, index_t ldc) {
  constexpr index_t L = kLanes<T>;
  const index_t n_full = cols / L, tail = cols % L;
  Vec<T> acc[RA][RB];
  for (int i = 0; i < RA; ++i)
    for (int k = 0; k < RB; ++k) acc[i][k] = simd::zero<T>();
  auto step = [&](index_t c, auto tail_tag) {
    constexpr bool kTail = decltype(tail_tag)::value;
    Vec<T> a[RA], bv[RB];
    for (int i = 0; i < RA; ++i) a[i] = load_chunk<kTail>(A + (ra + i) * cols, c, tail);
    for (int k = 0; k < RB; ++k) bv[k] = load_chunk<kTail>(B + (rb + k) * cols, c, tail);
    for (int i = 0; i < RA; ++i)
      for (int k = 0; k < RB; ++k) acc[i][k] += a[i] * bv[k];
  };
  for (index_t c = 0; c < n_full; ++c) step(c, std::false_type{});
  if (tail) step(n_full, std::true_type{});
  for (int i = 0; i < RA; ++i)
    for (int k = 0; k < RB; ++k) C[(ra + i) * ldc + rb + k] = scale * double(hsum(acc[i][k]));
}

// C = scale · A B^T for A, B [rows, cols] (token-major rows); C [rows, ldc] in double.
// With `symmetric` (A == B), only the upper triangle is computed and then mirrored.
template <class T>
void token_products(const T* A, const T* B, index_t rows, index_t cols, double scale, double* C,
                    index_t ldc, bool symmetric) {
  auto row_block = [&](auto ra_tag, index_t ra) {
    constexpr int RA = decltype(ra_tag)::value;
    index_t rb = symmetric ? ra : 0;
    for (; rb + 3 <= rows; rb += 3) token_products_tile<T, RA, 3>(A, B, cols, ra, rb, scale, C, ldc);
    for (; rb < rows; ++rb) token_products_tile<T, RA, 1>(A, B, cols, ra, rb, scale, C, ldc);
  };
  index_t ra = 0;
  for (; ra + 2 <= rows; ra += 2) row_block(std::integral_constant<int, 2>{}, ra);
  for (; ra < rows; ++ra) row_block(std::integral_constant<int, 1>{}, ra);
  if (symmetric)
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < r; ++c) C[r * ldc + c] = C[c * ldc + r];
}

// out[r0+i, chunk] = base[r0+i, chunk] + Σ_s coef[r0+i, s] src[s, chunk] for RO rows x NC chunks.
template <class T, int RO, int NC, bool Tail = false>
inline void row_combination_tile(const T* base, const T* coef, const T* src, index_t rows,
                                 index_t cols, index_t r0, index_t c0, index_t tail, T* out) {
  constexpr index_t L = kLanes<T>;
  Vec<T> acc[RO][NC];
  for (int i = 0; i < RO; ++i)
    for (int k = 0; k < NC; ++k) acc[i][k] = load_chunk<Tail>(base + (r0 + i) * cols, c0 + k, tail);
  for (index_t s = 0; s < rows; ++s) {
    Vec<T> x[NC];
    for (int k = 0; k < NC; ++k) x[k] = load_chunk<Tail>(src + s * cols, c0 + k, tail);
    for (int i = 0; i < RO; ++i) {
      const Vec<T> c = simd::broadcast(coef[(r0 + i) * rows + s]);
      for (int k = 0; k < NC; ++k) acc[i][k] += c * x[k];
    }
  }
  for (int i = 0; i < RO; ++i)
    for (int k = 0; k < NC; ++k) {
      T* o = out + (r0 + i) * cols + (c0 + k) * L;
      if constexpr (Tail)
        store_partial(o, acc[i][k], tail);
      else
        store(o, acc[i][k]);
    }
}

// out = base + coef · src for base, src, out [rows, cols] and coef [rows, rows]; out aliases
// neither base nor src.
template <class T>
void row_combination(const T* base, const T* coef, const T* src, index_t rows, index_t cols,
                     T* out) {
  const index_t n_full = cols / kLanes<T>, tail = cols % kLanes<T>;
  auto row_block = [&](auto ro_tag, index_t r0) {
    constexpr int RO = decltype(ro_tag)::value;
    index_t c = 0;
    for (; c + 2 <= n_full; c += 2)
      row_combination_tile<T, RO, 2>(base, coef, src, rows, cols, r0, c, 0, out);
    for (; c < n_full; ++c) row_combination_tile<T, RO, 1>(base, coef, src, rows, cols, r0, c, 0, out);
    if (tail) row_combination_tile<T, RO, 1, true>(base, coef, src, rows, cols, r0, n_full, tail, out);
  };
  index_t r = 0;
  for (; r + 3 <= rows; r += 3) row_block(std::integral_constant<int, 3>{}, r);
  for (; r < rows; ++r) row_block(std::integral_constant<int, 1>{}, r);
}

// Small dense double matrices [n, ld] with ld = round_up(n, lanes) and zero padding columns, so
// that products run on whole vectors. C (+)= A B; C aliases neither A nor B.
struct SmallMatrices {
  index_t n, ld;
  std::vector<double> storage;
  SmallMatrices(index_t n_, int count)
      : n(n_), ld(round_up(n_, kLanes<double>)), storage(static_cast<size_t>(count * n_ * ld), 0.0) {}
  double* operator[](int i) { return storage.data() + i * n * ld; }

  void multiply(const double* A, const double* B, double* C, bool accumulate = false) const {
    constexpr index_t L = kLanes<double>;
    for (index_t i = 0; i < n; ++i) {
      for (index_t c = 0; c < ld; c += L) {
        Vec<double> acc = accumulate ? load(C + i * ld + c) : simd::zero<double>();
        for (index_t k = 0; k < n; ++k) acc += simd::broadcast(A[i * ld + k]) * load(B + k * ld + c);
        store(C + i * ld + c, acc);
      }
    }
  }
  template <class T>
  void set(double* M, const T* W, bool transpose) const {  // W [n, n] row-major
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < n; ++j) M[i * ld + j] = double(transpose ? W[j * n + i] : W[i * n + j]);
  }
  template <class T>
  void get(T* W, const double* M, double scale = 1.0) const {  // W [n, n] row-major
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < n; ++j) W[i * n + j] = T(scale * M[i * ld + j]);
  }
};

template <class T>
void forward_range(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, T* F, index_t b0,
                   index_t b1) {
  const index_t d = sh.dim, N = sh.context, rows = d + 1, cols = N + 1;
  enum { kWpv, kWkq, kG, kGW, kP, kCount };
  SmallMatrices m(rows, kCount);
  m.set(m[kWpv], W_pv, false);
  m.set(m[kWkq], W_kq, false);
  std::vector<T> P(static_cast<size_t>(rows * rows));
  for (index_t b = b0; b < b1; ++b) {
    const T* Eb = E + b * rows * cols;
    token_products(Eb, Eb, rows, cols, 1.0 / double(N), m[kG], m.ld, true);  // G = E E^T / N
    m.multiply(m[kG], m[kWkq], m[kGW]);                                      // G W^KQ
    m.multiply(m[kWpv], m[kGW], m[kP]);                                      // P = W^PV G W^KQ
    m.get(P.data(), m[kP]);
    row_combination(Eb, P.data(), Eb, rows, cols, F + b * rows * cols);  // F = E + P E
  }
}

template <class T>
void vjp_range(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, const T* d_F, T* d_E,
               index_t b0, index_t b1, double* partial) {
  const index_t d = sh.dim, N = sh.context, rows = d + 1, cols = N + 1, n2 = rows * rows;
  enum { kWpvT, kWkqT, kG, kT1, kT2, kPt, kdP, kTmp, kdG, kdWpv, kdWkq, kCount };
  SmallMatrices m(rows, kCount);
  m.set(m[kWpvT], W_pv, true);
  m.set(m[kWkqT], W_kq, true);
  std::vector<T> coef(static_cast<size_t>(n2));
  std::vector<T> dE_tmp(static_cast<size_t>(d_E ? rows * cols : 0));
  for (index_t b = b0; b < b1; ++b) {
    const T* Eb = E + b * rows * cols;
    const T* dFb = d_F + b * rows * cols;
    token_products(Eb, Eb, rows, cols, 1.0 / double(N), m[kG], m.ld, true);  // G = E E^T / N
    token_products(dFb, Eb, rows, cols, 1.0, m[kdP], m.ld, false);           // dP = d_F E^T
    m.multiply(m[kWkqT], m[kG], m[kT1]);          // T1 = W^KQ^T G = (G W^KQ)^T
    m.multiply(m[kG], m[kWpvT], m[kT2]);          // T2 = G W^PV^T = (W^PV G)^T
    m.multiply(m[kdP], m[kT1], m[kdWpv], true);   // dW^PV += dP (G W^KQ)^T
    m.multiply(m[kT2], m[kdP], m[kdWkq], true);   // dW^KQ += (W^PV G)^T dP
    if (!d_E) continue;
    // dE = d_F + P^T d_F + (dG + dG^T) E / N with dG = W^PV^T dP W^KQ^T
    m.multiply(m[kWkqT], m[kT2], m[kPt]);  // P^T = W^KQ^T G W^PV^T
    m.get(coef.data(), m[kPt]);
    row_combination(dFb, coef.data(), dFb, rows, cols, dE_tmp.data());
    m.multiply(m[kWpvT], m[kdP], m[kTmp]);
    m.multiply(m[kTmp], m[kWkqT], m[kdG]);
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < rows; ++c)
        coef[r * rows + c] = T((m[kdG][r * m.ld + c] + m[kdG][c * m.ld + r]) / double(N));
    row_combination(dE_tmp.data(), coef.data(), Eb, rows, cols, d_E + b * rows * cols);
  }
  for (index_t r = 0; r < rows; ++r)
    for (index_t c = 0; c < rows; ++c) {
      partial[r * rows + c] = m[kdWpv][r * m.ld + c];
      partial[n2 + r * rows + c] = m[kdWkq][r * m.ld + c];
    }
}

}  // namespace

template <class T>
LsaKernels<T> lsa_kernels() {
  return {&predict_range<T>, &loss_grad_range<T>, &forward_range<T>, &vjp_range<T>};
}
template LsaKernels<float> lsa_kernels<float>();
template LsaKernels<double> lsa_kernels<double>();

}  // namespace lsa_native::cpu::LSA_ISA_NS
