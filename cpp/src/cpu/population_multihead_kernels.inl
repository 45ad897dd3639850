// The exact H-head population loss for fixed Λ and its gradient (population_multihead_kernels.hpp),
// included by one translation unit per instruction set with LSA_ISA_NS defined
// (population_multihead_kernels_{base,avx2,avx512}.cpp): the H² pair loops and the d³ products
// vectorise for the CPU's ISA. Derivation: docs/population.md, "H heads"; numpy transcription:
// reference/population_multihead.py.
//
// 2L = T1 + T2 + T3 + T4 + X + F6 (+ noise) of the one-head derivation, summed over pairs of heads:
// every term is a linear aggregate over the heads (z, R = Cᵀ, u, e4, m, s, tv) or one of five
// H x H Gram matrices (π, γ, σ, ν, ω). The gradient runs back through the aggregates, then the
// Grams. Every per-head quantity of all heads is one product of many rows (the register tiles of
// small_matrix_simd.hpp): no per-head matrix–vector products, no allocation but one workspace.
#include <algorithm>
#include <cstddef>
#include <limits>
#include <memory>
#include <vector>

#include "cpu/population_multihead_kernels.hpp"
#include "cpu/simd.hpp"
#include "cpu/small_matrix_simd.hpp"

#ifndef LSA_ISA_NS
#error "define LSA_ISA_NS before including population_multihead_kernels.inl"
#endif

namespace lsa_native::cpu::LSA_ISA_NS {
namespace {

using small::matvec_rows;
using small::multiply_strided;

// Σ x∘y over m entries, in vector partial sums (the H² Gram entries are the hot reductions).
double sum_products(const double* x, const double* y, index_t m) {
  constexpr index_t L = simd::kLanes<double>;
  simd::Vec<double> acc0 = simd::zero<double>(), acc1 = simd::zero<double>();
  index_t i = 0;
  for (; i + 2 * L <= m; i += 2 * L) {
    acc0 += simd::load(x + i) * simd::load(y + i);
    acc1 += simd::load(x + i + L) * simd::load(y + i + L);
  }
  for (; i + L <= m; i += L) acc0 += simd::load(x + i) * simd::load(y + i);
  double s = simd::hsum(acc0 + acc1);
  for (; i < m; ++i) s += x[i] * y[i];
  return s;
}

double trace(const double* A, index_t d) {
  double s = 0;
  for (index_t i = 0; i < d; ++i) s += A[i * d + i];
  return s;
}

// B = Aᵀ for d x d row-major matrices (B aliases not A).
void transpose(const double* A, double* B, index_t d) {
  for (index_t i = 0; i < d; ++i)
    for (index_t j = 0; j < d; ++j) B[j * d + i] = A[i * d + j];
}

// Products with Λ and the matrices made of it (Λ², Φ, M4: diagonal when Λ is): dense by the
// register tiles, or row/column scalings when Λ is diagonal (every evaluation of the random-diagonal
// expansion, and diagonal fixed Λ): about 40% of the kernel's products at d = 20, H = 8.
struct LambdaProducts {
  index_t d;
  bool diagonal;
  LambdaProducts(const double* Lam, index_t d_) : d(d_), diagonal(true) {
    for (index_t i = 0; i < d && diagonal; ++i)
      for (index_t j = 0; j < d; ++j) diagonal = diagonal && (i == j || Lam[i * d + j] == 0.0);
  }
  // out [rows, d] = X [rows, d] B
  void right(const double* X, const double* B, double* out, index_t rows) const {
    if (!diagonal) return small::multiply_dense(X, B, out, rows, d);
    for (index_t r = 0; r < rows; ++r)
      for (index_t j = 0; j < d; ++j) out[r * d + j] = X[r * d + j] * B[j * (d + 1)];
  }
  // out [d, d] = B X
  void left(const double* B, const double* X, double* out) const {
    if (!diagonal) return small::multiply_dense(B, X, out, d, d);
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d; ++j) out[i * d + j] = B[i * (d + 1)] * X[i * d + j];
  }
};

// The heads' parts in the flattened layout of population_multihead_kernels.hpp.
struct Parts {
  index_t d, H;
  double* base;
  double* P1(index_t h) const { return base + h * d; }  // [H, d] rows
  double* p2() const { return base + H * d; }
  double* Km(index_t h) const { return base + H * d + H + h * d * d; }  // [H d, d] rows
  double* K2(index_t h) const { return base + H * d + H + H * d * d + h * d; }  // [H, d] rows
};

// Every array of one evaluation, carved from one buffer (not zero-filled: each is written before it
// is read). Blocks whose rows are multiplied together by Λ are carved as one [k, d]. The buffer is
// the calling thread's, kept between calls (a fresh ~270 KB allocation per call at d = 20, H = 8
// came back from the system as page faults, with the caches cold, whenever other work ran between
// calls); it only grows, to the largest problem the thread has evaluated (≈ 5 MB a thread at
// d = 100, H = 8). One Workspace is alive per thread at a time. Debug builds fill it with NaN, so a
// read before a write shows instead of reusing the previous call's values.
struct Workspace {
  // Λ's terms; per head; per pair of heads (rows g·H + h); aggregates; gradient
  double *L2, *Phi, *M4, *a, *M4p1, *KL, *LKL, *S, *tau, *KT, *At;
  double *Y, *V, *LY, *LV, *pi, *gam, *A6;
  double *zus, *Lzus, *tv, *m, *mbar, *C, *R, *LR, *LRPhi, *LCL;
  double *X4, *LX4, *G_z, *G_u, *G_s, *G_Rt, *G_RtT, *x1, *x2, *coef, *piTau;
  double *GA1, *GA2, *GP, *Wpi, *P1all, *P2all, *Kx1, *Ke4, *Ktx2, *t1, *t2, *t3, *Zsym;

