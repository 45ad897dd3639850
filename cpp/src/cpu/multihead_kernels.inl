// CPU kernels of the H-head LSA (multihead.hpp), included by lsa_kernels_{base,avx2,avx512}.cpp after
// lsa_kernels.inl (LSA_ISA_NS defined): they reuse its token-axis tiles (PaddedRows, token_products,
// row_combination) and the small-matrix kit (SmallMatrices).
//
// Gram-first: per prompt G = E Eᵀ / N once (the only pass over the tokens, O(N d²)), then per head
// from G and the query column only (O(d²) per head):
//   q_h = W^KQ_h e_q,  G q_h,  G p_h,  ŷ = E[d, N] + Σ_h p_h · (G q_h)                 [ZFB (3.6)]
//   ∂ŷ/∂p_h = G q_h,  ∂ŷ/∂W^KQ_h = (G p_h) e_qᵀ.
// Small vectors are padded to whole SIMD vectors (lr = round_up(d+1, lanes)) with zero padding, so
// every product G x = Σ_c x_c G[c, :] (G symmetric) is d+1 vector FMAs.
#ifndef LSA_ISA_NS
#error "define LSA_ISA_NS before including multihead_kernels.inl"
#endif

#include "cpu/multihead_kernels.hpp"

namespace lsa_native::cpu::LSA_ISA_NS {
namespace {

// y[0:lr] = Σ_{c < n} x[c] M[c, :] for M [n, lr] (rows padded to whole vectors); y != M's rows.
template <class T>
inline void combine_rows(const T* M, const T* x, index_t n, index_t lr, T* y) {
  for (index_t k = 0; k < lr; k += kLanes<T>) {
    Vec<T> acc = simd::zero<T>();
    for (index_t c = 0; c < n; ++c) acc += simd::broadcast(x[c]) * load(M + c * lr + k);
    store(y + k, acc);
  }
}

// Σ_k a[k] b[k] over lr padded entries.
template <class T>
inline T padded_dot(const T* a, const T* b, index_t lr) {
  Vec<T> acc = simd::zero<T>();
  for (index_t k = 0; k < lr; k += kLanes<T>) acc += load(a + k) * load(b + k);
  return hsum(acc);
}

// Per-range scratch of the Gram-first prediction kernels: the staged prompt, G, and per head the
// padded p_h, W^KQ_h, W^KQ_hᵀ, q_h, G q_h, G p_h; double accumulators of the gradients.
template <class T>
struct HeadsScratch {
  index_t H, rows, cols, N, lr, lrd;
  PaddedRows<T> staged;
  simd::UnitVector<T> buf;
  simd::UnitVector<double> dbuf;
  T *G, *p, *W, *Wt, *e_q, *q, *Gq, *Gp;
  double *e_qd, *d_p, *d_K;  // e_q in double [lrd]; Σ w ∂ŷ/∂p_h [H, rows]; Σ w ∂ŷ/∂W^KQ_h [H, rows, lrd]

  HeadsScratch(index_t heads, index_t d, index_t N_, const T* W_pv, const T* W_kq)
      : H(heads), rows(d + 1), cols(N_ + 1), N(N_), lr(round_up(d + 1, kLanes<T>)),
        lrd(round_up(d + 1, kLanes<double>)), staged(d + 1, N_ + 1),
        buf(static_cast<size_t>(rows * lr + H * lr * (2 * rows + 4) + lr), T(0)),
        dbuf(static_cast<size_t>(lrd + H * rows + H * rows * lrd), 0.0) {
    G = buf.data();
    p = G + rows * lr;
    W = p + H * lr;
    Wt = W + H * rows * lr;
    q = Wt + H * rows * lr;
    Gq = q + H * lr;
    Gp = Gq + H * lr;
    e_q = Gp + H * lr;
    e_qd = dbuf.data();
    d_p = e_qd + lrd;
    d_K = d_p + H * rows;
    const index_t n2 = rows * rows;
    for (index_t h = 0; h < H; ++h)
      for (index_t r = 0; r < rows; ++r) {
        p[h * lr + r] = W_pv[h * n2 + d * rows + r];  // last row of W^PV_h
        for (index_t c = 0; c < rows; ++c) {
          W[(h * rows + r) * lr + c] = W_kq[h * n2 + r * rows + c];
          Wt[(h * rows + c) * lr + r] = W_kq[h * n2 + r * rows + c];
        }
      }
  }
  T* head(T* base, index_t h) const { return base + h * lr; }

