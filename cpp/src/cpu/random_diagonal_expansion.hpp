// The exact expectation over a random diagonal covariance Λτ = diag(λ), independent λ_i given by
// their raw moments, of a quantity that is a cubic polynomial in each λ_i: the population loss
// and its gradient, of one head (population_cpu.cpp) and of H heads (population_multihead_cpu.cpp)
// [ZFB 4.3; docs/population.md, "Random covariance"].
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "lsa_native/types.hpp"

namespace lsa_native::cpu {

// E f(diag λ) for f: a dense row-major d x d diagonal Λ -> a vector (every entry a cubic in each
// λ_i; moments [3, d] = (E λ_i, E λ_i², E λ_i³)):
//   E f = f(μ) + Σ_i [½ Var(λ_i) ∂²f/∂λ_i² + (1/6) κ3(λ_i) ∂³f/∂λ_i³]   (μ = E λ),
// the one-dimensional derivatives exact up to rounding from f at μ ± h e_i, μ ± 2h e_i, with a step
// of the entry's own scale (well-conditioned differences); (1 + 4d) evaluations, fewer when an
// entry is deterministic.
template <class F>
std::vector<double> random_diagonal_expectation(index_t d, const double* moments, F&& f) {
  const double *m1 = moments, *m2 = moments + d, *m3 = moments + 2 * d;
  auto at = [&](index_t i, double h) {
    std::vector<double> L(static_cast<size_t>(d * d), 0.0);
    for (index_t k = 0; k < d; ++k) L[static_cast<size_t>(k * d + k)] = m1[k];
    if (i >= 0) L[static_cast<size_t>(i * d + i)] += h;
    return f(static_cast<const double*>(L.data()));
  };
  const std::vector<double> at_mean = at(-1, 0.0);
  std::vector<double> total = at_mean;
  for (index_t i = 0; i < d; ++i) {
    const double var = m2[i] - m1[i] * m1[i];
    const double kappa = m3[i] - 3 * m1[i] * m2[i] + 2 * m1[i] * m1[i] * m1[i];  // E(λ − μ)³
    if (var <= 0 && kappa == 0) continue;  // deterministic entry
    const double h = std::max({std::fabs(m1[i]), std::sqrt(std::max(var, 0.0)), 1e-6});
    const std::vector<double> gp = at(i, h), gm = at(i, -h), gp2 = at(i, 2 * h), gm2 = at(i, -2 * h);
    for (size_t k = 0; k < total.size(); ++k) {
      const double second = (gp[k] - 2 * at_mean[k] + gm[k]) / (h * h);
      const double third = (gp2[k] - 2 * gp[k] + 2 * gm[k] - gm2[k]) / (2 * h * h * h);
      total[k] += 0.5 * std::max(var, 0.0) * second + kappa / 6.0 * third;
    }
  }
  return total;
}

}  // namespace lsa_native::cpu
