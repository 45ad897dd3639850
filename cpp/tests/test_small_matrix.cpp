// The small-matrix kit of common/small_matrix.hpp: Cholesky, cyclic Jacobi, Householder + QL,
// triangular products and solves, on random matrices of odd sizes and n = 1, in float and double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/small_matrix.hpp"
#include "cpu/small_matrix_simd.hpp"

namespace {

using namespace lsa_native::detail;

template <class T>
std::vector<T> random_symmetric(int n, std::mt19937_64& gen, bool spd) {
  std::normal_distribution<double> g;
  std::vector<double> m(n * n);
  for (auto& x : m) x = g(gen);
  std::vector<T> a(n * n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      if (spd) {
        for (int k = 0; k < n; ++k) s += m[i * n + k] * m[j * n + k];  // M Mᵀ + I
        s += (i == j);
      } else {
        s = 0.5 * (m[i * n + j] + m[j * n + i]);
      }
      a[i * n + j] = static_cast<T>(s);
    }
  return a;
}

template <class T>
double frob(const std::vector<T>& a) {
  double s = 0;
  for (T x : a) s += double(x) * double(x);
  return std::sqrt(s);
}

template <class T>
class SmallMatrix : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(SmallMatrix, Types);

TYPED_TEST(SmallMatrix, CholeskyReconstructsAndSolves) {
  using T = TypeParam;
  const double eps = SmallEps<T>::value;
  std::mt19937_64 gen(11);
  for (int n : {1, 2, 3, 7, 13, 31}) {
    auto a = random_symmetric<T>(n, gen, true);
    auto l = a;
    ASSERT_TRUE(cholesky_in_place(l.data(), n)) << n;
    double err = 0;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        double s = 0;
        for (int k = 0; k < n; ++k) s += double(l[i * n + k]) * double(l[j * n + k]);
        err = std::max(err, std::fabs(s - double(a[i * n + j])));
        if (j > i) {
          EXPECT_EQ(l[i * n + j], T(0));
        }
      }
    EXPECT_LE(err, 8 * n * eps * frob(a)) << "n = " << n;
    // L (L⁻¹ b) = b and Lᵀ (L⁻ᵀ b) = b.
    std::vector<T> b(n), x(n), y(n);
    for (int i = 0; i < n; ++i) b[i] = static_cast<T>(std::sin(1.0 + i));
    x = b;
    lower_solve(l.data(), n, x.data());
    lower_matvec(l.data(), n, x.data(), y.data());
    for (int i = 0; i < n; ++i) EXPECT_NEAR(y[i], b[i], 1e3 * n * eps) << n;
    x = b;
    lower_t_solve(l.data(), n, x.data());
    lower_t_matvec(l.data(), n, x.data(), y.data());
    for (int i = 0; i < n; ++i) EXPECT_NEAR(y[i], b[i], 1e3 * n * eps) << n;
  }
}

TYPED_TEST(SmallMatrix, CholeskyRejectsNonPositiveDefinite) {
  using T = TypeParam;
  std::vector<T> a = {T(1), T(2), T(2), T(1)};  // eigenvalues 3, −1
  EXPECT_FALSE(cholesky_in_place(a.data(), 2));
  std::vector<T> z = {T(0)};
  EXPECT_FALSE(cholesky_in_place(z.data(), 1));
  std::vector<T> nan = {T(NAN)};
  EXPECT_FALSE(cholesky_in_place(nan.data(), 1));
  std::vector<T> singular = {T(1), T(1), T(1), T(1)};  // rank 1: pivot 0 (or rounding below it)
  EXPECT_FALSE(cholesky_in_place(singular.data(), 2));
}

TYPED_TEST(SmallMatrix, JacobiDiagonalizesToRounding) {
  using T = TypeParam;
  const double eps = SmallEps<T>::value;
  std::mt19937_64 gen(5);
  for (int n : {1, 2, 3, 5, 9, 17, 31}) {
    for (bool spd : {false, true}) {
      auto a = random_symmetric<T>(n, gen, spd);
      auto work = a;
      std::vector<T> w(n), v(n * n);
      const int sweeps = jacobi_eigen(work.data(), n, w.data(), v.data());
      ASSERT_GE(sweeps, 0) << "n = " << n;
      EXPECT_LE(sweeps, 15) << "n = " << n;
      double rec = 0, orth = 0;
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
          double s = 0, o = 0;
          for (int k = 0; k < n; ++k) {
            s += double(v[i * n + k]) * double(w[k]) * double(v[j * n + k]);
            o += double(v[k * n + i]) * double(v[k * n + j]);
          }
          rec = std::max(rec, std::fabs(s - double(a[i * n + j])));
          orth = std::max(orth, std::fabs(o - double(i == j)));
        }
      // Rounding level: a few n·eps of ‖A‖_F (each of O(n) sweeps' rotations is orthogonal to eps).
      EXPECT_LE(rec, 20 * n * eps * frob(a)) << "n = " << n;
      EXPECT_LE(orth, 20 * n * eps) << "n = " << n;
    }
  }
}

