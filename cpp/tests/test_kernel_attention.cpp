// C++ API of kernel attention: the functional-GD construction by hand, finite differences of the
// loss, error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "lsa_native/kernel_attention.hpp"

namespace {

using lsa_native::Activation;
using lsa_native::index_t;
using lsa_native::KernelAttentionShape;

// One layer, linear kernel, V = [[0,0],[0,−r]], B = C = I: TF_1 = −r Σ_i y_i <x_i, x_q>  [CCS Prop 3.1]
TEST(KernelAttention, OneLayerLinearConstructionByHand) {
  const index_t d = 2, n = 3, T = n + 1;
  const std::vector<double> Z0 = {1, 0, 2, 0.5,    // x row 0 (x_q last)
                                  0, 1, 1, -1,     // x row 1
                                  3, -1, 2, 0};    // y row (query label 0)
  const double r = 0.1;
  const std::vector<double> V = {0, 0, 0, 0, 0, 0, 0, 0, -r};
  const std::vector<double> I = {1, 0, 0, 1};
  const Activation act = Activation::linear;
  std::vector<double> Z(Z0.size()), preds(2);
  lsa_native::kernel_attention_forward(KernelAttentionShape{1, d, n, 1, 1}, Z0.data(), V.data(),
                                       I.data(), I.data(), &act, Z.data(), preds.data());
  double expected = 0;
  for (index_t i = 0; i < n; ++i) expected += Z0[2 * T + i] * (Z0[i] * Z0[n] + Z0[T + i] * Z0[T + n]);
  EXPECT_NEAR(preds[1], -r * expected, 1e-14);
  EXPECT_EQ(preds[0], 0.0);
  EXPECT_NEAR(Z[2 * T + n], preds[1], 1e-15);
  // PredictionOutput::y_hat: the prediction of y_q, ŷ_ℓ = −TF_ℓ (SPEC 3.3), exactly.
  std::vector<double> y_hat(2);
  lsa_native::kernel_attention_forward(KernelAttentionShape{1, d, n, 1, 1}, Z0.data(), V.data(),
                                       I.data(), I.data(), &act, static_cast<double*>(nullptr),
                                       y_hat.data(), static_cast<double*>(nullptr),
                                       lsa_native::PredictionOutput::y_hat);
  EXPECT_EQ(y_hat[0], -preds[0]);
  EXPECT_EQ(y_hat[1], -preds[1]);
}

TEST(KernelAttention, GradientsMatchCentralDifferences) {
  const index_t Bsz = 3, d = 2, n = 4, L = 2, H = 2, D = d + 1;
  std::mt19937_64 gen(11);
  std::normal_distribution<double> normal;
  auto fill = [&](index_t size, double scale) {
    std::vector<double> v(static_cast<size_t>(size));
    for (auto& x : v) x = scale * normal(gen);
    return v;
  };
  auto Z0 = fill(Bsz * D * (n + 1), 0.5);
  const auto y = fill(Bsz, 1.0);
  auto V = fill(L * H * D * D, 0.1), Bq = fill(L * H * d * d, 0.3), Ck = fill(L * H * d * d, 0.3);
  const Activation acts[2] = {Activation::softmax, Activation::exp};
  const KernelAttentionShape shape{Bsz, d, n, L, H};
  std::vector<double> dV(V.size()), dB(Bq.size()), dC(Ck.size()), dZ(Z0.size());
  lsa_native::kernel_attention_loss_and_grad(shape, Z0.data(), y.data(), V.data(), Bq.data(),
                                             Ck.data(), acts, dV.data(), dB.data(), dC.data(),
                                             dZ.data(), static_cast<double*>(nullptr));
  std::vector<double> sV(V.size()), sB(Bq.size()), sC(Ck.size());
  auto loss = [&] {
    return lsa_native::kernel_attention_loss_and_grad(shape, Z0.data(), y.data(), V.data(),
                                                      Bq.data(), Ck.data(), acts, sV.data(),
                                                      sB.data(), sC.data(),
                                                      static_cast<double*>(nullptr),
                                                      static_cast<double*>(nullptr));
  };
  const double h = 1e-6;
  for (auto [param, grad] : {std::pair{&V, &dV}, {&Bq, &dB}, {&Ck, &dC}, {&Z0, &dZ}}) {
    for (size_t i = 0; i < param->size(); i += 3) {
      const double keep = (*param)[i];
      (*param)[i] = keep + h;
      const double up = loss();
      (*param)[i] = keep - h;
      const double down = loss();
      (*param)[i] = keep;
      const double fd = (up - down) / (2 * h);
      EXPECT_NEAR((*grad)[i], fd, 1e-6 * (1 + std::fabs(fd))) << "entry " << i;
    }
  }
}

// Softmax with logits ~1e4 (exp overflows without the max subtracted): the attention of the query
// is one-hot on the source maximizing S_iq = (b x_i)(c x_q), so TF = V[d, :]·z_{i*} exactly.
template <class T>
void check_saturated_softmax() {
  const index_t n = 3;
  const lsa_native::KernelAttentionShape shape{1, 1, n, 1, 1};
  // Z0 [2, 4]: x = (0.3, 0.9, −0.5; x_q = 1.0), y = (1.5, −2.0, 0.7; 0).
  const std::vector<T> Z0 = {T(0.3), T(0.9), T(-0.5), T(1.0), T(1.5), T(-2.0), T(0.7), T(0)};
  const std::vector<T> V = {T(0), T(0), T(0.25), T(-0.75)};  // V[d, :] = (0.25, −0.75)
  const std::vector<T> Bq = {T(100)}, Ck = {T(100)};         // S_iq = 1e4 x_i x_q
  const lsa_native::Activation act[] = {lsa_native::Activation::softmax};
  std::vector<T> preds(2);
  lsa_native::kernel_attention_forward(shape, Z0.data(), V.data(), Bq.data(), Ck.data(), act,
                                       static_cast<T*>(nullptr), preds.data());
  const double expected = 0.25 * 0.9 - 0.75 * -2.0;  // source 1 (x = 0.9) wins
  EXPECT_NEAR(double(preds[1]), expected, 1e-5 * std::fabs(expected));
}

TEST(KernelAttention, SoftmaxWithHugeLogitsIsOneHot) {
  check_saturated_softmax<float>();
  check_saturated_softmax<double>();
}

// loss_and_grad is the loss ½·MSE, (1/(2B)) Σ r² with r = TF + y_q, and forward + VJP seeded with
// ∂loss/∂Z_L = r / B at [d, n]; the VJP from a saved context equals the recomputing VJP bitwise.
TEST(KernelAttention, VjpWithAndWithoutContextComposeToLossGradient) {
  const index_t Bsz = 5, d = 3, n = 6, L = 2, H = 2, D = d + 1, per = D * (n + 1);
  std::mt19937_64 gen(5);
  std::normal_distribution<double> normal;
  auto fill = [&](index_t size, double scale) {
    std::vector<double> v(static_cast<size_t>(size));
    for (auto& x : v) x = scale * normal(gen);
    return v;
  };
  const auto Z0 = fill(Bsz * per, 0.5), y = fill(Bsz, 1.0);
  const auto V = fill(L * H * D * D, 0.1), Bq = fill(L * H * d * d, 0.3), Ck = fill(L * H * d * d, 0.3);
  const Activation acts[2] = {Activation::relu, Activation::softmax};
  const KernelAttentionShape shape{Bsz, d, n, L, H};
  std::vector<double> ctx(static_cast<size_t>(Bsz * lsa_native::kernel_attention_context_size<double>(shape)));
  std::vector<double> Z(Z0.size()), preds(static_cast<size_t>(Bsz * (L + 1)));
  lsa_native::kernel_attention_forward(shape, Z0.data(), V.data(), Bq.data(), Ck.data(), acts,
                                       Z.data(), preds.data(), ctx.data());
  std::vector<double> seed(Z0.size(), 0.0);
  double half_mse = 0;
  for (index_t b = 0; b < Bsz; ++b) {
    const double r = preds[b * (L + 1) + L] + y[b];
    seed[b * per + per - 1] = r / Bsz;
    half_mse += 0.5 * r * r / Bsz;
  }
  std::vector<double> gV(V.size()), gB(Bq.size()), gC(Ck.size()), gZ(Z0.size());
  std::vector<double> hV(V.size()), hB(Bq.size()), hC(Ck.size()), hZ(Z0.size());
  std::vector<double> lV(V.size()), lB(Bq.size()), lC(Ck.size()), lZ(Z0.size());
  lsa_native::kernel_attention_vjp(shape, Z0.data(), V.data(), Bq.data(), Ck.data(), acts,
                                   seed.data(), gV.data(), gB.data(), gC.data(), gZ.data(),
                                   ctx.data());
  lsa_native::kernel_attention_vjp(shape, Z0.data(), V.data(), Bq.data(), Ck.data(), acts,
                                   seed.data(), hV.data(), hB.data(), hC.data(), hZ.data(),
                                   static_cast<const double*>(nullptr));
  const double loss = lsa_native::kernel_attention_loss_and_grad(
      shape, Z0.data(), y.data(), V.data(), Bq.data(), Ck.data(), acts, lV.data(), lB.data(),
      lC.data(), lZ.data(), static_cast<double*>(nullptr));
  EXPECT_NEAR(loss, half_mse, 1e-14 * half_mse);
  EXPECT_EQ(gV, hV);
  EXPECT_EQ(gB, hB);
  EXPECT_EQ(gC, hC);
  EXPECT_EQ(gZ, hZ);
  for (auto [a, b] : {std::pair{&gV, &lV}, {&gB, &lB}, {&gC, &lC}, {&gZ, &lZ}})
    for (size_t i = 0; i < a->size(); ++i) EXPECT_NEAR((*a)[i], (*b)[i], 1e-13 * (1 + std::fabs((*b)[i])));
}

TEST(KernelAttention, InvalidArgumentsThrowError) {
  const std::vector<double> Z(12, 0.0), V(9, 0.0), B(4, 0.0);
  const Activation bad = static_cast<Activation>(7), ok = Activation::exp;
  std::vector<double> out(12);
  EXPECT_THROW(lsa_native::kernel_attention_forward(KernelAttentionShape{1, 2, 3, 1, 1}, Z.data(), V.data(),
                                                    B.data(), B.data(), &bad, out.data(), static_cast<double*>(nullptr)),
               lsa_native::Error);
  EXPECT_THROW(lsa_native::kernel_attention_forward(KernelAttentionShape{1, 2, 3, 0, 1}, Z.data(), V.data(),
                                                    B.data(), B.data(), &ok, out.data(), static_cast<double*>(nullptr)),
               lsa_native::Error);
  EXPECT_THROW(lsa_native::kernel_attention_forward(KernelAttentionShape{1, 2, 0, 1, 1}, Z.data(), V.data(),
                                                    B.data(), B.data(), &ok, out.data(), static_cast<double*>(nullptr)),
               lsa_native::Error);
}

}  // namespace

