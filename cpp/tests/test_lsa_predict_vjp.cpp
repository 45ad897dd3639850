// lsa_predict_vjp: central differences of Σ_b dŷ_b ŷ_b (lsa_predict) in every entry of W_pv,
// W_kq and E, including a nonzero query-label slot.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "lsa_native/lsa.hpp"

namespace {

using lsa_native::index_t;
using lsa_native::LsaShape;

TEST(LsaPredictVjp, MatchesCentralDifferences) {
  const index_t B = 3, d = 2, N = 4, D = d + 1;
  std::mt19937_64 gen(3);
  std::normal_distribution<double> normal;
  auto fill = [&](index_t n) {
    std::vector<double> v(static_cast<size_t>(n));
    for (auto& x : v) x = normal(gen);
    return v;
  };
  auto E = fill(B * D * (N + 1)), W_pv = fill(D * D), W_kq = fill(D * D);
  const auto g = fill(B);
  const LsaShape shape{B, d, N};
  std::vector<double> dpv(W_pv.size()), dkq(W_kq.size()), dE(E.size()), y(static_cast<size_t>(B));
  lsa_native::lsa_predict_vjp(shape, E.data(), W_pv.data(), W_kq.data(), g.data(), dpv.data(),
                              dkq.data(), dE.data());
  auto f = [&] {
    lsa_native::lsa_predict(shape, E.data(), W_pv.data(), W_kq.data(), y.data());
    double s = 0;
    for (index_t b = 0; b < B; ++b) s += g[b] * y[b];
    return s;
  };
  const double h = 1e-6;
  for (auto [param, grad] : {std::pair{&W_pv, &dpv}, {&W_kq, &dkq}, {&E, &dE}}) {
    for (size_t i = 0; i < param->size(); ++i) {
      const double keep = (*param)[i];
      (*param)[i] = keep + h;
      const double up = f();
      (*param)[i] = keep - h;
      const double down = f();
      (*param)[i] = keep;
      const double fd = (up - down) / (2 * h);
      EXPECT_NEAR((*grad)[i], fd, 1e-7 * (1 + std::fabs(fd))) << "entry " << i;
    }
  }
}

}  // namespace