TYPED_TEST(SmallMatrix, JacobiOnDiagonalAndRepeatedEigenvalues) {
  using T = TypeParam;
  std::vector<T> d = {T(3), T(0), T(0), T(0), T(-2), T(0), T(0), T(0), T(3)};
  std::vector<T> w(3), v(9);
  EXPECT_EQ(jacobi_eigen(d.data(), 3, w.data(), v.data()), 0);  // already diagonal: no sweep
  EXPECT_EQ(w[0], T(3));
  EXPECT_EQ(w[1], T(-2));
  EXPECT_EQ(w[2], T(3));
  std::vector<T> ones(16, T(1));  // eigenvalues 4, 0, 0, 0
  std::vector<T> w4(4), v4(16);
  ASSERT_GE(jacobi_eigen(ones.data(), 4, w4.data(), v4.data()), 0);
  std::sort(w4.begin(), w4.end());
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(w4[i], 0, 40 * SmallEps<T>::value);
  EXPECT_NEAR(w4[3], 4, 40 * SmallEps<T>::value);
}

TEST(SmallMatrix, JacobiReportsNonConvergence) {
  std::vector<double> a = {1, 2, 2, 1};
  std::vector<double> w(2), v(4);
  EXPECT_EQ(jacobi_eigen(a.data(), 2, w.data(), v.data(), 0), -1);  // zero sweeps allowed
}

// A = V diag(w) Vᵀ by householder_tridiagonal + tridiagonal_ql (+ householder_apply for V = Q S):
// returns the QL iterations; v [n x n] gets the eigenvectors as columns.
template <class T>
int householder_ql_eigen(std::vector<T> a, int n, std::vector<T>& w, std::vector<T>& v) {
  std::vector<T> off(n), work(2 * n), st(n * n, T(0)), col(n);
  w.assign(n, T(0));
  v.assign(n * n, T(0));
  householder_tridiagonal(a.data(), n, w.data(), off.data(), work.data());
  for (int i = 0; i < n; ++i) st[i * n + i] = T(1);
  const int iterations = tridiagonal_ql(w.data(), off.data(), n, st.data());
  for (int j = 0; j < n; ++j) {  // column j of V = Q (row j of Sᵀ)
    std::copy(st.begin() + j * n, st.begin() + (j + 1) * n, col.begin());
    householder_apply(a.data(), n, col.data());
    for (int i = 0; i < n; ++i) v[i * n + j] = col[i];
  }
  return iterations;
}

TYPED_TEST(SmallMatrix, HouseholderQLDiagonalizesToRounding) {
  using T = TypeParam;
  const double eps = SmallEps<T>::value;
  std::mt19937_64 gen(7);
  for (int n : {1, 2, 3, 4, 9, 17, 40, 97}) {
    for (bool spd : {false, true}) {
      const auto a = random_symmetric<T>(n, gen, spd);
      std::vector<T> w, v;
      const int iterations = householder_ql_eigen(a, n, w, v);
      ASSERT_GE(iterations, 0) << "n = " << n;
      EXPECT_LE(iterations, 3 * n) << "n = " << n;
      double rec = 0, orth = 0;
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
          double s = 0, o = 0;
          for (int k = 0; k < n; ++k) {
            s += double(v[i * n + k]) * double(w[k]) * double(v[j * n + k]);
            o += double(v[k * n + i]) * double(v[k * n + j]);
          }
          rec = std::max(rec, std::fabs(s - double(a[i * n + j])));
          orth = std::max(orth, std::fabs(o - double(i == j)));
        }
      // Backward stable: residual and loss of orthogonality a few n·eps (of ‖A‖_F).
      EXPECT_LE(rec, 20 * n * eps * frob(a)) << "n = " << n << " spd " << spd;
      EXPECT_LE(orth, 20 * n * eps) << "n = " << n << " spd " << spd;
      // The eigenvalues agree with the cyclic Jacobi's (Weyl: both within n·eps·‖A‖_F).
      std::vector<T> wj(n), vj(n * n);
      auto aj = a;
      ASSERT_GE(jacobi_eigen(aj.data(), n, wj.data(), vj.data()), 0);
      std::sort(w.begin(), w.end());
      std::sort(wj.begin(), wj.end());
      for (int i = 0; i < n; ++i)
        EXPECT_NEAR(double(w[i]), double(wj[i]), 40 * n * eps * frob(a)) << "n = " << n;
    }
  }
}

