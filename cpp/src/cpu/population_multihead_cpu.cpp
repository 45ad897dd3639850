// CPU implementation of the exact population loss of H-head linear attention and its gradient
// (population_multihead.hpp; derivation: docs/population.md, "H heads"; numpy transcription:
// reference/population_multihead.py). Arguments are validated by population_multihead.cpp.
//
// 2L = T1 + T2 + T3 + T4 + X + F6 (+ noise) of the one-head derivation, summed over pairs of heads:
// every term is a linear aggregate over the heads (z, R, u, e4, m, s, tv, C) or one of five H x H
// Gram matrices (π, γ, σ, ν, ω). The gradient runs back through the aggregates, then the Grams.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/small_matrix.hpp"
#include "cpu/population_multihead_cpu.hpp"
#include "cpu/small_matrix_cpu.hpp"

namespace lsa_native::cpu {
namespace {

using Vec = std::vector<double>;

// The parts of each head that reach ŷ: p_h = (p1_h; p2_h), K_h = [K1_h; k2_hᵀ]. Also the gradient
// of 2L with respect to them (same layout).
struct HeadParts {
  index_t d, H;
  Vec p1, p2, K1, k2;  // [H, d], [H], [H, d, d], [H, d]
  HeadParts(index_t d_, index_t H_)
      : d(d_), H(H_), p1(static_cast<size_t>(H_ * d_), 0.0), p2(static_cast<size_t>(H_), 0.0), K1(static_cast<size_t>(H_ * d_ * d_), 0.0),
        k2(static_cast<size_t>(H_ * d_), 0.0) {}
  double* P1(index_t h) { return p1.data() + h * d; }
  double* Km(index_t h) { return K1.data() + h * d * d; }
  double* K2(index_t h) { return k2.data() + h * d; }
  const double* P1(index_t h) const { return p1.data() + h * d; }
  const double* Km(index_t h) const { return K1.data() + h * d * d; }
  const double* K2(index_t h) const { return k2.data() + h * d; }
  // Flattened (p1, p2, K1, k2), the layout of the random-covariance expansion.
  Vec flat() const {
    Vec v(p1);
    v.insert(v.end(), p2.begin(), p2.end());
    v.insert(v.end(), K1.begin(), K1.end());
    v.insert(v.end(), k2.begin(), k2.end());
    return v;
  }
  void unflat(const double* v) {
    for (Vec* part : {&p1, &p2, &K1, &k2}) {
      std::copy(v, v + part->size(), part->begin());
      v += part->size();
    }
  }
};

// Row-major d x d products and helpers on raw pointers.
struct Kit {
  index_t d;
  int n;
  const SmallMatrixKernels& k = small_matrix_kernels();
  explicit Kit(index_t d_) : d(d_), n(int(d_)) {}
  Vec mm(const double* A, const double* B) const {
    Vec C(static_cast<size_t>(d * d));
    k.matmul(A, B, C.data(), d);
    return C;
  }
  Vec mv(const double* A, const double* x) const {
    Vec y(static_cast<size_t>(d));
    k.matvec(A, x, y.data(), d);
    return y;
  }
  Vec mvt(const double* A, const double* x) const {  // Aᵀ x
    Vec y(static_cast<size_t>(d));
    k.matvec_t(A, x, y.data(), d);
    return y;
  }
  void mv_to(const double* A, const double* x, double* y) const { k.matvec(A, x, y, d); }
  void mvt_to(const double* A, const double* x, double* y) const { k.matvec_t(A, x, y, d); }
  double dot(const double* x, const double* y) const { return detail::dot(x, y, n); }
  // Σ A∘B over d² entries, in four interleaved partial sums: the H² Gram entries are the hot
  // reductions, and one running sum is bound by the add latency.
  double frob(const double* A, const double* B) const {
    const index_t m = d * d;
    double s[4] = {0, 0, 0, 0};
    index_t i = 0;
    for (; i + 4 <= m; i += 4)
      for (int j = 0; j < 4; ++j) s[j] += A[i + j] * B[i + j];
    for (; i < m; ++i) s[0] += A[i] * B[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
  }
  void axpy(double c, const double* x, double* y) const { detail::axpy(c, x, n, y); }
  void axpy_mat(double c, const double* A, double* B) const { detail::axpy(c, A, n * n, B); }
  void outer(double* M, double c, const double* x, const double* y) const {
    detail::add_outer(M, n, c, x, y);
  }
  // M += c (xyᵀ + yxᵀ)/2
  void sym_outer(double* M, double c, const double* x, const double* y) const {
    outer(M, 0.5 * c, x, y);
    outer(M, 0.5 * c, y, x);
  }
};

double twice_loss_heads(const HeadParts& P, const double* Lam, index_t N, const LabelNoise& noise,
                        HeadParts* g) {
  const index_t d = P.d, H = P.H, dd = d * d;
  const Kit K(d);
  const double n = double(N), s2 = noise.std * noise.std;
  const double t = detail::trace(Lam, int(d));
  const Vec L2 = K.mm(Lam, Lam);
  Vec Phi(static_cast<size_t>(dd), 0.0), M4(static_cast<size_t>(dd), 0.0);  // Φ = ΛΓ = E[Λ̂²];  M4 = tr(Λ)Λ + (2/N)Λ²
  K.axpy_mat(1 + 1 / n, L2.data(), Phi.data());
  K.axpy_mat(t / n, Lam, Phi.data());
  K.axpy_mat(t, Lam, M4.data());
  K.axpy_mat(2 / n, L2.data(), M4.data());
  const double c3 = (1 + 2 / n) * (t * t + 2 * detail::trace(L2.data(), int(d)));

  // per head: a_h = Λp1_h, S_h = sym K1_h, ΛK1_hΛ, τ_h = tr(K1_hΛ), M4 p1_h
  Vec a(static_cast<size_t>(H * d)), S(static_cast<size_t>(H * dd)), LKL(static_cast<size_t>(H * dd)), tau(static_cast<size_t>(H)), M4p1(static_cast<size_t>(H * d));
  for (index_t h = 0; h < H; ++h) {
    const double* K1 = P.Km(h);
    const Vec ah = K.mv(Lam, P.P1(h)), mh = K.mv(M4.data(), P.P1(h));
    std::copy(ah.begin(), ah.end(), a.begin() + h * d);
    std::copy(mh.begin(), mh.end(), M4p1.begin() + h * d);
    const Vec lkl = K.mm(K.mm(Lam, K1).data(), Lam);
    std::copy(lkl.begin(), lkl.end(), LKL.begin() + h * dd);
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
    const double p2 = P.p2[h];
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
  Vec pi(HH), gam(HH), sig(HH), A6(HH), LY(HH * static_cast<size_t>(d)), LV(HH * static_cast<size_t>(d)), Y(HH * static_cast<size_t>(d)),
      V(HH * static_cast<size_t>(d));
  for (index_t g_ = 0; g_ < H; ++g_)
    for (index_t h = 0; h < H; ++h) {
      const size_t gh = static_cast<size_t>(g_ * H + h) * static_cast<size_t>(d);
      K.mvt_to(P.Km(g_), A(h), Y.data() + gh);
      K.mv_to(S.data() + g_ * dd, A(h), V.data() + gh);
      K.mv_to(Lam, Y.data() + gh, LY.data() + gh);
      K.mv_to(Lam, V.data() + gh, LV.data() + gh);
    }
  auto at = [&](Vec& X, index_t g_, index_t h) { return X.data() + static_cast<size_t>(g_ * H + h) * static_cast<size_t>(d); };
  double nu_sum = 0, om_sum = 0, pigam = 0, piA6 = 0;
  for (index_t h = 0; h < H; ++h)
    for (index_t g_ = 0; g_ < H; ++g_) {
      const size_t hg = static_cast<size_t>(h * H + g_);
      pi[hg] = K.dot(P.P1(h), A(g_));
      gam[hg] = K.frob(P.Km(h), LKL.data() + g_ * dd);
      sig[hg] = K.frob(S.data() + h * dd, LKL.data() + g_ * dd);
      A6[hg] = tau[h] * tau[g_] + 2 * sig[hg];
      nu_sum += K.dot(at(Y, g_, h), at(LY, h, g_));
      om_sum += K.dot(at(V, g_, h), at(LV, h, g_));
      pigam += pi[hg] * gam[hg];
      piA6 += pi[hg] * A6[hg];
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
                  (noise.query ? s2 : 0.0);
  }
  const double twice = T1 + T2 + T3 + T4 + X + F6 + noise_terms;
  if (!g) return twice;

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

  // ... then through each head's terms
  HeadParts& G = *g;
  for (index_t h = 0; h < H; ++h) {
    const double *K1 = P.Km(h), *p1 = P.P1(h), *k2 = P.K2(h), *ah = A(h), *Sh = S.data() + h * dd;
    const double p2 = P.p2[h];
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
    G.p2[h] += K.frob(G_C.data(), K1) + K.dot(k2, G_u.data());
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d; ++j) G.p2[h] += G_R[i * d + j] * K1[j * d + i];
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
    // ∂S_h = 2 Σ_g ΛS_g a_h a_gᵀ), πγ, πA6
    double piTau = 0;
    Vec scratch(static_cast<size_t>(d)), Wpi(static_cast<size_t>(dd), 0.0), Mom(static_cast<size_t>(dd), 0.0);
    for (index_t g_ = 0; g_ < H; ++g_) {
      const size_t hg = static_cast<size_t>(h * H + g_);
      K.mv_to(P.Km(g_), at(LY, h, g_), scratch.data());
      K.axpy(2 / n, scratch.data(), ga.data());
      K.mv_to(S.data() + g_ * dd, at(LV, h, g_), scratch.data());
      K.axpy(8 / (n * n), scratch.data(), ga.data());
      K.axpy(2 / n * gam[hg] + 2 / (n * n) * A6[hg], A(g_), gp1);
      K.outer(gK1, 2 / n, A(g_), at(LY, g_, h));
      K.outer(Mom.data(), 1.0, at(LV, g_, h), A(g_));   // Σ_g ΛS_g a_h a_gᵀ
      K.axpy_mat(pi[hg], LKL.data() + g_ * dd, Wpi.data());  // Σ_g π_hg ΛK1_gΛ
      piTau += pi[hg] * tau[g_];
    }
    // (2/N) Σ_g π_hg ΛK1_gΛ + (4/N²) Σ_g π_hg ΛS_gΛ + (4/N²)·2 sym(Σ_g ΛS_g a_h a_gᵀ)
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d; ++j)
        gK1[i * d + j] += 2 / n * Wpi[i * d + j] + 2 / (n * n) * (Wpi[i * d + j] + Wpi[j * d + i]) +
                          4 / (n * n) * (Mom[i * d + j] + Mom[j * d + i]);
    K.axpy_mat(2 / (n * n) * piTau, Lam, gK1);
    K.axpy(1.0, K.mv(Lam, ga.data()).data(), gp1);
  }
  return twice;
}

// Writes ½∂(2L) into full-size gradients (exact zeros where a parameter does not reach ŷ).
void write_merged(const HeadParts& g, double* d_W_pv, double* d_W_kq) {
  const index_t d = g.d, n1 = d + 1, sz = n1 * n1;
  std::fill(d_W_pv, d_W_pv + g.H * sz, 0.0);
  std::fill(d_W_kq, d_W_kq + g.H * sz, 0.0);
  for (index_t h = 0; h < g.H; ++h) {
    double *pv = d_W_pv + h * sz, *kq = d_W_kq + h * sz;
    for (index_t c = 0; c < d; ++c) {
      pv[d * n1 + c] = 0.5 * g.P1(h)[c];
      kq[d * n1 + c] = 0.5 * g.K2(h)[c];
      for (index_t r = 0; r < d; ++r) kq[r * n1 + c] = 0.5 * g.Km(h)[r * d + c];
    }
    pv[d * n1 + d] = 0.5 * g.p2[h];
  }
}

// p_h and the K-block of W^KQ_h = W^K_hᵀ W^Q_h (separate) or W_kq[h] (merged).
HeadParts read_heads(index_t d, index_t H, index_t rank, const double* W_pv, const double* W_kq,
                     const double* W_k, const double* W_q) {
  HeadParts P(d, H);
  const index_t n1 = d + 1;
  for (index_t h = 0; h < H; ++h) {
    const double* pv = W_pv + h * n1 * n1;
    for (index_t c = 0; c < d; ++c) P.P1(h)[c] = pv[d * n1 + c];
    P.p2[h] = pv[d * n1 + d];
    for (index_t r = 0; r <= d; ++r)
      for (index_t c = 0; c < d; ++c) {
        double v;
        if (rank == 0) {
          v = W_kq[h * n1 * n1 + r * n1 + c];
        } else {  // (W^Kᵀ W^Q)[r, c] = Σ_ρ W^K[ρ, r] W^Q[ρ, c]
          const double *Wk = W_k + h * rank * n1, *Wq = W_q + h * rank * n1;
          v = 0;
          for (index_t q = 0; q < rank; ++q) v += Wk[q * n1 + r] * Wq[q * n1 + c];
        }
        if (r < d) P.Km(h)[r * d + c] = v;
        else P.K2(h)[c] = v;
      }
  }
  return P;
}

// 2L and its flattened gradient: fixed Λ, or the exact expectation over a random diagonal Λτ
// (L is a cubic in each λ_i: E L = L(μ) + ½ Σ Var(λ_i) ∂²L/∂λ_i² + (1/6) Σ κ3(λ_i) ∂³L/∂λ_i³,
// the one-dimensional derivatives exact from 4 evaluations, docs/population.md).
double twice_loss_law(const HeadParts& P, PopulationCovariance law, const double* cov, index_t N,
                      const LabelNoise& noise, HeadParts* g) {
  if (law == PopulationCovariance::fixed) return twice_loss_heads(P, cov, N, noise, g);
  const index_t d = P.d;
  const double *m1 = cov, *m2 = cov + d, *m3 = cov + 2 * d;
  auto evaluate = [&](index_t i, double h) {
    Vec L(static_cast<size_t>(d * d), 0.0);
    for (index_t k = 0; k < d; ++k) L[k * d + k] = m1[k];
    if (i >= 0) L[i * d + i] += h;
    HeadParts gi(P.d, P.H);
    Vec out{twice_loss_heads(P, L.data(), N, noise, g ? &gi : nullptr)};
    if (g) {
      const Vec f = gi.flat();
      out.insert(out.end(), f.begin(), f.end());
    }
    return out;
  };
  const Vec at_mean = evaluate(-1, 0.0);
  Vec total = at_mean;
  for (index_t i = 0; i < d; ++i) {
    const double var = m2[i] - m1[i] * m1[i];
    const double kappa = m3[i] - 3 * m1[i] * m2[i] + 2 * m1[i] * m1[i] * m1[i];
    if (var <= 0 && kappa == 0) continue;
    const double h = std::max({std::fabs(m1[i]), std::sqrt(std::max(var, 0.0)), 1e-6});
    const Vec gp = evaluate(i, h), gm = evaluate(i, -h), gp2 = evaluate(i, 2 * h),
              gm2 = evaluate(i, -2 * h);
    for (size_t k = 0; k < total.size(); ++k) {
      const double second = (gp[k] - 2 * at_mean[k] + gm[k]) / (h * h);
      const double third = (gp2[k] - 2 * gp[k] + 2 * gm[k] - gm2[k]) / (2 * h * h * h);
      total[k] += 0.5 * std::max(var, 0.0) * second + kappa / 6.0 * third;
    }
  }
  if (g) g->unflat(total.data() + 1);
  return total[0];
}

}  // namespace

double multihead_population_loss(index_t d, index_t heads, const double* W_pv, const double* W_kq,
                                 PopulationCovariance law, const double* covariance, index_t N,
                                 double* d_W_pv, double* d_W_kq, const LabelNoise& noise) {
  const HeadParts P = read_heads(d, heads, 0, W_pv, W_kq, nullptr, nullptr);
  const bool want_grad = d_W_pv && d_W_kq;
  HeadParts g(d, heads);
  const double twice = twice_loss_law(P, law, covariance, N, noise, want_grad ? &g : nullptr);
  if (want_grad) write_merged(g, d_W_pv, d_W_kq);
  return 0.5 * twice;
}

double multihead_population_loss_separate(index_t d, index_t heads, index_t rank,
                                          const double* W_pv, const double* W_k, const double* W_q,
                                          PopulationCovariance law, const double* covariance, index_t N,
                                          double* d_W_pv, double* d_W_k, double* d_W_q,
                                          const LabelNoise& noise) {
  const HeadParts P = read_heads(d, heads, rank, W_pv, nullptr, W_k, W_q);
  const bool want_grad = d_W_pv && d_W_k && d_W_q;
  HeadParts g(d, heads);
  const double twice = twice_loss_law(P, law, covariance, N, noise, want_grad ? &g : nullptr);
  if (!want_grad) return 0.5 * twice;
  const index_t n1 = d + 1, sz = n1 * n1;
  std::vector<double> d_W_kq(static_cast<size_t>(heads * sz));
  write_merged(g, d_W_pv, d_W_kq.data());
  // K_h = W^K_hᵀ W^Q_h[:, :d] with G_h = ∂L/∂K_h [d+1, d]:
  //   ∂W^K_h[ρ, r] = Σ_c W^Q_h[ρ, c] G_h[r, c],  ∂W^Q_h[ρ, c] = Σ_r W^K_h[ρ, r] G_h[r, c] (c < d).
  std::fill(d_W_k, d_W_k + heads * rank * n1, 0.0);
  std::fill(d_W_q, d_W_q + heads * rank * n1, 0.0);
  for (index_t h = 0; h < heads; ++h) {
    const double *G = d_W_kq.data() + h * sz, *Wk = W_k + h * rank * n1, *Wq = W_q + h * rank * n1;
    double *gk = d_W_k + h * rank * n1, *gq = d_W_q + h * rank * n1;
    for (index_t q = 0; q < rank; ++q)
      for (index_t r = 0; r <= d; ++r)
        for (index_t c = 0; c < d; ++c) {
          gk[q * n1 + r] += Wq[q * n1 + c] * G[r * n1 + c];
          gq[q * n1 + c] += Wk[q * n1 + r] * G[r * n1 + c];
        }
  }
  return 0.5 * twice;
}

}  // namespace lsa_native::cpu
