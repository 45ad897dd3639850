// CPU LSA kernels, included by one translation unit per instruction set with LSA_ISA_NS defined.
//
// Per prompt the work is a handful of small dense products along the tokens (the contiguous axis
// of E). They are written with explicit 32-byte vectors (simd.hpp) and register tiles: several
// independent accumulators hide the FMA latency and each E value loaded is used several times.
// The prediction kernels (ŷ, loss and gradients, and lsa_predict_vjp.inl) read each prompt once,
// in place, in blocks of token chunks (PredictionScratch). The full-output kernels first stage
// every prompt row by row into an L1-resident buffer whose rows are padded with zeros to whole
// vectors (PaddedRows), so that their compute loops have no row tails. Both prefetch the prompts
// ahead (AheadPrompts) so that the reads of a range overlap its compute. At small d and N (d ≤ 8,
// prompts_in_lanes) the prediction kernels instead put the prompts in the SIMD lanes, L prompts
// at a time (LanePrompts): their per-prompt fixed work then runs once per L prompts.
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
using simd::to_double;
using simd::Vec;
using simd::VecBuffer;

inline index_t round_up(index_t n, index_t m) { return (n + m - 1) / m * m; }

// A [rows, ld] block with ld = cols rounded up to whole vectors; the padding stays zero, so padded
// tokens add 0 to every token sum. stage() copies a [rows, cols] prompt in, unstage() copies out.
template <class T>
struct PaddedRows {
  index_t rows, cols, ld;
  simd::UnitVector<T> data;
  PaddedRows(index_t rows_, index_t cols_)
      : rows(rows_), cols(cols_), ld(round_up(cols_, kLanes<T>)),
        data(static_cast<size_t>(rows_ * ld), T(0)) {}
  T* get() { return data.data(); }
  void stage(const T* src) {
    for (index_t r = 0; r < rows; ++r) std::memcpy(get() + r * ld, src + r * cols, sizeof(T) * cols);
  }
  // stage(src) that also prefetches, row by row, the prompt at `ahead` (a later prompt of the same
  // range): its lines are on their way while this prompt is computed on, so the memory reads of a
  // range run back to back instead of alternating with the L1-resident compute (ahead_prompts).
  void stage(const T* src, const T* ahead) {
    constexpr index_t kLine = 64 / sizeof(T);
    for (index_t r = 0; r < rows; ++r) {
      const T* next = ahead + r * cols;
      for (index_t k = 0; k < cols; k += kLine) __builtin_prefetch(next + k, 0, 3);
      __builtin_prefetch(next + cols - 1, 0, 3);
      std::memcpy(get() + r * ld, src + r * cols, sizeof(T) * cols);
    }
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

// How many prompts ahead the kernels prefetch (AheadPrompts): at least one, and about kPrefetchBytes of E in flight
// (one prompt at d = 20, N = 100; several of the small ones at d = 5, N = 30).
constexpr index_t kPrefetchBytes = 4096;
template <class T>
inline index_t ahead_prompts(index_t prompt_values) {
  return std::max<index_t>(1, (kPrefetchBytes + index_t(sizeof(T)) * prompt_values - 1) /
                                  (index_t(sizeof(T)) * prompt_values));
}
// ---------------------------------------------------------------------------------------------
// Prediction: t_j = p·e_j, s_j = e_j·q, ŷ = (1/N) Σ_j t_j s_j and the backward sums  [SPEC 3.2].
//
// One pass over each prompt, read in place from E (no staging copy): blocks of up to 4 token
// chunks; per block the rows are read once for t and s (kept in registers), then read again from
// L1 for the backward row sums g_k[r] = Σ_j t_j E[r, j] and g_p[r] = Σ_j s_j E[r, j] while the
// block is still there. A row's last, partial chunk is the vector that ends at the row's end with
// the lanes of tokens already read masked to zero (so a token is counted once, in some lane; t, s
// and g only need each token once). Prompts narrower than a vector are staged zero-padded.

// Integer lane masks of a Vec<T>: lanes_from(first) has all bits set in lanes >= first; keep(x, m)
// is x with the other lanes 0 (bitwise: no arithmetic on x).
template <class T>
using LaneMask = std::conditional_t<sizeof(T) == 4, simd::I32x8, simd::I64x4>;
template <class T>
inline LaneMask<T> lanes_from(index_t first) {
  LaneMask<T> mask;
  for (index_t k = 0; k < kLanes<T>; ++k) mask[k] = k >= first ? -1 : 0;
  return mask;
}
template <class T>
inline Vec<T> keep(Vec<T> x, LaneMask<T> mask) {
  LaneMask<T> bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits &= mask;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// Where a prompt's token chunks are: row r's chunk c < n_full at src + r·stride + c·L, and, when
// `tail`, one last chunk at src + r·stride + tail_off, the lanes of tokens before n_full·L masked.
template <class T>
struct PromptChunks {
  const T* src;
  index_t stride, n_full, tail_off;
  bool tail;
  LaneMask<T> tail_mask;
  index_t n_chunks() const { return n_full + (tail ? 1 : 0); }
  Vec<T> full(index_t r, index_t c) const { return load(src + r * stride + c * kLanes<T>); }
  Vec<T> last(index_t r) const { return keep<T>(load(src + r * stride + tail_off), tail_mask); }
};

// Prefetches a byte range a few lines per call, spread over a prompt's compute so that the next
// prompts' reads overlap it (the hardware prefetchers alone leave the reads and the compute in
// turns: about half of the read bandwidth).
struct Prefetcher {
  const char *next = nullptr, *end = nullptr;
  void start(const void* p, size_t bytes) {
    next = static_cast<const char*>(p);
    end = next + bytes;
  }
  void step(int lines) {
    for (int i = 0; i < lines && next < end; ++i, next += 64) __builtin_prefetch(next, 0, 3);
  }
};

// NB chunks from chunk c0 (`load(r, c)` gives row r's chunk c): t, s in registers (stored to t, s
// when not null), Σ t s returned; with `backward`, g_k, g_p [rows] vector partial sums += the
// block's terms (second, L1-resident read of the block's rows).
template <class T, int NB, bool kBackward, class Load>
inline Vec<T> prediction_block(const Load& chunk, index_t rows, index_t c0, const T* p, const T* q,
                               T* t, T* s, Vec<T>* g_k, Vec<T>* g_p, Prefetcher& ahead) {
  Vec<T> tv[NB], sv[NB];
  for (int k = 0; k < NB; ++k) tv[k] = sv[k] = simd::zero<T>();
  for (index_t r = 0; r < rows; ++r) {
    ahead.step(1);
    const Vec<T> pr = simd::broadcast(p[r]), qr = simd::broadcast(q[r]);
    for (int k = 0; k < NB; ++k) {
      const Vec<T> e = chunk(r, c0 + k);
      tv[k] += pr * e;
      sv[k] += qr * e;
    }
  }
  if (kBackward)
    for (index_t r = 0; r < rows; ++r) {
      Vec<T> gk = g_k[r], gp = g_p[r];
      for (int k = 0; k < NB; ++k) {
        const Vec<T> e = chunk(r, c0 + k);
        gk += tv[k] * e;
        gp += sv[k] * e;
      }
      g_k[r] = gk;
      g_p[r] = gp;
    }
  Vec<T> acc = simd::zero<T>();
  for (int k = 0; k < NB; ++k) {
    if (t) {
      store(t + (c0 + k) * kLanes<T>, tv[k]);
      store(s + (c0 + k) * kLanes<T>, sv[k]);
    }
    acc += tv[k] * sv[k];
  }
  return acc;
}

// Per-range scratch of the prediction kernels: W^KQ^T, q, t and s (by chunk: chunk c's tokens in
// lanes of t + c·L; the last chunk's masked lanes are 0), the backward row sums g_k, g_p (reduced
// to scalars by lanes groups) and, for prompts narrower than a vector, the staged prompt.
template <class T>
struct PredictionScratch {
  index_t rows, cols, ld_rows;
  PaddedRows<T> staged;  // used when cols < lanes only
  PromptChunks<T> view{};
  simd::UnitVector<T> buffer;
  VecBuffer<T> g_vec;
  T *W_kq_t, *q, *t, *s, *g_k_sum, *g_p_sum;
  Prefetcher ahead;
  PredictionScratch(index_t d, index_t N, const T* W_kq)
      : rows(d + 1), cols(N + 1), ld_rows(round_up(d + 1, kLanes<T>)),
        staged(cols < kLanes<T> ? d + 1 : 0, N + 1),
        buffer(static_cast<size_t>(rows * ld_rows + 3 * ld_rows + 2 * (round_up(cols, kLanes<T>) +
                                                                         kLanes<T>)), T(0)),
        g_vec(2 * ld_rows) {
    W_kq_t = buffer.data();
    q = W_kq_t + rows * ld_rows;
    g_k_sum = q + ld_rows;
    g_p_sum = g_k_sum + ld_rows;
    t = g_p_sum + ld_rows;
    s = t + round_up(cols, kLanes<T>) + kLanes<T>;
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < rows; ++c) W_kq_t[c * ld_rows + r] = W_kq[r * rows + c];
    constexpr index_t L = kLanes<T>;
    const index_t n_full = cols / L, rest = cols - n_full * L;
    if (cols < L) view = {nullptr, staged.ld, 1, 0, false, lanes_from<T>(0)};
    else view = {nullptr, cols, n_full, cols - L, rest > 0, lanes_from<T>(L - rest)};
  }
  // Points the view at prompt Eb [rows, cols] (staging it when narrower than a vector).
  void view_prompt(const T* Eb) {
    if (cols < kLanes<T>) {
      staged.stage(Eb);
      view.src = staged.get();
    } else {
      view.src = Eb;
    }
  }
  T e(index_t r, index_t j) const { return view.src[r * view.stride + j]; }
  T query_label_slot() const { return e(rows - 1, cols - 1); }
  // q = W^KQ e_q, t, s (stored with `keep_ts`), the backward row sums with kBackward; returns
  // Σ_j t_j s_j. `next`, `next_bytes`: a later prompt, prefetched while this one is computed.
  template <bool kBackward>
  T pass(const T* Eb, const T* p, const void* next, size_t next_bytes, bool keep_ts) {
    constexpr index_t L = kLanes<T>;
    ahead.start(next, next_bytes);
    view_prompt(Eb);
    // q = W^KQ e_q = Σ_c e_q[c] · (column c of W^KQ)   [ZFB (3.6)]
    for (index_t k = 0; k < ld_rows; k += L) {
      Vec<T> acc = simd::zero<T>();
      for (index_t c = 0; c < rows; ++c) acc += simd::broadcast(e(c, cols - 1)) * load(W_kq_t + c * ld_rows + k);
      store(q + k, acc);
    }
    Vec<T>* g_k = g_vec.data();
    Vec<T>* g_p = g_k + ld_rows;
    if (kBackward)  // rows >= `rows` are never written and stay 0
      for (index_t r = 0; r < rows; ++r) g_k[r] = g_p[r] = simd::zero<T>();
    T* tt = keep_ts ? t : nullptr;
    const PromptChunks<T>& v = view;
    const auto full = [&v](index_t r, index_t c) { return v.full(r, c); };
    const auto mixed = [&v](index_t r, index_t c) { return c < v.n_full ? v.full(r, c) : v.last(r); };
    Vec<T> acc = simd::zero<T>();
    // Blocks of 4 whole chunks while more than 4 chunks are left, then one block of the 1 to 4
    // left (the partial last chunk among them).
    const index_t total = v.n_chunks();
    index_t c = 0;
    for (; total - c > 4; c += 4)
      acc += prediction_block<T, 4, kBackward>(full, rows, c, p, q, tt, s, g_k, g_p, ahead);
    switch (total - c) {
      case 4: acc += prediction_block<T, 4, kBackward>(mixed, rows, c, p, q, tt, s, g_k, g_p, ahead); break;
      case 3: acc += prediction_block<T, 3, kBackward>(mixed, rows, c, p, q, tt, s, g_k, g_p, ahead); break;
      case 2: acc += prediction_block<T, 2, kBackward>(mixed, rows, c, p, q, tt, s, g_k, g_p, ahead); break;
      default: acc += prediction_block<T, 1, kBackward>(mixed, rows, c, p, q, tt, s, g_k, g_p, ahead);
    }
    ahead.step(1 << 20);  // what the blocks did not reach
    if (kBackward)
      for (index_t r0 = 0; r0 < ld_rows; r0 += L) {  // lanes groups: L row sums per reduction
        store(g_k_sum + r0, simd::hsum_lanes(g_k + r0));
        store(g_p_sum + r0, simd::hsum_lanes(g_p + r0));
      }
    return hsum(acc);
  }
  T g_k(index_t r) const { return g_k_sum[r]; }
  T g_p(index_t r) const { return g_p_sum[r]; }
};

// The prompt `ahead` prompts after b (clamped to the range) and its size in bytes.
template <class T>
struct AheadPrompts {
  const T* E;
  index_t values, ahead, b1;
  AheadPrompts(const T* E_, index_t values_, index_t b1_)
      : E(E_), values(values_), ahead(ahead_prompts<T>(values_)), b1(b1_) {}
  const T* at(index_t b) const { return E + std::min(b + ahead, b1 - 1) * values; }
  size_t bytes(index_t b) const { return b + ahead < b1 ? sizeof(T) * size_t(values) : 0; }
};

// ---------------------------------------------------------------------------------------------
// Prompts in lanes (small d): L = kLanes<T> prompts at once, lane l of every vector being prompt
// b + l of the group (as the H-head Wishart step, multihead_kernels.inl). At d = 5, N = 20 a prompt
// is 3 token chunks, and the token-lane pass above spends more on its per-prompt fixed work (q,
// the lane reductions of g_k and g_p, the scalar gradient sums) than on its token arithmetic. Here
// every step is a vector operation over L prompts and nothing is reduced across lanes before the
// range's end. The group's prompts are transposed in blocks of L values (simd::transpose) into
// X [values] (vectors, L1-resident: X[r·cols + j] holds E[r, j] of the L prompts), then, in the
// recipe's per-prompt order (common/lsa_recipe.hpp: sums over r, then sequentially over j):
//   q_r = Σ_c W^KQ[r, c] e_q[c],  t_j = Σ_r p_r X[r, j],  s_j = Σ_r q_r X[r, j],  Σ_j t_j s_j,
//   g_k[r] = Σ_j t_j X[r, j],  g_p[r] = Σ_j s_j X[r, j]   [ZFB (3.6), SPEC 3.2]
// (at d + 1 ≤ kGramMaxRows the backward passes instead form G = Σ_j X[:, j] X[:, j]ᵀ and take
// g_k = G p, g_p = G q, Σ_j t_j s_j = pᵀ G q: fewer products there, LanePrompts::gram_pass)
// and the batch sums of the gradients in double per lane (LaneGradSums), the lanes added in order
// at the range's end. A group's lanes past the range repeat its last prompt and weigh 0.

// Whether the prompts-in-lanes kernels run: d ≤ 8 and at most `max_tokens` tokens N + 1. Beyond,
// the token-lane kernels' per-prompt fixed work is a small part of a prompt, and the transposes
// cost more than it saves. The limits per kernel are the measured crossovers (bench/
// report_lsa_bandwidth.py, d = 2..8, same-run ratios): the loss gradient and the prediction VJP
// without dE gain up to N + 1 ≈ 48 (1.2-2.9x at N + 1 = 21..41), the VJP with dE up to 24; the
// prediction alone (no backward sums to save) gains in float32 up to 24 tokens and loses in
// float64 (its lanes are half as many per transpose).
constexpr index_t kLanesMaxRows = 9;
constexpr index_t kLanesMaxTokensBackward = 48, kLanesMaxTokensInputGrad = 24;
template <class T>
constexpr index_t kLanesMaxTokensPredict = sizeof(T) == 4 ? 24 : 0;
// Up to which d + 1 the backward passes run Gram-first (LanePrompts::gram_pass): its
// (d+1)(d+2)/2 products per token against the token pass's 4(d+1) + 1, in blocks of 7 register
// sums (measured best of 5..14 at d = 5). Measured (same-run min of 301-801 calls, N = 20, B =
// 4096, one thread, Zen 3 AVX2): the loss gradient's time 0.80x-0.94x in float32 and 0.83x-0.99x in
// float64 for d = 1..5 (d = 5: 0.94x, 0.96x; N = 40: 0.90x, 0.94x), 1.01x-1.20x from d = 6 on.
constexpr index_t kGramMaxRows = 6;
inline bool prompts_in_lanes(index_t d, index_t N, index_t max_tokens) {
  return d + 1 <= kLanesMaxRows && N + 1 <= max_tokens;
}

// The upper-triangle entries (a[e], b[e]), a ≤ b, of an R x R matrix in row-major order.
template <int R>
struct GramPairs {
  int a[R * (R + 1) / 2] = {}, b[R * (R + 1) / 2] = {};
  constexpr GramPairs() {
    int e = 0;
    for (int i = 0; i < R; ++i)
      for (int j = i; j < R; ++j, ++e) a[e] = i, b[e] = j;
  }
};

template <class T>
struct LanePrompts {
  static constexpr index_t L = kLanes<T>;
  index_t rows, cols, values, N;
  VecBuffer<T> buf;
  Vec<T> *X, *q, *t, *s, *g_k, *g_p, *p;  // p_r broadcast
  simd::UnitVector<T> W;                       // W^KQ [rows, rows]
  const T* src[kLanes<T>];
  Prefetcher ahead;
  int ahead_lines = 0;  // lines of the next group prefetched per token block
  LanePrompts(index_t d, index_t N_, const T* W_pv, const T* W_kq)
      : rows(d + 1), cols(N_ + 1), values((d + 1) * (N_ + 1)), N(N_),
        buf(values + 5 * rows + 2 * cols), W(W_kq, W_kq + rows * rows) {
    X = buf.data();
    q = X + values;
    g_k = q + rows;
    g_p = g_k + rows;
    p = g_p + rows;
    t = p + rows;
    s = t + cols;
    for (index_t r = 0; r < rows; ++r) p[r] = simd::broadcast(W_pv[d * rows + r]);  // last row of W^PV
  }
  // Transposes prompts b .. b + count − 1 of E (count ≤ L; lanes past count repeat the last) into
  // X and starts prefetching `next_bytes` from `next` (the following group).
  void stage(const T* E, index_t b, index_t count, const void* next, size_t next_bytes) {
    ahead.start(next, next_bytes);  // spread over the token blocks of pass()
    ahead_lines = int((index_t(next_bytes) / 64 + (cols + 3) / 4) / ((cols + 3) / 4 + 1));
    for (index_t l = 0; l < L; ++l) src[l] = E + (b + std::min(l, count - 1)) * values;
    if (values < L) {  // d = 1, N ≤ 2: values one by one
      for (index_t i = 0; i < values; ++i)
        for (index_t l = 0; l < L; ++l) X[i][l] = src[l][i];
      return;
    }
    // Blocks of L values; the last block ends at the prompt's end (overlapping the one before it:
    // the values in both are written twice, the same).
    for (index_t i0 = 0;; i0 += L) {
      const index_t at = std::min(i0, values - L);
      Vec<T> v[L];
      for (index_t l = 0; l < L; ++l) v[l] = load(src[l] + at);
      simd::transpose(v);
      for (index_t k = 0; k < L; ++k) X[at + k] = v[k];
      if (at + L == values) break;
    }
  }
  // The inverse of stage(): X [values] (lane l = prompt b + l) into the prompts b .. b + count − 1
  // of out, adding x − x of every value to `poison` (lanes past count repeat the last prompt).
  void unstage(T* out, index_t b, index_t count, Vec<T>& poison) const {
    for (index_t i = 0; i < values; ++i) poison += X[i] - X[i];
    if (values < L) {
      for (index_t i = 0; i < values; ++i)
        for (index_t l = 0; l < count; ++l) out[(b + l) * values + i] = X[i][l];
      return;
    }
    for (index_t i0 = 0;; i0 += L) {  // blocks as in stage()
      const index_t at = std::min(i0, values - L);
      Vec<T> v[L];
      for (index_t k = 0; k < L; ++k) v[k] = X[at + k];
      simd::transpose(v);
      for (index_t l = 0; l < count; ++l) store(out + (b + l) * values + at, v[l]);
      if (at + L == values) break;
    }
  }
  Vec<T> x(index_t r, index_t j) const { return X[r * cols + j]; }
  Vec<T> e_q(index_t r) const { return x(r, N); }
  // q, t, s and Σ_j t_j s_j; with kBackward also g_k, g_p. Returns ŷ (the recipe's epilogue).
  template <bool kBackward>
  Vec<T> pass() {
    for (index_t r = 0; r < rows; ++r) {  // q_r = (W^KQ e_q)_r   [ZFB (3.6)]
      Vec<T> acc = simd::zero<T>();
      for (index_t c = 0; c < rows; ++c) acc += simd::broadcast(W[r * rows + c]) * e_q(c);
      q[r] = acc;
    }
    if (kBackward)
      for (index_t r = 0; r < rows; ++r) g_k[r] = g_p[r] = simd::zero<T>();
    Vec<T> dot = simd::zero<T>();
    index_t j = 0;
    for (; j + 4 <= cols; j += 4) tokens<4, kBackward>(j, dot);
    switch (cols - j) {
      case 3: tokens<3, kBackward>(j, dot); break;
      case 2: tokens<2, kBackward>(j, dot); break;
      case 1: tokens<1, kBackward>(j, dot); break;
      default: break;
    }
    ahead.step(1 << 20);
    return e_q(rows - 1) + dot * simd::broadcast(T(1) / T(N));  // recipe::prediction per lane
  }
  // Tokens j0 .. j0 + JB − 1: t_j, s_j in registers (2·JB independent chains over the rows, each
  // p_r, q_r load used JB times), stored to t, s; dot += t_j s_j; with kBackward the row sums
  // g_k[r] += t_j X[r, j], g_p[r] += s_j X[r, j] while the block's X is in L1 (the same sequential
  // order over j as one token at a time).
  template <int JB, bool kBackward>
  void tokens(index_t j0, Vec<T>& dot) {
    ahead.step(ahead_lines);
    Vec<T> tj[JB], sj[JB];
    for (int k = 0; k < JB; ++k) tj[k] = sj[k] = simd::zero<T>();
    for (index_t r = 0; r < rows; ++r) {
      const Vec<T> pr = p[r], qr = q[r];
      const Vec<T>* xr = X + r * cols + j0;
      for (int k = 0; k < JB; ++k) {
        tj[k] += pr * xr[k];
        sj[k] += qr * xr[k];
      }
    }
    for (int k = 0; k < JB; ++k) {
      t[j0 + k] = tj[k];
      s[j0 + k] = sj[k];
      dot += tj[k] * sj[k];
    }
    if (kBackward)
      for (index_t r = 0; r < rows; ++r) {
        const Vec<T>* xr = X + r * cols + j0;
        Vec<T> gk = g_k[r], gp = g_p[r];
        for (int k = 0; k < JB; ++k) {
          gk += tj[k] * xr[k];
          gp += sj[k] * xr[k];
        }
        g_k[r] = gk;
        g_p[r] = gp;
      }
  }
  // ŷ, g_k and g_p (t and s not kept): Gram-first up to kGramMaxRows rows, where it is the
  // faster (measured: kGramMaxRows), else pass<true>.
  Vec<T> backward_pass() { return rows <= kGramMaxRows ? gram_pass() : pass<true>(); }
  // ŷ, g_k and g_p Gram-first (the backward without t and s): G = Σ_j X[:, j] X[:, j]ᵀ (sequentially
  // over j), then g_k = G p, g_p = G q and Σ_j t_j s_j = pᵀ G q = p · g_p. Per token that is
  // (d+1)(d+2)/2 products instead of the 4(d+1) + 1 of pass<true>, and the backward does not wait
  // for the forward: the Gram sums are independent chains over the tokens, in registers. Its
  // roundings are those of the Gram-first form, not the recipe's token order (within the same
  // bound: tests/test_lsa_lanes.py, the ISA tables' agreement in cpp/tests/test_isa.cpp).
  Vec<T> gram_pass() {
    for (index_t r = 0; r < rows; ++r) {  // q_r = (W^KQ e_q)_r   [ZFB (3.6)]
      Vec<T> acc = simd::zero<T>();
      for (index_t c = 0; c < rows; ++c) acc += simd::broadcast(W[r * rows + c]) * e_q(c);
      q[r] = acc;
    }
    static_assert(kGramMaxRows == 6, "gram_pass's cases are d + 1 = 1 .. 6");
    Vec<T> G[kGramMaxRows * kGramMaxRows];
    switch (rows) {
      case 2: gram<2>(G); break;
      case 3: gram<3>(G); break;
      case 4: gram<4>(G); break;
      case 5: gram<5>(G); break;
      case 6: gram<6>(G); break;
      default: gram<1>(G);
    }
    ahead.step(1 << 20);
    Vec<T> dot = simd::zero<T>();
    for (index_t r = 0; r < rows; ++r) {
      Vec<T> gk = simd::zero<T>(), gp = simd::zero<T>();
      for (index_t c = 0; c < rows; ++c) {
        gk += G[r * rows + c] * p[c];
        gp += G[r * rows + c] * q[c];
      }
      g_k[r] = gk;
      g_p[r] = gp;
      dot += p[r] * gp;
    }
    return e_q(rows - 1) + dot * simd::broadcast(T(1) / T(N));  // recipe::prediction per lane
  }
  // G [R, R] (both triangles) = Σ_j X[:, j] X[:, j]ᵀ for R = rows: the R(R+1)/2 upper entries in
  // blocks of up to kGramBlock register accumulators, each block one pass over the tokens.
  static constexpr int kGramBlock = 7;
  template <int R, int E0 = 0>
  void gram(Vec<T>* G) {
    constexpr int n = R * (R + 1) / 2, K = n - E0 < kGramBlock ? n - E0 : kGramBlock;
    gram_entries<R, E0, K>(G);
    if constexpr (E0 + K < n) gram<R, E0 + K>(G);
  }
  // Upper entries E0 .. E0 + K − 1 (row-major over a ≤ b) of G.
  template <int R, int E0, int K>
  void gram_entries(Vec<T>* G) {
    constexpr GramPairs<R> pairs{};
    Vec<T> acc[K];
    for (int k = 0; k < K; ++k) acc[k] = simd::zero<T>();
    for (index_t j = 0; j < cols; ++j) {
      if (j % 4 == 0) ahead.step(1);
      for (int k = 0; k < K; ++k)
        acc[k] += X[pairs.a[E0 + k] * cols + j] * X[pairs.b[E0 + k] * cols + j];
    }
    for (int k = 0; k < K; ++k)
      G[pairs.a[E0 + k] * R + pairs.b[E0 + k]] = G[pairs.b[E0 + k] * R + pairs.a[E0 + k]] = acc[k];
  }
  // The L values at v[b], lanes past count repeating v[b + count − 1].
  Vec<T> gather(const T* v, index_t b, index_t count) const {
    Vec<T> out;
    for (index_t l = 0; l < L; ++l) out[l] = v[b + std::min(l, count - 1)];
    return out;
  }
};

// The lanes of a vector of T in double: D vectors.
template <class T>
constexpr index_t kDoubleVecs = kLanes<T> / kLanes<double>;

// Batch sums in double, per lane, of Σ c_b g_p,b (→ ∂/∂p), Σ c_b g_k,b e_q,bᵀ (→ ∂/∂W^KQ) and
// Σ c_b² (the loss) for per-prompt coefficients c_b: PredictionGradSums' terms with the prompts in
// lanes; write() adds the lanes in order.
template <class T>
struct LaneGradSums {
  static constexpr index_t L = kLanes<T>, D = kDoubleVecs<T>;
  index_t rows;
  VecBuffer<double> acc;  // zeroed [1 + rows + rows², D]: loss, d_p, d_K; then e_q [rows, D]
  explicit LaneGradSums(index_t rows_)
      : rows(rows_), acc((1 + 2 * rows_ + rows_ * rows_) * D) {}
  // res: the group's residuals (or dŷ) in double, 0 in the lanes past the range; scale: 1/N.
  void add(const Vec<double>* res, double scale, const LanePrompts<T>& w, bool with_loss) {
    Vec<double>* loss = acc.data();
    Vec<double>* d_p = loss + D;
    Vec<double>* d_K = d_p + rows * D;
    Vec<double>* eq = d_K + rows * rows * D;
    Vec<double> coef[D];
    for (index_t k = 0; k < D; ++k) {
      if (with_loss) loss[k] += res[k] * res[k];
      coef[k] = res[k] * scale;  // recipe::residual_scale
    }
    for (index_t c = 0; c < rows; ++c) to_double(w.e_q(c), eq + c * D);
    for (index_t r = 0; r < rows; ++r) {
      Vec<double> gp[D], u[D];
      to_double(w.g_p[r], gp);
      to_double(w.g_k[r], u);
      for (index_t k = 0; k < D; ++k) {
        d_p[r * D + k] += coef[k] * gp[k];  // d_p += c g_p
        u[k] = coef[k] * u[k];
      }
      for (index_t c = 0; c < rows; ++c)  // d_K += (c g_k) e_qᵀ
        for (index_t k = 0; k < D; ++k) d_K[(r * rows + c) * D + k] += u[k] * eq[c * D + k];
    }
  }
  // The loss (with_loss) then d_p [rows], d_K [rows, rows] into out, each the sum of its lanes.
  void write(double* out, bool with_loss) const {
    const index_t first = with_loss ? 0 : 1, terms = 1 + rows + rows * rows;
    for (index_t i = first; i < terms; ++i) {
      double sum = 0;
      for (index_t k = 0; k < D; ++k)
        for (index_t l = 0; l < kLanes<double>; ++l) sum += acc[i * D + k][l];
      *out++ = sum;
    }
  }
};

// The group's values v (lanes past count set to 0) in double.
template <class T>
inline void lanes_to_double(Vec<T> v, index_t count, Vec<double>* out) {
  for (index_t l = count; l < kLanes<T>; ++l) v[l] = T(0);
  to_double(v, out);
}

// Runs fn(b, count) for the groups of kLanes<T> prompts of [b0, b1) with w staged.
template <class T, class Fn>
inline void for_each_lane_group(LanePrompts<T>& w, const T* E, index_t b0, index_t b1, Fn&& fn) {
  constexpr index_t L = kLanes<T>;
  for (index_t b = b0; b < b1; b += L) {
    const index_t count = std::min(L, b1 - b);
    const index_t after = std::min(b1 - (b + count), L);  // prompts of the next group
    w.stage(E, b, count, E + (b + count) * w.values, sizeof(T) * size_t(after * w.values));
    fn(b, count);
  }
}

// The lanes of y with lanes < count stored to out[0 .. count).
template <class T>
inline void store_lanes(T* out, Vec<T> y, index_t count) {
  if (count == kLanes<T>) store(out, y);
  else for (index_t l = 0; l < count; ++l) out[l] = y[l];
}

template <class T>
bool predict_lanes(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, T* y_hat,
                   index_t b0, index_t b1) {
  LanePrompts<T> w(sh.dim, sh.context, W_pv, W_kq);
  Vec<T> poison = simd::zero<T>();
  for_each_lane_group(w, E, b0, b1, [&](index_t b, index_t count) {
    const Vec<T> y = w.template pass<false>();
    store_lanes<T>(y_hat + b, y, count);
    poison += y - y;  // lanes past count repeat a prompt of the group
  });
  return detail::poison_clear(hsum(poison));
}

template <class T>
void loss_grad_lanes(const LsaShape& sh, const T* E, const T* y_q, const T* W_pv, const T* W_kq,
                     T* y_hat, index_t b0, index_t b1, double* partial) {
  LanePrompts<T> w(sh.dim, sh.context, W_pv, W_kq);
  LaneGradSums<T> sums(w.rows);
  const double scale = recipe::residual_scale<T>(1.0, sh.context);
  for_each_lane_group(w, E, b0, b1, [&](index_t b, index_t count) {
    const Vec<T> pred = w.backward_pass();
    if (y_hat) store_lanes<T>(y_hat + b, pred, count);
    Vec<double> res[kDoubleVecs<T>], y[kDoubleVecs<T>];
    lanes_to_double<T>(pred, count, res);
    lanes_to_double<T>(w.gather(y_q, b, count), count, y);
    for (index_t k = 0; k < kDoubleVecs<T>; ++k) res[k] -= y[k];  // r = ŷ − y in double
    sums.add(res, scale, w, true);
  });
  sums.write(partial, true);
}

template <class T>
bool predict_range(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, T* y_hat,
                   index_t b0, index_t b1) {
  if (prompts_in_lanes(sh.dim, sh.context, kLanesMaxTokensPredict<T>))
    return predict_lanes(sh, E, W_pv, W_kq, y_hat, b0, b1);
  const index_t d = sh.dim, N = sh.context, values = (d + 1) * (N + 1);
  PredictionScratch<T> w(d, N, W_kq);
  const AheadPrompts<T> next(E, values, b1);
  const T* p = W_pv + d * (d + 1);  // last row of W^PV
  T poison = T(0);
  for (index_t b = b0; b < b1; ++b) {
    const T dot = w.template pass<false>(E + b * values, p, next.at(b), next.bytes(b), false);
    y_hat[b] = recipe::prediction(w.query_label_slot(), dot, N);  // the recipe's epilogue
    poison += detail::poison(y_hat[b]);
  }
  return detail::poison_clear(poison);
}

// Batch sums in double of Σ c_b g_p,b (→ ∂/∂p) and Σ c_b g_k,b e_q,bᵀ (→ ∂/∂W^KQ) for per-prompt
// coefficients c_b (r_b/N for the loss, dŷ_b/N for the VJP), rows padded to whole double vectors.
// The rank-one terms of kGroup prompts are added together (each d_K vector loaded and stored once
// per group), in prompt order: the same roundings as adding them one prompt at a time.
struct PredictionGradSums {
  static constexpr index_t LD = kLanes<double>;
  static constexpr int kGroup = 8;
  index_t rows, ld;
  int pending = 0;
  simd::UnitVector<double> acc;
  double *d_p, *d_K, *e_q, *u;  // e_q [kGroup, ld], u [kGroup, rows]: the pending c_b g_k,b e_q,bᵀ
  explicit PredictionGradSums(index_t rows_)
      : rows(rows_), ld(round_up(rows_, LD)),
        acc(static_cast<size_t>((rows_ + 1 + kGroup) * ld + kGroup * rows_), 0.0) {
    d_p = acc.data();
    d_K = d_p + ld;
    e_q = d_K + rows * ld;
    u = e_q + kGroup * ld;
  }
  template <class T>
  void add(double coef, const PredictionScratch<T>& w) {
    double* eq = e_q + pending * ld;
    double* ub = u + pending * rows;
    for (index_t r = 0; r < rows; ++r) {
      eq[r] = double(w.e(r, w.cols - 1));
      d_p[r] += coef * double(w.g_p(r));
      ub[r] = coef * double(w.g_k(r));
    }
    if (++pending == kGroup) flush();
  }
  void flush() {
    for (index_t r = 0; r < rows; ++r) {
      double* row = d_K + r * ld;
      for (index_t k = 0; k < ld; k += LD) {
        Vec<double> v = load(row + k);
        for (int i = 0; i < pending; ++i) v += simd::broadcast(u[i * rows + r]) * load(e_q + i * ld + k);
        store(row + k, v);
      }
    }
    pending = 0;
  }
  // d_p [rows] then d_K [rows, rows] into out.
  void write(double* out) {
    flush();
    for (index_t r = 0; r < rows; ++r) {
      out[r] = d_p[r];
      for (index_t c = 0; c < rows; ++c) out[rows + r * rows + c] = d_K[r * ld + c];
    }
  }
};

template <class T>
void loss_grad_range(const LsaShape& sh, const T* E, const T* y_q, const T* W_pv, const T* W_kq,
                     T* y_hat, index_t b0, index_t b1, double* partial) {
  if (prompts_in_lanes(sh.dim, sh.context, kLanesMaxTokensBackward))
    return loss_grad_lanes(sh, E, y_q, W_pv, W_kq, y_hat, b0, b1, partial);
  const index_t d = sh.dim, N = sh.context, rows = d + 1, values = rows * (N + 1);
  PredictionScratch<T> w(d, N, W_kq);
  const AheadPrompts<T> next(E, values, b1);
  PredictionGradSums sums(rows);
  double loss = 0;
  const T* p = W_pv + d * rows;
  for (index_t b = b0; b < b1; ++b) {
    // one read of the prompt: ŷ and g_p = Σ_j s_j e_j, g_k = Σ_j t_j e_j (the 1/N in `scaled`)
    const T dot = w.template pass<true>(E + b * values, p, next.at(b), next.bytes(b), false);
    const T pred = recipe::prediction(w.query_label_slot(), dot, N);
    if (y_hat) y_hat[b] = pred;
    const double residual = double(pred) - double(y_q[b]);
    loss += residual * residual;
    // d_p += r g_p;  d_K += (r g_k) e_q^T   (SPEC 3.2)
    sums.add(recipe::residual_scale<T>(residual, N), w);
  }
  partial[0] = loss;
  sums.write(partial + 1);
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
  simd::UnitVector<S> storage;
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
  simd::UnitVector<T> P(static_cast<size_t>(rows * rows));
  PaddedRows<T> e(rows, cols), f(rows, cols);
  Vec<T> poison = simd::zero<T>();
  const AheadPrompts<T> next(E, rows * cols, b1);
  for (index_t b = b0; b < b1; ++b) {
    e.stage(E + b * rows * cols, next.at(b));
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
  simd::UnitVector<double> d_W(static_cast<size_t>(2 * n2), 0.0);  // Σ_b dW^PV, Σ_b dW^KQ in double
  m.set(m[kWpvT], W_pv, true);
  m.set(m[kWkqT], W_kq, true);
  simd::UnitVector<T> coef(static_cast<size_t>(n2));
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
