// The LSA recipe (common/lsa_recipe.hpp) run by a scalar host driver in the order the CUDA kernels
// use, against the CPU kernels (which the Python tests check against the numpy reference) and a
// direct evaluation of f(E) = E + W^PV E (E^T W^KQ E)/N. The GPU runs these formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/lsa_recipe.hpp"
#include "lsa_native/lsa.hpp"
#include "lsa_problem.hpp"

namespace {

using lsa_native::index_t;
using lsa_native::LsaShape;
namespace recipe = lsa_native::recipe;
using recipe::rows_of;

template <class T>
using Problem = lsa_native::testing::LsaProblem<T>;
using lsa_native::testing::random_lsa_problem;

// ---- scalar host driver: the steps of the CUDA kernels, one entry at a time ----

template <class T>
T recipe_predict(const T* Eb, const T* W_pv, const T* W_kq, int rows, int cols, std::vector<T>& t,
                 std::vector<T>& s) {
  const int N = cols - 1;
  const auto Ep = rows_of(Eb, cols);
  std::vector<T> q(rows);
  for (int r = 0; r < rows; ++r) q[r] = recipe::query_entry(rows_of(W_kq, rows), Ep, rows, N, r);
  const T* p = W_pv + (rows - 1) * rows;
  T sum = 0;
  for (int j = 0; j < cols; ++j) {
    recipe::token_scalars(Ep, rows, p, q.data(), j, t[j], s[j]);
    sum += t[j] * s[j];
  }
  return recipe::prediction(Ep(rows - 1, N), sum, N);
}

// Returns L; d_W_pv, d_W_kq [rows²] (as in lsa_loss_and_grad).
template <class T>
double recipe_loss_and_grad(const Problem<T>& pr, std::vector<double>& d_W_pv,
                            std::vector<double>& d_W_kq) {
  const int rows = int(pr.shape.dim + 1), cols = int(pr.shape.context + 1), N = cols - 1;
  std::vector<T> t(cols), s(cols);
  d_W_pv.assign(rows * rows, 0.0);
  d_W_kq.assign(rows * rows, 0.0);
  double loss = 0;
  for (index_t b = 0; b < pr.shape.batch; ++b) {
    const T* Eb = pr.E.data() + b * rows * cols;
    const T pred = recipe_predict(Eb, pr.W_pv.data(), pr.W_kq.data(), rows, cols, t, s);
    const double res = double(pred) - double(pr.y_q[b]);
    const double scale = recipe::residual_scale<T>(res, N);
    loss += res * res;
    for (int r = 0; r < rows; ++r) {
      T g_p, g_k;
      recipe::weighted_row_sums(rows_of(Eb, cols), cols, t.data(), s.data(), r, g_p, g_k);
      d_W_pv[(rows - 1) * rows + r] += scale * double(g_p);
      for (int c = 0; c < rows; ++c) d_W_kq[r * rows + c] += scale * double(g_k) * double(Eb[c * cols + N]);
    }
  }
  const double inv_b = 1.0 / double(pr.shape.batch);
  for (auto* v : {&d_W_pv, &d_W_kq})
    for (auto& x : *v) x *= inv_b;
  return 0.5 * loss * inv_b;
}

template <class T>
std::vector<T> small_product(const recipe::Mat<T>& A, const recipe::Mat<T>& B, int n) {
  std::vector<T> C(n * n);
  for (int i = 0; i < n * n; ++i) C[i] = recipe::product_entry(A, B, n, i / n, i % n);
  return C;
}

// F [rows, cols] of one prompt, Gram-first.
template <class T>
std::vector<T> recipe_forward(const T* Eb, const T* W_pv, const T* W_kq, int rows, int cols) {
  const int n2 = rows * rows;
  const auto Ep = rows_of(Eb, cols);
  const T inv_n = recipe::inv_context<T>(cols - 1);
  std::vector<T> G(n2), F(rows * cols);
  for (int i = 0; i < n2; ++i) G[i] = recipe::token_product(Ep, Ep, cols, i / rows, i % rows) * inv_n;
  const auto GW = small_product(rows_of(G.data(), rows), rows_of(W_kq, rows), rows);
  const auto P = small_product(rows_of(W_pv, rows), rows_of(GW.data(), rows), rows);
  for (int i = 0; i < rows * cols; ++i)
    F[i] = recipe::row_combination_entry(Ep(i / cols, i % cols), rows_of(P.data(), rows), Ep, rows,
                                         i / cols, i % cols);
  return F;
}

// dW_pv, dW_kq (batch sums in double) and dE.
template <class T>
void recipe_vjp(const Problem<T>& pr, std::vector<double>& d_W_pv, std::vector<double>& d_W_kq,
                std::vector<T>& d_E) {
  const int rows = int(pr.shape.dim + 1), cols = int(pr.shape.context + 1), N = cols - 1;
  const int n2 = rows * rows, rc = rows * cols;
  d_W_pv.assign(n2, 0.0);
  d_W_kq.assign(n2, 0.0);
  d_E.assign(pr.E.size(), T(0));
  const auto M = [rows](const T* p) { return rows_of(p, rows); };
  const auto W_pv_t = M(pr.W_pv.data()).transposed(), W_kq_t = M(pr.W_kq.data()).transposed();
  const T inv_n = recipe::inv_context<T>(N);
  for (index_t b = 0; b < pr.shape.batch; ++b) {
    const auto Ep = rows_of(pr.E.data() + b * rc, cols), dFp = rows_of(pr.d_F.data() + b * rc, cols);
    std::vector<T> G(n2), dP(n2), sym(n2);
    for (int i = 0; i < n2; ++i) {
      G[i] = recipe::token_product(Ep, Ep, cols, i / rows, i % rows) * inv_n;
      dP[i] = recipe::token_product(dFp, Ep, cols, i / rows, i % rows);
    }
    const auto T1 = small_product(W_kq_t, M(G.data()), rows);
    const auto T2 = small_product(M(G.data()), W_pv_t, rows);
    const auto a = small_product(M(dP.data()), M(T1.data()), rows);
    const auto k = small_product(M(T2.data()), M(dP.data()), rows);
    for (int i = 0; i < n2; ++i) {
      d_W_pv[i] += double(a[i]);
      d_W_kq[i] += double(k[i]);
    }
    const auto Pt = small_product(W_kq_t, M(T2.data()), rows);
    const auto Tmp = small_product(W_pv_t, M(dP.data()), rows);
    const auto dG = small_product(M(Tmp.data()), W_kq_t, rows);
    for (int i = 0; i < n2; ++i) sym[i] = recipe::symmetric_part_entry(M(dG.data()), N, i / rows, i % rows);
    for (int i = 0; i < rc; ++i) {
      const int r = i / cols, j = i % cols;
      const T first = recipe::row_combination_entry(dFp(r, j), M(Pt.data()), dFp, rows, r, j);
      d_E[b * rc + i] = recipe::row_combination_entry(first, M(sym.data()), Ep, rows, r, j);
    }
  }
}

// |a − b| ≤ tol · (|b| + scale) entrywise.
template <class A, class B>
void expect_close(const std::vector<A>& a, const std::vector<B>& b, double tol, double scale,
                  const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_LE(std::abs(double(a[i]) - double(b[i])), tol * (std::abs(double(b[i])) + scale))
        << what << " at " << i << ": " << double(a[i]) << " vs " << double(b[i]);
}

struct Size {
  index_t B, d, N;
};
const Size kSizes[] = {{1, 1, 1}, {3, 1, 5}, {5, 4, 1}, {7, 3, 7}, {4, 20, 100}, {9, 5, 33}};

// float64: the recipe and the CPU kernels sum in different orders (SIMD partial sums), so they
// agree to a few hundred ulps of the magnitudes involved (sums of ≤ (N+1)(d+1)² products of O(1)
// values); 1e-11 relative to |value| + the typical magnitude covers that with margin and still
// catches any wrong term (errors O(1)).
TEST(LsaRecipe, PredictionAndLossGradientMatchTheCpuKernels) {
  for (const Size& z : kSizes) {
    auto pr = random_lsa_problem<double>(z.B, z.d, z.N, unsigned(17 + z.d * 31 + z.N));
    const int rows = int(z.d + 1), cols = int(z.N + 1);
    std::vector<double> y(z.B), y_recipe(z.B), t(cols), s(cols);
    lsa_native::lsa_predict(pr.shape, pr.E.data(), pr.W_pv.data(), pr.W_kq.data(), y.data());
    for (index_t b = 0; b < z.B; ++b)
      y_recipe[b] = recipe_predict(pr.E.data() + b * rows * cols, pr.W_pv.data(), pr.W_kq.data(),
                                   rows, cols, t, s);
    const double mag = double(rows) * rows;  // |ŷ| ~ (d+1)² for unit normals
    expect_close(y_recipe, y, 1e-11, mag, "predict");

    std::vector<double> g_pv(rows * rows), g_kq(rows * rows), r_pv, r_kq;
    const double L = lsa_native::lsa_loss_and_grad(pr.shape, pr.E.data(), pr.y_q.data(),
                                                   pr.W_pv.data(), pr.W_kq.data(), g_pv.data(),
                                                   g_kq.data());
    const double L_recipe = recipe_loss_and_grad(pr, r_pv, r_kq);
    EXPECT_NEAR(L_recipe, L, 1e-11 * (L + mag * mag)) << "loss";
    expect_close(r_pv, g_pv, 1e-11, mag * mag, "d_W_pv");
    expect_close(r_kq, g_kq, 1e-11, mag * mag, "d_W_kq");
  }
}

TEST(LsaRecipe, PredictionEqualsTheAttentionFormula) {
  // ŷ = [E + W^PV E (E^T W^KQ E)/N]_{d, N}, evaluated directly (the label slot is random here).
  auto pr = random_lsa_problem<double>(6, 3, 4, 5);
  const int rows = 4, cols = 5, N = 4;
  std::vector<double> t(cols), s(cols);
  for (index_t b = 0; b < 6; ++b) {
    const double* Eb = pr.E.data() + b * rows * cols;
    double direct = Eb[(rows - 1) * cols + N];
    for (int i = 0; i < cols; ++i) {
      double a = 0;  // (E^T W^KQ E)[i, N]
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < rows; ++c) a += Eb[r * cols + i] * pr.W_kq[r * rows + c] * Eb[c * cols + N];
      for (int m = 0; m < rows; ++m) direct += pr.W_pv[(rows - 1) * rows + m] * Eb[m * cols + i] * a / N;
    }
    EXPECT_NEAR(recipe_predict(Eb, pr.W_pv.data(), pr.W_kq.data(), rows, cols, t, s), direct,
                1e-12 * 100);
  }
}