  Workspace(index_t d, index_t H) {
    thread_local simd::UnitVector<double> storage;
    const index_t dd = d * d, Hd = H * d, HH = H * H;
    size_t used = 0;
    // two passes: count (base null), then assign
    for (int pass = 0; pass < 2; ++pass) {
      double* base = pass == 0 ? nullptr : storage.data();
      used = 0;
      auto take = [&](double*& p, index_t n) {
        p = base ? base + used : nullptr;
        used += (static_cast<size_t>(n) + 7) / 8 * 8;  // 64-byte strides between arrays
      };
      take(L2, dd), take(Phi, dd), take(M4, dd), take(a, Hd), take(M4p1, Hd), take(KL, H * dd);
      take(LKL, H * dd), take(S, H * dd), take(tau, H), take(KT, H * dd), take(At, Hd);
      take(Y, HH * d), take(V, HH * d), take(LY, HH * d), take(LV, HH * d), take(pi, HH);
      take(gam, HH), take(A6, HH);
      take(zus, 3 * d), take(Lzus, 3 * d), take(tv, d), take(m, d), take(mbar, d), take(C, dd);
      take(R, dd), take(LR, dd), take(LRPhi, dd), take(LCL, dd);
      take(X4, 4 * d), take(LX4, 4 * d), take(G_z, d), take(G_u, d), take(G_s, d), take(G_Rt, dd);
      take(G_RtT, dd), take(x1, d), take(x2, d), take(coef, HH), take(piTau, H);
      take(GA1, Hd), take(GA2, Hd), take(GP, Hd), take(Wpi, H * dd), take(P1all, H * dd);
      take(P2all, H * dd), take(Kx1, Hd), take(Ke4, Hd), take(Ktx2, Hd), take(t1, Hd), take(t2, Hd);
      take(t3, Hd), take(Zsym, dd);
      if (pass == 0 && storage.size() < used) storage.resize(used);
    }
#ifndef NDEBUG
    std::fill(storage.begin(), storage.begin() + static_cast<std::ptrdiff_t>(used),
              std::numeric_limits<double>::quiet_NaN());
#endif
  }
};

// ∂K1_h of one head (twice_loss's last step), on its own so that its rows vectorise:
//   a_h x1ᵀ + x2 a_hᵀ + 2 M4p1_h (Λu)ᵀ + p2_h G_Rtᵀ + c Λ + (2/N)(P1_h + Wpi_h) + Z + Zᵀ,
//   Z = (2/N²) Wpi_h + (4/N²) P2_h   (P1_h, P2_h rows of stride H d; 2 M4p1_h (Λu)ᵀ is ∂e4 = 2Λu)
struct K1Gradient {
  index_t d, Hd;
  double n;
  const double *ah, *x1, *x2, *M4p1, *Lu;
  double p2h;
  const double* G_RtT;
  double c;
  const double *Lam, *P1h, *Wpi, *P2h;
  // row i's entries at ld's column(s) (one double, or a vector of them: scalars broadcast), but Z
  template <class Load>
  auto row_terms(Load ld, index_t i) const {
    const index_t r = i * d, rh = i * Hd;
    return ah[i] * ld(x1) + x2[i] * ld(ah) + 2 * M4p1[i] * ld(Lu) + p2h * ld(G_RtT + r) +
           c * ld(Lam + r) + 2 / n * (ld(P1h + rh) + ld(Wpi + r));
  }
  void write(double* Z, double* gK1) const {
    constexpr index_t L = simd::kLanes<double>;
    using V = simd::Vec<double>;
    const double c2 = 2 / (n * n), c4 = 4 / (n * n);
    for (index_t i = 0; i < d; ++i) {
      double *z = Z + i * d, *g = gK1 + i * d;
      index_t j = 0;
      for (; j + L <= d; j += L) {
        const auto ld = [j](const double* p) { return simd::load(p + j); };
        const V zj = simd::broadcast(c2) * simd::load(Wpi + i * d + j) +
                     simd::broadcast(c4) * simd::load(P2h + i * Hd + j);
        simd::store(z + j, zj);
        simd::store(g + j, row_terms(ld, i) + zj);
      }
      for (; j < d; ++j) {
        const auto ld = [j](const double* p) { return p[j]; };
        z[j] = c2 * Wpi[i * d + j] + c4 * P2h[i * Hd + j];
        g[j] = row_terms(ld, i) + z[j];
      }
    }
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d; ++j) gK1[i * d + j] += Z[j * d + i];
  }
};

