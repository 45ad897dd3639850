// The kernel-attention recipe (common/ka_recipe.hpp) run by a scalar host driver, step by step in
// the order the CUDA kernels use, against the CPU kernels (which the Python tests check against
// the numpy reference of CCS (3), (5), (12)): Z_L, the predictions, the VJP and loss_and_grad, for
// every activation, several layers and heads, d = 1, n = 1, odd sizes and large logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/ka_recipe.hpp"
#include "ka_problem.hpp"
#include "lsa_native/kernel_attention.hpp"

namespace {

using lsa_native::Activation;
using lsa_native::index_t;
using lsa_native::KernelAttentionShape;
namespace recipe = lsa_native::recipe;
using recipe::rows_of;
template <class T>
using Problem = lsa_native::testing::KaProblem<T>;
using lsa_native::testing::random_ka_problem;

// ---- scalar host driver: one prompt, unpadded [rows, n+1] matrices -----------------------------

template <class T>
struct Prompt {
  int d, n, D, cols, L, H;
  std::vector<T> Z;        // Z_0..Z_L [L+1, D, cols]
  std::vector<T> U, W, Y;  // per (ℓ, s): [d, cols], [d, cols], [D, cols]
  std::vector<T> Hs;       // per (ℓ, s): h̃ [n, cols]
  Prompt(const KernelAttentionShape& s)
      : d(int(s.dim)), n(int(s.context)), D(d + 1), cols(n + 1), L(int(s.layers)), H(int(s.heads)),
        Z(std::size_t((L + 1) * D * cols)), U(std::size_t(L * H * d * cols)), W(U.size()),
        Y(std::size_t(L * H * D * cols)), Hs(std::size_t(L * H * n * cols)) {}
  T* z(int l) { return Z.data() + l * D * cols; }
  T* u(int p) { return U.data() + p * d * cols; }
  T* w(int p) { return W.data() + p * d * cols; }
  T* y(int p) { return Y.data() + p * D * cols; }
  T* h(int p) { return Hs.data() + p * n * cols; }
};

template <class T>
void recipe_forward(Prompt<T>& st, const T* Z0, const Problem<T>& pr) {
  const int d = st.d, n = st.n, D = st.D, cols = st.cols;
  std::copy(Z0, Z0 + D * cols, st.z(0));
  for (int l = 0; l < st.L; ++l) {
    const auto Z = rows_of<T>(st.z(l), cols);
    T* Zn = st.z(l + 1);
    std::copy(st.z(l), st.z(l) + D * cols, Zn);  // residual
    for (int s = 0; s < st.H; ++s) {
      const int p = l * st.H + s;
      const Activation a = pr.acts[s];
      const auto Bm = rows_of(pr.Bq.data() + p * d * d, d), Cm = rows_of(pr.Ck.data() + p * d * d, d);
      const auto V = rows_of(pr.V.data() + p * D * D, D);
      T *U = st.u(p), *W = st.w(p), *Hs = st.h(p), *Y = st.y(p);
      for (int a_ = 0; a_ < d; ++a_)
        for (int j = 0; j < cols; ++j) {
          U[a_ * cols + j] = recipe::u_entry(Bm, Z, d, a_, j);
          W[a_ * cols + j] = recipe::u_entry(Cm, Z, d, a_, j);
        }
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < cols; ++j)
          Hs[i * cols + j] = recipe::logit_entry(rows_of<T>(U, cols), rows_of<T>(W, cols), d, i, j);
      for (int j = 0; j < cols; ++j) {
        const bool cw = recipe::column_wise(a);
        const T shift = cw ? recipe::column_max(rows_of<T>(Hs, cols), n, j) : T(0);
        for (int i = 0; i < n; ++i) Hs[i * cols + j] = recipe::activation_value(a, Hs[i * cols + j], shift);
        if (cw) {
          const T scale = recipe::inverse(recipe::column_sum(rows_of<T>(Hs, cols), n, j));
          for (int i = 0; i < n; ++i) Hs[i * cols + j] *= scale;
        }
      }
      for (int r = 0; r < D; ++r)
        for (int j = 0; j < cols; ++j) Y[r * cols + j] = recipe::y_entry(Z, rows_of<T>(Hs, cols), n, r, j);
      for (int r = 0; r < D; ++r)
        for (int j = 0; j < cols; ++j)
          Zn[r * cols + j] = recipe::residual_entry(Zn[r * cols + j], V, rows_of<T>(Y, cols), D, r, j);
    }
  }
}

