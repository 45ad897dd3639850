// The exact H-head population loss for fixed Λ and its gradient (population_multihead_kernels.hpp),
// included by one translation unit per instruction set with LSA_ISA_NS defined
// (population_multihead_kernels_{base,avx2,avx512}.cpp): the H² pair loops and the d³ products
// vectorise for the CPU's ISA. Derivation: docs/population.md, "H heads"; numpy transcription:
// reference/population_multihead.py.
//
// 2L = T1 + T2 + T3 + T4 + X + F6 (+ noise) of the one-head derivation, summed over pairs of heads:
// every term is a linear aggregate over the heads (z, R, u, e4, m, s, tv, C) or one of five H x H
// Gram matrices (π, γ, σ, ν, ω). The gradient runs back through the aggregates, then the Grams.
#include <algorithm>
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

using Vec = std::vector<double>;

// The heads' arrays (H d, H d², H² d entries) that every use writes before reading: not zero-filled
// (at d = 20, H = 8 zero-filling them cost as much as a tenth of the call).
struct Scratch {
  std::unique_ptr<double[]> p;
  explicit Scratch(size_t n) : p(new double[n]) {}
  double* data() const { return p.get(); }
  double& operator[](size_t i) const { return p[i]; }
};

// Row-major d x d products (the register tiles of small_matrix_simd.hpp, compiled for this ISA)
// and vector helpers on raw pointers (simd.hpp's vectors; internal linkage, one copy per ISA).
struct Kit {
  index_t d;
  explicit Kit(index_t d_) : d(d_) {}
  Vec mm(const double* A, const double* B) const {
    Vec C(static_cast<size_t>(d * d));
    small::multiply_dense(A, B, C.data(), d, d);
    return C;
  }
  // C [m, n] = A [m, k] B [k, n] (row-major with leading dimensions; C aliases neither): whole
  // column vectors by the kit's tiles, the last n mod L columns by plain loops.
  static void gemm(const double* A, index_t lda, const double* B, index_t ldb, double* C, index_t ldc,
                   index_t m, index_t k, index_t n) {
    constexpr index_t L = simd::kLanes<double>;
    const index_t n_vec = n / L * L;
    for (index_t c0 = 0; c0 < n_vec; c0 += 3 * L)
      small::multiply_columns(A, lda, B, ldb, C, ldc, m, k, c0, std::min<index_t>(3, (n_vec - c0) / L),
                              false);
    for (index_t i = 0; i < m; ++i)
      for (index_t j = n_vec; j < n; ++j) {
        double acc = 0;
        for (index_t q = 0; q < k; ++q) acc += A[i * lda + q] * B[q * ldb + j];
        C[i * ldc + j] = acc;
      }
  }
  Vec mv(const double* A, const double* x) const {
    Vec y(static_cast<size_t>(d));
    mv_to(A, x, y.data());
    return y;
  }
  Vec mvt(const double* A, const double* x) const {  // Aᵀ x
    Vec y(static_cast<size_t>(d));
    mvt_to(A, x, y.data());
    return y;
  }
  void mv_to(const double* A, const double* x, double* y) const { small::matvec_dense(A, x, y, d); }
  void mvt_to(const double* A, const double* x, double* y) const {
    small::multiply_dense(x, A, y, 1, d);  // yᵀ = xᵀ A
  }
  // Σ x∘y over m entries, in vector partial sums (the H² Gram entries are the hot reductions).
  static double sum_products(const double* x, const double* y, index_t m) {
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
  double dot(const double* x, const double* y) const { return sum_products(x, y, d); }
  double frob(const double* A, const double* B) const { return sum_products(A, B, d * d); }
  double trace(const double* A) const {
    double s = 0;
    for (index_t i = 0; i < d; ++i) s += A[i * d + i];
    return s;
  }
  static void add(double c, const double* x, index_t m, double* y) {
    for (index_t i = 0; i < m; ++i) y[i] += c * x[i];
  }
  void axpy(double c, const double* x, double* y) const { add(c, x, d, y); }
  void axpy_mat(double c, const double* A, double* B) const { add(c, A, d * d, B); }
  void outer(double* M, double c, const double* x, const double* y) const {  // M += c x yᵀ
    for (index_t i = 0; i < d; ++i) add(c * x[i], y, d, M + i * d);
  }
  // M += c (xyᵀ + yxᵀ)/2
  void sym_outer(double* M, double c, const double* x, const double* y) const {
    outer(M, 0.5 * c, x, y);
    outer(M, 0.5 * c, y, x);
  }
};

// The heads' parts in the flattened layout of population_multihead_kernels.hpp.
struct Parts {
  index_t d, H;
  double* base;
  double* P1(index_t h) const { return base + h * d; }
  double* p2() const { return base + H * d; }
  double* Km(index_t h) const { return base + H * d + H + h * d * d; }
  double* K2(index_t h) const { return base + H * d + H + H * d * d + h * d; }
};

double twice_loss(index_t d, index_t H, const double* parts, const double* Lam, index_t N,
                  double noise_std, bool query_noise, double* grad) {
  const Parts P{d, H, const_cast<double*>(parts)};  // read only
  const double* P_p2 = P.p2();
  const index_t dd = d * d;
  const Kit K(d);
  const double n = double(N), s2 = noise_std * noise_std;
  const double t = K.trace(Lam);
  const Vec L2 = K.mm(Lam, Lam);
  Vec Phi(static_cast<size_t>(dd), 0.0), M4(static_cast<size_t>(dd), 0.0);  // Φ = ΛΓ = E[Λ̂²];  M4 = tr(Λ)Λ + (2/N)Λ²
  K.axpy_mat(1 + 1 / n, L2.data(), Phi.data());
  K.axpy_mat(t / n, Lam, Phi.data());
  K.axpy_mat(t, Lam, M4.data());
  K.axpy_mat(2 / n, L2.data(), M4.data());
  const double c3 = (1 + 2 / n) * (t * t + 2 * K.trace(L2.data()));

  // per head: a_h = Λp1_h, S_h = sym K1_h, ΛK1_hΛ, τ_h = tr(K1_hΛ), M4 p1_h
  const Scratch a(static_cast<size_t>(H * d)), S(static_cast<size_t>(H * dd)), LKL(static_cast<size_t>(H * dd)),
      tau(static_cast<size_t>(H)), M4p1(static_cast<size_t>(H * d));
  // as products of many rows (Λ, M4 symmetric): a = P1 Λ, M4p1 = P1 M4 [H, d], K1Λ [H d, d]
  small::multiply_dense(P.P1(0), Lam, a.data(), H, d);
  small::multiply_dense(P.P1(0), M4.data(), M4p1.data(), H, d);
  const Scratch KL(static_cast<size_t>(H * dd));
  small::multiply_dense(P.Km(0), Lam, KL.data(), H * d, d);
  for (index_t h = 0; h < H; ++h) {
    const double* K1 = P.Km(h);
    small::multiply_dense(Lam, KL.data() + h * dd, LKL.data() + h * dd, d, d);
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d; ++j) S[h * dd + i * d + j] = 0.5 * (K1[i * d + j] + K1[j * d + i]);
    tau[h] = K.frob(K1, Lam);  // Λ symmetric
  }
  auto A = [&](index_t h) { return a.data() + h * d; };

