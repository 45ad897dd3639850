// The one ISA mechanism (cpu/isa.hpp): every per-ISA kernel table gives the same results from its
// baseline and its AVX2+FMA build (to rounding: FMA contraction and vector widths differ), so the
// build this machine does not pick is exercised too. Odd sizes, d = 1, N = 1, float and double.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

#include "cpu/isa.hpp"
#include "cpu/lsa_kernels.hpp"
#include "cpu/lsa_predict_vjp.hpp"
#include "cpu/small_matrix_cpu.hpp"
#include "lsa_problem.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LSA_TEST_HAVE_AVX2_TABLES 1
#endif

namespace {

using lsa_native::index_t;
namespace cpu = lsa_native::cpu;

// max |a − b| / max(1, max |b|).
template <class T>
double relative_gap(const std::vector<T>& a, const std::vector<T>& b) {
  double gap = 0, scale = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    gap = std::max(gap, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return gap / scale;
}

template <class T>
double tolerance() {
  return std::is_same<T, float>::value ? 2e-4 : 1e-11;
}

#if LSA_TEST_HAVE_AVX2_TABLES
template <class T>
void check_lsa_tables() {
  for (auto [B, d, N] : {std::array<index_t, 3>{3, 1, 1}, {5, 4, 9}, {4, 20, 100}, {2, 7, 33}}) {
    const auto p = lsa_native::testing::random_lsa_problem<T>(B, d, N, unsigned(B * 100 + d + N));
    const index_t rc = (d + 1) * (N + 1);
    const auto tables = {cpu::isa_baseline::lsa_predict_vjp_kernels<T>(),
                         cpu::isa_avx2::lsa_predict_vjp_kernels<T>()};
    std::vector<std::vector<T>> d_E;
    std::vector<std::vector<double>> partial;
    for (const auto& k : tables) {
      d_E.emplace_back(static_cast<size_t>(B * rc), T(NAN));  // poisoned: every entry written
      partial.emplace_back(static_cast<size_t>(cpu::predict_vjp_partial_size(d)), NAN);
      k.range(p.shape, p.E.data(), p.W_pv.data(), p.W_kq.data(), p.y_q.data(), d_E.back().data(), 0,
              B, partial.back().data());
    }
    for (T x : d_E[0]) ASSERT_TRUE(std::isfinite(double(x)));
    EXPECT_LT(relative_gap(d_E[0], d_E[1]), tolerance<T>()) << "d_E, d = " << d << ", N = " << N;
    if (d == 20) {  // power: the two builds are different code (FMA contraction, vector widths)
      EXPECT_GT(relative_gap(d_E[0], d_E[1]), 0.0) << "baseline and AVX2 tables are the same code";
    }
    EXPECT_LT(relative_gap(partial[0], partial[1]), tolerance<T>()) << "d = " << d << ", N = " << N;

    const auto lsa = {cpu::isa_baseline::lsa_kernels<T>(), cpu::isa_avx2::lsa_kernels<T>()};
    std::vector<std::vector<T>> F;
    for (const auto& k : lsa) {
      F.emplace_back(static_cast<size_t>(B * rc), T(NAN));
      k.forward(p.shape, p.E.data(), p.W_pv.data(), p.W_kq.data(), F.back().data(), 0, B);
    }
    EXPECT_LT(relative_gap(F[0], F[1]), tolerance<T>()) << "forward, d = " << d << ", N = " << N;
  }
}
#endif

TEST(IsaTables, LsaKernelsAgreeAcrossInstructionSets) {
#if LSA_TEST_HAVE_AVX2_TABLES
  if (!cpu::use_avx2_kernels()) GTEST_SKIP() << "this CPU has no AVX2+FMA";
  check_lsa_tables<float>();
  check_lsa_tables<double>();
#else
  GTEST_SKIP() << "no AVX2 build of the kernels on this platform";
#endif
}

TEST(IsaTables, SmallMatrixKernelsAgreeAcrossInstructionSets) {
#if LSA_TEST_HAVE_AVX2_TABLES
  if (!cpu::use_avx2_kernels()) GTEST_SKIP() << "this CPU has no AVX2+FMA";
  std::mt19937_64 gen(41);
  std::normal_distribution<double> g;
  for (index_t n : {1, 2, 5, 8, 13, 50}) {
    std::vector<double> a(static_cast<size_t>(n * n)), b(a.size()), x(static_cast<size_t>(n));
    for (auto* v : {&a, &b, &x})
      for (auto& e : *v) e = g(gen);
    const cpu::SmallMatrixKernels tables[] = {cpu::isa_baseline::small_matrix_kernels(),
                                              cpu::isa_avx2::small_matrix_kernels()};
    std::vector<double> c[2], y[2], yt[2];
    for (int t = 0; t < 2; ++t) {
      c[t].assign(a.size(), NAN);
      y[t].assign(x.size(), NAN);
      yt[t].assign(x.size(), NAN);
      tables[t].matmul(a.data(), b.data(), c[t].data(), n);
      tables[t].matvec(a.data(), x.data(), y[t].data(), n);
      tables[t].matvec_t(a.data(), x.data(), yt[t].data(), n);
    }
    EXPECT_LT(relative_gap(c[0], c[1]), 1e-13) << "n = " << n;
    EXPECT_LT(relative_gap(y[0], y[1]), 1e-13) << "n = " << n;
    EXPECT_LT(relative_gap(yt[0], yt[1]), 1e-13) << "n = " << n;
    for (double v : c[0]) ASSERT_TRUE(std::isfinite(v));
  }
#else
  GTEST_SKIP() << "no AVX2 build of the kernels on this platform";
#endif
}

}  // namespace
