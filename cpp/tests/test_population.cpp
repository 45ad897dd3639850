// C++ API of the exact population loss: hand-checked values, finite differences, the reduced
// objective, gradient flow, error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "lsa_native/population.hpp"

namespace {

using lsa_native::index_t;

std::vector<double> random_matrix(index_t rows, index_t cols, unsigned seed, double scale) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  std::vector<double> m(static_cast<size_t>(rows * cols));
  for (auto& v : m) v = scale * normal(gen);
  return m;
}

std::vector<double> spd(index_t d, unsigned seed) {  // A A^T + d I
  const auto A = random_matrix(d, d, seed, 1.0);
  std::vector<double> L(static_cast<size_t>(d * d), 0.0);
  for (index_t i = 0; i < d; ++i)
    for (index_t j = 0; j < d; ++j) {
      for (index_t k = 0; k < d; ++k) L[i * d + j] += A[i * d + k] * A[j * d + k];
      if (i == j) L[i * d + j] += double(d);
    }
  return L;
}

// d = 1 by hand. With p1 = 0, k2 = 0: L = ½ u² Γ λ³ K² − u λ² K + ½ λ with Γ = (1 + 2/N) λ.
TEST(PopulationLoss, HandCheckedScalarManifold) {
  const double lambda = 1.5, u = 0.7, K = -0.4;
  const index_t N = 3;
  const std::vector<double> W_pv = {0, 0, 0, u}, W_kq = {K, 0, 0, 0}, Lam = {lambda};
  const double gamma = (1 + 2.0 / N) * lambda;
  const double expected = 0.5 * u * u * gamma * lambda * lambda * K * K - u * lambda * lambda * K + 0.5 * lambda;
  std::vector<double> g_pv(4), g_kq(4);
  EXPECT_NEAR(lsa_native::population_loss(1, W_pv.data(), W_kq.data(), Lam.data(), N, g_pv.data(), g_kq.data()),
              expected, 1e-14);
  EXPECT_NEAR(g_pv[3], u * gamma * lambda * lambda * K * K - lambda * lambda * K, 1e-14);
  EXPECT_NEAR(g_kq[0], u * u * gamma * lambda * lambda * K - u * lambda * lambda, 1e-14);
}

TEST(PopulationLoss, GradientMatchesCentralDifferences) {
  const index_t d = 3, N = 4, n = (d + 1) * (d + 1);
  const auto W_pv = random_matrix(d + 1, d + 1, 1, 0.5), W_kq = random_matrix(d + 1, d + 1, 2, 0.5);
  const auto Lam = spd(d, 3);
  std::vector<double> g_pv(n), g_kq(n);
  lsa_native::population_loss(d, W_pv.data(), W_kq.data(), Lam.data(), N, g_pv.data(), g_kq.data());
  const double h = 1e-5;
  for (int which = 0; which < 2; ++which)
    for (index_t i = 0; i < n; ++i) {
      auto P = W_pv, K = W_kq;
      auto& W = which == 0 ? P : K;
      W[i] += h;
      const double up = lsa_native::population_loss(d, P.data(), K.data(), Lam.data(), N);
      W[i] -= 2 * h;
      const double down = lsa_native::population_loss(d, P.data(), K.data(), Lam.data(), N);
      const double fd = (up - down) / (2 * h);
      // A quartic in θ: truncation O(h² |∂³L|) well below the tolerance.
      EXPECT_NEAR(which == 0 ? g_pv[i] : g_kq[i], fd, 1e-6 * (1 + std::fabs(fd)));
    }
}

TEST(PopulationLoss, ManifoldEqualsReducedObjectivePlusHalfTrace) {
  const index_t d = 4, N = 7;
  const auto U = random_matrix(d, d, 4, 1.0);
  const auto Lam = spd(d, 5);
  const double u = 0.8;
  std::vector<double> W_pv((d + 1) * (d + 1), 0.0), W_kq((d + 1) * (d + 1), 0.0);
  W_pv[d * (d + 1) + d] = u;
  for (index_t i = 0; i < d; ++i)
    for (index_t j = 0; j < d; ++j) W_kq[i * (d + 1) + j] = U[i * d + j];
  double trace = 0;
  for (index_t i = 0; i < d; ++i) trace += Lam[i * d + i];
  const double full = lsa_native::population_loss(d, W_pv.data(), W_kq.data(), Lam.data(), N);
  const double reduced = lsa_native::reduced_loss(d, U.data(), u, Lam.data(), N);
  EXPECT_NEAR(full, reduced + 0.5 * trace, 1e-11 * (1 + std::fabs(full)));
}

