// The SIMD range fills of cpu/simd_random.hpp against the scalar recipe, included by
// test_random.cpp (the portable per-group Philox: the test units get no ISA flags, so philox_avx2's
// fills are checked only through the library's tables, by test_isa.cpp and tests/test_isa_tables.py)
// and test_random_wide.cpp (the AVX-512 table's philox_wide and its 4-group fills, on portable
// 64-byte vectors, so that any CPU runs them; there also bit for bit against test_random.cpp's
// 8-lane code). LSA_FILL_SUITE names the test suite.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/philox.hpp"
#include "common/random.hpp"
#include "cpu/simd_random.hpp"
#include "random_bounds.hpp"

// test_random.cpp's 8-lane fills (defined there, outside its anonymous namespace).
namespace lsa_native::test {
template <class T>
void eight_lane_fills(const rng::StreamAddress& a, std::uint64_t p0, int n, T* normals, T* uniforms);
template <class T>
void eight_lane_packed_fill(const rng::StreamAddress& a, int n, int prompts, T* out);
}  // namespace lsa_native::test

#ifndef LSA_FILL_SUITE
#error "define LSA_FILL_SUITE before including random_fill_checks.inl"
#endif

namespace {
namespace fill_checks {

namespace simd = lsa_native::cpu::simd;
namespace rng = lsa_native::rng;

// Every group count the fills use: the words of G·8 counters (random counters and keys, a word near
// 2^32 included) are rng::philox4x32_10's.
template <int G>
void check_philox_groups(std::mt19937& gen) {
  for (int t = 0; t < 50; ++t) {
    simd::U32x8 w[G][4];
    std::uint32_t c[G][8][4];
    for (int g = 0; g < G; ++g)
      for (int l = 0; l < 8; ++l)
        for (int j = 0; j < 4; ++j) w[g][j][l] = c[g][l][j] = t == 0 ? 0xffffffffu - std::uint32_t(l + j) : std::uint32_t(gen());
    const rng::PhiloxKey key{std::uint32_t(gen()), std::uint32_t(gen())};
    simd::philox_groups<G>(w, key);
    for (int g = 0; g < G; ++g)
      for (int l = 0; l < 8; ++l) {
        rng::philox4x32_10(c[g][l], key.k0, key.k1);
        for (int j = 0; j < 4; ++j) ASSERT_EQ(w[g][j][l], c[g][l][j]) << "G " << G << " group " << g << " lane " << l;
      }
  }
}

// The normals of block `block` of stream a through this unit's SIMD transform (every lane the same
// block): the values fill_normals must give bit for bit.
template <class T>
void block_normals(const rng::StreamAddress& a, std::uint32_t block, T* z) {
  std::uint32_t c[4];
  rng::stream_block(a, block, c);
  simd::U32x8 w[4];
  for (int j = 0; j < 4; ++j) w[j] = simd::U32x8{} + c[j];
  T all[8 * rng::NormalsPerBlock<T>::value];
  simd::lane_normals(w, all);
  std::memcpy(z, all, sizeof(T) * rng::NormalsPerBlock<T>::value);
}

// Ranges of every length 0 .. 100 and longer ones (whole Philox calls between a head and a tail),
// at starts that are and are not multiples of a block, of 8 blocks, and of a Philox call: uniforms
// equal rng::uniform_at bit for bit, normals the one-block transform bit for bit, and nothing is
// written past the range.
template <class T>
void check_ranges() {
  constexpr std::uint64_t per = rng::NormalsPerBlock<T>::value;
  const rng::StreamAddress a{rng::philox_key(0x0123456789abcdefull), 11, 3, rng::kStreamUserFirst};
  std::vector<int> lengths;
  for (int n = 0; n <= 100; ++n) lengths.push_back(n);
  for (int n : {127, 128, 129, 255, 256, 257, 300, 511, 1000, 1025}) lengths.push_back(n);
  const T sentinel = T(-12345);
  for (std::uint64_t p0 : {0ull, 1ull, 2ull, 3ull, 5ull, 7ull, 17ull, 31ull, 33ull, 63ull, 64ull, 65ull, 127ull, 129ull,
                           255ull, 257ull, 1001ull, 4097ull}) {
    std::vector<T> zb((1025 + 2 * 512) / per * per + 2 * per);  // the blocks that cover the longest range
    const std::uint64_t b_first = p0 / per;
    for (std::uint64_t b = 0; b * per < zb.size(); ++b) block_normals(a, std::uint32_t(b_first + b), zb.data() + b * per);
    // the transform itself: the scalar recipe (libm) within kNormalBound
    const double bound = lsa_native::test::kNormalBound<T>;
    for (std::uint64_t q = 0; q < zb.size(); ++q) {
      const double exact = double(rng::normal_at<T>(a, b_first * per + q));
      ASSERT_NEAR(double(zb[size_t(q)]), exact, bound * std::max(1.0, std::fabs(exact))) << "normal at " << b_first * per + q;
    }
    for (int n : lengths) {
      std::vector<T> u(size_t(n) + 1, sentinel), z(size_t(n) + 1, sentinel);
      simd::fill_uniforms(a, p0, n, u.data());
      simd::fill_normals(a, p0, n, z.data());
      for (int i = 0; i < n; ++i) {
        const T want = rng::uniform_at<T>(a, p0 + std::uint64_t(i));
        ASSERT_EQ(std::memcmp(&u[size_t(i)], &want, sizeof(T)), 0) << "uniform p0 " << p0 << " n " << n << " i " << i;
        const T zn = zb[size_t(p0 % per) + size_t(i)];
        ASSERT_EQ(std::memcmp(&z[size_t(i)], &zn, sizeof(T)), 0) << "normal p0 " << p0 << " n " << n << " i " << i;
      }
      ASSERT_EQ(u[size_t(n)], sentinel) << "uniforms written past the range: p0 " << p0 << " n " << n;
      ASSERT_EQ(z[size_t(n)], sentinel) << "normals written past the range: p0 " << p0 << " n " << n;
    }
  }
}

// The packed fill (lanes crossing prompts, a last call of fewer groups; block counts below 8: several
// carries per advance; a first prompt near 2^32: the prompt word wraps as the scalar counter does)
// gives each prompt its fill_normals values and writes exactly packed_normals_size values, all
// finite; the per-prompt fill and the Wishart step's lanes over 8 prompts give the same bits.
template <class T>
void check_packed_and_prompts() {
  constexpr int per = rng::NormalsPerBlock<T>::value, L = int(simd::kLanes<T>), H = 8 / L;
  const T sentinel = T(-12345);
  std::vector<int> lengths;
  for (int n = 1; n <= 70; n += (n < 12 ? 1 : 7)) lengths.push_back(n);
  for (int n : {110, 513}) lengths.push_back(n);
  for (std::uint32_t first : {5u, 0xfffffffau, 0xfffffffdu}) {
    const rng::StreamAddress a{rng::philox_key(0xfeedull), first, 9, rng::kStreamX};
    for (int n : lengths) {
      const int stride = (n + per - 1) / per * per;
      for (int prompts = 1; prompts <= 11; ++prompts) {
        const size_t size = size_t(simd::packed_normals_size<T>(n, prompts));
        std::vector<T> packed(size + 8 * per, sentinel);
        std::vector<T> many(size_t(n) * size_t(prompts)), one(static_cast<size_t>(stride));
        simd::fill_normals_packed(a, n, prompts, packed.data());
        simd::fill_normals_prompts(a, n, prompts, many.data());
        for (size_t i = 0; i < packed.size(); ++i)
          ASSERT_EQ(i < size, packed[i] != sentinel && std::isfinite(packed[i]))
              << "packed n " << n << " prompts " << prompts << ": value " << i << " of " << size;
        for (int k = 0; k < prompts; ++k) {
          rng::StreamAddress ak = a;
          ak.prompt += std::uint32_t(k);
          simd::fill_normals(ak, 0, stride, one.data());
          for (int p = 0; p < stride; ++p)
            ASSERT_EQ(packed[size_t(k) * stride + p], one[size_t(p)]) << "packed n " << n << " prompts " << prompts << " k " << k;
          for (int p = 0; p < n; ++p)
            ASSERT_EQ(many[size_t(k) * n + p], one[size_t(p)]) << "prompts n " << n << " prompts " << prompts << " k " << k;
        }
      }
      std::vector<T> many(size_t(n) * 8);  // the same normals as vectors over 8 prompts
      simd::fill_normals_prompts(a, n, 8, many.data());
      simd::VecBuffer<T> buffer(n * H);
      simd::Vec<T>* lanes = buffer.data();
      simd::fill_normals_lanes<T>(a, n, lanes);
      for (int k = 0; k < 8; ++k)
        for (int p = 0; p < n; ++p)
          ASSERT_EQ(lanes[(k / L) * n + p][k % L], many[size_t(k) * n + p]) << "lanes n " << n << " k " << k;
    }
  }
}

// The gamma fills (kGammaGroups vectors per gamma_vectors call, a last call of partial or idle
// vectors) against rng::gamma_variate within kGammaBound (random_bounds.hpp, plus the boost's
// exponent rounding for shapes < 1): every length 0 .. 100 from odd starts, shapes below 1 (0.05:
// float's U^(1/a) also underflows, the scalar fallback), at 1 and large. Nothing past n is written,
// a range is the prefix of a longer one bit for bit, and the values do not depend on the group
// count (G = 1, one vector per call, gives the same bits).
template <class T>
void check_gammas() {
  const rng::StreamAddress a{rng::philox_key(4242), 7, 11, rng::kStreamUserFirst + 3};
  const double eps = std::numeric_limits<T>::epsilon();
  const double bound = lsa_native::test::kGammaBound<T>;
  const T sentinel = T(-1);
  for (double shape : {0.05, 0.3, 0.999, 1.0, 2.5, 47.5, 1e4}) {
    for (std::uint32_t k0 : {0u, 1u, 7u, 13u, 1001u}) {
      std::vector<double> ref(100);
      for (int i = 0; i < 100; ++i)
        ref[size_t(i)] = double(rng::gamma_variate<T>(a, k0 + std::uint32_t(i), T(shape)));
      std::vector<T> full(100);
      simd::fill_gammas<T>(a, k0, 100, T(shape), full.data());
      for (int n = 0; n <= 100; ++n) {
        std::vector<T> g(size_t(n) + 1, sentinel), g1(size_t(n) + 1, sentinel);
        simd::fill_gammas<T>(a, k0, n, T(shape), g.data());
        simd::fill_gammas<T, 1>(a, k0, n, T(shape), g1.data());
        ASSERT_EQ(g[size_t(n)], sentinel) << "shape " << shape << " k0 " << k0 << " n " << n;
        ASSERT_EQ(g1[size_t(n)], sentinel) << "shape " << shape << " k0 " << k0 << " n " << n;
        for (int i = 0; i < n; ++i) {
          ASSERT_EQ(g[size_t(i)], full[size_t(i)]) << "shape " << shape << " k0 " << k0 << " n " << n << " i " << i;
          ASSERT_EQ(g1[size_t(i)], g[size_t(i)]) << "shape " << shape << " k0 " << k0 << " n " << n << " i " << i;
        }
      }
      for (int i = 0; i < 100; ++i) {
        const double exact = ref[size_t(i)];
        // (float's U^(1/a) underflowing to an exact 0 must be matched exactly: both take libm there)
        const double boost = shape < 1 && exact > 0 ? 4 * eps * (std::fabs(std::log(exact)) + 1) : 0.0;
        ASSERT_NEAR(double(full[size_t(i)]), exact, (bound + boost) * exact)
            << "shape " << shape << " k0 " << k0 << " i " << i;
      }
    }
  }
}

// The Bartlett χ² fill (kGammaGroups variates i per call, odd dp's last one alone, partial vectors of
// prompts) against rng::chi_square_variate, and the same bits at G = 1.
template <class T>
void check_bartlett_chi2() {
  const rng::StreamAddress c{rng::philox_key(31), 5, 3, rng::kStreamBartlettChi2};
  const double bound = lsa_native::test::kGammaBound<T>;
  for (int N : {2, 3, 20, 101}) {
    for (int dp : {1, 2, 3, 6, 21}) {
      if (dp > N) continue;
      for (int prompts : {1, 3, 5, 8, 13}) {
        std::vector<T> chi(size_t(dp) * size_t(prompts) + 1, T(-1)), chi1(chi);
        simd::fill_bartlett_chi2<T>(c, N, dp, prompts, chi.data());
        simd::fill_bartlett_chi2<T, 1>(c, N, dp, prompts, chi1.data());
        ASSERT_EQ(chi.back(), T(-1));
        for (int k = 0; k < prompts; ++k) {
          rng::StreamAddress ck = c;
          ck.prompt += std::uint32_t(k);
          for (int i = 0; i < dp; ++i) {
            const size_t at = size_t(k) * size_t(dp) + size_t(i);
            const double want = double(rng::chi_square_variate<T>(ck, std::uint32_t(i), T(N - i)));
            ASSERT_EQ(chi[at], chi1[at]) << "N " << N << " dp " << dp << " k " << k << " i " << i;
            ASSERT_NEAR(double(chi[at]), want, bound * want) << "N " << N << " dp " << dp << " k " << k << " i " << i;
          }
        }
      }
    }
  }
}

TEST(LSA_FILL_SUITE, PhiloxGroupsMatchScalar) {
  std::mt19937 gen(7);
  check_philox_groups<1>(gen);
  check_philox_groups<2>(gen);
  check_philox_groups<3>(gen);
  check_philox_groups<4>(gen);
}
TEST(LSA_FILL_SUITE, RangesOfEveryLengthAndOffset) {
  check_ranges<float>();
  check_ranges<double>();
}
TEST(LSA_FILL_SUITE, PackedAndPromptFills) {
  check_packed_and_prompts<float>();
  check_packed_and_prompts<double>();
}
TEST(LSA_FILL_SUITE, GammasOfEveryLengthAndStart) {
  check_gammas<float>();
  check_gammas<double>();
}
TEST(LSA_FILL_SUITE, BartlettChi2PairsOfVariates) {
  check_bartlett_chi2<float>();
  check_bartlett_chi2<double>();
}


#if defined(LSA_NATIVE_SIMD_WIDE_PORTABLE)
// The wide paths give the 8-lane code's bits (both units: baseline flags, no FMA): ranges, the
// packed fill and the Wishart lanes' source.
template <class T>
void check_same_bits_as_eight_lanes() {
  const rng::StreamAddress a{rng::philox_key(0x5eedull), 3, 4, rng::kStreamUserFirst};
  for (std::uint64_t p0 : {0ull, 3ull, 129ull, 1000001ull})
    for (int n : {1, 77, 4097}) {
      std::vector<T> z(n), u(n), z8(n), u8(n);
      simd::fill_normals(a, p0, n, z.data());
      simd::fill_uniforms(a, p0, n, u.data());
      lsa_native::test::eight_lane_fills(a, p0, n, z8.data(), u8.data());
      ASSERT_EQ(std::memcmp(z.data(), z8.data(), sizeof(T) * size_t(n)), 0) << "normals p0 " << p0 << " n " << n;
      ASSERT_EQ(std::memcmp(u.data(), u8.data(), sizeof(T) * size_t(n)), 0) << "uniforms p0 " << p0 << " n " << n;
    }
  for (int n : {5, 110}) {
    const size_t size = size_t(simd::packed_normals_size<T>(n, 9));
    std::vector<T> packed(size), packed8(size);
    simd::fill_normals_packed(a, n, 9, packed.data());
    lsa_native::test::eight_lane_packed_fill(a, n, 9, packed8.data());
    ASSERT_EQ(std::memcmp(packed.data(), packed8.data(), sizeof(T) * size), 0) << "packed n " << n;
  }
}
TEST(LSA_FILL_SUITE, SameBitsAsTheEightLaneCode) {
  check_same_bits_as_eight_lanes<float>();
  check_same_bits_as_eight_lanes<double>();
}
#endif

}  // namespace fill_checks
}  // namespace