namespace {
// exp attention at huge logits: exp overflows to inf, and 0·inf in the backward gives NaN
// gradients even where the loss could stay finite. The entry points flag it while writing.
TEST(KernelAttention, NonFiniteOutputsNameTheOutput) {
  const index_t Bsz = 3, d = 2, n = 5, L = 1, H = 1, D = d + 1, per = D * (n + 1);
  std::mt19937_64 gen(7);
  std::normal_distribution<double> normal;
  std::vector<double> Z0(Bsz * per), y(Bsz), V(L * H * D * D), Bq(d * d), Ck(d * d);
  for (auto* v : {&Z0, &y, &V, &Bq, &Ck})
    for (auto& x : *v) x = normal(gen);
  for (auto& x : Z0) x *= 30;
  for (auto& x : Bq) x *= 10;
  for (auto& x : Ck) x *= 10;
  const Activation acts[1] = {Activation::exp};
  const KernelAttentionShape shape{Bsz, d, n, L, H};
  std::vector<double> gV(V.size()), gB(Bq.size()), gC(Ck.size()), gZ(Z0.size());
  std::string what;
  try {
    lsa_native::kernel_attention_loss_and_grad(shape, Z0.data(), y.data(), V.data(), Bq.data(),
                                               Ck.data(), acts, gV.data(), gB.data(), gC.data(),
                                               gZ.data(), static_cast<double*>(nullptr));
  } catch (const lsa_native::NonFiniteError& e) {
    what = e.what();
  }
  EXPECT_NE(what.find(": overflowed to non-finite values from finite inputs"), std::string::npos) << what;
  const std::string output = what.substr(0, what.find(':'));
  EXPECT_TRUE(output == "loss" || output == "d_V" || output == "d_B" || output == "d_C" ||
              output == "d_Z0") << what;
  // A NaN input is named instead.
  Z0[4] = std::nan("");
  for (auto& x : Bq) x /= 10;
  for (auto& x : Ck) x /= 10;
  try {
    lsa_native::kernel_attention_forward(shape, Z0.data(), V.data(), Bq.data(), Ck.data(), acts,
                                         gZ.data(), static_cast<double*>(nullptr));
    what = "(no exception)";
  } catch (const lsa_native::Error& e) {
    what = e.what();
  }
  EXPECT_EQ(what.rfind("Z0: contains non-finite values", 0), 0u) << what;
}
}  // namespace