  // Stages prompt Eb, forms G, q_h, G q_h, G p_h (when `with_Gp`) and returns ŷ.
  T predict(const T* Eb, bool with_Gp) {
    staged.stage(Eb);
    const T* e = staged.get();
    token_products(e, e, rows, staged.ld, T(1) / T(N), G, lr, true);  // G = E Eᵀ / N
    for (index_t r = 0; r < rows; ++r) e_q[r] = e[r * staged.ld + N];
    T y = e_q[rows - 1];  // the query's label slot
    for (index_t h = 0; h < H; ++h) {
      combine_rows(Wt + h * rows * lr, e_q, rows, lr, head(q, h));  // q_h = W^KQ_h e_q
      combine_rows(G, head(q, h), rows, lr, head(Gq, h));             // G q_h
      if (with_Gp) combine_rows(G, head(p, h), rows, lr, head(Gp, h));  // G p_h
      y += padded_dot(head(p, h), head(Gq, h), lr);
    }
    return y;
  }

  // d_p_h += w G q_h,  d_K_h += (w G p_h) e_qᵀ  (w = the residual or dŷ; sums in double).
  void accumulate(double w) {
    constexpr index_t LD = kLanes<double>;
    for (index_t r = 0; r < rows; ++r) e_qd[r] = double(e_q[r]);
    for (index_t h = 0; h < H; ++h) {
      const T* gq = head(Gq, h);
      const T* gp = head(Gp, h);
      for (index_t r = 0; r < rows; ++r) {
        d_p[h * rows + r] += w * double(gq[r]);
        const Vec<double> coef = simd::broadcast(w * double(gp[r]));
        double* row = d_K + (h * rows + r) * lrd;
        for (index_t c = 0; c < lrd; c += LD) store(row + c, load(row + c) + coef * load(e_qd + c));
      }
    }
  }

