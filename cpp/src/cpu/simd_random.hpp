// SIMD policies for the RNG recipes of common/philox.hpp and common/random.hpp: Philox on 8 lanes
// of uint32 (8 counters at once; groups of 8 interleaved: philox_avx2, and philox_wide on the
// AVX-512 table's 16-lane registers), vectorized log and sin/cos(2πu) next to simd.hpp's exp, and
// range fills of normals in the stream order random.hpp fixes (the same words on every table).
// Internal linkage throughout (see simd.hpp): each ISA's translation unit keeps its own copy.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "common/random.hpp"
#include "cpu/simd.hpp"

namespace lsa_native::cpu::simd {
namespace {

typedef std::uint32_t U32x8 __attribute__((vector_size(32)));
typedef std::uint32_t U32x4 __attribute__((vector_size(16)));
typedef std::uint64_t U64x4 __attribute__((vector_size(32)));
typedef std::int32_t I32x4 __attribute__((vector_size(16)));

// The AVX-512 table's 64-byte paths (philox_wide; the normals' transform on 16 floats or 8 doubles,
// the float64 uniforms on 8): LSA_NATIVE_SIMD_WIDE_PORTABLE compiles the same code without AVX-512
// (lowered to narrower registers, slowly) so that tests run it on any CPU
// (cpp/tests/test_random_wide.cpp). Every path gives the same words, and the same bits where both
// widths compile to the same operations (checked without AVX-512; AVX-512's FMA contraction may
// round differently, within the bound tests/test_isa_tables.py states).
#if defined(__AVX512F__) || defined(LSA_NATIVE_SIMD_WIDE_PORTABLE)
#define LSA_NATIVE_SIMD_WIDE 1
typedef double Vec8d __attribute__((vector_size(64)));
typedef float Vec16f __attribute__((vector_size(64)));
typedef std::uint64_t U64x8 __attribute__((vector_size(64)));
typedef std::uint32_t U32x16 __attribute__((vector_size(64)));
typedef std::int32_t I32x16 __attribute__((vector_size(64)));
typedef std::int64_t I64x8 __attribute__((vector_size(64)));
#endif

// The signed integer vector with V's lanes (bit patterns, masks of comparisons and selects).
template <class V>
struct IntLanes;
template <>
struct IntLanes<Vec<float>> {
  using type = I32x8;
};
template <>
struct IntLanes<Vec<double>> {
  using type = I64x4;
};
#if defined(LSA_NATIVE_SIMD_WIDE)
template <>
struct IntLanes<Vec16f> {
  using type = I32x16;
};
template <>
struct IntLanes<Vec8d> {
  using type = I64x8;
};
#endif

template <class To, class From>
inline To bit_cast(const From& f) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast: sizes differ");
  To t;
  std::memcpy(&t, &f, sizeof t);
  return t;
}

// Philox word policy for 8 independent counters: the 32x32->64 products of even and odd lanes as
// two 4-lane 64-bit products (vpmuludq under AVX2).
struct WordOpsU32x8 {
  static void mulhilo(std::uint32_t m, U32x8 a, U32x8& hi, U32x8& lo) {
#if defined(__AVX2__)
    const __m256i va = bit_cast<__m256i>(a);
    const __m256i vm = _mm256_set1_epi32(static_cast<int>(m));
    const __m256i even = _mm256_mul_epu32(va, vm);                         // lanes 0, 2, 4, 6
    const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(va, 32), vm);   // lanes 1, 3, 5, 7
    hi = bit_cast<U32x8>(_mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA));
    lo = bit_cast<U32x8>(_mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA));
#else
    const U64x4 a64 = bit_cast<U64x4>(a);
    const U64x4 even = (a64 & 0xffffffffull) * static_cast<std::uint64_t>(m);
    const U64x4 odd = (a64 >> 32) * static_cast<std::uint64_t>(m);
    hi = bit_cast<U32x8>((even >> 32) | (odd & 0xffffffff00000000ull));
    lo = bit_cast<U32x8>((even & 0xffffffffull) | (odd << 32));
#endif
  }
};

#if defined(__AVX2__)
// rng::philox4x32_10 on G groups of 8 counters (w[g][j][lane] = word j of counter lane of group g),
// the same words with fewer instructions than WordOpsU32x8's round: the counters live in the low
// halves of 64-bit lanes (x[2g] counters 0, 2, 4, 6 and x[2g+1] counters 1, 3, 5, 7 of group g),
// where vpmuludq reads its operands and leaves lo in the low half and hi in the high half of each
// product. A round is then 2 products, 2 shifts (hi down) and 4 xors per 4 counters, with no
// blends; the high halves carry junk that no product or final word reads.
// G > 1 interleaves independent groups: a round's chain product -> shift -> xor takes 5 cycles
// while 8 counters give only 4 independent products per round, so one group waits on latency;
// two fill the multiply and logic pipes (bench/cpp/tokens_step_parts.cpp measures both).
template <int G>
inline void philox_avx2(U32x8 (&w)[G][4], std::uint32_t k0, std::uint32_t k1) {
  __m256i x[2 * G][4];
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < 4; ++j) {
      x[2 * g][j] = bit_cast<__m256i>(w[g][j]);
      x[2 * g + 1][j] = _mm256_srli_epi64(bit_cast<__m256i>(w[g][j]), 32);
    }
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(rng::kPhiloxM0));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(rng::kPhiloxM1));
#pragma GCC unroll 10
  for (int r = 0; r < rng::kPhiloxRounds; ++r) {
    if (r > 0) {
      k0 += rng::kPhiloxW0;
      k1 += rng::kPhiloxW1;
    }
    const __m256i vk0 = _mm256_set1_epi32(static_cast<int>(k0));
    const __m256i vk1 = _mm256_set1_epi32(static_cast<int>(k1));
    for (auto& c : x) {
      const __m256i p0 = _mm256_mul_epu32(c[0], m0);  // hi0:lo0
      const __m256i p1 = _mm256_mul_epu32(c[2], m1);  // hi1:lo1
      // c[1] ^ k0 first: off the chain product -> shift -> xor that limits a round
      c[0] = _mm256_xor_si256(_mm256_srli_epi64(p1, 32), _mm256_xor_si256(c[1], vk0));
      c[2] = _mm256_xor_si256(_mm256_srli_epi64(p0, 32), _mm256_xor_si256(c[3], vk1));
      c[1] = p1;
      c[3] = p0;
    }
  }
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < 4; ++j)
      w[g][j] = bit_cast<U32x8>(_mm256_blend_epi32(x[2 * g][j], _mm256_slli_epi64(x[2 * g + 1][j], 32), 0xAA));
}
#endif

#if defined(LSA_NATIVE_SIMD_WIDE)

