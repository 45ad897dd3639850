// The flow integrators against an exact solution: on L(θ) = ½ θᵀAθ with A = diag(a) the flow is
// θ_i(t) = e^{−a_i t} θ_i(0). Catches a wrong tableau coefficient (order loss) that the population
// tests, comparing two integrators at loose tolerance, miss.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "lsa_native/population.hpp"

namespace {

const std::vector<double> kRates = {0.5, 1.0, 3.0, 10.0};

lsa_native::LossAndGrad quadratic() {
  return [](const double* th, double* g) {
    double L = 0;
    for (size_t i = 0; i < kRates.size(); ++i) {
      g[i] = kRates[i] * th[i];
      L += 0.5 * kRates[i] * th[i] * th[i];
    }
    return L;
  };
}

// max_i |θ_i(T) − e^{−a_i T} θ_i(0)| with θ(0) = 1.
double max_error(const lsa_native::FlowResult& r, double T) {
  double e = 0;
  for (size_t i = 0; i < kRates.size(); ++i)
    e = std::max(e, std::fabs(r.final_theta[i] - std::exp(-kRates[i] * T)));
  return e;
}

TEST(GradientFlow, Dopri5MeetsItsToleranceInFewSteps) {
  const std::vector<double> theta0(kRates.size(), 1.0);
  for (double rtol : {1e-6, 1e-9, 1e-12}) {
    lsa_native::FlowOptions o;
    o.rtol = rtol;
    o.atol = rtol * 1e-2;
    const auto r = lsa_native::gradient_flow(quadratic(), theta0, {2.0}, o);
    // Global error of an error-per-step controller: a small multiple of the tolerance.
    EXPECT_LT(max_error(r, 2.0), 50 * rtol) << "rtol " << rtol;
    // A 5th-order method needs ~ (1/rtol)^{1/5} steps per unit of stiffness·time: at 1e-12 that is
    // a few hundred; a lower-order (wrong) tableau needs orders of magnitude more.
    EXPECT_LT(r.steps, 20 * std::pow(1.0 / rtol, 0.2) + 50) << "rtol " << rtol;
  }
}

TEST(GradientFlow, Rk4ConvergesAtFourthOrder) {
  const std::vector<double> theta0(kRates.size(), 1.0);
  double previous = 0;
  for (double h : {0.02, 0.01, 0.005}) {
    lsa_native::FlowOptions o;
    o.method = lsa_native::FlowOptions::Method::rk4;
    o.step = h;
    const double e = max_error(lsa_native::gradient_flow(quadratic(), theta0, {1.0}, o), 1.0);
    if (previous > 0) {
      const double ratio = previous / e;  // 2^4 = 16 for a 4th-order method
      EXPECT_GT(ratio, 13.0) << "h " << h;
      EXPECT_LT(ratio, 19.0) << "h " << h;
    }
    previous = e;
  }
}

// L = Σ_i ½ a_i θ_i² + ¼ b φ⁴ on (θ, φ): θ_i(t) = e^{−a_i t}, φ(t) = φ0/√(1 + 2bφ0²t). The quartic
// term makes the Jacobian change along the flow (the Rosenbrock method reuses a stale one), a rate
// of 0 gives a parameter with an identically zero Jacobian row (solved outside the Cholesky), and
// a negative rate a growing direction (I − hγJ is definite only for h < 1/(γ|a|)).
struct MixedFlow {
  std::vector<double> rates;
  double b = 2.0, phi0 = 1.0;
  lsa_native::LossAndGrad loss() const {
    return [this](const double* th, double* g) {
      double L = 0;
      for (size_t i = 0; i < rates.size(); ++i) {
        g[i] = rates[i] * th[i];
        L += 0.5 * rates[i] * th[i] * th[i];
      }
      const double phi = th[rates.size()];
      g[rates.size()] = b * phi * phi * phi;
      return L + 0.25 * b * phi * phi * phi * phi;
    };
  }
  std::vector<double> theta0() const {
    std::vector<double> t(rates.size(), 1.0);
    t.push_back(phi0);
    return t;
  }
  double max_error(const lsa_native::FlowResult& r, double T) const {
    double e = std::fabs(r.final_theta.back() - phi0 / std::sqrt(1 + 2 * b * phi0 * phi0 * T));
    for (size_t i = 0; i < rates.size(); ++i)
      e = std::max(e, std::fabs(r.final_theta[i] - std::exp(-rates[i] * T)));
    return e;
  }
};

lsa_native::FlowResult run(const MixedFlow& m, lsa_native::FlowOptions::Method method, double T,
                           double rtol) {
  lsa_native::FlowOptions o;
  o.method = method;
  o.rtol = rtol;
  o.atol = rtol * 1e-2;
  return lsa_native::gradient_flow(m.loss(), m.theta0(), {T}, o);
}

TEST(GradientFlow, RosenbrockMeetsItsToleranceOnAStiffNonlinearFlow) {
  const MixedFlow m{{0.0, 0.5, 3.0, 1e4, -0.5}};
  for (double rtol : {1e-6, 1e-9, 1e-12}) {
    const auto r = run(m, lsa_native::FlowOptions::Method::rosenbrock, 3.0, rtol);
    EXPECT_LT(m.max_error(r, 3.0), 50 * rtol) << "rtol " << rtol;
    EXPECT_EQ(r.final_theta[0], 1.0);  // zero rate: the parameter never moves
    EXPECT_EQ(r.method_used, "rosenbrock");
    EXPECT_EQ(r.stiff_steps, r.steps);
    EXPECT_GE(r.jacobian_evaluations, 1);
    // The controller's estimate is the embedded order-2 error, O(h³): steps ∝ rtol^{−1/3}. The
    // stiff rate 1e4 plays no part (explicit DOPRI5 needs 3.3e-4 steps at any tolerance).
    EXPECT_LT(r.steps, 20 * std::pow(1.0 / rtol, 1.0 / 3) + 50) << "rtol " << rtol;
  }
}

TEST(GradientFlow, RosenbrockLocalErrorIsFourthOrderInTheStep) {
  // One step of h from θ(0) (times = {h}, initial step h, a tolerance that accepts it) with J
  // evaluated there: local error O(h⁴) for an order-3 method, so halving h divides it by ~16 (8 for
  // order 2, 32 for order 4). A wrong tableau coefficient drops the order.
  const MixedFlow m{{0.5, 3.0}};
  double previous = 0;
  for (double h : {0.04, 0.02, 0.01}) {
    lsa_native::FlowOptions o;
    o.method = lsa_native::FlowOptions::Method::rosenbrock;
    o.step = h;
    o.rtol = 1e3;
    const auto r = lsa_native::gradient_flow(m.loss(), m.theta0(), {h}, o);
    ASSERT_EQ(r.steps, 1);
    const double e = m.max_error(r, h);
    if (previous > 0) {
      EXPECT_GT(previous / e, 13.0) << "h " << h;
      EXPECT_LT(previous / e, 19.5) << "h " << h;
    }
    previous = e;
  }
}

TEST(GradientFlow, AutoSwitchesToRosenbrockWhenDopri5Stalls) {
  const MixedFlow m{{0.5, 1.0, 2000.0}};
  const auto r = run(m, lsa_native::FlowOptions::Method::automatic, 50.0, 1e-10);
  EXPECT_EQ(r.method_used, "dopri5+rosenbrock");
  EXPECT_GT(r.switch_time, 0.0);
  EXPECT_LT(r.switch_time, 50.0);
  EXPECT_GT(r.stiff_steps, 0);
  EXPECT_LT(m.max_error(r, 50.0), 5e-9);
  // DOPRI5 alone is held at h ≈ 3.3/2000: ~3e4 steps to t = 50.
  const auto explicit_only = run(m, lsa_native::FlowOptions::Method::dopri5, 50.0, 1e-10);
  EXPECT_LT(3 * r.gradient_evaluations, explicit_only.gradient_evaluations);
}

TEST(GradientFlow, AutoStaysExplicitOnANonStiffFlow) {
  const MixedFlow m{{0.5, 1.0}};
  const auto r = run(m, lsa_native::FlowOptions::Method::automatic, 2.0, 1e-10);
  EXPECT_EQ(r.method_used, "dopri5");
  EXPECT_LT(r.switch_time, 0.0);
  EXPECT_EQ(r.jacobian_evaluations, 0);
  EXPECT_LT(m.max_error(r, 2.0), 5e-9);
}

}  // namespace