  // out[0 : H·rows] = d_p, out[H·rows : ] = d_K unpadded [H, rows, rows].
  void write_partial(double* out) const {
    for (index_t i = 0; i < H * rows; ++i) out[i] = d_p[i];
    double* k = out + H * rows;
    for (index_t hr = 0; hr < H * rows; ++hr)
      for (index_t c = 0; c < rows; ++c) k[hr * rows + c] = d_K[hr * lrd + c];
  }
};

template <class T>
bool mh_predict_range(const LsaShape& sh, index_t H, const T* E, const T* W_pv, const T* W_kq,
                      T* y_hat, index_t b0, index_t b1) {
  HeadsScratch<T> w(H, sh.dim, sh.context, W_pv, W_kq);
  const index_t stride = w.rows * w.cols;
  T poison = T(0);
  for (index_t b = b0; b < b1; ++b) {
    y_hat[b] = w.predict(E + b * stride, false);
    poison += detail::poison(y_hat[b]);
  }
  return detail::poison_clear(poison);
}

template <class T>
void mh_loss_grad_range(const LsaShape& sh, index_t H, const T* E, const T* y_q, const T* W_pv,
                        const T* W_kq, T* y_hat, index_t b0, index_t b1, double* partial) {
  HeadsScratch<T> w(H, sh.dim, sh.context, W_pv, W_kq);
  const index_t stride = w.rows * w.cols;
  double loss = 0;
  for (index_t b = b0; b < b1; ++b) {
    const T pred = w.predict(E + b * stride, true);
    if (y_hat) y_hat[b] = pred;
    const double residual = double(pred) - double(y_q[b]);
    loss += residual * residual;
    w.accumulate(residual);
  }
  partial[0] = loss;
  w.write_partial(partial + 1);
}

template <class T>
bool mh_predict_vjp_range(const LsaShape& sh, index_t H, const T* E, const T* W_pv,
                          const T* W_kq, const T* d_y, T* d_E, index_t b0, index_t b1,
                          double* partial) {
  HeadsScratch<T> w(H, sh.dim, sh.context, W_pv, W_kq);
  const index_t rows = w.rows, lr = w.lr, stride = rows * w.cols, N = w.N;
  PaddedRows<T> zero(rows, w.cols), de(rows, w.cols);
  simd::UnitVector<T> S(static_cast<size_t>(rows * rows)), through(static_cast<size_t>(lr));
  Vec<T> poison = simd::zero<T>();
  for (index_t b = b0; b < b1; ++b) {
    w.predict(E + b * stride, true);
    const T g = d_y[b];
    w.accumulate(double(g));
    if (!d_E) continue;
    // coef = (dŷ/N) Σ_h (p_h q_hᵀ + q_h p_hᵀ);  dE = coef E (+ the query column terms)
    const T gn = g / T(N);
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < rows; ++c) {
        T acc = T(0);
        for (index_t h = 0; h < H; ++h) {
          const T* ph = w.head(w.p, h);
          const T* qh = w.head(w.q, h);
          acc += ph[r] * qh[c] + qh[r] * ph[c];
        }
        S[r * rows + c] = gn * acc;
      }
    row_combination(zero.get(), S.data(), w.staged.get(), rows, w.staged.ld, de.get());
    // Σ_h W^KQ_hᵀ G p_h = Σ_h Σ_k (G p_h)_k W^KQ_h[k, :]: the query column through q_h.
    std::fill(through.begin(), through.end(), T(0));
    for (index_t h = 0; h < H; ++h) {
      const T* W = w.W + h * rows * lr;
      const T* gp = w.head(w.Gp, h);
      for (index_t k = 0; k < rows; ++k)
        for (index_t r = 0; r < rows; ++r) through[r] += gp[k] * W[k * lr + r];
    }
    T* out = de.get();
    for (index_t r = 0; r < rows; ++r) out[r * de.ld + N] += g * through[r];
    out[(rows - 1) * de.ld + N] += g;  // the query-label slot
    de.unstage(d_E + b * stride, poison);
  }
  w.write_partial(partial);
  return detail::poison_clear(hsum(poison));
}

// P = Σ_h W^PV_h G W^KQ_h from G in m[kG] into m[kP], with the weights in m[first + 2h] (W^PV_h)
// and m[first + 2h + 1] (W^KQ_h); kGW is scratch.
template <class T>
void mh_forward_matrix(SmallMatrices<T>& m, index_t H, int kG, int kGW, int kP, int first) {
  for (index_t h = 0; h < H; ++h) {
    m.multiply(m[kG], m[first + 2 * int(h) + 1], m[kGW]);   // G W^KQ_h
    m.multiply(m[first + 2 * int(h)], m[kGW], m[kP], h > 0);  // P += W^PV_h G W^KQ_h
  }
}

template <class T>
bool mh_forward_range(const LsaShape& sh, index_t H, const T* E, const T* W_pv, const T* W_kq,
                      T* F, index_t b0, index_t b1) {
  const index_t N = sh.context, rows = sh.dim + 1, cols = N + 1, n2 = rows * rows;
  enum { kG, kGW, kP, kFirst };
  SmallMatrices<T> m(rows, int(kFirst + 2 * H));
  for (index_t h = 0; h < H; ++h) {
    m.set(m[kFirst + 2 * int(h)], W_pv + h * n2, false);
    m.set(m[kFirst + 2 * int(h) + 1], W_kq + h * n2, false);
  }
  simd::UnitVector<T> P(static_cast<size_t>(n2));
  PaddedRows<T> e(rows, cols), f(rows, cols);
  Vec<T> poison = simd::zero<T>();
  for (index_t b = b0; b < b1; ++b) {
    e.stage(E + b * rows * cols);
    token_products(e.get(), e.get(), rows, e.ld, T(1) / T(N), m[kG], m.ld, true);  // G
    mh_forward_matrix(m, H, kG, kGW, kP, kFirst);
    m.get(P.data(), m[kP]);
    row_combination(e.get(), P.data(), e.get(), rows, e.ld, f.get());  // F = E + P E
    f.unstage(F + b * rows * cols, poison);
  }
  return detail::poison_clear(hsum(poison));
}

// The steps of the one-head VJP (lsa_recipe.hpp) summed over heads:
//   T1_h = W^KQ_hᵀ G, T2_h = G W^PV_hᵀ, dW^PV_h += dP T1_h, dW^KQ_h += T2_h dP,
//   Pᵀ = Σ_h W^KQ_hᵀ T2_h, dG = Σ_h (W^PV_hᵀ dP) W^KQ_hᵀ, dE = d_F + Pᵀ d_F + ((dG + dGᵀ)/N) E.
template <class T>
bool mh_vjp_range(const LsaShape& sh, index_t H, const T* E, const T* W_pv, const T* W_kq,
                  const T* d_F, T* d_E, index_t b0, index_t b1, double* partial) {
  const index_t N = sh.context, rows = sh.dim + 1, cols = N + 1, n2 = rows * rows;
  enum { kG, kT1, kT2, kPt, kdP, kTmp, kdG, kProduct, kFirst };
  SmallMatrices<T> m(rows, int(kFirst + 2 * H));  // m[kFirst + 2h] = W^PV_hᵀ, + 1: W^KQ_hᵀ
  for (index_t h = 0; h < H; ++h) {
    m.set(m[kFirst + 2 * int(h)], W_pv + h * n2, true);
    m.set(m[kFirst + 2 * int(h) + 1], W_kq + h * n2, true);
  }
  simd::UnitVector<double> d_W(static_cast<size_t>(2 * H * n2), 0.0);
  simd::UnitVector<T> coef(static_cast<size_t>(n2));
  PaddedRows<T> e(rows, cols), df(rows, cols), tmp(rows, cols), de(rows, cols);
  Vec<T> poison = simd::zero<T>();
  for (index_t b = b0; b < b1; ++b) {
    e.stage(E + b * rows * cols);
    df.stage(d_F + b * rows * cols);
    const index_t ld = e.ld;
    token_products(e.get(), e.get(), rows, ld, T(1) / T(N), m[kG], m.ld, true);  // G = E Eᵀ / N
    token_products(df.get(), e.get(), rows, ld, T(1), m[kdP], m.ld, false);      // dP = d_F Eᵀ
    for (index_t h = 0; h < H; ++h) {
      T* WpvT = m[kFirst + 2 * int(h)];
      T* WkqT = m[kFirst + 2 * int(h) + 1];
      m.multiply(WkqT, m[kG], m[kT1]);  // T1 = W^KQ_hᵀ G
      m.multiply(m[kG], WpvT, m[kT2]);  // T2 = G W^PV_hᵀ
      m.multiply(m[kdP], m[kT1], m[kProduct]);
      accumulate(m[kProduct], m.ld, rows, d_W.data() + h * n2);  // dW^PV_h += dP T1
      m.multiply(m[kT2], m[kdP], m[kProduct]);
      accumulate(m[kProduct], m.ld, rows, d_W.data() + (H + h) * n2);  // dW^KQ_h += T2 dP
      if (!d_E) continue;
      m.multiply(WkqT, m[kT2], m[kPt], h > 0);  // Pᵀ += W^KQ_hᵀ G W^PV_hᵀ
      m.multiply(WpvT, m[kdP], m[kTmp]);
      m.multiply(m[kTmp], WkqT, m[kdG], h > 0);  // dG += W^PV_hᵀ dP W^KQ_hᵀ
    }
    if (!d_E) continue;
    m.get(coef.data(), m[kPt]);
    row_combination(df.get(), coef.data(), df.get(), rows, ld, tmp.get());
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < rows; ++c)
        coef[r * rows + c] = (m[kdG][r * m.ld + c] + m[kdG][c * m.ld + r]) / T(N);
    row_combination(tmp.get(), coef.data(), e.get(), rows, ld, de.get());
    de.unstage(d_E + b * rows * cols, poison);
  }
  std::copy(d_W.begin(), d_W.end(), partial);
  return detail::poison_clear(hsum(poison));
}