// lo | hi << 32 of the products (low half of a's lanes) × m: vpmuludq zmm, which ignores the high
// halves (the portable form masks them; GCC makes vpmullq of it, hence the intrinsic). The
// zero-masking form with every lane on is plain vpmuludq; GCC 12's _mm512_mul_epu32 (and
// _mm512_sqrt_pd) warn -Wuninitialized on their _mm512_undefined_*.
__attribute__((always_inline)) inline U64x8 mul_low_halves(U64x8 a, std::uint64_t m) {
#if defined(__AVX512F__)
  return bit_cast<U64x8>(
      _mm512_maskz_mul_epu32(0xff, bit_cast<__m512i>(a), _mm512_set1_epi64(static_cast<long long>(m))));
#else
  return (a & 0xffffffffull) * m;
#endif
}

// rng::philox4x32_10 on G groups of 8 counters (w[g][j][lane] as in philox_avx2), philox_avx2's
// trick on 16-lane registers: the 8 counters of a group sit in the low halves of one register's
// eight 64-bit lanes (a zero extension in, a truncation out: no even/odd split and no blend), so a
// round is 2 products, 2 shifts and 2 three-way xors (vpternlogq) per 8 counters instead of
// philox_avx2's 4, 4 and 8. The chain product -> shift -> xor (7 cycles) against 3 cycles of port
// time per group and round: G = 4 groups (16 registers of state of the 32) keep the pipes busy.
template <int G>
inline void philox_wide(U32x8 (&w)[G][4], std::uint32_t k0, std::uint32_t k1) {
  U64x8 x[G][4];
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < 4; ++j) x[g][j] = __builtin_convertvector(w[g][j], U64x8);
#pragma GCC unroll 10
  for (int r = 0; r < rng::kPhiloxRounds; ++r) {
    if (r > 0) {
      k0 += rng::kPhiloxW0;
      k1 += rng::kPhiloxW1;
    }
    const U64x8 vk0 = U64x8{} + k0, vk1 = U64x8{} + k1;
    for (auto& c : x) {
      const U64x8 p0 = mul_low_halves(c[0], rng::kPhiloxM0);  // hi0:lo0
      const U64x8 p1 = mul_low_halves(c[2], rng::kPhiloxM1);  // hi1:lo1
      c[0] = (p1 >> 32) ^ (c[1] ^ vk0);
      c[2] = (p0 >> 32) ^ (c[3] ^ vk1);
      c[1] = p1;  // the high halves carry junk that no product or final word reads
      c[3] = p0;
    }
  }
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < 4; ++j) w[g][j] = __builtin_convertvector(x[g][j], U32x8);
}
#endif

// ---- vectorized math -------------------------------------------------------------------------

__attribute__((always_inline)) inline Vec<float> sqrt(Vec<float> x) {
#if defined(__AVX__)
  return bit_cast<Vec<float>>(_mm256_sqrt_ps(bit_cast<__m256>(x)));
#elif defined(__SSE2__)
  __m128 h[2];
  std::memcpy(h, &x, sizeof x);
  h[0] = _mm_sqrt_ps(h[0]);
  h[1] = _mm_sqrt_ps(h[1]);
  std::memcpy(&x, h, sizeof x);
  return x;
#else
  for (int i = 0; i < 8; ++i) x[i] = __builtin_sqrtf(x[i]);
  return x;
#endif
}
__attribute__((always_inline)) inline Vec<double> sqrt(Vec<double> x) {
#if defined(__AVX__)
  return bit_cast<Vec<double>>(_mm256_sqrt_pd(bit_cast<__m256d>(x)));
#elif defined(__SSE2__)
  __m128d h[2];
  std::memcpy(h, &x, sizeof x);
  h[0] = _mm_sqrt_pd(h[0]);
  h[1] = _mm_sqrt_pd(h[1]);
  std::memcpy(&x, h, sizeof x);
  return x;
#else
  for (int i = 0; i < 4; ++i) x[i] = __builtin_sqrt(x[i]);
  return x;
#endif
}

#if defined(LSA_NATIVE_SIMD_WIDE)
__attribute__((always_inline)) inline Vec<double> low_half(Vec8d x) {
  return __builtin_shufflevector(x, x, 0, 1, 2, 3);
}
__attribute__((always_inline)) inline Vec<double> high_half(Vec8d x) {
  return __builtin_shufflevector(x, x, 4, 5, 6, 7);
}
__attribute__((always_inline)) inline Vec<float> low_half(Vec16f x) {
  return __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7);
}
__attribute__((always_inline)) inline Vec<float> high_half(Vec16f x) {
  return __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
}
__attribute__((always_inline)) inline Vec16f sqrt(Vec16f x) {
#if defined(__AVX512F__)
  return bit_cast<Vec16f>(_mm512_maskz_sqrt_ps(0xffff, bit_cast<__m512>(x)));  // as mul_low_halves
#else
  return __builtin_shufflevector(sqrt(low_half(x)), sqrt(high_half(x)), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,
                                 14, 15);
#endif
}
__attribute__((always_inline)) inline Vec8d sqrt(Vec8d x) {
#if defined(__AVX512F__)
  return bit_cast<Vec8d>(_mm512_maskz_sqrt_pd(0xff, bit_cast<__m512d>(x)));  // as mul_low_halves
#else
  return __builtin_shufflevector(sqrt(low_half(x)), sqrt(high_half(x)), 0, 1, 2, 3, 4, 5, 6, 7);
#endif
}
#endif