double twice_loss(index_t d, index_t H, const double* parts, const double* Lam, index_t N,
                  double noise_std, bool query_noise, double* grad) {
  const Parts P{d, H, const_cast<double*>(parts)};  // read only
  const double* p2 = P.p2();
  const double* K1s = P.Km(0);  // [H d, d]: the heads' K1 stacked
  const index_t dd = d * d, Hd = H * d;
  const size_t HH = static_cast<size_t>(H * H);
  const double n = double(N), s2 = noise_std * noise_std;
  Workspace w(d, H);

  // Λ's terms: Φ = ΛΓ = E[Λ̂²] = (1 + 1/N)Λ² + tr(Λ)/N Λ, M4 = tr(Λ)Λ + (2/N)Λ²
  const double t = trace(Lam, d);
  const LambdaProducts lp(Lam, d);
  lp.left(Lam, Lam, w.L2);
  for (index_t i = 0; i < dd; ++i) {
    w.Phi[i] = (1 + 1 / n) * w.L2[i] + t / n * Lam[i];
    w.M4[i] = t * Lam[i] + 2 / n * w.L2[i];
  }
  const double c3 = (1 + 2 / n) * (t * t + 2 * trace(w.L2, d));

  // per head (Λ, M4 symmetric): a_h = Λp1_h, M4p1_h, K1_hΛ, ΛK1_hΛ, S_h = sym K1_h, τ_h = tr(K1_hΛ),
  // K1_hᵀ (stacked, for the backward), aᵀ [d, H]
  lp.right(P.P1(0), Lam, w.a, H);
  lp.right(P.P1(0), w.M4, w.M4p1, H);
  lp.right(K1s, Lam, w.KL, Hd);
  for (index_t h = 0; h < H; ++h) {
    const double* K1 = P.Km(h);
    double *Sh = w.S + h * dd, *KTh = w.KT + h * dd;
    lp.left(Lam, w.KL + h * dd, w.LKL + h * dd);
    transpose(K1, KTh, d);
    for (index_t i = 0; i < dd; ++i) Sh[i] = 0.5 * (K1[i] + KTh[i]);
    w.tau[h] = sum_products(K1, Lam, dd);
    for (index_t i = 0; i < d; ++i) w.At[i * H + h] = w.a[h * d + i];
  }
  auto A = [&](index_t h) { return w.a + h * d; };
  auto row = [&](double* X, index_t g_, index_t h) { return X + static_cast<size_t>(g_ * H + h) * d; };

  // pairs (rows g·H + h): Y[g,h] = a_hᵀK1_g (= (K1_gᵀa_h)ᵀ), V[g,h] = a_hᵀS_g; ΛY, ΛV
  for (index_t g_ = 0; g_ < H; ++g_) {
    small::multiply_dense(w.a, P.Km(g_), row(w.Y, g_, 0), H, d);
    small::multiply_dense(w.a, w.S + g_ * dd, row(w.V, g_, 0), H, d);
  }
  lp.right(w.Y, Lam, w.LY, H * H);
  lp.right(w.V, Lam, w.LV, H * H);

  // linear aggregates: z = Σ K1_hᵀa_h = Σ Y[h,h], u = Σ p2_h k2_h, s = Σ S_h a_h = Σ V[h,h]
  // (rows of zus), tv = Σ τ_h a_h, e4 = Σ K1_hᵀ M4 p1_h, C = Σ p1_h k2_hᵀ + p2_h K1_h, R = Cᵀ,
  // m = tv + Λ Σ (K1_h + K1_hᵀ) a_h = tv + 2Λs, m̄ = E v = z + tr(Λ) u
  double *z = w.zus, *u = w.zus + d, *s = w.zus + 2 * d;
  double *e4 = w.X4, *mbar = w.X4 + d, *G_m = w.X4 + 2 * d, *G_tv = w.X4 + 3 * d;
  std::fill(w.zus, w.zus + 3 * d, 0.0);
  std::fill(w.tv, w.tv + d, 0.0);
  std::fill(w.C, w.C + dd, 0.0);
  for (index_t h = 0; h < H; ++h) {
    const double *Yhh = row(w.Y, h, h), *Vhh = row(w.V, h, h), *k2 = P.K2(h), *p1 = P.P1(h), *K1 = P.Km(h);
    for (index_t i = 0; i < d; ++i) {
      z[i] += Yhh[i];
      u[i] += p2[h] * k2[i];
      s[i] += Vhh[i];
      w.tv[i] += w.tau[h] * A(h)[i];
    }
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d; ++j) w.C[i * d + j] += p1[i] * k2[j] + p2[h] * K1[i * d + j];
  }
  multiply_strided(w.M4p1, Hd, K1s, d, e4, d, 1, Hd, d);
  transpose(w.C, w.R, d);
  lp.right(w.zus, Lam, w.Lzus, 3);
  const double *Lz = w.Lzus, *Lu = w.Lzus + d, *Ls = w.Lzus + 2 * d;
  for (index_t i = 0; i < d; ++i) {
    w.m[i] = w.tv[i] + 2 * Ls[i];
    mbar[i] = z[i] + t * u[i];
  }

  // H x H Grams, all symmetric in (h, g) (Λ, S_g symmetric; ν_gh = Y[h,g]ᵀΛY[g,h] = ν_hg, so ω):
  // the pairs g >= h, the sums weighted 2 off the diagonal
  double nu_sum = 0, om_sum = 0, pigam = 0, piA6 = 0;
  for (index_t h = 0; h < H; ++h)
    for (index_t g_ = h; g_ < H; ++g_) {
      const size_t hg = static_cast<size_t>(h * H + g_), gh = static_cast<size_t>(g_ * H + h);
      const double wt = g_ == h ? 1.0 : 2.0;
      const double* LKLg = w.LKL + g_ * dd;
      const double pi = sum_products(P.P1(h), A(g_), d);
      const double gam = sum_products(P.Km(h), LKLg, dd);
      const double sig = sum_products(w.S + h * dd, LKLg, dd);
      const double A6 = w.tau[h] * w.tau[g_] + 2 * sig;
      w.pi[hg] = w.pi[gh] = pi;
      w.gam[hg] = w.gam[gh] = gam;
      w.A6[hg] = w.A6[gh] = A6;
      nu_sum += wt * sum_products(row(w.Y, g_, h), row(w.LY, h, g_), d);
      om_sum += wt * sum_products(row(w.V, g_, h), row(w.LV, h, g_), d);
      pigam += wt * pi * gam;
      piA6 += wt * pi * A6;
    }

  lp.left(Lam, w.R, w.LR);
  lp.right(w.LR, w.Phi, w.LRPhi, d);
  const double uLu = sum_products(u, Lu, d);
  const double T1 = sum_products(z, Lz, d) + (nu_sum + pigam) / n;
  const double T2 = sum_products(w.R, w.LRPhi, dd) - 2 * sum_products(w.R, w.L2, dd) + t;
  const double T3 = c3 * uLu;
  const double T4 = 2 * sum_products(e4, Lu, d);
  const double X = 2 / n * sum_products(mbar, w.m, d);
  const double F6 = (piA6 + 4 * sum_products(w.tv, s, d) + 4 * sum_products(s, Ls, d) + 4 * om_sum) /
                    (n * n);
  double noise_terms = 0;
  if (s2 > 0) {  // ΛCΛ (G_RtT, written only in the backward, holds ΛC meanwhile)
    lp.left(Lam, w.C, w.G_RtT);
    lp.right(w.G_RtT, Lam, w.LCL, d);
    noise_terms = 2 * s2 * (sum_products(mbar, Lu, d) + sum_products(w.m, u, d) / n) +
                  s2 * s2 * (1 + 2 / n) * uLu +
                  s2 / n * (sum_products(w.C, w.LCL, dd) + 4 * t * uLu) + (query_noise ? s2 : 0.0);
  }
  const double twice = T1 + T2 + T3 + T4 + X + F6 + noise_terms;
  if (!grad) return twice;

  // ∂(2L) with respect to the aggregates. C = Rᵀ enters through R only: G_Rt = ∂R + (∂C)ᵀ.
  // Rows of X4 = (e4, m̄, G_m, G_tv) times Λ give Λe4, Λm̄, ΛG_m, ΛG_tv.
  const double cu = 2 * c3 + 2 * s2 * s2 * (1 + 2 / n) + 8 * s2 * t / n;
  for (index_t i = 0; i < d; ++i) {
    const double G_mbar = 2 / n * w.m[i] + 2 * s2 * Lu[i];
    w.G_z[i] = 2 * Lz[i] + G_mbar;
    w.G_u[i] = cu * Lu[i] + t * G_mbar + 2 * s2 / n * w.m[i];  // + 2Λe4 + 2s²Λm̄ below
    G_m[i] = 2 / n * mbar[i] + 2 * s2 / n * u[i];
    G_tv[i] = 4 / (n * n) * s[i];
    w.G_s[i] = 4 / (n * n) * w.tv[i] + 8 / (n * n) * Ls[i];
  }
  lp.right(w.X4, Lam, w.LX4, 4);
  const double *Le4 = w.LX4, *Lmbar = w.LX4 + d, *LGm = w.LX4 + 2 * d, *LGtv = w.LX4 + 3 * d;
  const double* G_e4 = Lu;  // ∂e4 = 2Λu: the factor 2 where it is used
  for (index_t i = 0; i < d; ++i) {
    w.G_u[i] += 2 * Le4[i] + 2 * s2 * Lmbar[i];
    w.x1[i] = w.G_z[i] + LGm[i] + 0.5 * w.G_s[i];  // the side K1_h acts on
    w.x2[i] = LGm[i] + 0.5 * w.G_s[i];             // the side K1_hᵀ acts on
  }
  for (index_t i = 0; i < dd; ++i) w.G_Rt[i] = 2 * w.LRPhi[i] - 2 * w.L2[i];
  if (s2 > 0)
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d; ++j) w.G_Rt[i * d + j] += 2 * s2 / n * w.LCL[j * d + i];
  transpose(w.G_Rt, w.G_RtT, d);

  // The Grams' terms of every head at once, as products over the heads (g the summed head):
  //   GA1[h] = Σ_g K1_g LY[h,g]                  = LY [H, H d] · [K1_gᵀ]_g [H d, d]
  //   GA2[h] = Σ_g S_g LV[h,g]                    = LV [H, H d] · [S_g]_g  [H d, d]
  //   GP[h]  = Σ_g (2/N γ_hg + 2/N² A6_hg) a_g   = coefficients [H, H] · a [H, d]
  //   Wpi[h] = Σ_g π_hg ΛK1_gΛ                    = π [H, H] · LKL [H, d²]
  //   P1[h]  = Σ_g a_g LY[g,h]ᵀ, P2[h] = Σ_g a_g LV[g,h]ᵀ = aᵀ [d, H] · LY, LV [H, H d] ([d, H d])
  for (size_t i = 0; i < HH; ++i) w.coef[i] = 2 / n * w.gam[i] + 2 / (n * n) * w.A6[i];
  for (index_t h = 0; h < H; ++h) {
    w.piTau[h] = 0;
    for (index_t g_ = 0; g_ < H; ++g_) w.piTau[h] += w.pi[h * H + g_] * w.tau[g_];
  }
  multiply_strided(w.LY, Hd, w.KT, d, w.GA1, d, H, Hd, d);
  multiply_strided(w.LV, Hd, w.S, d, w.GA2, d, H, Hd, d);
  multiply_strided(w.coef, H, w.a, d, w.GP, d, H, H, d);
  multiply_strided(w.pi, H, w.LKL, dd, w.Wpi, dd, H, H, dd);
  multiply_strided(w.At, H, w.LY, Hd, w.P1all, Hd, d, H, Hd);
  multiply_strided(w.At, H, w.LV, Hd, w.P2all, Hd, d, H, Hd);

  // ∂p1_h = Λ(K1_h x1 + K1_hᵀ x2 + 2/N GA1_h + 8/N² GA2_h) + 2 M4 K1_h Λu + G_Rtᵀ k2_h
  //         + τ_h Λ(G_m + G_tv) + GP_h                        (rows of [H, d] times Λ, M4, G_Rt)
  matvec_rows(K1s, w.x1, w.Kx1, Hd, d);
  matvec_rows(w.KT, w.x2, w.Ktx2, Hd, d);
  matvec_rows(K1s, G_e4, w.Ke4, Hd, d);
  for (index_t i = 0; i < Hd; ++i) w.Kx1[i] += w.Ktx2[i] + 2 / n * w.GA1[i] + 8 / (n * n) * w.GA2[i];
  lp.right(w.Kx1, Lam, w.t1, H);
  lp.right(w.Ke4, w.M4, w.t2, H);
  small::multiply_dense(P.K2(0), w.G_Rt, w.t3, H, d);
  const Parts G{d, H, grad};
  double* gp1 = G.P1(0);
  for (index_t h = 0; h < H; ++h)
    for (index_t i = 0; i < d; ++i) {
      const index_t k = h * d + i;
      gp1[k] = w.t1[k] + 2 * w.t2[k] + w.t3[k] + w.tau[h] * (LGm[i] + LGtv[i]) + w.GP[k];
    }
  // ∂k2_h = G_Rt p1_h + p2_h G_u (rows p1 · G_Rtᵀ); ∂p2_h = <G_Rtᵀ, K1_h> + k2_h·G_u
  small::multiply_dense(P.P1(0), w.G_RtT, G.K2(0), H, d);
  for (index_t h = 0; h < H; ++h) {
    double* gk2 = G.K2(h);
    for (index_t i = 0; i < d; ++i) gk2[i] += p2[h] * w.G_u[i];
    G.p2()[h] = sum_products(w.G_RtT, P.Km(h), dd) + sum_products(P.K2(h), w.G_u, d);
  }
  // ∂K1_h = a_h x1ᵀ + x2 a_hᵀ + 2 M4p1_h (Λu)ᵀ + p2_h G_Rtᵀ + (a_h·(G_m + G_tv) + 2/N² (πτ)_h) Λ
  //         + (2/N)(P1_h + Wpi_h) + (2/N²)(Wpi_h + Wpi_hᵀ) + (4/N²)(P2_h + P2_hᵀ)
  for (index_t h = 0; h < H; ++h) {
    const double* ah = A(h);
    const double c = sum_products(ah, G_m, d) + sum_products(ah, G_tv, d) + 2 / (n * n) * w.piTau[h];
    const K1Gradient k{d, Hd, n, ah, w.x1, w.x2, w.M4p1 + h * d, G_e4, p2[h], w.G_RtT, c, Lam,
                       w.P1all + h * d, w.Wpi + h * dd, w.P2all + h * d};
    k.write(w.Zsym, G.Km(h));
  }
  return twice;
}