// ---- the fused Wishart step: multihead::heads_residual with the SIMD lanes over prompts ----------
//
// Each prompt's factors (wishart::prompt_factors, multihead::form_m: e_q, M, y_q) are formed by the
// scalar recipe and staged into one lane of WishartHeads::lanes; every kWishartLanes prompts the
// O(H d²) part runs on vectors, lane l being prompt l, in heads_residual's order of operations:
//   q_h = W^KQ_h e_q,  A = Mᵀ [p | q],  ex = e_qᵀ [p | q],  GX = M A + e_q exᵀ/N,
//   ŷ = Σ_h ex_h ex_{H+h}/N + Σ_m A[m, h] A[m, H+h];
// then multihead::accumulate's sums in double, per lane over the range (lane l: prompts b0 + l,
// b0 + l + L, ...), the lanes added in order at the range's end. The p_h are the same for every
// prompt (broadcasts). Ranges are the fixed chunks of parallel.hpp, so the lanes, hence the sums, do
// not depend on the thread count.
template <class T>
struct WishartLaneArrays {  // vectors (kWishartLanes entries each) of WishartHeads::lanes
  T *e_q, *M, *y_q, *Q, *A, *GX, *ex, *y_hat;
  WishartLaneArrays(T* base, index_t rows, index_t dp, index_t H) {
    const index_t L = kWishartLanes<T>, w = 2 * H;
    e_q = base;
    M = e_q + L * rows;
    y_q = M + L * rows * dp;
    Q = y_q + L;
    A = Q + L * rows * H;
    GX = A + L * dp * w;
    ex = GX + L * rows * w;
    y_hat = ex + L * w;
  }
};