// Natural log of positive normal finite numbers (the uniforms of random.hpp are), fdlibm's method:
// x = 2^k·m with m in [√½, √2), f = m − 1, s = f/(2 + f), log(1+f) = 2 atanh(s) = f − hfsq +
// s(hfsq + R(s²)) with hfsq = f²/2, and log x = k ln2 + log(1+f) with ln2 split in two parts.
// double: fdlibm's minimax R (|s| < 0.1716, error < 2^-58.45); float: below, without s's division.
// Accurate to ~1 ulp; zero, negative, subnormal or non-finite inputs are outside the contract.
template <class V>  // V: a vector of doubles, 4 or 8 lanes
__attribute__((always_inline)) inline V log_double(V x) {
  using I = typename IntLanes<V>::type;
  // m in [√½, √2) and k + 1023 in one add: the offset carries into the exponent exactly when the
  // mantissa exceeds that of √2 (double(√2) = 0x3ff6a09e667f3bcd), and the low bits plus
  // 0x3fe6a09e667f3bce give 1.mantissa, or half of it after a carry (positive x: no sign bit)
  const I t = bit_cast<I>(x) + 0x00095f619980c432ll;
  const I e = t >> 52;
  const V m = bit_cast<V>((t & 0x000fffffffffffffll) + 0x3fe6a09e667f3bcell);
  // k as double: 2^52 + e (exact, built in the bits) minus 2^52 + 1023.
  const V k = bit_cast<V>(e | 0x4330000000000000ll) - (4503599627370496.0 + 1023.0);
  const V f = m - 1.0;
  const V s = f / (f + 2.0);
  const V z = s * s;
  const V w = z * z;
  const V t1 = w * (3.999999999940941908e-01 + w * (2.222219843214978396e-01 + w * 1.531383769920937332e-01));
  const V t2 =
      z * (6.666666666666735130e-01 +
           w * (2.857142874366239149e-01 + w * (1.818357216161805012e-01 + w * 1.479819860511658591e-01)));
  const V R = t1 + t2;
  const V hfsq = 0.5 * f * f;
  return k * 6.93147180369123816490e-01 - ((hfsq - (s * (hfsq + R) + k * 1.90821492927058770002e-10)) - f);
}
__attribute__((always_inline)) inline Vec<double> log(Vec<double> x) { return log_double(x); }
#if defined(LSA_NATIVE_SIMD_WIDE)
__attribute__((always_inline)) inline Vec8d log(Vec8d x) { return log_double(x); }
#endif
template <class V>  // V: a vector of floats, 8 or 16 lanes
__attribute__((always_inline)) inline V log_float(V x) {
  using I = typename IntLanes<V>::type;
  // as for double: float(√2) = 0x3fb504f3
  const I t = bit_cast<I>(x) + 0x004afb0c;
  const V m = bit_cast<V>((t & 0x007fffff) + 0x3f3504f4);
  const V k = __builtin_convertvector((t >> 23) - 127, V);
  const V f = m - 1.0f;
  // log(1+f) = f − f²/2 + f³·P(f), P Cephes logf's minimax polynomial of degree 8 on
  // [√½ − 1, √2 − 1] (relative error < 7.6e-8), no division; P by Estrin's scheme (short chains).
  const V f2 = f * f, f4 = f2 * f2;
  const V q0 = f * -2.4999993993e-1f + 3.3333331174e-1f;
  const V q1 = f * -1.6668057665e-1f + 2.0000714765e-1f;
  const V q2 = f * -1.2420140846e-1f + 1.4249322787e-1f;
  const V q3 = f * -1.1514610310e-1f + 1.1676998740e-1f;
  const V P = (f4 * 7.0376836292e-2f + (q3 * f2 + q2)) * f4 + (q1 * f2 + q0);
  const V y = (f * f2) * P + k * -2.12194440e-4f - 0.5f * f2;
  return (f + y) + k * 0.693359375f;
}
__attribute__((always_inline)) inline Vec<float> log(Vec<float> x) { return log_float(x); }
#if defined(LSA_NATIVE_SIMD_WIDE)
__attribute__((always_inline)) inline Vec16f log(Vec16f x) { return log_float(x); }
#endif

// s = sin(2πu), c = cos(2πu) for u in [0, 1]: q = round(4u) (the 1.5·2^p rounding trick),
// r = u − q/4 exactly, a = 2πr in [−π/4, π/4], polynomials of sin a and cos a (double: Taylor to
// a^15 and a^16, truncation < 5e-17; float: Cephes' minimax, below), then the quarter turn q.
template <class V>  // V: a vector of doubles, 4 or 8 lanes
__attribute__((always_inline)) inline void sincos_2pi_double(V u, V& s, V& c) {
  using I = typename IntLanes<V>::type;
  const V magic = V{} + 6755399441055744.0;  // 1.5 · 2^52
  const V t = u * 4.0 + magic;
  const V q = t - magic;
  const I qi = bit_cast<I>(t) & 3;
  const V a = (u - q * 0.25) * 6.283185307179586476925;
  const V x2 = a * a;
  V sp = V{} + -1.0 / 1307674368000.0;  // −1/15!
  const double sin_c[7] = {1.0 / 6227020800.0, -1.0 / 39916800.0, 1.0 / 362880.0, -1.0 / 5040.0,
                           1.0 / 120.0,        -1.0 / 6.0,         1.0};
  for (double k : sin_c) sp = sp * x2 + k;
  const V sa = sp * a;
  V cp = V{} + 1.0 / 20922789888000.0;  // 1/16!
  const double cos_c[8] = {-1.0 / 87178291200.0, 1.0 / 479001600.0, -1.0 / 3628800.0, 1.0 / 40320.0,
                           -1.0 / 720.0,         1.0 / 24.0,        -0.5,              1.0};
  for (double k : cos_c) cp = cp * x2 + k;
  const V ca = cp;
  const I swap = (qi & 1) != 0;
  V ss = swap ? ca : sa;
  V cc = swap ? sa : ca;
  s = (qi & 2) != 0 ? -ss : ss;
  c = ((qi + 1) & 2) != 0 ? -cc : cc;
}
__attribute__((always_inline)) inline void sincos_2pi(Vec<double> u, Vec<double>& s, Vec<double>& c) {
  sincos_2pi_double(u, s, c);
}
#if defined(LSA_NATIVE_SIMD_WIDE)
__attribute__((always_inline)) inline void sincos_2pi(Vec8d u, Vec8d& s, Vec8d& c) { sincos_2pi_double(u, s, c); }
#endif
template <class V>  // V: a vector of floats, 8 or 16 lanes
__attribute__((always_inline)) inline void sincos_2pi_float(V u, V& s, V& c) {
  using I = typename IntLanes<V>::type;
  const V magic = V{} + 12582912.0f;  // 1.5 · 2^23
  const V t = u * 4.0f + magic;
  const V q = t - magic;
  const I qi = bit_cast<I>(t);
  const V a = (u - q * 0.25f) * 6.28318530717958647f;
  const V x2 = a * a;
  // Cephes sinf/cosf minimax polynomials on [−π/4, π/4] (error below float's half ulp):
  // sin a = a + a³(s1 + s2 a² + s3 a⁴), cos a = 1 − a²/2 + a⁴(c1 + c2 a² + c3 a⁴).
  const V x4 = x2 * x2;
  const V sp = (x2 * 8.3321608736e-3f - 1.6666654611e-1f) + x4 * -1.9515295891e-4f;
  const V sa = (a * x2) * sp + a;
  const V cp = (x2 * -1.388731625493765e-3f + 4.166664568298827e-2f) + x4 * 2.443315711809948e-5f;
  const V ca = x4 * cp + (1.0f - 0.5f * x2);
  // quarter turn q: swap for odd q (one blend each), signs by xor of the sign bit
  const I swap = (qi << 31) >> 31;  // all ones where q is odd
  const I ss = bit_cast<I>(swap ? ca : sa);
  const I cc = bit_cast<I>(swap ? sa : ca);
  const I sign = I{} + std::int32_t(0x80000000u);
  s = bit_cast<V>(ss ^ ((qi << 30) & sign));
  c = bit_cast<V>(cc ^ (((qi + 1) << 30) & sign));
}
__attribute__((always_inline)) inline void sincos_2pi(Vec<float> u, Vec<float>& s, Vec<float>& c) {
  sincos_2pi_float(u, s, c);
}
#if defined(LSA_NATIVE_SIMD_WIDE)
__attribute__((always_inline)) inline void sincos_2pi(Vec16f u, Vec16f& s, Vec16f& c) { sincos_2pi_float(u, s, c); }
#endif