// dZ: ∂ℓ/∂Z_L in, ∂ℓ/∂Z_0 out; g: [dV | dB | dC] accumulated in double.
template <class T>
void recipe_backward(Prompt<T>& st, const Problem<T>& pr, std::vector<T>& dZ, double* g) {
  const int d = st.d, n = st.n, D = st.D, cols = st.cols, LH = st.L * st.H;
  double *gV = g, *gB = gV + LH * D * D, *gC = gB + LH * d * d;
  std::vector<T> dZp(dZ.size()), dY(std::size_t(D * cols)), dH(std::size_t(n * cols)),
      dU(std::size_t(d * cols)), dW(dU.size());
  for (int l = st.L - 1; l >= 0; --l) {
    const auto Z = rows_of<T>(st.z(l), cols);
    const auto dO = rows_of<T>(dZ.data(), cols);
    dZp = dZ;  // residual
    for (int s = 0; s < st.H; ++s) {
      const int p = l * st.H + s;
      const Activation a = pr.acts[s];
      const auto Bm = rows_of(pr.Bq.data() + p * d * d, d), Cm = rows_of(pr.Ck.data() + p * d * d, d);
      const auto V = rows_of(pr.V.data() + p * D * D, D);
      const auto U = rows_of<T>(st.u(p), cols), W = rows_of<T>(st.w(p), cols);
      const auto Y = rows_of<T>(st.y(p), cols), Hs = rows_of<T>(st.h(p), cols);
      for (int r = 0; r < D; ++r)
        for (int q = 0; q < D; ++q)
          gV[p * D * D + r * D + q] += double(recipe::token_product_entry(dO, Y, cols, r, q));
      for (int q = 0; q < D; ++q)
        for (int j = 0; j < cols; ++j) dY[q * cols + j] = recipe::dy_entry(V, dO, D, q, j);
      const auto dYm = rows_of<T>(dY.data(), cols);
      for (int r = 0; r < D; ++r)
        for (int i = 0; i < n; ++i) dZp[r * cols + i] += recipe::token_product_entry(dYm, Hs, cols, r, i);
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < cols; ++j) dH[i * cols + j] = recipe::dh_entry(Z, dYm, D, i, j);
      for (int j = 0; j < cols; ++j) {
        const T dot = recipe::column_wise(a) ? recipe::column_dot(Hs, rows_of<T>(dH.data(), cols), n, j) : T(0);
        for (int i = 0; i < n; ++i)
          dH[i * cols + j] = recipe::activation_gradient(a, Hs(i, j), dH[i * cols + j], dot);
      }
      const auto dS = rows_of<T>(dH.data(), cols);
      for (int a_ = 0; a_ < d; ++a_) {
        for (int i = 0; i < cols; ++i)
          dU[a_ * cols + i] = i < n ? recipe::token_product_entry(W, dS, cols, a_, i) : T(0);
        for (int j = 0; j < cols; ++j) dW[a_ * cols + j] = recipe::dw_entry(U, dS, n, a_, j);
      }
      const auto dUm = rows_of<T>(dU.data(), cols), dWm = rows_of<T>(dW.data(), cols);
      for (int a_ = 0; a_ < d; ++a_)
        for (int b = 0; b < d; ++b) {
          gB[p * d * d + a_ * d + b] += double(recipe::token_product_entry(dUm, Z, cols, a_, b));
          gC[p * d * d + a_ * d + b] += double(recipe::token_product_entry(dWm, Z, cols, a_, b));
        }
      for (int b = 0; b < d; ++b)
        for (int j = 0; j < cols; ++j) {
          T v = recipe::input_gradient_entry(dZp[b * cols + j], Bm, dUm, d, b, j);
          dZp[b * cols + j] = recipe::input_gradient_entry(v, Cm, dWm, d, b, j);
        }
    }
    dZ.swap(dZp);
  }
}

// Relative bounds: float64 1e-12; float32 2e-4, times the logit scale² (the rounding error of S
// grows with |S|, and h̃ amplifies it by up to |S| for softmax/exp).
template <class T>
double tolerance(double logit_scale = 1.0) {
  return sizeof(T) == 4 ? 2e-4 * std::max(1.0, logit_scale * logit_scale) : 1e-12;
}