template <class T>
void wishart_lanes_compute(WishartHeads<T>& c, index_t count) {
  constexpr index_t L = kWishartLanes<T>;
  static_assert(L == kLanes<T>, "one prompt per SIMD lane");
  const linear::Law<T>& P = *c.P;
  const index_t rows = P.d + 1, dp = wishart::noise_dim(P), H = c.H, W = 2 * H;
  const WishartLaneArrays<T> v(c.lanes, rows, dp, H);
  const auto at = [](T* base, index_t i) { return base + i * L; };
  const T inv_n = T(1) / T(P.N);
  for (index_t k = 0; k < rows; ++k)  // Q[k, h] = (W^KQ_h e_q)_k
    for (index_t j = 0; j < H; ++j) {
      Vec<T> acc = simd::zero<T>();
      for (index_t col = 0; col < rows; ++col)
        acc += simd::broadcast(c.W_kq_t[(k * rows + col) * H + j]) * load(at(v.e_q, col));
      store(at(v.Q, k * H + j), acc);
    }
  // head_x(k, j) = X[k, j] = p_j[k] (broadcast) for j < H, Q[k, j − H] otherwise
  const auto head_x = [&](index_t k, index_t j) {
    return j < H ? simd::broadcast(c.p_t[k * H + j]) : load(at(v.Q, k * H + j - H));
  };
  for (index_t i = 0; i < dp * W; ++i) store(at(v.A, i), simd::zero<T>());
  for (index_t j = 0; j < W; ++j) store(at(v.ex, j), simd::zero<T>());
  for (index_t k = 0; k < rows; ++k) {  // A = Mᵀ X, ex = e_qᵀ X
    const Vec<T> e = load(at(v.e_q, k));
    for (index_t j = 0; j < W; ++j) {
      const Vec<T> xkj = head_x(k, j);
      for (index_t m = 0; m < dp; ++m)
        store(at(v.A, m * W + j), load(at(v.A, m * W + j)) + load(at(v.M, k * dp + m)) * xkj);
      store(at(v.ex, j), load(at(v.ex, j)) + e * xkj);
    }
  }
  for (index_t k = 0; k < rows; ++k) {  // GX = M A + e_q exᵀ / N
    const Vec<T> e = load(at(v.e_q, k));
    for (index_t j = 0; j < W; ++j) {
      Vec<T> acc = e * load(at(v.ex, j)) * inv_n;
      for (index_t m = 0; m < dp; ++m) acc += load(at(v.M, k * dp + m)) * load(at(v.A, m * W + j));
      store(at(v.GX, k * W + j), acc);
    }
  }
  Vec<T> y_hat = simd::zero<T>();
  for (index_t j = 0; j < H; ++j) {
    Vec<T> t = load(at(v.ex, j)) * load(at(v.ex, H + j)) * inv_n;
    for (index_t m = 0; m < dp; ++m) t += load(at(v.A, m * W + j)) * load(at(v.A, m * W + H + j));
    y_hat += t;
  }
  // multihead::accumulate's sums in double, lane by lane (lanes >= count weigh 0): lane_acc[i·L + l]
  // sums term i over the prompts of lane l; mh_wishart_flush adds the lanes in order.
  constexpr index_t D = L / kLanes<double>;  // double vectors per vector of T
  Vec<double> r[D], e[D];
  to_double(y_hat, r);
  to_double(load(v.y_q), e);
  for (index_t q = 0; q < D; ++q)
    for (index_t i = 0; i < kLanes<double>; ++i) r[q][i] = q * kLanes<double> + i < count ? r[q][i] - e[q][i] : 0.0;
  double* sums = c.lane_acc;
  const auto add = [&](index_t term, const Vec<double>* x, const Vec<double>* y) {
    for (index_t q = 0; q < D; ++q) {
      double* slot = sums + term * L + q * kLanes<double>;
      store(slot, load(slot) + x[q] * y[q]);
    }
  };
  add(0, r, r);
  const index_t first_K = 1 + H * rows, width = first_K + H * rows * rows;
  double* eq = sums + width * L;  // e_q[col] in double, once per group
  for (index_t col = 0; col + 1 < rows; ++col) {
    Vec<double> x[D];
    to_double(load(at(v.e_q, col)), x);
    for (index_t q = 0; q < D; ++q) store(eq + col * L + q * kLanes<double>, x[q]);
  }
  for (index_t j = 0; j < H; ++j)
    for (index_t k = 0; k < rows; ++k) {
      Vec<double> g[D], rk[D];
      to_double(load(at(v.GX, k * W + H + j)), g);
      add(1 + j * rows + k, r, g);
      to_double(load(at(v.GX, k * W + j)), g);
      for (index_t q = 0; q < D; ++q) rk[q] = r[q] * g[q];
      for (index_t col = 0; col + 1 < rows; ++col) {
        Vec<double> x[D];
        for (index_t q = 0; q < D; ++q) x[q] = load(eq + col * L + q * kLanes<double>);
        add(first_K + (j * rows + k) * rows + col, rk, x);
      }
    }
}