  // linear aggregates over the heads
  Vec z(static_cast<size_t>(d), 0.0), u(static_cast<size_t>(d), 0.0), e4(static_cast<size_t>(d), 0.0), m(static_cast<size_t>(d), 0.0), s(static_cast<size_t>(d), 0.0),
      tv(static_cast<size_t>(d), 0.0), R(static_cast<size_t>(dd), 0.0), C(static_cast<size_t>(dd), 0.0), KsymA(static_cast<size_t>(d), 0.0);
  for (index_t h = 0; h < H; ++h) {
    const double *K1 = P.Km(h), *p1 = P.P1(h), *k2 = P.K2(h);
    const double p2 = P_p2[h];
    const Vec Kta = K.mvt(K1, A(h)), Ka = K.mv(K1, A(h)), Sa = K.mv(S.data() + h * dd, A(h));
    K.axpy(1.0, Kta.data(), z.data());                   // z = Σ K1_hᵀ a_h
    K.axpy(p2, k2, u.data());                            // u = Σ p2_h k2_h
    K.axpy(1.0, K.mvt(K1, M4p1.data() + h * d).data(), e4.data());  // e4 = Σ K1_hᵀ M4 p1_h
    K.axpy(tau[h], A(h), tv.data());                     // tv = Σ τ_h a_h
    K.axpy(1.0, Ka.data(), KsymA.data());                // Σ (K1_h + K1_hᵀ) a_h, Λ applied below
    K.axpy(1.0, Kta.data(), KsymA.data());
    K.axpy(1.0, Sa.data(), s.data());                    // s = Σ S_h a_h
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d; ++j) {
        R[i * d + j] += p2 * K1[j * d + i] + k2[i] * p1[j];  // R = Σ p2_h K1_hᵀ + k2_h p1_hᵀ
        C[i * d + j] += p1[i] * k2[j] + p2 * K1[i * d + j];  // C = Σ p1_h k2_hᵀ + p2_h K1_h
      }
  }
  K.axpy(1.0, K.mv(Lam, KsymA.data()).data(), m.data());
  K.axpy(1.0, tv.data(), m.data());  // m = Σ τ_h a_h + Λ(K1_h + K1_hᵀ) a_h
  Vec mbar = z;                      // m̄ = E v = z + tr(Λ) u
  K.axpy(t, u.data(), mbar.data());

  // H x H Grams: π, γ, σ; ν, ω through Y[g,h] = K1_gᵀa_h and V[g,h] = S_g a_h
  const size_t HH = static_cast<size_t>(H * H);
  const Scratch pi(HH), gam(HH), sig(HH), A6(HH), LY(HH * static_cast<size_t>(d)), LV(HH * static_cast<size_t>(d)),
      Y(HH * static_cast<size_t>(d)), V(HH * static_cast<size_t>(d));
  // rows g·H + h: Y = a_hᵀ K1_g (= (K1_gᵀa_h)ᵀ), V = a_hᵀ S_g (S_g symmetric), then ΛY, ΛV as
  // [H², d] x Λ (Λ symmetric): 2H + 2 products of many rows instead of 4H² mat-vecs.
  for (index_t g_ = 0; g_ < H; ++g_) {
    const size_t g0 = static_cast<size_t>(g_ * H) * static_cast<size_t>(d);
    small::multiply_dense(a.data(), P.Km(g_), Y.data() + g0, H, d);
    small::multiply_dense(a.data(), S.data() + g_ * dd, V.data() + g0, H, d);
  }
  small::multiply_dense(Y.data(), Lam, LY.data(), H * H, d);
  small::multiply_dense(V.data(), Lam, LV.data(), H * H, d);
  auto at = [&](const Scratch& X, index_t g_, index_t h) { return X.data() + static_cast<size_t>(g_ * H + h) * static_cast<size_t>(d); };
  // every Gram is symmetric in (h, g) (Λ, S_g symmetric; ν_gh = Y[h,g]ᵀΛY[g,h] = ν_hg, so ω):
  // the pairs g >= h, the sums weighted 2 off the diagonal
  double nu_sum = 0, om_sum = 0, pigam = 0, piA6 = 0;
  for (index_t h = 0; h < H; ++h)
    for (index_t g_ = h; g_ < H; ++g_) {
      const size_t hg = static_cast<size_t>(h * H + g_), gh = static_cast<size_t>(g_ * H + h);
      const double w = g_ == h ? 1.0 : 2.0;
      pi[hg] = pi[gh] = K.dot(P.P1(h), A(g_));
      gam[hg] = gam[gh] = K.frob(P.Km(h), LKL.data() + g_ * dd);
      sig[hg] = sig[gh] = K.frob(S.data() + h * dd, LKL.data() + g_ * dd);
      A6[hg] = A6[gh] = tau[h] * tau[g_] + 2 * sig[hg];
      nu_sum += w * K.dot(at(Y, g_, h), at(LY, h, g_));
      om_sum += w * K.dot(at(V, g_, h), at(LV, h, g_));
      pigam += w * pi[hg] * gam[hg];
      piA6 += w * pi[hg] * A6[hg];
    }

  const Vec Lz = K.mv(Lam, z.data()), Lu = K.mv(Lam, u.data()), Ls = K.mv(Lam, s.data());
  const Vec LR = K.mm(Lam, R.data()), LRPhi = K.mm(LR.data(), Phi.data());
  const double uLu = K.dot(u.data(), Lu.data());
  const double T1 = K.dot(z.data(), Lz.data()) + (nu_sum + pigam) / n;
  const double T2 = K.frob(R.data(), LRPhi.data()) - 2 * K.frob(R.data(), L2.data()) + t;
  const double T3 = c3 * uLu;
  const double T4 = 2 * K.dot(e4.data(), Lu.data());
  const double X = 2 / n * K.dot(mbar.data(), m.data());
  const double F6 = (piA6 + 4 * K.dot(tv.data(), s.data()) + 4 * K.dot(s.data(), Ls.data()) +
                     4 * om_sum) / (n * n);
  Vec LCL;  // ΛCΛ, for the noise terms
  double noise_terms = 0;
  if (s2 > 0) {
    LCL = K.mm(K.mm(Lam, C.data()).data(), Lam);
    noise_terms = 2 * s2 * (K.dot(mbar.data(), Lu.data()) + K.dot(m.data(), u.data()) / n) +
                  s2 * s2 * (1 + 2 / n) * uLu + s2 / n * (K.frob(C.data(), LCL.data()) + 4 * t * uLu) +
                  (query_noise ? s2 : 0.0);
  }
  const double twice = T1 + T2 + T3 + T4 + X + F6 + noise_terms;
  if (!grad) return twice;

  // ∂(2L) with respect to the aggregates ...
  Vec G_mbar(static_cast<size_t>(d), 0.0), G_z(static_cast<size_t>(d), 0.0), G_u(static_cast<size_t>(d), 0.0), G_e4 = Lu, G_m(static_cast<size_t>(d), 0.0),
      G_s(static_cast<size_t>(d), 0.0), G_tv(static_cast<size_t>(d), 0.0), G_R(static_cast<size_t>(dd), 0.0);
  K.axpy(2 / n, m.data(), G_mbar.data());
  K.axpy(2 * s2, Lu.data(), G_mbar.data());
  K.axpy(2.0, Lz.data(), G_z.data());
  K.axpy(1.0, G_mbar.data(), G_z.data());
  K.axpy_mat(2.0, LRPhi.data(), G_R.data());
  K.axpy_mat(-2.0, L2.data(), G_R.data());
  const Vec Le4 = K.mv(Lam, e4.data()), Lmbar = K.mv(Lam, mbar.data());
  K.axpy(2 * c3 + 2 * s2 * s2 * (1 + 2 / n) + 8 * s2 * t / n, Lu.data(), G_u.data());
  K.axpy(2.0, Le4.data(), G_u.data());
  K.axpy(t, G_mbar.data(), G_u.data());
  K.axpy(2 * s2, Lmbar.data(), G_u.data());
  K.axpy(2 * s2 / n, m.data(), G_u.data());
  for (double& v : G_e4) v *= 2;  // 2Λu
  K.axpy(2 / n, mbar.data(), G_m.data());
  K.axpy(2 * s2 / n, u.data(), G_m.data());
  K.axpy(4 / (n * n), tv.data(), G_s.data());
  K.axpy(8 / (n * n), Ls.data(), G_s.data());
  K.axpy(4 / (n * n), s.data(), G_tv.data());
  Vec G_C(static_cast<size_t>(dd), 0.0);
  if (s2 > 0) K.axpy_mat(2 * s2 / n, LCL.data(), G_C.data());
  const Vec LGm = K.mv(Lam, G_m.data()), LGtv = K.mv(Lam, G_tv.data());

  // The Grams' terms of every head at once, as products over the heads (g the summed head):
  //   GA1[h] = Σ_g K1_g LY[h,g]                              = LY [H, H d] · [K1_gᵀ]_g [H d, d]
  //   GA2[h] = Σ_g S_g LV[h,g]                                = LV [H, H d] · [S_g]_g  [H d, d]
  //   GP[h]  = Σ_g (2/N γ_hg + 2/N² A6_hg) a_g               = coefficients [H, H] · a [H, d]
  //   Wpi[h] = Σ_g π_hg ΛK1_gΛ                                = π [H, H] · LKL [H, d²]
  const Scratch KT(static_cast<size_t>(H * dd)), At(static_cast<size_t>(H * d)), coef(HH),
      GA1(static_cast<size_t>(H * d)), GA2(static_cast<size_t>(H * d)), GP(static_cast<size_t>(H * d)),
      Wpi_all(static_cast<size_t>(H * dd));
  Vec piTau(static_cast<size_t>(H), 0.0);
  for (index_t g_ = 0; g_ < H; ++g_)
    for (index_t i = 0; i < d; ++i) {
      At[i * H + g_] = a[g_ * d + i];
      for (index_t j = 0; j < d; ++j) KT[(g_ * d + j) * d + i] = P.Km(g_)[i * d + j];
    }
  for (size_t i = 0; i < HH; ++i) coef[i] = 2 / n * gam[i] + 2 / (n * n) * A6[i];
  for (index_t h = 0; h < H; ++h)
    for (index_t g_ = 0; g_ < H; ++g_) piTau[h] += pi[h * H + g_] * tau[g_];
  Kit::gemm(LY.data(), H * d, KT.data(), d, GA1.data(), d, H, H * d, d);
  Kit::gemm(LV.data(), H * d, S.data(), d, GA2.data(), d, H, H * d, d);
  Kit::gemm(coef.data(), H, a.data(), d, GP.data(), d, H, H, d);
  Kit::gemm(pi.data(), H, LKL.data(), dd, Wpi_all.data(), dd, H, H, dd);
  Vec P1(static_cast<size_t>(dd)), P2(static_cast<size_t>(dd));

  // ... then through each head's terms
  std::fill(grad, grad + H * (d + 1) * (d + 1), 0.0);
  const Parts G{d, H, grad};
  double* G_p2 = G.p2();
  for (index_t h = 0; h < H; ++h) {
    const double *K1 = P.Km(h), *p1 = P.P1(h), *k2 = P.K2(h), *ah = A(h), *Sh = S.data() + h * dd;
    const double p2 = P_p2[h];
    double *gp1 = G.P1(h), *gK1 = G.Km(h), *gk2 = G.K2(h);
    // ∂p1_h: a_h's Grams go through Λ at the end (ga), the rest directly
    Vec ga(static_cast<size_t>(d), 0.0);
    const Vec KGz = K.mv(K1, G_z.data()), KGe4 = K.mv(K1, G_e4.data()), KLGm = K.mv(K1, LGm.data()),
              KtLGm = K.mvt(K1, LGm.data()), SGs = K.mv(Sh, G_s.data());
    Vec lam_side(static_cast<size_t>(d), 0.0);  // Λ(K1_h G_z + K1_h ΛG_m + K1_hᵀ ΛG_m + S_h G_s)
    K.axpy(1.0, KGz.data(), lam_side.data());
    K.axpy(1.0, KLGm.data(), lam_side.data());
    K.axpy(1.0, KtLGm.data(), lam_side.data());
    K.axpy(1.0, SGs.data(), lam_side.data());
    K.axpy(1.0, K.mv(Lam, lam_side.data()).data(), gp1);
    K.axpy(1.0, K.mv(M4.data(), KGe4.data()).data(), gp1);
    K.axpy(1.0, K.mvt(G_R.data(), k2).data(), gp1);
    K.axpy(tau[h], LGm.data(), gp1);
    K.axpy(tau[h], LGtv.data(), gp1);
    K.axpy(1.0, K.mv(G_C.data(), k2).data(), gp1);
    // ∂p2_h, ∂k2_h
    G_p2[h] += K.frob(G_C.data(), K1) + K.dot(k2, G_u.data());
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d; ++j) G_p2[h] += G_R[i * d + j] * K1[j * d + i];
    K.axpy(1.0, K.mv(G_R.data(), p1).data(), gk2);
    K.axpy(p2, G_u.data(), gk2);
    K.axpy(1.0, K.mvt(G_C.data(), p1).data(), gk2);
    // ∂K1_h
    K.outer(gK1, 1.0, ah, G_z.data());
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d; ++j) gK1[i * d + j] += p2 * G_R[j * d + i];
    K.outer(gK1, 1.0, M4p1.data() + h * d, G_e4.data());
    K.axpy_mat(K.dot(ah, G_m.data()) + K.dot(ah, G_tv.data()), Lam, gK1);
    K.outer(gK1, 1.0, LGm.data(), ah);
    K.outer(gK1, 1.0, ah, LGm.data());
    K.sym_outer(gK1, 1.0, G_s.data(), ah);
    K.axpy_mat(p2, G_C.data(), gK1);
    // the Grams: ν (2 Σ_g K1_g ΛK1_hᵀa_g; 2 Σ_g a_g (ΛK1_gᵀa_h)ᵀ), ω (2 Σ_g S_g ΛS_h a_g;
    // ∂S_h = 2 Σ_g ΛS_g a_h a_gᵀ), πγ, πA6: with P1 = Σ_g a_g LY[g,h]ᵀ = aᵀ LY[:, h] and
    // P2 = Σ_g a_g LV[g,h]ᵀ = aᵀ LV[:, h] (the transpose of Σ_g ΛS_g a_h a_gᵀ)
    K.axpy(1.0, GP.data() + h * d, gp1);
    K.axpy(2 / n, GA1.data() + h * d, ga.data());
    K.axpy(8 / (n * n), GA2.data() + h * d, ga.data());
    Kit::gemm(At.data(), H, LY.data() + h * d, H * d, P1.data(), d, d, H, d);
    Kit::gemm(At.data(), H, LV.data() + h * d, H * d, P2.data(), d, d, H, d);
    const double* Wpi = Wpi_all.data() + h * dd;
    // (2/N) P1 + (2/N) Wpi + (2/N²)(Wpi + Wpiᵀ) + (4/N²)(P2 + P2ᵀ)
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d; ++j)
        gK1[i * d + j] += 2 / n * (P1[i * d + j] + Wpi[i * d + j]) +
                          2 / (n * n) * (Wpi[i * d + j] + Wpi[j * d + i]) +
                          4 / (n * n) * (P2[i * d + j] + P2[j * d + i]);
    K.axpy_mat(2 / (n * n) * piTau[h], Lam, gK1);
    K.axpy(1.0, K.mv(Lam, ga.data()).data(), gp1);
  }
  return twice;
}

}  // namespace

PopulationMultiheadKernels population_multihead_kernels() { return {&twice_loss}; }

}  // namespace lsa_native::cpu::LSA_ISA_NS