TEST(LsaRecipe, ForwardAndVjpMatchTheCpuKernels) {
  for (const Size& z : kSizes) {
    auto pr = random_lsa_problem<double>(z.B, z.d, z.N, unsigned(99 + z.d * 7 + z.N));
    const int rows = int(z.d + 1), cols = int(z.N + 1), rc = rows * cols, n2 = rows * rows;
    std::vector<double> F(z.B * rc), F_recipe;
    lsa_native::lsa_forward(pr.shape, pr.E.data(), pr.W_pv.data(), pr.W_kq.data(), F.data());
    for (index_t b = 0; b < z.B; ++b) {
      const auto Fb = recipe_forward(pr.E.data() + b * rc, pr.W_pv.data(), pr.W_kq.data(), rows, cols);
      F_recipe.insert(F_recipe.end(), Fb.begin(), Fb.end());
    }
    const double mag = double(rows) * rows * rows;  // |P E| ~ (d+1)³ for unit normals
    expect_close(F_recipe, F, 1e-11, mag, "forward");

    std::vector<double> g_pv(n2), g_kq(n2), d_E(z.B * rc), r_pv, r_kq, r_dE;
    lsa_native::lsa_vjp(pr.shape, pr.E.data(), pr.W_pv.data(), pr.W_kq.data(), pr.d_F.data(),
                        g_pv.data(), g_kq.data(), d_E.data());
    recipe_vjp(pr, r_pv, r_kq, r_dE);
    const double gmag = mag * double(cols) * double(z.B);
    expect_close(r_pv, g_pv, 1e-11, gmag, "vjp d_W_pv");
    expect_close(r_kq, g_kq, 1e-11, gmag, "vjp d_W_kq");
    expect_close(r_dE, d_E, 1e-11, mag * rows, "vjp d_E");
  }
}