TYPED_TEST(SmallMatrix, HouseholderQLOnDiagonalRepeatedAndTridiagonal) {
  using T = TypeParam;
  const double eps = SmallEps<T>::value;
  std::vector<T> w, v;
  // Already diagonal: no reflector, no QL iteration, the eigenvalues exactly.
  EXPECT_EQ(householder_ql_eigen<T>({T(3), 0, 0, 0, T(-2), 0, 0, 0, T(3)}, 3, w, v), 0);
  EXPECT_EQ(w, (std::vector<T>{T(3), T(-2), T(3)}));
  // Rank one (eigenvalues 5, 0, 0, 0, 0): a fully repeated zero eigenvalue.
  ASSERT_GE(householder_ql_eigen(std::vector<T>(25, T(1)), 5, w, v), 0);
  std::sort(w.begin(), w.end());
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(double(w[i]), 0, 40 * eps);
  EXPECT_NEAR(double(w[4]), 5, 40 * eps);
  // Tridiagonal input: the reflectors are the identity (τ = 0), Q = I.
  std::vector<T> t = {T(2), T(1), 0, T(1), T(2), T(1), 0, T(1), T(2)};  // 2 − √2, 2, 2 + √2
  ASSERT_GE(householder_ql_eigen(t, 3, w, v), 0);
  std::sort(w.begin(), w.end());
  EXPECT_NEAR(double(w[0]), 2 - std::sqrt(2.0), 20 * eps);
  EXPECT_NEAR(double(w[1]), 2, 20 * eps);
  EXPECT_NEAR(double(w[2]), 2 + std::sqrt(2.0), 20 * eps);
}

TEST(SmallMatrix, HouseholderQLPollsAndStops) {
  // The poll runs inside both stages; an exception thrown by it ends the call (Ctrl-C on the CPU).
  std::mt19937_64 gen(3);
  const int n = 30;
  auto a = random_symmetric<double>(n, gen, false);
  std::vector<double> d(n), e(n), work(2 * n), st(n * n, 0.0);
  int calls = 0;
  householder_tridiagonal(a.data(), n, d.data(), e.data(), work.data(), [&] { ++calls; });
  EXPECT_EQ(calls, n - 2);  // one per reflector
  for (int i = 0; i < n; ++i) st[i * n + i] = 1;
  calls = 0;
  EXPECT_GE(tridiagonal_ql(d.data(), e.data(), n, st.data(), [&] { ++calls; }), 0);
  EXPECT_EQ(calls, n);  // one per eigenvalue
  struct Stop {};
  EXPECT_THROW(tridiagonal_ql(d.data(), e.data(), n, st.data(), [] { throw Stop(); }), Stop);
}

}  // namespace

// ---- dense products and updates of the kit, and the SIMD matmul of cpu/small_matrix_cpu.hpp ----
#include "cpu/small_matrix_cpu.hpp"

namespace {

std::vector<double> random_matrix(int rows, int cols, std::mt19937_64& gen) {
  std::normal_distribution<double> g;
  std::vector<double> a(static_cast<size_t>(rows * cols));
  for (auto& x : a) x = g(gen);
  return a;
}

// C = A B by the definition, summed in long double.
std::vector<double> naive_product(const std::vector<double>& a, const std::vector<double>& b, int n) {
  std::vector<double> c(static_cast<size_t>(n * n));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      long double s = 0;
      for (int k = 0; k < n; ++k) s += (long double)a[i * n + k] * b[k * n + j];
      c[i * n + j] = double(s);
    }
  return c;
}

TEST(SmallMatrixDense, ProductsMatchTheDefinitionAtOddSizes) {
  std::mt19937_64 gen(31);
  for (int n : {1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 17, 21, 50}) {
    const auto a = random_matrix(n, n, gen), b = random_matrix(n, n, gen);
    const auto want = naive_product(a, b, n);
    // Poisoned outputs: every entry must be written.
    std::vector<double> c_simd(want.size(), std::nan(""));
    lsa_native::cpu::matmul(a.data(), b.data(), c_simd.data(), lsa_native::index_t(n));
    for (size_t i = 0; i < want.size(); ++i) {
      const double tol = 1e-13 * n;  // entries are O(√n); rounding grows at most like n·eps
      EXPECT_NEAR(c_simd[i], want[i], tol) << "n = " << n << ", entry " << i;
    }
  }
}