// Math policy of random.hpp's recipes on vectors.
struct SimdMath {
  template <class V>
  static V log(V x) { return simd::log(x); }
  template <class V>
  static V sqrt(V x) { return simd::sqrt(x); }
  template <class V>
  static void sincos_2pi(V u, V& s, V& c) { simd::sincos_2pi(u, s, c); }
  // Words -> reals, exactly: 8 words to 8 floats (only values < 2^24 occur: the signed conversion
  // is exact), 4 words to 4 doubles (full 32 bits through the sign flip).
  template <class V>
  static V to_real(U32x8 w) { return __builtin_convertvector(bit_cast<I32x8>(w), V); }
  template <class V>
  static V to_real(U32x4 w) {
    return __builtin_convertvector(bit_cast<I32x4>(w ^ 0x80000000u), V) + 2147483648.0;
  }
#if defined(LSA_NATIVE_SIMD_WIDE)
  template <class V>
  static V to_real(U32x16 w) { return __builtin_convertvector(bit_cast<I32x16>(w), V); }  // as U32x8
#endif
};

#if defined(LSA_NATIVE_SIMD_WIDE)
// rng::uniform_double(a[l], b[l]) on 8 lanes, bit for bit, from the bits instead of two
// conversions each: with m = (a >> 12)·2^32 + b (52 bits), the double 1 + m·2^-52 has m as its
// mantissa, and subtracting 1 − 2^-53 leaves (2m + 1)·2^-53 exactly (a multiple of 2^-53 below 1),
// the recipe's (a >> 12)·2^-20 + (b + ½)·2^-52.
__attribute__((always_inline)) inline Vec8d uniform_double_bits(U32x8 a, U32x8 b) {
  const U64x8 m = (__builtin_convertvector(a >> 12, U64x8) << 32) | __builtin_convertvector(b, U64x8);
  return bit_cast<Vec8d>(m | 0x3ff0000000000000ull) - (1.0 - 0x1p-53);
}
#endif

// ---- range fills ---------------------------------------------------------------------------

// rng::philox4x32_10 in place on G groups of 8 counters (w[g][j][lane]: word j of a counter).
template <int G>
inline void philox_groups(U32x8 (&w)[G][4], rng::PhiloxKey key) {
#if defined(LSA_NATIVE_SIMD_WIDE)
  philox_wide<G>(w, key.k0, key.k1);
#elif defined(__AVX2__)
  philox_avx2<G>(w, key.k0, key.k1);
#else
  for (auto& wg : w) rng::philox4x32_10<U32x8, WordOpsU32x8>(wg, key.k0, key.k1);
#endif
}
// philox_groups on the first `groups` (1 .. G) groups of w only (a range's head or tail).
template <int G>
inline void philox_first_groups(U32x8 (&w)[G][4], int groups, rng::PhiloxKey key) {
  if constexpr (G > 1) {
    if (groups < G) return philox_first_groups<G - 1>(reinterpret_cast<U32x8(&)[G - 1][4]>(w), groups, key);
  }
  philox_groups<G>(w, key);
}
// The counters of 8 blocks: w[j][lane] = word j of block blocks[lane] of prompt prompts[lane] (the
// stream's step and tag).
inline void lane_counters(const rng::StreamAddress& a, U32x8 blocks, U32x8 prompts, U32x8 (&w)[4]) {
  w[0] = blocks;
  w[1] = prompts;
  w[2] = U32x8{} + a.step;
  w[3] = U32x8{} + a.stream;
}
// Philox on those 8 blocks.
inline void philox_lanes(const rng::StreamAddress& a, U32x8 blocks, U32x8 prompts, U32x8 (&w)[4]) {
  lane_counters(a, blocks, prompts, w);
  philox_groups(reinterpret_cast<U32x8(&)[1][4]>(w), a.key);
}
// The 8·groups consecutive blocks b0 .. b0 + 8·groups − 1 of a stream, groups <= G: w[g][j][lane]
// = word j of block b0 + 8g + lane (groups > 1: philox_avx2's or philox_wide's interleaved groups).
template <int G>
inline void philox_consecutive_blocks(const rng::StreamAddress& a, std::uint32_t b0, U32x8 (&w)[G][4],
                                      int groups = G) {
  const U32x8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int g = 0; g < G; ++g)  // every group's counters (a few adds), so that none is unset
    lane_counters(a, lane + (b0 + 8u * std::uint32_t(g)), U32x8{} + a.prompt, w[g]);
  philox_first_groups(w, groups, a.key);
}

// Block order from lane order with shuffles (no scalar loop in the hot path): z[4·lane + j] =
// v[j][lane] for 8 lanes and j < 4 (a 4 x 8 transpose), and z[2·l + j] = (j ? b : a)[l] for 4 lanes.
inline void store_block_order(const Vec<float> (&v)[4], float* z) {
#if defined(__AVX__)
  // 12 shuffles: t = pairs (unpack), s[l] = the 4 words of lanes l and l + 4 (shufps), then halves
  const __m256 v0 = bit_cast<__m256>(v[0]), v1 = bit_cast<__m256>(v[1]);
  const __m256 v2 = bit_cast<__m256>(v[2]), v3 = bit_cast<__m256>(v[3]);
  const __m256 t0 = _mm256_unpacklo_ps(v0, v1), t1 = _mm256_unpackhi_ps(v0, v1);
  const __m256 t2 = _mm256_unpacklo_ps(v2, v3), t3 = _mm256_unpackhi_ps(v2, v3);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  _mm256_storeu_ps(z, _mm256_permute2f128_ps(s0, s1, 0x20));       // lanes 0, 1
  _mm256_storeu_ps(z + 8, _mm256_permute2f128_ps(s2, s3, 0x20));   // lanes 2, 3
  _mm256_storeu_ps(z + 16, _mm256_permute2f128_ps(s0, s1, 0x31));  // lanes 4, 5
  _mm256_storeu_ps(z + 24, _mm256_permute2f128_ps(s2, s3, 0x31));  // lanes 6, 7
#else
  const Vec<float> p = __builtin_shufflevector(v[0], v[1], 0, 8, 1, 9, 2, 10, 3, 11);
  const Vec<float> q = __builtin_shufflevector(v[2], v[3], 0, 8, 1, 9, 2, 10, 3, 11);
  const Vec<float> p2 = __builtin_shufflevector(v[0], v[1], 4, 12, 5, 13, 6, 14, 7, 15);
  const Vec<float> q2 = __builtin_shufflevector(v[2], v[3], 4, 12, 5, 13, 6, 14, 7, 15);
  store(z, __builtin_shufflevector(p, q, 0, 1, 8, 9, 2, 3, 10, 11));        // lanes 0, 1
  store(z + 8, __builtin_shufflevector(p, q, 4, 5, 12, 13, 6, 7, 14, 15));  // lanes 2, 3
  store(z + 16, __builtin_shufflevector(p2, q2, 0, 1, 8, 9, 2, 3, 10, 11));
  store(z + 24, __builtin_shufflevector(p2, q2, 4, 5, 12, 13, 6, 7, 14, 15));
#endif
}
inline void store_interleaved(Vec<double> a, Vec<double> b, double* z) {
  store(z, __builtin_shufflevector(a, b, 0, 4, 1, 5));
  store(z + 4, __builtin_shufflevector(a, b, 2, 6, 3, 7));
}

