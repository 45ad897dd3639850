// CPU implementation of the closed-form population losses of the one-layer LSA and their gradients
// (population.hpp; derivation: docs/population.md). Arguments are validated by population.cpp.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/parallel.hpp"
#include "common/small_matrix.hpp"
#include "cpu/small_matrix_cpu.hpp"
#include "cpu/population_cpu.hpp"
#include "cpu/random_diagonal_expansion.hpp"

namespace lsa_native::cpu {
namespace {

// Minimal dense row-major d x d matrix for the O(d^3) closed forms.
struct Mat {
  index_t n;
  std::vector<double> a;
  explicit Mat(index_t n_) : n(n_), a(static_cast<size_t>(n_ * n_), 0.0) {}
  double& operator()(index_t i, index_t j) { return a[i * n + j]; }
  double operator()(index_t i, index_t j) const { return a[i * n + j]; }
};
using Vecd = std::vector<double>;

// Products run on the SIMD small-matrix kernels (cpu/small_matrix_cpu.hpp, chosen per instruction
// set), the other O(d^2) steps on the LSA_HD kit (common/small_matrix.hpp).
Mat matmul(const Mat& A, const Mat& B) {
  Mat C(A.n);
  cpu::matmul(A.a.data(), B.a.data(), C.a.data(), A.n);
  return C;
}
Vecd matvec(const Mat& A, const Vecd& x) {
  Vecd y(static_cast<size_t>(A.n));
  cpu::small_matrix_kernels().matvec(A.a.data(), x.data(), y.data(), A.n);
  return y;
}
Vecd matvec_t(const Mat& A, const Vecd& x) {  // A^T x
  Vecd y(static_cast<size_t>(A.n));
  cpu::small_matrix_kernels().matvec_t(A.a.data(), x.data(), y.data(), A.n);
  return y;
}
double dot(const Vecd& x, const Vecd& y) { return detail::dot(x.data(), y.data(), int(x.size())); }
double trace(const Mat& A) { return detail::trace(A.a.data(), int(A.n)); }
double frobenius_dot(const Mat& A, const Mat& B) {  // Σ A∘B = tr(A^T B)
  return detail::dot(A.a.data(), B.a.data(), int(A.a.size()));
}
double trace_product(const Mat& A, const Mat& B) {  // tr(A B)
  return detail::trace_product(A.a.data(), B.a.data(), int(A.n));
}
void add_outer(Mat& M, double c, const Vecd& x, const Vecd& y) {  // M += c x y^T
  detail::add_outer(M.a.data(), int(M.n), c, x.data(), y.data());
}
void add_scaled(Mat& M, double c, const Mat& A) {
  detail::axpy(c, A.a.data(), int(A.a.size()), M.a.data());
}
void add_scaled(Vecd& v, double c, const Vecd& x) { detail::axpy(c, x.data(), int(x.size()), v.data()); }

// The parameters that affect ŷ (SPEC 3.2/3.5): p = (p1; p2) last row of W^PV, K = [K1; k2^T] the
// first d columns of W^KQ.
struct Params {
  Vecd p1, k2;
  double p2;
  Mat K1;
  Params(index_t d, const double* W_pv, const double* W_kq)
      : p1(static_cast<size_t>(d)), k2(static_cast<size_t>(d)), p2(W_pv[d * (d + 1) + d]), K1(d) {
    for (index_t c = 0; c < d; ++c) {
      p1[c] = W_pv[d * (d + 1) + c];
      k2[c] = W_kq[d * (d + 1) + c];
      for (index_t r = 0; r < d; ++r) K1(r, c) = W_kq[r * (d + 1) + c];
    }
  }
};

struct Grad {
  Vecd p1, k2;
  double p2 = 0;
  Mat K1;
  explicit Grad(index_t d) : p1(static_cast<size_t>(d), 0.0), k2(static_cast<size_t>(d), 0.0), K1(d) {}
  void write(index_t d, double scale, double* d_W_pv, double* d_W_kq) const {
    std::fill(d_W_pv, d_W_pv + (d + 1) * (d + 1), 0.0);
    std::fill(d_W_kq, d_W_kq + (d + 1) * (d + 1), 0.0);
    for (index_t c = 0; c < d; ++c) {
      d_W_pv[d * (d + 1) + c] = scale * p1[c];
      d_W_kq[d * (d + 1) + c] = scale * k2[c];
      for (index_t r = 0; r < d; ++r) d_W_kq[r * (d + 1) + c] = scale * K1(r, c);
    }
    d_W_pv[d * (d + 1) + d] = scale * p2;
  }
};

// The products of Λ and the parameters that the six terms of 2L share (docs/population.md, with
// n = N: a = Λp1, α = p1ᵀΛp1, τ = tr(K1Λ), β = tr(K1ΛK1ᵀΛ), Φ = ΛΓ [ZFB Thm 4.1]).
struct Shared {
  double n;         // N
  double trL, trL2; // tr Λ, tr Λ²
  Mat L2, Phi;      // Λ², Φ = E[Λ̂ Λ̂] = (1 + 1/N)Λ² + tr(Λ)/N · Λ
  Vecd a;           // Λ p1
  double alpha;     // p1ᵀ Λ p1
  Mat KL, LK, LKL;  // K1Λ, ΛK1, ΛK1Λ
  double tau;       // tr(K1Λ)
  Vecd u1, Lu1;     // K1ᵀa, ΛK1ᵀa
  double beta;      // tr(K1ΛK1ᵀΛ) = <ΛK1Λ, K1>
  Vecd Lk2;         // Λ k2