TEST(SmallMatrixDense, VectorOperationsMatchTheDefinition) {
  std::mt19937_64 gen(32);
  for (int n : {1, 3, 4, 6, 11, 17, 50}) {
    const auto a = random_matrix(n, n, gen), b = random_matrix(n, n, gen);
    const auto x = random_matrix(n, 1, gen), y = random_matrix(n, 1, gen);
    std::vector<double> ax(n), atx(n), m = a;
    const auto& simd_kernels = lsa_native::cpu::small_matrix_kernels();
    simd_kernels.matvec(a.data(), x.data(), ax.data(), n);
    simd_kernels.matvec_t(a.data(), x.data(), atx.data(), n);
    add_outer(m.data(), n, 0.5, x.data(), y.data());
    double tr = 0, trab = 0, xy = 0;
    for (int i = 0; i < n; ++i) {
      double s = 0, st = 0;
      for (int j = 0; j < n; ++j) {
        s += a[i * n + j] * x[j];
        st += a[j * n + i] * x[j];
        trab += a[i * n + j] * b[j * n + i];
        EXPECT_NEAR(m[i * n + j], a[i * n + j] + 0.5 * x[i] * y[j], 1e-15);
      }
      EXPECT_NEAR(ax[i], s, 1e-13);
      EXPECT_NEAR(atx[i], st, 1e-13);
      tr += a[i * n + i];
      xy += x[i] * y[i];
    }
    EXPECT_NEAR(trace(a.data(), n), tr, 1e-13);
    EXPECT_NEAR(trace_product(a.data(), b.data(), n), trab, 1e-12);
    EXPECT_NEAR(dot(x.data(), y.data(), n), xy, 1e-13);
    std::vector<double> z = y;
    axpy(-2.0, x.data(), n, z.data());
    for (int i = 0; i < n; ++i) EXPECT_NEAR(z[i], y[i] - 2 * x[i], 1e-15);
  }
}

}  // namespace

