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

}  // namespace