  Shared(const Params& P, const Mat& Lam, index_t N)
      : n(double(N)), trL(trace(Lam)), trL2(0), L2(matmul(Lam, Lam)), Phi(Lam.n),
        a(matvec(Lam, P.p1)), alpha(dot(P.p1, a)), KL(matmul(P.K1, Lam)), LK(matmul(Lam, P.K1)),
        LKL(matmul(LK, Lam)), tau(trace(KL)), u1(matvec_t(P.K1, a)), Lu1(matvec(Lam, u1)),
        beta(frobenius_dot(LKL, P.K1)), Lk2(matvec(Lam, P.k2)) {
    trL2 = trace(L2);
    add_scaled(Phi, 1 + 1 / n, L2);
    add_scaled(Phi, trL / n, Lam);
  }
};

// Each term below returns its value and, when g is not null, adds its gradient to g. The caller
// runs them in the order T1, T2, T3, T4, X, F6 (the order the gradients accumulate in).

// T1 = E[v0ᵀΛv0] = (1 + 1/N) aᵀK1ΛK1ᵀa + α tr(K1ΛK1ᵀΛ)/N
double term_T1(const Shared& s, Grad* g) {
  const double n = s.n;
  const double T1 = (1 + 1 / n) * dot(s.u1, s.Lu1) + s.alpha * s.beta / n;
  if (g) {
    const Vecd LKLu1 = matvec(s.LK, s.Lu1);
    add_scaled(g->p1, 2 * (1 + 1 / n), LKLu1);
    add_scaled(g->p1, 2 * s.beta / n, s.a);
    add_outer(g->K1, 2 * (1 + 1 / n), s.a, s.Lu1);
    add_scaled(g->K1, 2 * s.alpha / n, s.LKL);
  }
  return T1;
}

// T2 = E tr(M1ᵀΛM1) = tr(RᵀΛRΦ) − 2 tr(RΛ²) + tr Λ,  R = p2 K1ᵀ + k2 p1ᵀ
double term_T2(const Shared& s, const Params& P, const Mat& Lam, Grad* g) {
  const index_t d = Lam.n;
  const Mat& K1 = P.K1;
  const Vecd &p1 = P.p1, &k2 = P.k2;
  const double p2 = P.p2;
  Mat R(d), LR(d);  // Λ R = p2 (K1 Λ)^T + (Λ k2) p1^T: no product needed
  for (index_t i = 0; i < d; ++i)
    for (index_t j = 0; j < d; ++j) {
      R(i, j) = p2 * K1(j, i) + k2[i] * p1[j];
      LR(i, j) = p2 * s.KL(j, i) + s.Lk2[i] * p1[j];
    }
  const Mat LRPhi = matmul(LR, s.Phi);
  const double T2 = frobenius_dot(R, LRPhi) - 2 * frobenius_dot(R, s.L2) + s.trL;
  if (g) {  // through D = ∂T2/∂R = 2(Λ R Φ − Λ²)
    Mat D = LRPhi;
    add_scaled(D, -1.0, s.L2);
    for (double& v : D.a) v *= 2;
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d; ++j) {
        g->p2 += D(i, j) * K1(j, i);
        g->K1(j, i) += p2 * D(i, j);
      }
    add_scaled(g->k2, 1.0, matvec(D, p1));
    add_scaled(g->p1, 1.0, matvec_t(D, k2));
  }
  return T2;
}

// T3 = E[v2ᵀΛv2] = p2² (k2ᵀΛk2)(1 + 2/N)(tr(Λ)² + 2 tr(Λ²))
double term_T3(const Shared& s, const Params& P, Grad* g) {
  const double p2 = P.p2;
  const double k2Lk2 = dot(P.k2, s.Lk2);
  const double c3 = (1 + 2 / s.n) * (s.trL * s.trL + 2 * s.trL2);
  const double T3 = p2 * p2 * k2Lk2 * c3;
  if (g) {
    g->p2 += 2 * p2 * k2Lk2 * c3;
    add_scaled(g->k2, 2 * p2 * p2 * c3, s.Lk2);
  }
  return T3;
}

// T4 = 2 E[v0ᵀΛv2] = 2 p2 p1ᵀ M4 K1 Λ k2,  M4 = tr(Λ) Λ + (2/N) Λ²
double term_T4(const Shared& s, const Params& P, const Mat& Lam, Grad* g) {
  const double p2 = P.p2;
  Mat M4(Lam.n);
  add_scaled(M4, s.trL, Lam);
  add_scaled(M4, 2 / s.n, s.L2);
  const Vecd z = matvec(s.KL, P.k2);  // K1 Λ k2
  const Vecd w4 = matvec(M4, P.p1);   // M4 p1
  const double T4 = 2 * p2 * dot(w4, z);
  if (g) {
    g->p2 += 2 * dot(w4, z);
    add_scaled(g->p1, 2 * p2, matvec(M4, z));
    add_scaled(g->k2, 2 * p2, matvec_t(s.KL, w4));
    add_outer(g->K1, 2 * p2, w4, s.Lk2);
  }
  return T4;
}

// X = (2/N) m̄ᵀm (the cross term),  m̄ = E v = K1ᵀa + p2 tr(Λ) k2,  m = τ a + Λ (K1 + K1ᵀ) a
double term_X(const Shared& s, const Params& P, const Mat& Lam, Grad* g) {
  const double n = s.n, p2 = P.p2;
  Vecd mbar = s.u1;
  add_scaled(mbar, p2 * s.trL, P.k2);
  Vecd m = matvec(s.LK, s.a);
  add_scaled(m, s.tau, s.a);
  add_scaled(m, 1.0, s.Lu1);
  const double X = 2 / n * dot(mbar, m);
  if (g) {
    g->p2 += 2 / n * s.trL * dot(P.k2, m);
    add_scaled(g->k2, 2 / n * p2 * s.trL, m);
    const Vecd v = matvec(Lam, mbar);
    add_scaled(g->p1, 2 / n, matvec(s.LK, m));
    add_scaled(g->p1, 2 / n * s.tau, v);
    add_scaled(g->p1, 2 / n, matvec(Lam, matvec_t(P.K1, v)));
    add_scaled(g->p1, 2 / n, matvec(s.LK, v));
    add_outer(g->K1, 2 / n, s.a, m);
    add_scaled(g->K1, 2 / n * dot(mbar, s.a), Lam);
    add_outer(g->K1, 2 / n, v, s.a);
    add_outer(g->K1, 2 / n, s.a, v);
  }
  return X;
}

// F6 = [α(τ² + 2 tr(SΛSΛ)) + 4τ aᵀSa + 8 aᵀSΛSa] / N² (the 6th moment of x_q),  S = (K1 + K1ᵀ)/2
double term_F6(const Shared& s, const Params& P, const Mat& Lam, Grad* g) {
  const index_t d = Lam.n;
  const double n = s.n, alpha = s.alpha, tau = s.tau;
  const Mat& K1 = P.K1;
  Mat S(d), SL(d), LSL(d);  // SΛ = ½(K1Λ + (ΛK1)^T), ΛSΛ = ½(ΛK1Λ + (ΛK1Λ)^T)
  for (index_t i = 0; i < d; ++i)
    for (index_t j = 0; j < d; ++j) {
      S(i, j) = 0.5 * (K1(i, j) + K1(j, i));
      SL(i, j) = 0.5 * (s.KL(i, j) + s.LK(j, i));
      LSL(i, j) = 0.5 * (s.LKL(i, j) + s.LKL(j, i));
    }
  const double tSLSL = trace_product(SL, SL);
  const Vecd Sa = matvec(S, s.a);
  const double aSa = dot(s.a, Sa);
  const Vecd LSa = matvec(Lam, Sa);
  const double aSLSa = dot(Sa, LSa);
  const double F6 = (alpha * (tau * tau + 2 * tSLSL) + 4 * tau * aSa + 8 * aSLSa) / (n * n);
  if (g) {  // the S-gradient is symmetric, so it is also the K1-gradient
    const double inv_n2 = 1 / (n * n);
    add_scaled(g->p1, inv_n2 * 2 * (tau * tau + 2 * tSLSL), s.a);
    add_scaled(g->p1, inv_n2 * 8 * tau, LSa);
    add_scaled(g->p1, inv_n2 * 16, matvec(Lam, matvec(S, LSa)));
    add_scaled(g->K1, inv_n2 * (2 * alpha * tau + 4 * aSa), Lam);
    add_scaled(g->K1, inv_n2 * 4 * alpha, LSL);
    add_outer(g->K1, inv_n2 * 4 * tau, s.a, s.a);
    add_outer(g->K1, inv_n2 * 8, s.a, LSa);
    add_outer(g->K1, inv_n2 * 8, LSa, s.a);
  }
  return F6;
}

// 2L and, when g is not null, ∂(2L): the sum of the six terms of docs/population.md.
double twice_loss_noiseless(const Params& P, const Mat& Lam, index_t N, Grad* g) {
  const Shared s(P, Lam, N);
  const double T1 = term_T1(s, g);
  const double T2 = term_T2(s, P, Lam, g);
  const double T3 = term_T3(s, P, g);
  const double T4 = term_T4(s, P, Lam, g);
  const double X = term_X(s, P, Lam, g);
  const double F6 = term_F6(s, P, Lam, g);
  return T1 + T2 + T3 + T4 + X + F6;
}

// 2ΔL and, when g is not null, ∂(2ΔL) added to g: the label-noise terms of docs/population.md
// ("Label noise"). With y_i = <w, x_i> + σ ε_i, a = p1 + p2 w, β = k2ᵀx_q, m = p1ᵀΛK1Λk2,
// κ2 = k2ᵀΛk2, π = p1ᵀΛp1, τ = tr(K1ᵀΛK1Λ), t = tr Λ, and the query term's 4th moment
// X4 = ρθ + m + m' (ρ = p1ᵀΛk2, θ = tr(K1Λ), m' = p1ᵀΛK1ᵀΛk2):
//   ΔL = σ²(1 + 1/N) p2 m + C κ2 + σ² p2² τ/(2N) + σ² p2 X4/N + ½σ² [query noise],
//   C  = (1 + 2/N) p2² (σ² t + σ⁴/2) + σ² π/(2N).
double twice_noise_loss(const Params& P, const Mat& Lam, index_t N, const LabelNoise& noise, Grad* g) {
  const double s2 = noise.std * noise.std;
  if (s2 == 0) return 0.0;
  const double n = double(N);
  const Mat& K1 = P.K1;
  const Vecd &p1 = P.p1, &k2 = P.k2;
  const double p2 = P.p2;
  const double t = trace(Lam);
  const Vecd Lp1 = matvec(Lam, p1), Lk2 = matvec(Lam, k2);
  const Vecd KLk2 = matvec(K1, Lk2);      // K1 Λ k2
  const Mat LK1L = matmul(matmul(Lam, K1), Lam);
  const double m = dot(Lp1, KLk2);        // p1ᵀ Λ K1 Λ k2
  const double kappa2 = dot(k2, Lk2);
  const double pi = dot(p1, Lp1);
  const double tau = frobenius_dot(K1, LK1L);  // tr(K1ᵀ Λ K1 Λ)
  const double c1 = s2 * (1 + 1 / n);
  const double C = (1 + 2 / n) * p2 * p2 * (s2 * t + 0.5 * s2 * s2) + s2 * pi / (2 * n);
  const double q = noise.query ? s2 : 0.0;
  const Vecd KtLp1 = matvec_t(K1, Lp1);  // K1ᵀ Λ p1
  const Vecd KtLk2 = matvec_t(K1, Lk2);  // K1ᵀ Λ k2
  const double rho = dot(p1, Lk2), theta = trace_product(K1, Lam), m2 = dot(Lp1, KtLk2);
  const double X4 = rho * theta + m + m2;
  const double e = s2 * p2 / n;
  if (g) {
    g->p2 += 2 * s2 * X4 / n;
    add_scaled(g->p1, 2 * e * theta, Lk2);
    add_scaled(g->p1, 2 * e, matvec(Lam, KLk2));
    add_scaled(g->p1, 2 * e, matvec(Lam, KtLk2));
    add_scaled(g->K1, 2 * e * rho, Lam);
    add_outer(g->K1, 2 * e, Lp1, Lk2);
    add_outer(g->K1, 2 * e, Lk2, Lp1);
    add_scaled(g->k2, 2 * e * theta, Lp1);
    add_scaled(g->k2, 2 * e, matvec(Lam, KtLp1));
    add_scaled(g->k2, 2 * e, matvec(Lam, matvec(K1, Lp1)));
    g->p2 += 2 * c1 * m + 4 * (1 + 2 / n) * p2 * (s2 * t + 0.5 * s2 * s2) * kappa2 + 2 * s2 * p2 * tau / n;
    add_scaled(g->p1, 2 * c1 * p2, matvec(Lam, KLk2));
    add_scaled(g->p1, 2 * s2 * kappa2 / n, Lp1);
    add_outer(g->K1, 2 * c1 * p2, Lp1, Lk2);
    add_scaled(g->K1, 2 * s2 * p2 * p2 / n, LK1L);
    add_scaled(g->k2, 2 * c1 * p2, matvec(Lam, KtLp1));
    add_scaled(g->k2, 4 * C, Lk2);
  }
  return 2 * c1 * p2 * m + 2 * C * kappa2 + s2 * p2 * p2 * tau / n + 2 * e * X4 + q;
}

Mat to_mat(index_t d, const double* Lambda) {
  Mat L(d);
  std::copy(Lambda, Lambda + d * d, L.a.begin());
  return L;
}

// 2L with label noise: the noiseless six terms plus the noise terms.
double twice_loss(const Params& P, const Mat& Lam, index_t N, Grad* g, const LabelNoise& noise) {
  return twice_loss_noiseless(P, Lam, N, g) + twice_noise_loss(P, Lam, N, noise, g);
}

}  // namespace