// The token-axis tile kit (cpu/small_matrix_simd.hpp, here in this unit's baseline vectors): every
// tile shape and edge (rb = 1, 2, 3, 4+ with partial blocks; odd ra; strided rows; symmetric), and
// combine_rows with and without a base, accumulating in place and with transposed coefficients.
namespace token_kit {
namespace small = lsa_native::cpu::small;
using lsa_native::index_t;

template <class S>
std::vector<S> random_values(size_t count, std::mt19937_64& gen) {
  std::normal_distribution<double> g;
  std::vector<S> v(count);
  for (auto& x : v) x = S(g(gen));
  return v;
}

template <class S>
void check_token_products(std::mt19937_64& gen) {
  constexpr index_t L = lsa_native::cpu::simd::kLanes<S>;
  const double eps = std::numeric_limits<S>::epsilon();
  for (index_t chunks : {1, 3, 4})
    for (index_t ra : {1, 2, 3, 5, 6, 9})
      for (index_t rb : {1, 2, 3, 4, 5, 8, 9, 30}) {
        const index_t len = chunks * L, lda = len + L, ldb = len + 2 * L, ldc = rb + 3;
        const auto A = random_values<S>(size_t(ra * lda), gen), B = random_values<S>(size_t(rb * ldb), gen);
        std::vector<S> C(size_t(ra * ldc), std::numeric_limits<S>::quiet_NaN());
        small::token_products(A.data(), lda, ra, B.data(), ldb, rb, len, S(0.5), C.data(), ldc);
        for (index_t i = 0; i < ra; ++i)
          for (index_t j = 0; j < rb; ++j) {
            double want = 0, scale = 0;
            for (index_t c = 0; c < len; ++c) {
              want += double(A[i * lda + c]) * double(B[j * ldb + c]);
              scale += std::abs(double(A[i * lda + c]) * double(B[j * ldb + c]));
            }
            EXPECT_NEAR(C[i * ldc + j], 0.5 * want, 2.0 * double(len) * eps * scale)
                << "ra " << ra << " rb " << rb << " len " << len << " entry " << i << "," << j;
          }
        for (index_t i = 0; i < ra; ++i)  // the padding of C's rows is not written
          for (index_t j = rb; j < ldc; ++j) EXPECT_TRUE(std::isnan(C[i * ldc + j]));
        // Symmetric: A Aᵀ from the upper triangle, mirrored exactly.
        std::vector<S> G(size_t(ra * ra), std::numeric_limits<S>::quiet_NaN()), F(G.size());
        small::token_products(A.data(), lda, ra, A.data(), lda, ra, len, S(1), G.data(), ra, true);
        small::token_products(A.data(), lda, ra, A.data(), lda, ra, len, S(1), F.data(), ra);
        for (index_t i = 0; i < ra; ++i)
          for (index_t j = 0; j < ra; ++j) {
            EXPECT_EQ(G[i * ra + j], G[j * ra + i]);
            EXPECT_EQ(G[i * ra + j], F[std::min(i, j) * ra + std::max(i, j)]);
          }
      }
}

template <class S>
void check_combine_rows(std::mt19937_64& gen) {
  constexpr index_t L = lsa_native::cpu::simd::kLanes<S>;
  for (index_t chunks : {1, 3, 4, 5})
    for (index_t rows : {1, 2, 3, 4, 5, 7})
      for (index_t count : {1, 5, 6}) {
        const index_t len = chunks * L, ldo = len + L, lds = len + 2 * L;
        const auto src = random_values<S>(size_t(count * lds), gen);
        const auto base = random_values<S>(size_t(rows * ldo), gen);
        const auto coef = random_values<S>(size_t(rows * count), gen);  // [rows, count]
        const auto coef_t = [&] {                                        // [count, rows]
          std::vector<S> t(coef.size());
          for (index_t r = 0; r < rows; ++r)
            for (index_t k = 0; k < count; ++k) t[size_t(k * rows + r)] = coef[size_t(r * count + k)];
          return t;
        }();
        // Each entry: the plain loop's operations in the same order (FMA per term) give the same
        // value; compared exactly against a loop of std::fma.
        auto want = [&](index_t r, index_t c, bool with_base) {
          S acc = with_base ? base[size_t(r * ldo + c)] : S(0);
          for (index_t k = 0; k < count; ++k) acc = std::fma(coef[size_t(r * count + k)], src[size_t(k * lds + c)], acc);
          return acc;
        };
        std::vector<S> out(base.size(), std::numeric_limits<S>::quiet_NaN()), acc = base;
        small::combine_rows(out.data(), ldo, base.data(), coef.data(), count, index_t(1), src.data(), lds, rows, count, len);
        small::combine_rows(acc.data(), ldo, acc.data(), coef_t.data(), index_t(1), rows, src.data(), lds, rows, count, len);
        std::vector<S> plain(base.size(), std::numeric_limits<S>::quiet_NaN());
        small::combine_rows(plain.data(), ldo, static_cast<const S*>(nullptr), coef.data(), count, index_t(1), src.data(), lds, rows, count, len);
        for (index_t r = 0; r < rows; ++r)
          for (index_t c = 0; c < len; ++c) {
            const double tol = 40.0 * double(count) * std::numeric_limits<S>::epsilon();
            EXPECT_NEAR(out[size_t(r * ldo + c)], want(r, c, true), tol) << rows << " " << count << " " << len;
            EXPECT_EQ(acc[size_t(r * ldo + c)], out[size_t(r * ldo + c)]);
            EXPECT_NEAR(plain[size_t(r * ldo + c)], want(r, c, false), tol);
          }
      }
}
}  // namespace token_kit

TEST(TokenTileKit, TokenProductsMatchTheDefinitionAtEveryTileEdge) {
  std::mt19937_64 gen(41);
  token_kit::check_token_products<float>(gen);
  token_kit::check_token_products<double>(gen);
}

TEST(TokenTileKit, CombineRowsMatchesThePlainLoop) {
  std::mt19937_64 gen(42);
  token_kit::check_combine_rows<float>(gen);
  token_kit::check_combine_rows<double>(gen);
}

// simd::transpose (the prompts-in-lanes kernels' staging, lsa_kernels.inl): v[j][i] is the old
// v[i][j] for every lane pair, and transposing twice gives the block back.
namespace token_kit {
template <class S>
void check_transpose() {
  namespace simd = lsa_native::cpu::simd;
  constexpr index_t L = simd::kLanes<S>;
  simd::Vec<S> v[L];
  for (index_t i = 0; i < L; ++i)
    for (index_t j = 0; j < L; ++j) v[i][j] = S(i * L + j);
  simd::transpose(v);
  for (index_t i = 0; i < L; ++i)
    for (index_t j = 0; j < L; ++j) EXPECT_EQ(v[j][i], S(i * L + j)) << "lanes " << L << " i " << i << " j " << j;
  simd::transpose(v);
  for (index_t i = 0; i < L; ++i)
    for (index_t j = 0; j < L; ++j) EXPECT_EQ(v[i][j], S(i * L + j));
}

}  // namespace token_kit

TEST(SimdKit, TransposeSwapsLanesAndVectors) {
  token_kit::check_transpose<float>();
  token_kit::check_transpose<double>();
}
