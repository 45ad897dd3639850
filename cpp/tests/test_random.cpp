// Philox4x32-10 known-answer vectors and the scalar variate recipes of common/random.hpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/philox.hpp"
#include "common/random.hpp"
#include "cpu/simd_random.hpp"

namespace {

using lsa_native::rng::philox4x32_10;

// Random123 kat_vectors, philox4x32 10 (also reproduced by randomgen's Philox(number=4, width=32)).
TEST(Philox, KnownAnswerVectors) {
  struct Kat {
    std::uint32_t ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    std::uint32_t c[4] = {k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]};
    philox4x32_10(c, k.key[0], k.key[1]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(c[i], k.out[i]) << "word " << i;
  }
}

TEST(Random, UniformsStrictlyInsideUnitInterval) {
  using namespace lsa_native::rng;
  EXPECT_GT(uniform_float<float>(0u), 0.0f);
  EXPECT_LT(uniform_float<float>(0xffffffffu), 1.0f);
  EXPECT_EQ(uniform_float<float>(0u) + uniform_float<float>(0xffffffffu), 1.0f);  // symmetric
  EXPECT_GT(uniform_double<double>(0u, 0u), 0.0);
  EXPECT_LT(uniform_double<double>(0xffffffffu, 0xffffffffu), 1.0);
  EXPECT_EQ(uniform_double<double>(0u, 0u) + uniform_double<double>(0xffffffffu, 0xffffffffu), 1.0);
}

TEST(Random, SinCos2PiMatchesLibm) {
  using lsa_native::rng::ScalarMath;
  for (int i = 0; i <= 1000; ++i) {
    const double u = i / 1000.0;
    double s, c;
    ScalarMath::sincos_2pi(u, s, c);
    EXPECT_NEAR(s, std::sin(2 * M_PI * u), 1e-15);
    EXPECT_NEAR(c, std::cos(2 * M_PI * u), 1e-15);
  }
}

TEST(Random, GammaMeanAndVariance) {
  using namespace lsa_native::rng;
  const StreamAddress a{philox_key(12345), 0, 0, kStreamUserFirst};
  for (double shape : {0.3, 1.0, 2.5, 40.0}) {
    const int n = 20000;
    double s1 = 0, s2 = 0;
    for (int k = 0; k < n; ++k) {
      const double x = gamma_variate<double>(a, static_cast<std::uint32_t>(k), shape);
      ASSERT_GT(x, 0.0);
      s1 += x;
      s2 += x * x;
    }
    const double mean = s1 / n, var = s2 / n - mean * mean;
    // Gamma(a, 1): mean a, variance a; the sample mean's sd is sqrt(a/n): a 5-sigma band.
    EXPECT_NEAR(mean, shape, 5 * std::sqrt(shape / n)) << "shape " << shape;
    EXPECT_NEAR(var / shape, 1.0, 0.2) << "shape " << shape;
  }
}

}  // namespace

// The Wishart step's χ² over (prompt, variate) slots agree with the scalar recipe (its normals:
// random_fill_checks.inl's PackedAndPromptFills).
TEST(Random, BartlettChiSquaresMatchTheScalarRecipe) {
  namespace simd = lsa_native::cpu::simd;
  namespace rng = lsa_native::rng;
  const rng::StreamAddress c{rng::philox_key(77), 5, 3, rng::kStreamBartlettChi2};
  auto check = [&](auto zero, double tol) {
    using T = decltype(zero);
    const int N = 9;
    for (int dp : {1, 5, 9}) {
      for (int prompts : {1, 2, 7, 11, 17}) {
        std::vector<T> chi(size_t(dp) * prompts);
        simd::fill_bartlett_chi2(c, N, dp, prompts, chi.data());
        for (int k = 0; k < prompts; ++k) {
          rng::StreamAddress ck = c;
          ck.prompt += std::uint32_t(k);
          for (int i = 0; i < dp; ++i) {
            const double want = rng::chi_square_variate<T>(ck, std::uint32_t(i), T(N - i));
            ASSERT_NEAR(chi[size_t(k) * dp + i], want, tol * want) << dp << " " << k << " " << i;
          }
        }
      }
    }
  };
  check(float{}, 1e-5);
  check(double{}, 1e-13);
}

// The SIMD range fills with this unit's Philox (random_fill_checks.inl; the AVX-512 one: test_random_wide.cpp).
#define LSA_FILL_SUITE Fills
#include "random_fill_checks.inl"

// This unit's 8-lane fills for test_random_wide.cpp's bitwise comparison (random_fill_checks.inl).
namespace lsa_native::test {
template <class T>
void eight_lane_fills(const rng::StreamAddress& a, std::uint64_t p0, int n, T* normals, T* uniforms) {
  cpu::simd::fill_normals(a, p0, n, normals);
  cpu::simd::fill_uniforms(a, p0, n, uniforms);
}
template <class T>
void eight_lane_packed_fill(const rng::StreamAddress& a, int n, int prompts, T* out) {
  cpu::simd::fill_normals_packed(a, n, prompts, out);
}
template void eight_lane_fills<float>(const rng::StreamAddress&, std::uint64_t, int, float*, float*);
template void eight_lane_fills<double>(const rng::StreamAddress&, std::uint64_t, int, double*, double*);
template void eight_lane_packed_fill<float>(const rng::StreamAddress&, int, int, float*);
template void eight_lane_packed_fill<double>(const rng::StreamAddress&, int, int, double*);
}  // namespace lsa_native::test