double population_loss(index_t d, const double* W_pv, const double* W_kq, const double* Lambda,
                       index_t N, double* d_W_pv, double* d_W_kq, const LabelNoise& noise) {
  const Params P(d, W_pv, W_kq);
  const bool want_grad = d_W_pv && d_W_kq;
  Grad g(d);
  const double twice = twice_loss(P, to_mat(d, Lambda), N, want_grad ? &g : nullptr, noise);
  if (want_grad) g.write(d, 0.5, d_W_pv, d_W_kq);
  return 0.5 * twice;
}

double population_loss_random_diagonal(index_t d, const double* W_pv, const double* W_kq,
                                       const double* moments, index_t N, double* d_W_pv,
                                       double* d_W_kq, const LabelNoise& noise) {
  const Params P(d, W_pv, W_kq);
  const bool want_grad = d_W_pv && d_W_kq;
  const size_t width = want_grad ? static_cast<size_t>(2 + 2 * d + d * d) : 1;

  // 2L and its flattened gradient at a diagonal Λ, expected over the law
  const std::vector<double> total = random_diagonal_expectation(d, moments, [&](const double* Lambda) {
    Grad g(d);
    std::vector<double> out(width);
    out[0] = twice_loss(P, to_mat(d, Lambda), N, want_grad ? &g : nullptr, noise);
    if (want_grad) {
      std::copy(g.p1.begin(), g.p1.end(), out.begin() + 1);
      std::copy(g.k2.begin(), g.k2.end(), out.begin() + 1 + d);
      out[1 + 2 * d] = g.p2;
      std::copy(g.K1.a.begin(), g.K1.a.end(), out.begin() + 2 + 2 * d);
    }
    return out;
  });
  if (want_grad) {
    Grad g(d);
    std::copy(total.begin() + 1, total.begin() + 1 + d, g.p1.begin());
    std::copy(total.begin() + 1 + d, total.begin() + 1 + 2 * d, g.k2.begin());
    g.p2 = total[1 + 2 * d];
    std::copy(total.begin() + 2 + 2 * d, total.end(), g.K1.a.begin());
    g.write(d, 0.5, d_W_pv, d_W_kq);
  }
  return 0.5 * total[0];
}