TEST(PopulationLoss, InvalidArgumentsThrowError) {
  const std::vector<double> W(4, 0.1), Lam = {1.0}, bad = {-1.0};
  EXPECT_THROW(lsa_native::population_loss(1, W.data(), W.data(), bad.data(), 3), lsa_native::Error);
  EXPECT_THROW(lsa_native::population_loss(1, W.data(), W.data(), Lam.data(), 0), lsa_native::Error);
  EXPECT_THROW(lsa_native::population_loss(0, W.data(), W.data(), Lam.data(), 3), lsa_native::Error);
  const std::vector<double> nonsym = {2, 1, 0, 2};
  const std::vector<double> W2(9, 0.1);
  EXPECT_THROW(lsa_native::population_loss(2, W2.data(), W2.data(), nonsym.data(), 3), lsa_native::Error);
  const std::vector<double> moments = {1.0, 0.5, 1.0};  // E λ² < (E λ)²: not a variance
  EXPECT_THROW(lsa_native::population_loss_random_diagonal(1, W.data(), W.data(), moments.data(), 3),
               lsa_native::Error);
}

// Random diagonal Λτ with the two-point law λ_i ∈ {a, b} (probability ½ each): the exact expectation
// is the average over the 2^d diagonals, which the moment formula must reproduce (L is cubic in λ).
TEST(PopulationLoss, RandomDiagonalEqualsTwoPointEnumeration) {
  const index_t d = 2, N = 3, n2 = (d + 1) * (d + 1);
  const double a = 0.5, b = 2.5;
  const auto W_pv = random_matrix(d + 1, d + 1, 11, 0.5), W_kq = random_matrix(d + 1, d + 1, 12, 0.5);
  std::vector<double> moments(3 * d);
  for (index_t i = 0; i < d; ++i) {
    moments[0 * d + i] = (a + b) / 2;
    moments[1 * d + i] = (a * a + b * b) / 2;
    moments[2 * d + i] = (a * a * a + b * b * b) / 2;
  }
  std::vector<double> g_pv(n2), g_kq(n2), e_pv(n2, 0.0), e_kq(n2, 0.0), t_pv(n2), t_kq(n2);
  const double L = lsa_native::population_loss_random_diagonal(d, W_pv.data(), W_kq.data(),
                                                               moments.data(), N, g_pv.data(),
                                                               g_kq.data());
  double expected = 0;
  for (double l0 : {a, b})
    for (double l1 : {a, b}) {
      const std::vector<double> Lam = {l0, 0, 0, l1};
      expected += 0.25 * lsa_native::population_loss(d, W_pv.data(), W_kq.data(), Lam.data(), N,
                                                     t_pv.data(), t_kq.data());
      for (index_t i = 0; i < n2; ++i) {
        e_pv[i] += 0.25 * t_pv[i];
        e_kq[i] += 0.25 * t_kq[i];
      }
    }
  EXPECT_NEAR(L, expected, 1e-11 * std::fabs(expected));
  for (index_t i = 0; i < n2; ++i) {
    EXPECT_NEAR(g_pv[i], e_pv[i], 1e-10 * (1 + std::fabs(e_pv[i])));
    EXPECT_NEAR(g_kq[i], e_kq[i], 1e-10 * (1 + std::fabs(e_kq[i])));
  }
}

TEST(GradientFlow, ReachesTheorem41LimitOnTheScalarProblem) {
  // d = 1, Λ = λ: the limit is u = |Γ^{-1}|^{1/2}, K = |Γ^{-1}|^{-1/2} Γ^{-1}, i.e. u = K = Γ^{-1/2}.
  const double lambda = 2.0;
  const index_t N = 5;
  const std::vector<double> Lam = {lambda};
  const double sigma = 0.3;
  std::vector<double> theta = {0, 0, 0, sigma, sigma, 0, 0, 0};  // W_pv(0), W_kq(0): Assumption 3.3
  const lsa_native::LossAndGrad f = [&](const double* th, double* g) {
    return lsa_native::population_loss(1, th, th + 4, Lam.data(), N, g, g + 4);
  };
  lsa_native::FlowOptions options;
  options.grad_tol = 1e-12;
  const auto r = lsa_native::gradient_flow(f, theta, {1.0, 1e4}, options);
  const double gamma = (1 + 2.0 / N) * lambda;
  EXPECT_NEAR(r.final_theta[3], 1 / std::sqrt(gamma), 1e-10);
  EXPECT_NEAR(r.final_theta[4], 1 / std::sqrt(gamma), 1e-10);
  EXPECT_GT(r.gradient_evaluations, 0);
}

}  // namespace
