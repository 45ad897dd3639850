// C++ API of the batched LSA: hand-checked values, finite differences, error paths, threads.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <random>
#include <thread>
#include <vector>

#include "lsa_native/device.hpp"
#include "lsa_native/lsa.hpp"

namespace {

using lsa_native::index_t;
using lsa_native::LsaShape;

struct Problem {
  LsaShape shape;
  std::vector<double> E, y_q, W_pv, W_kq;
};

Problem random_problem(index_t B, index_t d, index_t N, unsigned seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  Problem p{{B, d, N}, std::vector<double>(B * (d + 1) * (N + 1)), std::vector<double>(B),
            std::vector<double>((d + 1) * (d + 1)), std::vector<double>((d + 1) * (d + 1))};
  for (auto* v : {&p.E, &p.y_q, &p.W_pv, &p.W_kq})
    for (auto& x : *v) x = normal(gen);
  for (index_t b = 0; b < B; ++b) p.E[(b * (d + 1) + d) * (N + 1) + N] = 0;  // query label slot
  return p;
}

// d = 1, N = 1 by hand: E = [[x1, xq], [y1, 0]], G = (e1 e1^T + eq eq^T)/1,
// ŷ = p^T G q with p = (W_pv[1,0], W_pv[1,1]), q = W_kq[:, 0] · xq.
TEST(LsaPredict, HandCheckedSmallestCase) {
  const double x1 = 2, y1 = -1, xq = 3;
  const std::vector<double> E = {x1, xq, y1, 0};
  const std::vector<double> W_pv = {0, 0, 0.5, 2};  // p = (0.5, 2)
  const std::vector<double> W_kq = {1, 0, -1, 0};   // K = (1, -1)^T → q = (3, -3)
  // G = [[x1² + xq², x1 y1], [x1 y1, y1²]] = [[13, -2], [-2, 1]]; G q = (45, -9); p·Gq = 4.5
  double y_hat = 0;
  lsa_native::lsa_predict(LsaShape{1, 1, 1}, E.data(), W_pv.data(), W_kq.data(), &y_hat);
  EXPECT_DOUBLE_EQ(y_hat, 4.5);
  float y32 = 0;
  const std::vector<float> E32(E.begin(), E.end()), P32(W_pv.begin(), W_pv.end()),
      K32(W_kq.begin(), W_kq.end());
  lsa_native::lsa_predict(LsaShape{1, 1, 1}, E32.data(), P32.data(), K32.data(), &y32);
  EXPECT_FLOAT_EQ(y32, 4.5f);
}

TEST(LsaLossAndGrad, MatchesCentralDifferences) {
  Problem p = random_problem(37, 3, 5, 1);
  const index_t n2 = 16;
  std::vector<double> g_pv(n2), g_kq(n2), scratch_pv(n2), scratch_kq(n2);
  lsa_native::lsa_loss_and_grad(p.shape, p.E.data(), p.y_q.data(), p.W_pv.data(), p.W_kq.data(),
                                g_pv.data(), g_kq.data());
  auto loss = [&](const std::vector<double>& P, const std::vector<double>& K) {
    return lsa_native::lsa_loss_and_grad(p.shape, p.E.data(), p.y_q.data(), P.data(), K.data(),
                                         scratch_pv.data(), scratch_kq.data());
  };
  const double h = 1e-6;
  for (int which = 0; which < 2; ++which) {
    for (index_t i = 0; i < n2; ++i) {
      auto P = p.W_pv, K = p.W_kq;
      auto& W = which == 0 ? P : K;
      W[i] += h;
      const double up = loss(P, K);
      W[i] -= 2 * h;
      const double down = loss(P, K);
      const double fd = (up - down) / (2 * h);
      const double analytic = which == 0 ? g_pv[i] : g_kq[i];
      // Central differences of a quartic: truncation O(h²) and cancellation O(1e-16/h) ≈ 1e-10.
      EXPECT_NEAR(analytic, fd, 1e-6 * (1 + std::fabs(fd))) << "parameter " << which << " entry " << i;
    }
  }
  // Entries that cannot affect ŷ have exactly zero gradient.
  for (index_t i = 0; i < 12; ++i) EXPECT_EQ(g_pv[i], 0.0);
  for (index_t r = 0; r < 4; ++r) EXPECT_EQ(g_kq[r * 4 + 3], 0.0);
}

TEST(LsaForward, BottomRightEntryIsThePrediction) {
  Problem p = random_problem(300, 5, 13, 2);
  std::vector<double> F(p.E.size()), y_hat(300);
  lsa_native::lsa_forward(p.shape, p.E.data(), p.W_pv.data(), p.W_kq.data(), F.data());
  lsa_native::lsa_predict(p.shape, p.E.data(), p.W_pv.data(), p.W_kq.data(), y_hat.data());
  for (index_t b = 0; b < 300; ++b)
    EXPECT_NEAR(F[(b * 6 + 5) * 14 + 13], y_hat[b], 1e-12 * (1 + std::fabs(y_hat[b])));
}

// Outputs are tested while written: overflow from finite inputs -> NonFiniteError naming the
// output; a NaN input -> Error naming the input. Odd sizes so the padded SIMD tails are exercised.
std::string message_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST(LsaNonFinite, OutputsFlaggedInTheWritingPassNameTheOutput) {
  Problem p = random_problem(37, 3, 11, 9);
  const index_t n = p.E.size(), B = p.shape.batch;
  std::vector<double> big(p.E), y(B), F(n), d_F(n, 1.0), g_pv(16), g_kq(16), g_E(n);
  for (auto& x : big) x *= 1e120;  // ŷ ~ E³ overflows double; E stays finite
  auto starts = [](const std::string& m, const std::string& prefix) { return m.rfind(prefix, 0) == 0; };
  EXPECT_THROW(lsa_native::lsa_predict(p.shape, big.data(), p.W_pv.data(), p.W_kq.data(), y.data()),
               lsa_native::NonFiniteError);
  EXPECT_TRUE(starts(message_of([&] {
    lsa_native::lsa_predict(p.shape, big.data(), p.W_pv.data(), p.W_kq.data(), y.data());
  }), "y_hat: overflowed"));
  EXPECT_TRUE(starts(message_of([&] {
    lsa_native::lsa_forward(p.shape, big.data(), p.W_pv.data(), p.W_kq.data(), F.data());
  }), "F: overflowed"));
  // dE alone: P = W^PV G W^KQ huge, d_F moderate; the parameter gradients stay finite.
  std::vector<double> W_pv(p.W_pv), W_kq(p.W_kq);
  for (auto& x : W_pv) x *= 1e160;
  for (auto& x : W_kq) x *= 1e160;
  EXPECT_TRUE(starts(message_of([&] {
    lsa_native::lsa_vjp(p.shape, p.E.data(), W_pv.data(), W_kq.data(), d_F.data(), g_pv.data(),
                        g_kq.data(), g_E.data());
  }), "dE: overflowed")) << "vjp";
  EXPECT_NO_THROW(lsa_native::lsa_vjp(p.shape, p.E.data(), W_pv.data(), W_kq.data(), d_F.data(),
                                      g_pv.data(), g_kq.data(), static_cast<double*>(nullptr)));
  std::vector<double> nan_E(p.E);
  nan_E[n - 5] = std::nan("");
  EXPECT_THROW(lsa_native::lsa_forward(p.shape, nan_E.data(), p.W_pv.data(), p.W_kq.data(), F.data()),
               lsa_native::Error);
  EXPECT_TRUE(starts(message_of([&] {
    lsa_native::lsa_forward(p.shape, nan_E.data(), p.W_pv.data(), p.W_kq.data(), F.data());
  }), "E: contains non-finite values"));
  EXPECT_TRUE(starts(message_of([&] {
    lsa_native::lsa_loss_and_grad(p.shape, big.data(), p.y_q.data(), p.W_pv.data(), p.W_kq.data(),
                                  g_pv.data(), g_kq.data(), y.data());
  }), "loss: overflowed"));
}

TEST(LsaVjp, MatchesCentralDifferencesOfForward) {
  Problem p = random_problem(3, 2, 4, 3);
  std::mt19937_64 gen(4);
  std::normal_distribution<double> normal;
  std::vector<double> d_F(p.E.size()), F(p.E.size());
  for (auto& x : d_F) x = normal(gen);
  std::vector<double> g_pv(9), g_kq(9), g_E(p.E.size());
  lsa_native::lsa_vjp(p.shape, p.E.data(), p.W_pv.data(), p.W_kq.data(), d_F.data(), g_pv.data(),
                      g_kq.data(), g_E.data());
  auto objective = [&](const std::vector<double>& E, const std::vector<double>& P,
                       const std::vector<double>& K) {
    lsa_native::lsa_forward(p.shape, E.data(), P.data(), K.data(), F.data());
    double s = 0;
    for (size_t i = 0; i < F.size(); ++i) s += F[i] * d_F[i];
    return s;
  };
  const double h = 1e-6;
  auto check = [&](const std::vector<double>& grad, int which) {
    for (size_t i = 0; i < grad.size(); ++i) {
      auto args = std::vector<std::vector<double>>{p.E, p.W_pv, p.W_kq};
      args[which][i] += h;
      const double up = objective(args[0], args[1], args[2]);
      args[which][i] -= 2 * h;
      const double down = objective(args[0], args[1], args[2]);
      const double fd = (up - down) / (2 * h);
      EXPECT_NEAR(grad[i], fd, 1e-6 * (1 + std::fabs(fd))) << "argument " << which << " entry " << i;
    }
  };
  check(g_E, 0);
  check(g_pv, 1);
  check(g_kq, 2);
}

TEST(LsaErrors, InvalidArgumentsThrowError) {
  Problem p = random_problem(2, 2, 3, 5);
  std::vector<double> y(2);
  const double* E = p.E.data();
  const double* P = p.W_pv.data();
  const double* K = p.W_kq.data();
  EXPECT_THROW(lsa_native::lsa_predict(LsaShape{0, 2, 3}, E, P, K, y.data()), lsa_native::Error);
  EXPECT_THROW(lsa_native::lsa_predict(LsaShape{2, 0, 3}, E, P, K, y.data()), lsa_native::Error);
  EXPECT_THROW(lsa_native::lsa_predict(LsaShape{2, 2, 0}, E, P, K, y.data()), lsa_native::Error);
  EXPECT_THROW(lsa_native::lsa_predict(LsaShape{2, 2, 3}, E, P, K, static_cast<double*>(nullptr)),
               lsa_native::Error);
  EXPECT_THROW(lsa_native::lsa_predict(LsaShape{1LL << 40, 1LL << 20, 1LL << 20}, E, P, K, y.data()),
               lsa_native::Error);
  try {
    lsa_native::lsa_predict(LsaShape{2, 2, 0}, E, P, K, y.data());
  } catch (const lsa_native::Error& e) {
    EXPECT_NE(std::string(e.what()).find("context length N"), std::string::npos) << e.what();
  }
}

TEST(LsaThreads, ConcurrentCallsAndThreadCountsGiveIdenticalResults) {
  Problem p = random_problem(1000, 5, 30, 6);
  std::vector<double> g_pv(36), g_kq(36);
  const double loss = lsa_native::lsa_loss_and_grad(p.shape, p.E.data(), p.y_q.data(),
                                                    p.W_pv.data(), p.W_kq.data(), g_pv.data(),
                                                    g_kq.data());
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<double> a(36), b(36);
      for (int rep = 0; rep < 5; ++rep) {
        const double l = lsa_native::lsa_loss_and_grad(p.shape, p.E.data(), p.y_q.data(),
                                                       p.W_pv.data(), p.W_kq.data(), a.data(),
                                                       b.data());
        mismatches[t] += (l != loss) + (a != g_pv) + (b != g_kq);
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0);

  const int before = lsa_native::num_threads();
  for (int n : {1, 3}) {
    lsa_native::set_num_threads(n);
    EXPECT_EQ(lsa_native::num_threads(), n);
    std::vector<double> a(36), b(36);
    EXPECT_EQ(lsa_native::lsa_loss_and_grad(p.shape, p.E.data(), p.y_q.data(), p.W_pv.data(),
                                            p.W_kq.data(), a.data(), b.data()),
              loss);
    EXPECT_EQ(a, g_pv);
    EXPECT_EQ(b, g_kq);
  }
  lsa_native::set_num_threads(0);
  EXPECT_EQ(lsa_native::num_threads(), before);
}

TEST(Device, ReportsBuildAndRuntime) {
  if (!lsa_native::cuda_compiled()) {
    EXPECT_FALSE(lsa_native::cuda_available());
  }
  const std::string isa = lsa_native::cpu_kernel_isa();
  EXPECT_TRUE(isa == "avx2-fma" || isa == "baseline") << isa;
}

}  // namespace