// The normals of 8 Philox blocks (w[j][lane] = word j of the lane's block) as vectors over the
// blocks: float: v[j] lane l = normal j of block l (j < 4); double: v[2h + j] lane l = normal j of
// block 4h + l (j < 2, h < 2).
inline void normal_vectors(const U32x8 (&w)[4], Vec<float> (&v)[4]) {
#if defined(LSA_NATIVE_SIMD_WIDE)  // AVX-512: both pairs of words in one 16-lane transform
  const U32x16 w1 = __builtin_shufflevector(w[0], w[2], 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const U32x16 w2 = __builtin_shufflevector(w[1], w[3], 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  Vec16f z0, z1;
  rng::box_muller<float, Vec16f, SimdMath>(rng::uniform_float<Vec16f, U32x16, SimdMath>(w1),
                                           rng::uniform_float<Vec16f, U32x16, SimdMath>(w2), z0, z1);
  v[0] = low_half(z0);
  v[1] = low_half(z1);
  v[2] = high_half(z0);
  v[3] = high_half(z1);
#else
  for (int h = 0; h < 2; ++h) {
    const Vec<float> u1 = rng::uniform_float<Vec<float>, U32x8, SimdMath>(w[2 * h]);
    const Vec<float> u2 = rng::uniform_float<Vec<float>, U32x8, SimdMath>(w[2 * h + 1]);
    rng::box_muller<float, Vec<float>, SimdMath>(u1, u2, v[2 * h], v[2 * h + 1]);
  }
#endif
}
// double: AVX-512: the 8 blocks in one 8-lane transform (one register; on AVX2, 64-byte vectors
// were 45% slower: GCC scalarizes their selects); else two 4-lane ones.
inline void normal_vectors(const U32x8 (&w)[4], Vec<double> (&v)[4]) {
#if defined(LSA_NATIVE_SIMD_WIDE)
  Vec8d z0, z1;
  rng::box_muller<double, Vec8d, SimdMath>(uniform_double_bits(w[0], w[1]), uniform_double_bits(w[2], w[3]), z0, z1);
  v[0] = low_half(z0);
  v[1] = low_half(z1);
  v[2] = high_half(z0);
  v[3] = high_half(z1);
#else
  for (int h = 0; h < 2; ++h) {  // lanes 4h..4h+3
    U32x4 q[4];
    for (int j = 0; j < 4; ++j)
      q[j] = h == 0 ? __builtin_shufflevector(w[j], w[j], 0, 1, 2, 3) : __builtin_shufflevector(w[j], w[j], 4, 5, 6, 7);
    const Vec<double> u1 = rng::uniform_double<Vec<double>, U32x4, SimdMath>(q[0], q[1]);
    const Vec<double> u2 = rng::uniform_double<Vec<double>, U32x4, SimdMath>(q[2], q[3]);
    rng::box_muller<double, Vec<double>, SimdMath>(u1, u2, v[2 * h], v[2 * h + 1]);
  }
#endif
}

// The same normals in block order: z[4·lane + j] (float: 4 per block) or z[2·lane + j] (double:
// 2 per block) = normal j of the block.
inline void lane_normals(const U32x8 (&w)[4], float* z) {  // z [32]
  Vec<float> n[4];
  normal_vectors(w, n);
  store_block_order(n, z);
}
inline void lane_normals(const U32x8 (&w)[4], double* z) {  // z [16]
  Vec<double> n[4];
  normal_vectors(w, n);
  for (int h = 0; h < 2; ++h) store_interleaved(n[2 * h], n[2 * h + 1], z + 8 * h);
}

// The uniforms of 8 Philox blocks in block order, the bits rng::uniform_at gives (the word-to-real
// conversion is exact): z[4·lane + j] = uniform_float(word j) (float), z[2·lane + j] =
// uniform_double(words 2j, 2j+1) (double).
inline void lane_uniforms(const U32x8 (&w)[4], float* z) {  // z [32]
  Vec<float> u[4];
  for (int j = 0; j < 4; ++j) u[j] = rng::uniform_float<Vec<float>, U32x8, SimdMath>(w[j]);
  store_block_order(u, z);
}
inline void lane_uniforms(const U32x8 (&w)[4], double* z) {  // z [16]
#if defined(LSA_NATIVE_SIMD_WIDE)
  const Vec8d u0 = uniform_double_bits(w[0], w[1]), u1 = uniform_double_bits(w[2], w[3]);
  store_interleaved(low_half(u0), low_half(u1), z);
  store_interleaved(high_half(u0), high_half(u1), z + 8);
#else
  for (int h = 0; h < 2; ++h) {  // lanes 4h..4h+3
    U32x4 q[4];
    for (int j = 0; j < 4; ++j)
      q[j] = h == 0 ? __builtin_shufflevector(w[j], w[j], 0, 1, 2, 3) : __builtin_shufflevector(w[j], w[j], 4, 5, 6, 7);
    const Vec<double> u0 = rng::uniform_double<Vec<double>, U32x4, SimdMath>(q[0], q[1]);
    const Vec<double> u1 = rng::uniform_double<Vec<double>, U32x4, SimdMath>(q[2], q[3]);
    store_interleaved(u0, u1, z + 8 * h);
  }
#endif
}

// Groups of 8 blocks per Philox call in the range fills (philox_avx2's or philox_wide's interleave).
#if defined(LSA_NATIVE_SIMD_WIDE)
constexpr int kFillGroups = 4;
#else
constexpr int kFillGroups = 2;
#endif

// out[i] = the variate at position p0 + i of stream a, i < n, with rng::NormalsPerBlock<T> variates
// per Philox block (4 float, 2 double: normals and uniforms alike) and `lanes(w, z)` turning the
// words of 8 consecutive blocks into their variates in block order. Whole 8·kFillGroups-block
// groups are written straight into out; only a group cut by p0 or by the end goes through a buffer,
// with Philox on those of its 8-block parts that hold the range (a short range costs its blocks
// rounded up to 8, not to 8·kFillGroups).
template <class T, class Lanes>
inline void fill_by_blocks(const rng::StreamAddress& a, std::uint64_t p0, index_t n, T* out,
                           Lanes lanes) {
  constexpr std::uint64_t per = rng::NormalsPerBlock<T>::value;
  constexpr std::uint64_t eight = 8 * per;               // variates per 8 blocks
  constexpr std::uint64_t group = kFillGroups * eight;  // variates per Philox call
  if (n <= 0) return;
  const std::uint64_t end = p0 + static_cast<std::uint64_t>(n);
  U32x8 w[kFillGroups][4];
  // positions [p, stop) of the group holding p, through a buffer: Philox on only the 8-block
  // groups lo .. hi − 1 of it that hold them
  const auto part = [&](std::uint64_t p, std::uint64_t stop) {
    T z[group];
    const std::uint64_t g0 = p / group * group;
    const std::uint64_t last = stop < g0 + group ? stop : g0 + group;
    const int lo = static_cast<int>((p - g0) / eight), hi = static_cast<int>((last - g0 + eight - 1) / eight);
    philox_consecutive_blocks<kFillGroups>(a, static_cast<std::uint32_t>((g0 + lo * eight) / per), w, hi - lo);
    for (int g = lo; g < hi; ++g) lanes(w[g - lo], z + g * eight);
    for (std::uint64_t q = p - g0; q < last - g0; ++q) *out++ = z[q];
  };
  std::uint64_t p = p0;
  if (p % group != 0) {  // the head of a group
    const std::uint64_t next = (p / group + 1) * group;
    part(p, end);
    p = next;
  }
  for (; p + group <= end; p += group) {  // whole groups, straight into out
    philox_consecutive_blocks<kFillGroups>(a, static_cast<std::uint32_t>(p / per), w);
    for (int g = 0; g < kFillGroups; ++g) lanes(w[g], out + g * eight);
    out += group;
  }
  if (p < end) part(p, end);  // the tail
}

// out[i] = normal at position p0 + i of stream a, i < n (the values random.hpp's normal_at defines,
// up to the rounding of this file's log/sin/cos).
template <class T>
inline void fill_normals(const rng::StreamAddress& a, std::uint64_t p0, index_t n, T* out) {
  fill_by_blocks(a, p0, n, out, [](const U32x8 (&w)[4], T* z) { lane_normals(w, z); });
}

// out[i] = uniform at position p0 + i of stream a, i < n: rng::uniform_at's values, bit for bit.
template <class T>
inline void fill_uniforms(const rng::StreamAddress& a, std::uint64_t p0, index_t n, T* out) {
  fill_by_blocks(a, p0, n, out, [](const U32x8 (&w)[4], T* z) { lane_uniforms(w, z); });
}

// The short ranges of several prompts, packed: out[k·stride + p] = the normal at position p < n of
// prompt a.prompt + k's stream, k < prompts, with stride = n rounded up to whole blocks
// (rng::NormalsPerBlock<T>); positions n .. stride − 1 of each prompt get its next normals. The
// blocks of all prompts are taken back to back, 8·kFillGroups per Philox call, the lanes crossing
// from one prompt to the next, so a prompt costs its own blocks (fill_normals per prompt rounds each
// range up to 8 blocks: at d = 5, N = 20, 128 normals for 110). out holds
// round_up(prompts·stride / per, 8)·per values (the last 8 blocks' extra lanes run on into prompts
// past the last; their values are written and meaningless).
template <class T>
inline index_t packed_normals_size(index_t n, index_t prompts) {
  constexpr index_t per = rng::NormalsPerBlock<T>::value;
  const index_t blocks = prompts * ((n + per - 1) / per);
  return (blocks + 7) / 8 * 8 * per;
}
template <class T>
inline void fill_normals_packed(const rng::StreamAddress& a, index_t n, index_t prompts, T* out) {
  constexpr index_t per = rng::NormalsPerBlock<T>::value;
  const auto nb = static_cast<std::int32_t>((n + per - 1) / per);  // blocks per prompt
  const index_t total = prompts * nb;
  // lane l of the first 8 blocks: block l % nb of prompt l / nb
  I32x8 blk, pid;
  for (int l = 0; l < 8; ++l) {
    blk[l] = l % nb;
    pid[l] = l / nb;
  }
  // the next 8 blocks of every lane: + 8, carried into the next prompts
  const auto advance = [nb](I32x8& b, I32x8& p) {
    b += 8;
    for (std::int32_t carry = 0; carry < 8; carry += nb) {  // nb >= 8: once
      const I32x8 over = b >= nb;  // all ones where the block is past the prompt's range
      b -= over & nb;
      p -= over;
    }
  };
  // `groups` groups of 8 blocks from block f on: the counters of all kFillGroups (none unset),
  // Philox and normals on the first `groups`
  const auto call = [&](index_t f, int groups) {
    U32x8 w[kFillGroups][4];
    for (int g = 0; g < kFillGroups; ++g) {
      w[g][0] = bit_cast<U32x8>(blk);
      w[g][1] = bit_cast<U32x8>(pid) + a.prompt;
      w[g][2] = U32x8{} + a.step;
      w[g][3] = U32x8{} + a.stream;
      advance(blk, pid);
    }
    philox_first_groups(w, groups, a.key);
    for (int g = 0; g < groups; ++g) lane_normals(w[g], out + (f + 8 * g) * per);
  };
  index_t f = 0;
  for (; f + 8 * kFillGroups <= total; f += 8 * kFillGroups) call(f, kFillGroups);  // whole calls
  if (f < total) call(f, static_cast<int>((total - f + 7) / 8));                     // the last blocks
}

// out[k·n + p] = the normal at position p < n of prompt a.prompt + k's stream, k < prompts: the
// normals fill_normals gives for each prompt, with the SIMD lanes over 8 prompts and one block of
// each per call (no per-lane bookkeeping; the Wishart step's few normals per prompt).
template <class T>
inline void fill_normals_prompts(const rng::StreamAddress& a, index_t n, index_t prompts, T* out) {
  constexpr index_t per = rng::NormalsPerBlock<T>::value;
  const U32x8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
  for (index_t k0 = 0; k0 < prompts; k0 += 8) {
    const index_t m = prompts - k0 < 8 ? prompts - k0 : 8;
    const U32x8 ids = lane + (a.prompt + static_cast<std::uint32_t>(k0));
    for (index_t p0 = 0; p0 < n; p0 += per) {
      U32x8 w[4];
      philox_lanes(a, U32x8{} + static_cast<std::uint32_t>(p0 / per), ids, w);
      T z[8 * per];  // z[per·lane + j] = normal j of the lane's block
      lane_normals(w, z);
      const index_t count = n - p0 < per ? n - p0 : per;
      for (index_t l = 0; l < m; ++l) std::memcpy(out + (k0 + l) * n + p0, z + per * l, sizeof(T) * count);
    }
  }
}

// The normals fill_normals_prompts gives for 8 prompts a.prompt .. a.prompt + 7, as vectors over
// the prompts: lane l of out[h·n + p] = the normal at position p < n of prompt a.prompt +
// h·kLanes<T> + l, h < 8 / kLanes<T> (float: one vector per position; double: two).
template <class T>
inline void fill_normals_lanes(const rng::StreamAddress& a, index_t n, Vec<T>* out) {
  constexpr index_t per = rng::NormalsPerBlock<T>::value, H = 8 / kLanes<T>;
  const U32x8 ids = U32x8{0, 1, 2, 3, 4, 5, 6, 7} + a.prompt;
  for (index_t p0 = 0; p0 < n; p0 += per) {
    U32x8 w[4];
    philox_lanes(a, U32x8{} + static_cast<std::uint32_t>(p0 / per), ids, w);
    Vec<T> v[4];  // v[h·per + j]: normal p0 + j of prompts h·kLanes<T> + lane
    normal_vectors(w, v);
    const index_t count = n - p0 < per ? n - p0 : per;
    for (index_t h = 0; h < H; ++h)
      for (index_t j = 0; j < count; ++j) out[h * n + p0 + j] = v[h * per + j];
  }
}

// ---- chi-square variates of the Bartlett factor ---------------------------------------------

// The lanes of a comparison mask (I32x8 or I64x4) as bits (lane l -> bit l): one movemask on AVX,
// a loop elsewhere.
template <class M>
__attribute__((always_inline)) inline unsigned lane_bits(M m) {
  constexpr int kLanesOfM = int(sizeof(M) / sizeof(m[0]));
#if defined(__AVX__)
  if constexpr (kLanesOfM == 8) return unsigned(_mm256_movemask_ps(bit_cast<__m256>(m)));
  else return unsigned(_mm256_movemask_pd(bit_cast<__m256d>(m)));
#else
  unsigned b = 0;
  for (int l = 0; l < kLanesOfM; ++l) b |= unsigned(m[l] != 0) << l;
  return b;
#endif
}

template <class T>
using GammaMask = std::conditional_t<sizeof(T) == 4, I32x8, I64x4>;

// rng::gamma_variate's per-shape constants on a vector of shapes: the boost lanes (shape < 1),
// d = alpha − 1/3 and c = 1/sqrt(9d) with alpha = shape (+1 in the boost lanes).
template <class T>
struct GammaShape {
  Vec<T> shape, d, c;
  GammaMask<T> boost;
  GammaShape() = default;
  __attribute__((always_inline)) explicit GammaShape(Vec<T> s) : shape(s) {
    boost = s < T(1);
    const Vec<T> alpha = boost ? s + T(1) : s;
    d = alpha - T(1) / T(3);
    c = T(1) / simd::sqrt(d * T(9));
  }
};

// The uniforms of one gamma attempt from its Philox words (rng::gamma_variate's layout): u1, u2 (the
// Box–Muller pair whose cosine is z), u (the acceptance test) and ub (the boost uniform, used from
// attempt 0 only). float: 8 lanes, words 0-3 of one block each; double: 4 lanes, lanes 0-3 of w
// the attempt's block, lanes 4-7 its block +1.
template <class T>
__attribute__((always_inline)) inline void gamma_uniforms(const U32x8 (&w)[4], Vec<T>& u1, Vec<T>& u2, Vec<T>& u,
                                                          Vec<T>& ub) {
  if constexpr (sizeof(T) == 4) {
    u1 = rng::uniform_float<Vec<float>, U32x8, SimdMath>(w[0]);
    u2 = rng::uniform_float<Vec<float>, U32x8, SimdMath>(w[1]);
    u = rng::uniform_float<Vec<float>, U32x8, SimdMath>(w[2]);
    ub = rng::uniform_float<Vec<float>, U32x8, SimdMath>(w[3]);
  } else {
    U32x4 lo[4], hi[4];
    for (int j = 0; j < 4; ++j) {
      lo[j] = __builtin_shufflevector(w[j], w[j], 0, 1, 2, 3);
      hi[j] = __builtin_shufflevector(w[j], w[j], 4, 5, 6, 7);
    }
    u1 = rng::uniform_double<Vec<double>, U32x4, SimdMath>(lo[0], lo[1]);
    u2 = rng::uniform_double<Vec<double>, U32x4, SimdMath>(lo[2], lo[3]);
    u = rng::uniform_double<Vec<double>, U32x4, SimdMath>(hi[0], hi[1]);
    ub = rng::uniform_double<Vec<double>, U32x4, SimdMath>(hi[2], hi[3]);
  }
}

// One Marsaglia–Tsang attempt on vectors (an attempt of rng::gamma_variate at alpha >= 1): the
// attempt's z (Box–Muller's cosine) and u from its words; returns the acceptance mask and writes
// x = d·v, and ub.
template <class T>
__attribute__((always_inline)) inline GammaMask<T> gamma_attempt(const GammaShape<T>& g, const U32x8 (&w)[4], Vec<T>& x,
                                                                 Vec<T>& ub) {
  Vec<T> u1, u2, u, z, z_unused;
  gamma_uniforms<T>(w, u1, u2, u, ub);
  rng::box_muller<T, Vec<T>, SimdMath>(u1, u2, z, z_unused);
  const Vec<T> one_cz = g.c * z + T(1);
  const GammaMask<T> positive = one_cz > T(0);
  const Vec<T> v = positive ? one_cz * one_cz * one_cz : Vec<T>{} + T(1);
  x = g.d * v;
  const GammaMask<T> accept = simd::log(u) < T(0.5) * z * z + g.d - g.d * v + g.d * simd::log(v);
  return positive & accept;
}

// Vectors of gamma variates, G at a time (kGammaGroups): vector j's lane l (< 8 float, < 4 double)
// is variate blocks[j][l] / (2·kGammaMaxAttempts) of prompt ids[j][l] at shape g[j].shape[l]
// (double: lanes 4-7 of blocks and ids name block +1 of lanes 0-3), unscaled; lanes at or past
// live[j] are computed but not corrected. Attempt 0 of all G vectors runs unconditionally on one
// interleaved Philox call (philox_groups<G>) and independent transform chains, which the core
// overlaps; only a vector with a rejected lane runs attempts 1, 2, ... (one vector, until all its
// lanes accepted: P(a lane rejects) <= 0.05). Every lane's operations are those of one attempt of
// rng::gamma_variate in this file's SIMD math, so the values do not depend on G.
constexpr int kGammaGroups = 2;

template <class T, int G>
__attribute__((always_inline)) inline void gamma_vectors(const rng::StreamAddress& a, const U32x8 (&blocks)[G],
                                                         const U32x8 (&ids)[G], const GammaShape<T> (&g)[G],
                                                         const int (&live)[G], Vec<T> (&x)[G]) {
  constexpr bool kFloat = sizeof(T) == 4;
  constexpr unsigned kAll = kFloat ? 0xffu : 0xfu;
  using Mask = GammaMask<T>;
  // log of the smallest normal number: below it the vector exp flushes to 0
  const T log_tiny = kFloat ? T(-87.3365448) : T(-708.3964185322641);
  U32x8 w[G][4];
  for (int j = 0; j < G; ++j) lane_counters(a, blocks[j], ids[j], w[j]);
  philox_groups<G>(w, a.key);
  Vec<T> boost_u[G];
  Mask done[G];
  for (int j = 0; j < G; ++j) {
    Vec<T> x0;
    done[j] = gamma_attempt<T>(g[j], w[j], x0, boost_u[j]);
    x[j] = done[j] ? x0 : g[j].d;  // d: the recipe's value when every attempt rejects
  }
  for (int j = 0; j < G; ++j) {  // the rare retries, one vector at a time
    for (std::uint32_t t = 1; t < rng::kGammaMaxAttempts && lane_bits(done[j]) != kAll; ++t) {
      U32x8 wt[4];
      philox_lanes(a, blocks[j] + 2 * t, ids[j], wt);
      Vec<T> xt, ub_unused;
      const Mask ok = gamma_attempt<T>(g[j], wt, xt, ub_unused);
      x[j] = (ok & ~done[j]) ? xt : x[j];
      done[j] |= ok;
    }
  }
  for (int j = 0; j < G; ++j) {
    if (lane_bits(g[j].boost) == 0) continue;
    const Vec<T> log_boost = simd::log(boost_u[j]) / g[j].shape;  // U^(1/a) = exp(log U / a)
    x[j] = g[j].boost ? x[j] * simd::exp(log_boost) : x[j];
    // lanes whose U^(1/a) the vector exp flushes: the scalar recipe (libm's exp)
    unsigned tiny = lane_bits(g[j].boost & ~(log_boost > log_tiny)) & ((1u << live[j]) - 1u);
    for (; tiny != 0; tiny &= tiny - 1) {
      const int l = __builtin_ctz(tiny);
      const rng::StreamAddress al{a.key, ids[j][l], a.step, a.stream};
      x[j][l] = rng::gamma_variate<T>(al, blocks[j][l] / (2 * rng::kGammaMaxAttempts), g[j].shape[l]);
    }
  }
}

// out[i] = Gamma(shape) variate k0 + i of stream a, i < n: rng::gamma_variate's values up to the
// rounding of this file's log/sin/cos and simd.hpp's exp (shapes below 1 take the boost
// Gamma(a) = Gamma(a + 1)·U^(1/a) with attempt 0's boost uniform; only a lane whose U^(1/a) falls
// below the smallest normal number takes the scalar recipe). Lanes take consecutive variates, 8
// (float) or 4 (double) per vector, kGammaGroups vectors per gamma_vectors call; the tail's lanes
// past n compute variates that are not written.
template <class T, int G = kGammaGroups>
inline void fill_gammas(const rng::StreamAddress& a, std::uint32_t k0, index_t n, T shape, T* out) {
  constexpr bool kFloat = sizeof(T) == 4;
  constexpr int L = kFloat ? 8 : 4;  // variates per vector
  constexpr std::uint32_t stride = 2 * rng::kGammaMaxAttempts;
  // lane l: variate l (double: lanes 4-7 read block +1 of lanes 0-3's variates)
  const U32x8 first = kFloat ? U32x8{0, 1, 2, 3, 4, 5, 6, 7} * stride
                             : U32x8{0, 1, 2, 3, 0, 1, 2, 3} * stride + U32x8{0, 0, 0, 0, 1, 1, 1, 1};
  GammaShape<T> g[G];
  U32x8 ids[G];
  for (int j = 0; j < G; ++j) {
    g[j] = GammaShape<T>(simd::broadcast(shape));
    ids[j] = U32x8{} + a.prompt;
  }
  for (index_t s0 = 0; s0 < n; s0 += G * L) {
    U32x8 blocks[G];
    int live[G];
    for (int j = 0; j < G; ++j) {
      const index_t s = s0 + j * L;
      blocks[j] = first + (k0 + static_cast<std::uint32_t>(s)) * stride;
      live[j] = n - s >= L ? L : n - s > 0 ? int(n - s) : 0;
    }
    Vec<T> x[G];
    gamma_vectors<T, G>(a, blocks, ids, g, live, x);
    for (int j = 0; j < G; ++j) {
      T* o = out + s0 + j * L;
      if (live[j] == L) {
        store(o, x[j]);
      } else {
        for (int l = 0; l < live[j]; ++l) o[l] = x[j][l];
      }
    }
  }
}

// The Bartlett χ² of `prompts` consecutive prompts from a.prompt on:
//   out[k·dp + i] = χ²_{N−i} = 2·Gamma((N − i)/2), variate i < dp of prompt a.prompt + k's stream
// as rng::chi_square_variate defines it, up to fill_gammas' rounding. A vector takes variate i of L
// prompts at once (one shape per vector; float: 8 prompts, double: 4, its lanes 4-7 reading block
// +1 as gamma_vectors does), G consecutive variates i per gamma_vectors call (any G gives the same
// values; odd dp's last variate alone).
template <class T, int G = kGammaGroups>
inline void fill_bartlett_chi2(const rng::StreamAddress& a, index_t N, index_t dp, index_t prompts,
                               T* out) {
  constexpr int L = sizeof(T) == 4 ? 8 : 4;  // prompts per vector
  constexpr std::uint32_t stride = 2 * rng::kGammaMaxAttempts;
  // lane l: prompt l % L; double: lanes 4-7 read block +1 (gamma_vectors)
  const U32x8 lane = sizeof(T) == 4 ? U32x8{0, 1, 2, 3, 4, 5, 6, 7} : U32x8{0, 1, 2, 3, 0, 1, 2, 3};
  const U32x8 upper = sizeof(T) == 4 ? U32x8{} : U32x8{0, 0, 0, 0, 1, 1, 1, 1};
  // variates i0 .. i0 + H − 1 (H <= G) of prompts k0 .. k0 + m − 1
  const auto run = [&](auto h, index_t k0, int m, index_t i0) {
    constexpr int H = decltype(h)::value;
    const U32x8 ids = lane + (a.prompt + static_cast<std::uint32_t>(k0));
    U32x8 blocks[H], id[H];
    GammaShape<T> g[H];
    int live[H];
    for (int j = 0; j < H; ++j) {
      blocks[j] = upper + static_cast<std::uint32_t>(i0 + j) * stride;
      id[j] = ids;
      g[j] = GammaShape<T>(simd::broadcast(T(0.5) * static_cast<T>(N - i0 - j)));
      live[j] = m;
    }
    Vec<T> x[H];
    gamma_vectors<T, H>(a, blocks, id, g, live, x);
    for (int j = 0; j < H; ++j)
      for (int l = 0; l < m; ++l) out[(k0 + l) * dp + i0 + j] = T(2) * x[j][l];
  };
  for (index_t k0 = 0; k0 < prompts; k0 += L) {
    const int m = prompts - k0 < L ? int(prompts - k0) : L;
    index_t i = 0;
    for (; i + G <= dp; i += G) run(std::integral_constant<int, G>{}, k0, m, i);
    for (; i < dp; ++i) run(std::integral_constant<int, 1>{}, k0, m, i);
  }
}

}  // namespace
}  // namespace lsa_native::cpu::simd