// max |a − b| ≤ tol · max |b| (b from the CPU kernels), every entry finite.
template <class A, class B>
void expect_close(const std::vector<A>& a, const std::vector<B>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double scale = 0, err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(double(a[i])) && std::isfinite(double(b[i]))) << what << " " << i;
    scale = std::max(scale, std::abs(double(b[i])));
    err = std::max(err, std::abs(double(a[i]) - double(b[i])));
  }
  EXPECT_LE(err, tol * scale) << what << ": max error " << err << " at scale " << scale;
}

template <class T>
void check(const KernelAttentionShape& s, std::vector<Activation> acts, double logit_scale = 0.5) {
  SCOPED_TRACE(testing::Message() << "B=" << s.batch << " d=" << s.dim << " n=" << s.context
                                  << " L=" << s.layers << " H=" << s.heads << " act0="
                                  << int(acts[0]) << " scale=" << logit_scale << " bytes=" << sizeof(T));
  const auto pr = random_ka_problem<T>(s, acts, unsigned(s.batch * 7919 + s.dim * 31 + s.context),
                                       logit_scale);
  const index_t d = s.dim, D = d + 1, cols = s.context + 1, per = D * cols, LH = s.layers * s.heads;
  const index_t nV = LH * D * D, nB = LH * d * d;
  // CPU kernels
  std::vector<T> Z_cpu(pr.Z0.size()), pred_cpu(s.batch * (s.layers + 1)), dV(nV), dB(nB), dC(nB),
      dZ0(pr.Z0.size()), lV(nV), lB(nB), lC(nB), lZ0(pr.Z0.size());
  lsa_native::kernel_attention_forward(s, pr.Z0.data(), pr.V.data(), pr.Bq.data(), pr.Ck.data(),
                                       pr.acts.data(), Z_cpu.data(), pred_cpu.data());
  lsa_native::kernel_attention_vjp(s, pr.Z0.data(), pr.V.data(), pr.Bq.data(), pr.Ck.data(),
                                   pr.acts.data(), pr.d_Z.data(), dV.data(), dB.data(), dC.data(),
                                   dZ0.data(), static_cast<const T*>(nullptr));
  const double loss_cpu = lsa_native::kernel_attention_loss_and_grad(
      s, pr.Z0.data(), pr.y_q.data(), pr.V.data(), pr.Bq.data(), pr.Ck.data(), pr.acts.data(),
      lV.data(), lB.data(), lC.data(), lZ0.data(), static_cast<T*>(nullptr));
  // Recipe
  Prompt<T> st(s);
  std::vector<T> Z(pr.Z0.size()), pred(pred_cpu.size()), rZ0(pr.Z0.size()), rlZ0(pr.Z0.size());
  std::vector<double> g(std::size_t(nV + 2 * nB), 0.0), lg(g.size(), 0.0);
  double loss = 0;
  std::vector<T> dZ(static_cast<std::size_t>(per));
  for (index_t b = 0; b < s.batch; ++b) {
    recipe_forward(st, pr.Z0.data() + b * per, pr);
    std::copy(st.z(st.L), st.z(st.L) + per, Z.begin() + b * per);
    for (int l = 0; l <= st.L; ++l) pred[b * (s.layers + 1) + l] = st.z(l)[d * cols + s.context];
    std::copy(pr.d_Z.begin() + b * per, pr.d_Z.begin() + (b + 1) * per, dZ.begin());
    recipe_backward(st, pr, dZ, g.data());
    std::copy(dZ.begin(), dZ.end(), rZ0.begin() + b * per);
    // loss_and_grad: the same backward seeded at [d, n]; loss ½·MSE (½ × CCS (5))
    const double res = recipe::loss_residual(double(st.z(st.L)[d * cols + s.context]), double(pr.y_q[b]));
    loss += res * res;
    std::fill(dZ.begin(), dZ.end(), T(0));
    dZ[d * cols + s.context] = T(recipe::loss_seed(res, s.batch));
    recipe_backward(st, pr, dZ, lg.data());
    std::copy(dZ.begin(), dZ.end(), rlZ0.begin() + b * per);
  }
  const double tol = tolerance<T>(logit_scale);
  expect_close(Z, Z_cpu, tol, "Z_L");
  expect_close(pred, pred_cpu, tol, "predictions");
  auto split = [&](const std::vector<double>& all, index_t from, index_t count) {
    return std::vector<double>(all.begin() + from, all.begin() + from + count);
  };
  expect_close(split(g, 0, nV), dV, tol, "vjp d_V");
  expect_close(split(g, nV, nB), dB, tol, "vjp d_B");
  expect_close(split(g, nV + nB, nB), dC, tol, "vjp d_C");
  expect_close(rZ0, dZ0, tol, "vjp d_Z0");
  EXPECT_NEAR(0.5 * loss / double(s.batch), loss_cpu, tol * loss_cpu) << "loss";
  expect_close(split(lg, 0, nV), lV, tol, "loss d_V");
  expect_close(split(lg, nV, nB), lB, tol, "loss d_B");
  expect_close(split(lg, nV + nB, nB), lC, tol, "loss d_C");
  expect_close(rlZ0, lZ0, tol, "loss d_Z0");
}