TEST(LsaRecipe, Float32PredictionWithinRounding) {
  // float32 instantiation vs the float64 one on the same (float-representable) inputs.
  auto pr = random_lsa_problem<float>(5, 20, 100, 3);
  const int rows = 21, cols = 101;
  std::vector<float> t(cols), s(cols);
  std::vector<double> t64(cols), s64(cols);
  const std::vector<double> W_pv(pr.W_pv.begin(), pr.W_pv.end()), W_kq(pr.W_kq.begin(), pr.W_kq.end());
  for (index_t b = 0; b < 5; ++b) {
    const float* Eb = pr.E.data() + b * rows * cols;
    const std::vector<double> E64(Eb, Eb + rows * cols);
    const double y64 = recipe_predict(E64.data(), W_pv.data(), W_kq.data(), rows, cols, t64, s64);
    const float y32 = recipe_predict(Eb, pr.W_pv.data(), pr.W_kq.data(), rows, cols, t, s);
    // Chains of ~ (d+1) + (d+1) + (N+1) roundings on magnitudes ≲ (d+1)² · 10.
    EXPECT_NEAR(y32, y64, 4 * (2 * rows + cols) * 6e-8 * rows * rows * 10);
  }
}

// A register tile over the whole k range in order is product_entry / token_product entry for entry
// (the tiled CUDA kernels with one token group); an interleaved k split (step g, partial tiles
// summed) agrees to rounding. Tiles past the edge repeat the last row / column.
TEST(LsaRecipe, AccumulateTileIsTheProductEntry) {
  std::mt19937_64 gen(17);
  std::normal_distribution<double> normal;
  const int n = 10, cols = 23;
  std::vector<double> A(n * n), B(n * n), E(n * cols);
  for (auto* v : {&A, &B, &E})
    for (auto& x : *v) x = normal(gen);
  const auto Am = rows_of(A.data(), n), Bm = rows_of(B.data(), n), Em = rows_of(E.data(), cols);
  constexpr int kT = 3;
  for (int r0 = 0; r0 < n; r0 += kT)
    for (int c0 = 0; c0 < n; c0 += kT) {
      double small[kT][kT] = {}, gram[kT][kT] = {}, split[kT][kT] = {};
      recipe::accumulate_tile<double, kT, kT>(small, Am, Bm, r0, n - 1,
                                              c0, n - 1, 0, n, 1);
      recipe::accumulate_tile<double, kT, kT>(gram, Em, Em.transposed(), r0, n - 1, c0, n - 1, 0,
                                              cols, 1);
      for (int kg = 0; kg < 4; ++kg) {
        double part[kT][kT] = {};
        recipe::accumulate_tile<double, kT, kT>(part, Em, Em.transposed(), r0, n - 1, c0, n - 1,
                                                kg, cols, 4);
        for (int i = 0; i < kT; ++i)
          for (int j = 0; j < kT; ++j) split[i][j] += part[i][j];
      }
      for (int i = 0; i < kT; ++i)
        for (int j = 0; j < kT; ++j) {
          const int r = std::min(r0 + i, n - 1), c = std::min(c0 + j, n - 1);
          EXPECT_EQ(small[i][j], recipe::product_entry(Am, Bm, n, r, c)) << r << "," << c;
          const double g = recipe::token_product(Em, Em, cols, r, c);
          EXPECT_EQ(gram[i][j], g) << r << "," << c;
          EXPECT_NEAR(split[i][j], g, 1e-13 * cols) << r << "," << c;
        }
    }
}

}  // namespace