// Stages one prompt (its e_q, M = Ã L̃ T/√N and y_q by the scalar recipe) into the next lane.
template <class T>
void mh_wishart_prompt(void* ctx, index_t, const T* z, const T* chi2, const T* w, const T* lam_sqrt) {
  WishartHeads<T>& c = *static_cast<WishartHeads<T>*>(ctx);
  constexpr index_t L = kWishartLanes<T>;
  const linear::Law<T>& P = *c.P;
  const index_t rows = P.d + 1;
  const wishart::Prompt<T> pr = wishart::prompt_factors(P, z, chi2, w, lam_sqrt, c.s);
  const index_t dp = pr.dp;
  multihead::form_m(pr, c.h.M);
  const WishartLaneArrays<T> v(c.lanes, rows, dp, c.H);
  const index_t l = c.filled;
  for (index_t k = 0; k < rows; ++k) v.e_q[k * L + l] = c.s.e_q[k];
  for (index_t i = 0; i < rows * dp; ++i) v.M[i * L + l] = c.h.M[i];
  v.y_q[l] = wishart::query_target(P, w, c.s.e_q, z);
  if (++c.filled == L) {
    wishart_lanes_compute(c, L);
    c.filled = 0;
  }
}

// The staged prompts of a range's last, partial group (the unused lanes compute on stale values
// and are not accumulated).
template <class T>
void mh_wishart_flush(void* ctx) {
  WishartHeads<T>& c = *static_cast<WishartHeads<T>*>(ctx);
  if (c.filled > 0) wishart_lanes_compute(c, c.filled);
  c.filled = 0;
  const index_t L = kWishartLanes<T>, width = multihead_loss_grad_partial_size(c.P->d, c.H);
  for (index_t i = 0; i < width; ++i)
    for (index_t l = 0; l < L; ++l) c.acc[i] += c.lane_acc[i * L + l];
}

}  // namespace

template <class T>
MultiHeadKernels<T> multihead_kernels() {
  return {&mh_predict_range<T>, &mh_loss_grad_range<T>, &mh_predict_vjp_range<T>,
          &mh_forward_range<T>, &mh_vjp_range<T>, &mh_wishart_prompt<T>,
          &mh_wishart_flush<T>};
}
template MultiHeadKernels<float> multihead_kernels<float>();
template MultiHeadKernels<double> multihead_kernels<double>();

}  // namespace lsa_native::cpu::LSA_ISA_NS