std::vector<Activation> all_activations() {
  std::vector<Activation> a;
  for (int c = 0; c < lsa_native::kActivationCount; ++c) a.push_back(lsa_native::activation_from_code(c));
  return a;
}

template <class T>
void check_all() {
  for (Activation a : all_activations()) {
    check<T>({3, 2, 5, 2, 1}, {a});
    check<T>({1, 1, 1, 1, 1}, {a});          // d = 1, n = 1
    check<T>({2, 1, 9, 3, 1}, {a});          // d = 1
    check<T>({4, 3, 1, 2, 1}, {a});          // n = 1
    check<T>({5, 5, 30, 3, 1}, {a});         // the CCS size
    check<T>({2, 4, 13, 2, 3}, {a, Activation::linear, Activation::softmax});  // heads
  }
  check<T>({3, 3, 11, 2, 4}, all_activations());  // every activation in one layer
}

TEST(KaRecipe, MatchesCpuKernelsFloat64) { check_all<double>(); }
TEST(KaRecipe, MatchesCpuKernelsFloat32) { check_all<float>(); }

// Large logits: softmax stays finite only with the column max subtracted; exp with |S| ≈ 30-60.
TEST(KaRecipe, LargeLogits) {
  check<double>({3, 3, 12, 1, 1}, {Activation::softmax}, 6.0);
  check<float>({3, 3, 12, 1, 1}, {Activation::softmax}, 6.0);
  check<double>({3, 2, 7, 1, 1}, {Activation::exp}, 3.0);
  check<double>({2, 3, 12, 2, 2}, {Activation::softmax, Activation::softmax}, 6.0);
}

// The table drives the dispatch: codes round-trip, out-of-range codes are refused with the range.
TEST(KaRecipe, ActivationTable) {
  EXPECT_EQ(lsa_native::kActivationCount, 4);
  EXPECT_STREQ(lsa_native::activation_names[3], "softmax");
  EXPECT_TRUE(recipe::column_wise(Activation::softmax));
  EXPECT_FALSE(recipe::column_wise(Activation::exp));
  EXPECT_EQ(recipe::activation_value(Activation::relu, -2.0, 0.0), 0.0);
  EXPECT_EQ(recipe::activation_value(Activation::softmax, 3.0, 3.0), 1.0);
  EXPECT_THROW(lsa_native::activation_from_code(lsa_native::kActivationCount), lsa_native::Error);
  EXPECT_THROW(lsa_native::activation_from_code(-1), lsa_native::Error);
}

// The query backward's seed: the loss's r / B with the residual r (labels), −y for the
// predictions' VJP (ŷ = −TF) with residual 0, i.e. nothing added to the loss sum.
TEST(KaRecipe, QuerySeed) {
  using recipe::QuerySeed;
  const double r = recipe::query_residual(QuerySeed::labels, 0.5, 1.5);
  EXPECT_EQ(r, recipe::loss_residual(0.5, 1.5));
  EXPECT_EQ(recipe::query_seed(QuerySeed::labels, r, 1.5, 4), recipe::loss_seed(r, 4));
  EXPECT_EQ(recipe::query_seed(QuerySeed::labels, r, 1.5, 4), 0.5);
  EXPECT_EQ(recipe::query_residual(QuerySeed::prediction_gradient, 0.5, 1.5), 0.0);
  EXPECT_EQ(recipe::query_seed(QuerySeed::prediction_gradient, 0.0, 1.5, 4), -1.5);
}

}  // namespace
