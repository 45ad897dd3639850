// Helpers of the emulated-CUDA tests (include after cuda_emulation.hpp and cuda/lsa_kernels.cuh):
// per-dtype tolerances, a closeness check that also catches unwritten (NaN-poisoned) outputs, and
// reduce_partials_kernel's fixed order on the host.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

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

}  // namespace lsa_native::testing
