// Helpers of the emulated-CUDA tests (include after cuda_emulation.hpp and cuda/lsa_kernels.cuh):
// per-dtype tolerances, a closeness check that also catches unwritten (NaN-poisoned) outputs, and
// reduce_partials_kernel's fixed order on the host; the sampled steps' law cases and their specs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "lsa_native/sampling.hpp"

namespace lsa_native::testing {

// CUDA vs CPU on identical inputs: float32 to rounding of sums over a prompt, float64 to 1e-12.
template <class T>
double tolerance() {
  return sizeof(T) == 4 ? 2e-4 : 1e-12;
}

// max |a − b| ≤ tol · max |b| (and no NaN: poisoned outputs must be overwritten).
template <class A, class B>
void expect_close(const std::vector<A>& a, const std::vector<B>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double scale = 0, err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(double(a[i]))) << what << ": entry " << i << " not written";
    scale = std::max(scale, std::abs(double(b[i])));
    err = std::max(err, std::abs(double(a[i]) - double(b[i])));
  }
  EXPECT_LE(err, tol * scale) << what;
}

// reduce_partials_kernel's order on the host (thread t sums rows t, t + 256, ...; then a binary
// tree): the emulated kernel matches it bit for bit (ReducePartialsOrder), and the other tests use
// it to keep the emulation fast.
inline std::vector<double> reduce(const std::vector<double>& partial, int count, int width) {
  namespace k = lsa_native::cuda::kernels;
  std::vector<double> total(width);
  for (int i = 0; i < width; ++i) {
    double buf[k::kReduceThreads];
    for (int t = 0; t < k::kReduceThreads; ++t) {
      buf[t] = 0;
      for (int r = t; r < count; r += k::kReduceThreads) buf[t] += partial[size_t(r) * width + i];
    }
    for (int h = k::kReduceThreads / 2; h > 0; h /= 2)
      for (int t = 0; t < h; ++t) buf[t] += buf[t + h];
    total[i] = buf[0];
  }
  return total;
}

// A law of the test matrix: name, d, N and the spec's options.
struct Case {
  const char* name;
  index_t d, N;
  double noise = 0;
  bool query_noise = false;
  index_t tasks = 0;
  CovarianceLaw law = CovarianceLaw::fixed;
  double a = 0, b = 0, p = 0;
  bool sphere = false;
  bool chol = false, query_chol = false;
};

// Cholesky factors of a random SPD matrix (d x d, row-major lower), fixed by d and salt.
inline std::vector<double> factor(index_t d, unsigned salt) {
  std::vector<double> L(d * d, 0.0);
  for (index_t k2 = 0; k2 < d; ++k2)
    for (index_t m = 0; m <= k2; ++m)
      L[k2 * d + m] = m == k2 ? 0.5 + 0.1 * double((k2 + salt) % 7) : 0.3 * std::sin(double(salt + 3 * k2 + m));
  return L;
}

// The LinearPromptSpec of a case (seed given), holding the factors it points to.
struct SpecHolder {
  LinearPromptSpec spec;
  std::vector<double> L, Lq;
  explicit SpecHolder(const Case& c, std::uint64_t seed) {
    spec.dim = c.d;
    spec.context = c.N;
    spec.seed = seed;
    spec.noise_std = c.noise;
    spec.query_noise = c.query_noise;
    spec.tasks = c.tasks;
    spec.law = c.law;
    spec.law_a = c.a;
    spec.law_b = c.b;
    spec.law_p = c.p;
    spec.covariates = c.sphere ? lsa_native::Covariates::sphere : lsa_native::Covariates::gaussian;
    if (c.chol) {
      L = factor(c.d, 1);
      spec.chol = L.data();
    }
    if (c.query_chol) {
      Lq = factor(c.d, 4);
      spec.query_chol = Lq.data();
    }
  }
};

}  // namespace lsa_native::testing