// Separate heads, per head h (rows = d + 1): K_h [rows, d] = W^K_hᵀ [rows, r] · W^Q_h[:, :d]; the
// products by the register tiles (multiply_strided), K_h's rows then split into K1_h and k2_h.
void separate_keys(index_t d, index_t H, index_t rank, const double* W_k, const double* W_q,
                   double* parts) {
  const index_t n1 = d + 1;
  const Parts P{d, H, parts};
  std::unique_ptr<double[]> work(new double[static_cast<size_t>(n1 * rank + n1 * d)]);
  double *WkT = work.get(), *Kh = WkT + n1 * rank;
  for (index_t h = 0; h < H; ++h) {
    const double *Wk = W_k + h * rank * n1, *Wq = W_q + h * rank * n1;
    for (index_t q = 0; q < rank; ++q)
      for (index_t r = 0; r < n1; ++r) WkT[r * rank + q] = Wk[q * n1 + r];
    multiply_strided(WkT, rank, Wq, n1, Kh, d, n1, rank, d);
    std::copy(Kh, Kh + d * d, P.Km(h));
    std::copy(Kh + d * d, Kh + n1 * d, P.K2(h));
  }
}

// G_h = ½ [∂K1_h; ∂k2_h] [rows, d] and G_hᵀ [d, rows]: d_W_q[h] = W^K_h G_h, d_W_k[h] = W^Q_h[:, :d] G_hᵀ.
void separate_gradient(index_t d, index_t H, index_t rank, const double* W_k, const double* W_q,
                       const double* grad, double* d_W_k, double* d_W_q) {
  const index_t n1 = d + 1;
  const Parts g{d, H, const_cast<double*>(grad)};  // read only
  std::unique_ptr<double[]> work(new double[static_cast<size_t>(2 * n1 * d)]);
  double *G = work.get(), *GT = G + n1 * d;
  for (index_t h = 0; h < H; ++h) {
    const index_t at = h * rank * n1;
    for (index_t r = 0; r < n1; ++r) {
      const double* row = r < d ? g.Km(h) + r * d : g.K2(h);
      for (index_t c = 0; c < d; ++c) G[r * d + c] = GT[c * n1 + r] = 0.5 * row[c];
    }
    multiply_strided(W_k + at, n1, G, d, d_W_q + at, n1, rank, n1, d);
    for (index_t q = 0; q < rank; ++q) d_W_q[at + q * n1 + d] = 0;
    multiply_strided(W_q + at, n1, GT, n1, d_W_k + at, n1, rank, d, n1);
  }
}

}  // namespace

PopulationMultiheadKernels population_multihead_kernels() {
  return {&twice_loss, &separate_keys, &separate_gradient};
}

}  // namespace lsa_native::cpu::LSA_ISA_NS
