// C++ API of the H-head LSA (multihead.hpp): heads add up to one-head predictions, H = 1 is the
// one-head LSA bitwise, hand-checked d = 1, N = 1, error paths, thread-count independence.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "lsa_native/lsa.hpp"
#include "lsa_native/multihead.hpp"
#include "lsa_native/types.hpp"

namespace {

using lsa_native::index_t;
using lsa_native::LsaShape;

std::vector<double> normals(index_t n, unsigned seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(gen);
  return v;
}

TEST(MultiHead, HeadsAddUpToOneHeadPredictions) {
  const index_t B = 23, d = 4, N = 9, H = 3, n2 = (d + 1) * (d + 1);
  const LsaShape s{B, d, N};
  auto E = normals(B * (d + 1) * (N + 1), 1), W_pv = normals(H * n2, 2), W_kq = normals(H * n2, 3);
  for (index_t b = 0; b < B; ++b) E[(b * (d + 1) + d) * (N + 1) + N] = 0;  // label slots 0
  std::vector<double> y(B), one(B), sum(B, 0.0);
  lsa_native::multihead_lsa_predict(s, H, E.data(), W_pv.data(), W_kq.data(), y.data());
  for (index_t h = 0; h < H; ++h) {
    lsa_native::lsa_predict(s, E.data(), W_pv.data() + h * n2, W_kq.data() + h * n2, one.data());
    for (index_t b = 0; b < B; ++b) sum[b] += one[b];
  }
  for (index_t b = 0; b < B; ++b) EXPECT_NEAR(y[b], sum[b], 1e-12 * (1 + std::abs(sum[b])));
}

TEST(MultiHead, OneHeadIsLsaBitwise) {
  const index_t B = 11, d = 3, N = 7, n2 = (d + 1) * (d + 1);
  const LsaShape s{B, d, N};
  const auto E = normals(B * (d + 1) * (N + 1), 4), y_q = normals(B, 5), W_pv = normals(n2, 6),
             W_kq = normals(n2, 7);
  std::vector<double> a_pv(n2), a_kq(n2), b_pv(n2), b_kq(n2);
  const double la = lsa_native::multihead_lsa_loss_and_grad(s, 1, E.data(), y_q.data(), W_pv.data(),
                                                            W_kq.data(), a_pv.data(), a_kq.data());
  const double lb = lsa_native::lsa_loss_and_grad(s, E.data(), y_q.data(), W_pv.data(), W_kq.data(),
                                                  b_pv.data(), b_kq.data());
  EXPECT_EQ(la, lb);
  EXPECT_EQ(a_pv, b_pv);
  EXPECT_EQ(a_kq, b_kq);
}

// d = 1, N = 1, two heads: E = [[x1, xq], [y1, 0]], G = [[x1² + xq², x1 y1], [x1 y1, y1²]].
TEST(MultiHead, HandCheckedSmallestCase) {
  const std::vector<double> E = {2, 3, -1, 0};  // G = [[13, -2], [-2, 1]]
  // head 0: p = (0.5, 2), q = W_kq e_q = (3, -3) → p·Gq = (0.5, 2)·(45, -9) = 4.5
  // head 1: p = (1, 0),   q = (0, 3)             → p·Gq = (1, 0)·(-6, 3) = -6
  const std::vector<double> W_pv = {0, 0, 0.5, 2, 0, 0, 1, 0};
  const std::vector<double> W_kq = {1, 0, -1, 0, 0, 0, 1, 0};
  double y = 0;
  lsa_native::multihead_lsa_predict(LsaShape{1, 1, 1}, 2, E.data(), W_pv.data(), W_kq.data(), &y);
  EXPECT_DOUBLE_EQ(y, -1.5);
}

TEST(MultiHead, RefusesBadHeadCounts) {
  const LsaShape s{1, 1, 1};
  const std::vector<double> E(4), W(4);
  double y = 0;
  EXPECT_THROW(lsa_native::multihead_lsa_predict(s, 0, E.data(), W.data(), W.data(), &y),
               lsa_native::Error);
  EXPECT_THROW(lsa_native::multihead_lsa_predict(s, 2, E.data(), W.data(), W.data(), static_cast<double*>(nullptr)),
               lsa_native::Error);
}

}  // namespace