double population_loss_samples(index_t d, const double* W_pv, const double* W_kq,
                               const double* Lambdas, index_t n_samples, index_t N,
                               double* d_W_pv, double* d_W_kq, const LabelNoise& noise) {
  const Params P(d, W_pv, W_kq);
  const bool want_grad = d_W_pv && d_W_kq;
  std::vector<double> losses(static_cast<size_t>(n_samples));
  std::vector<Grad> grads(static_cast<size_t>(want_grad ? n_samples : 0), Grad(d));
  detail::parallel_for(n_samples, [&](index_t s) {
    losses[s] = twice_loss(P, to_mat(d, Lambdas + s * d * d), N, want_grad ? &grads[s] : nullptr, noise);
  });
  double total = 0;
  Grad g(d);
  for (index_t s = 0; s < n_samples; ++s) {  // fixed order: independent of the thread count
    total += losses[s];
    if (!want_grad) continue;
    add_scaled(g.p1, 1.0, grads[s].p1);
    add_scaled(g.k2, 1.0, grads[s].k2);
    g.p2 += grads[s].p2;
    add_scaled(g.K1, 1.0, grads[s].K1);
  }
  const double scale = 0.5 / double(n_samples);
  if (want_grad) g.write(d, scale, d_W_pv, d_W_kq);
  return scale * total;
}

double reduced_loss(index_t d, const double* U11, double u, const double* Lambda, index_t N,
                    double* d_U11, double* d_u) {
  const double n = double(N);
  const Mat Lam = to_mat(d, Lambda);
  const Mat U = to_mat(d, U11);
  const Mat L2 = matmul(Lam, Lam);
  const double trL = trace(Lam);
  Mat Phi(d);  // ΓΛ
  add_scaled(Phi, 1 + 1 / n, L2);
  add_scaled(Phi, trL / n, Lam);
  // ℓ̃ = ½u² tr(ΓΛ U Λ U^T) − u tr(Λ² U^T)   [ZFB Lemma A.1]
  const Mat PhiUL = matmul(matmul(Phi, U), Lam);
  const double quad = frobenius_dot(PhiUL, U);  // tr(ΓΛ U Λ U^T)
  const double lin = frobenius_dot(L2, U);      // tr(Λ² U^T)
  if (d_U11)  // ∂ℓ̃/∂U11 = u² ΓΛ U Λ − u Λ²
    for (index_t i = 0; i < d * d; ++i) d_U11[i] = u * u * PhiUL.a[i] - u * L2.a[i];
  if (d_u) *d_u = u * quad - lin;  // ∂ℓ̃/∂u
  return 0.5 * u * u * quad - u * lin;
}

}  // namespace lsa_native::cpu
