// Variates from Philox words (philox.hpp): uniforms on (0, 1), Box–Muller normals, Marsaglia–Tsang
// gamma and chi-square, each a pure function of (seed, step, prompt, stream, position).
//
// Recipes are LSA_HD templates over the value type V (a scalar, or a GCC vector on the CPU) and a
// math policy (log, sqrt, sin/cos of 2πu, conversions): ScalarMath below for host and device
// scalars, cpu/simd_random.hpp for the CPU SIMD build. The positions of variates along a stream are
// fixed here, once, for every backend:
//
//  * uniform u (float):  position p <- word p%4 of block p/4;  u = (w>>9 + ½)·2^-23 (23 bits and the half cell).
//    uniform u (double): position p <- words 2(p%2), 2(p%2)+1 of block p/2;
//                        u = ((w_a>>12)·2^32 + w_b + ½)·2^-52 (52 bits and the half cell:
//                        53 significant bits, the most that keeps every value exact below 1).
//    Both lie strictly inside (0, 1) (log u is finite) and are symmetric about ½.
//  * normal (float):  positions 4k..4k+3 come from block k: (w0, w1) -> Box–Muller pair (cos, sin),
//                     (w2, w3) -> the next pair.
//    normal (double): positions 2k, 2k+1 come from block k: u1 from (w0, w1), u2 from (w2, w3).
//    So float and double streams of one seed are different draws (each with its full precision).
//  * gamma variate k of a stream: attempt t (< kGammaMaxAttempts) reads block 2·kGammaMaxAttempts·k
//    + 2t (float and double) and, for double, block +1 (see gamma_variate).
//
// Why Box–Muller: it is exact (no approximation of the normal law beyond the uniform's resolution),
// needs no rejection and no tables, so it vectorizes lane by lane on AVX2 and runs branch-free in a
// GPU warp; a ziggurat is faster in scalar code but its rejection branches and table gathers defeat
// both. The tails are cut where log u is: |z| <= sqrt(2·24·ln 2) = 5.77 for float (P(|Z| > 5.77) =
// 7.9e-9) and sqrt(2·53·ln 2) = 8.57 for double.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/hd.hpp"
#include "common/philox.hpp"

namespace lsa_native::rng {

// Stream tags (counter word c3). Each quantity of a prompt has its own tag, so no two share words.
// 0x100-0x1FF are reserved for the kernel-GP samplers, 0x1000 and up for tests and users.
enum Stream : std::uint32_t {
  kStreamRaw = 0,            // raw words / generic test stream
  kStreamX = 1,              // linear prompts: x_i[k] at k·N+i, x_q[k] at N·d+k, fresh w at (N+1)·d+k
  kStreamQuery = 2,          // reserved (query draws of other samplers)
  kStreamTask = 3,           // reserved (fresh tasks are drawn with the covariates)
  kStreamNoise = 4,          // label noise ε_i
  kStreamQueryNoise = 5,     // query target noise (optional)
  kStreamCovariance = 6,     // per-prompt random diagonal covariance entries (ZFB 4.3)
  kStreamTaskPool = 7,       // the κ fixed tasks: prompt field = task index, step field = 0
  kStreamTaskChoice = 8,     // which of the κ tasks a prompt uses
  kStreamBartlettNormal = 9, // Wishart step: x_q, the Bartlett T_ij (i > j), fresh w, ε_q
  kStreamBartlettChi2 = 10,  // Wishart step: the diagonal chi-squares T_ii²
  kStreamRadius = 11,        // spare: radial parts
  kStreamKernelGPFirst = 0x100,
  kStreamUserFirst = 0x1000,
};

// Attempts per gamma variate before the documented fallback (see gamma_variate).
constexpr std::uint32_t kGammaMaxAttempts = 64;

// Host/device scalar math. The CPU SIMD policy (cpu/simd_random.hpp) has the same members.
struct ScalarMath {
  template <class T>
  LSA_HD static T log(T x) { return std::log(x); }
  template <class T>
  LSA_HD static T sqrt(T x) { return std::sqrt(x); }
  template <class T>
  LSA_HD static T exp(T x) { return std::exp(x); }
  // s = sin(2πu), c = cos(2πu) for u in [0, 1]: exact reduction in u (q = nearest quarter,
  // r = u − q/4 is exact), so only |2πr| <= π/4 reaches sin/cos.
  template <class T>
  LSA_HD static void sincos_2pi(T u, T& s, T& c) {
    const T q = std::nearbyint(u * T(4));
    const T r = u - q * T(0.25);
    const T a = r * T(6.283185307179586476925286766559);
    const T sa = std::sin(a), ca = std::cos(a);
    switch (static_cast<int>(q) & 3) {
      case 0: s = sa; c = ca; break;
      case 1: s = ca; c = -sa; break;
      case 2: s = -sa; c = -ca; break;
      default: s = -ca; c = sa; break;
    }
  }
  // Word (or 21-bit part) -> real, exactly.
  template <class T>
  LSA_HD static T to_real(std::uint32_t w) { return static_cast<T>(w); }
};

// Recipes below are templates over the value type V (scalar or vector), its word type W and the
// math policy; constants are written as scalars of the element type, which broadcast over vectors.

// u in (0, 1) from one word: the top 23 bits, centred in their cell (24 significant bits: exact in
// float, the largest value is 1 − 2^-24 < 1).
template <class V, class W, class Math = ScalarMath>
LSA_HD_LOCAL V uniform_float(W w) {
  return Math::template to_real<V>(w >> 9) * 1.1920928955078125e-07f + 5.9604644775390625e-08f;
}
// u in (0, 1) from two words: 52 bits (20 of w_a, 32 of w_b), centred in their cell; both terms
// and the sum are exact in double, and the largest value is 1 − 2^-53 < 1.
template <class V, class W, class Math = ScalarMath>
LSA_HD_LOCAL V uniform_double(W w_a, W w_b) {
  return Math::template to_real<V>(w_a >> 12) * 9.5367431640625e-07 +
         (Math::template to_real<V>(w_b) + 0.5) * 2.220446049250313080847e-16;
}

// Box–Muller: z0 = r cos(2π u2), z1 = r sin(2π u2), r = sqrt(−2 log u1); iid N(0, 1) for iid
// uniforms [Box & Muller 1958]. S is the element type of V.
template <class S, class V = S, class Math = ScalarMath>
LSA_HD_LOCAL void box_muller(V u1, V u2, V& z0, V& z1) {
  const V r = Math::sqrt(Math::log(u1) * S(-2));
  V s, c;
  Math::sincos_2pi(u2, s, c);
  z0 = r * c;
  z1 = r * s;
}

// Normals of one block, in stream order: 4 (float) or 2 (double).
template <class T>
struct NormalsPerBlock;
template <>
struct NormalsPerBlock<float> {
  static constexpr int value = 4;
};
template <>
struct NormalsPerBlock<double> {
  static constexpr int value = 2;
};

template <class Math = ScalarMath>
LSA_HD_LOCAL void normals_from_block(const std::uint32_t (&w)[4], float (&z)[4]) {
  box_muller<float, float, Math>(uniform_float<float, std::uint32_t, Math>(w[0]),
                          uniform_float<float, std::uint32_t, Math>(w[1]), z[0], z[1]);
  box_muller<float, float, Math>(uniform_float<float, std::uint32_t, Math>(w[2]),
                          uniform_float<float, std::uint32_t, Math>(w[3]), z[2], z[3]);
}
template <class Math = ScalarMath>
LSA_HD_LOCAL void normals_from_block(const std::uint32_t (&w)[4], double (&z)[2]) {
  box_muller<double, double, Math>(uniform_double<double, std::uint32_t, Math>(w[0], w[1]),
                           uniform_double<double, std::uint32_t, Math>(w[2], w[3]), z[0], z[1]);
}

// Where a stream is: the fixed counter words of one (seed, step, prompt, stream).
struct StreamAddress {
  PhiloxKey key;
  std::uint32_t prompt, step, stream;
};

LSA_HD_LOCAL void stream_block(const StreamAddress& a, std::uint32_t block, std::uint32_t (&w)[4]) {
  philox_block(a.key, block, a.prompt, a.step, a.stream, w);
}

// The normal at `position` of a stream (scalar; the CPU fills ranges with cpu/simd_random.hpp,
// which gives the same values up to the rounding of its log/sin/cos).
template <class T, class Math = ScalarMath>
LSA_HD_LOCAL T normal_at(const StreamAddress& a, std::uint64_t position) {
  constexpr int per = NormalsPerBlock<T>::value;
  std::uint32_t w[4];
  stream_block(a, static_cast<std::uint32_t>(position / per), w);
  T z[per];
  normals_from_block<Math>(w, z);
  return z[position % per];
}

// out[i] = the normal at position p0 + i of a stream, i < n, each block's normals computed once: the
// scalar range fill (CUDA threads; the CPU's SIMD twin is cpu/simd_random.hpp's fill_normals).
template <class T, class Math = ScalarMath>
LSA_HD_LOCAL void normals_range(const StreamAddress& a, std::uint64_t p0, std::int64_t n, T* out) {
  constexpr int per = NormalsPerBlock<T>::value;
  const std::uint64_t end = p0 + static_cast<std::uint64_t>(n);
  for (std::uint64_t blk = p0 / per; blk * per < end; ++blk) {
    std::uint32_t w[4];
    stream_block(a, static_cast<std::uint32_t>(blk), w);
    T z[per];
    normals_from_block<Math>(w, z);
    for (int j = 0; j < per; ++j) {
      const std::uint64_t pos = blk * per + static_cast<std::uint64_t>(j);
      if (pos >= p0 && pos < end) out[pos - p0] = z[j];
    }
  }
}

// The uniform at `position` of a stream.
template <class T>
LSA_HD_LOCAL T uniform_at(const StreamAddress& a, std::uint64_t position);
template <>
LSA_HD float uniform_at<float>(const StreamAddress& a, std::uint64_t position) {
  std::uint32_t w[4];
  stream_block(a, static_cast<std::uint32_t>(position / 4), w);
  return uniform_float<float>(w[position % 4]);
}
template <>
LSA_HD double uniform_at<double>(const StreamAddress& a, std::uint64_t position) {
  std::uint32_t w[4];
  stream_block(a, static_cast<std::uint32_t>(position / 2), w);
  const int j = 2 * static_cast<int>(position % 2);
  return uniform_double<double>(w[j], w[j + 1]);
}

// Integer uniform on {0, ..., n−1} from a word by multiply-shift: bias below n·2^-32 (no rejection,
// so the position of every later variate stays fixed).
LSA_HD_LOCAL std::uint32_t index_from_word(std::uint32_t w, std::uint32_t n) {
  return static_cast<std::uint32_t>((static_cast<std::uint64_t>(w) * n) >> 32);
}

// Gamma(shape, 1) variate number k of a stream, by Marsaglia & Tsang (2000), "A simple method for
// generating gamma variables": for a >= 1, with d = a − 1/3, c = 1/sqrt(9d), draw z ~ N(0,1),
// v = (1 + cz)^3, accept x = d·v when v > 0 and log u < z²/2 + d − d·v + d·log v. For a < 1 the
// boost Gamma(a) = Gamma(a + 1)·U^(1/a) [same paper, Sec. 6].
// Attempt t reads block 2·kGammaMaxAttempts·k + 2t: float: z from (w0, w1) (cos branch), u from
// w2, the boost uniform from w3 of attempt 0; double: z from that block (u1 = (w0, w1),
// u2 = (w2, w3)), u and the boost uniform from block +1 ((w0, w1) and (w2, w3)).
// Acceptance is >= 0.95 per attempt, so all kGammaMaxAttempts failing has probability < 1e-83; then
// the mode-like value d is returned (documented, never observed).
// Requires shape > 0 and k < 2^32 / (2·kGammaMaxAttempts) = 2^25.
template <class T, class Math = ScalarMath>
LSA_HD_LOCAL T gamma_variate(const StreamAddress& a, std::uint32_t k, T shape) {
  const bool boost = shape < T(1);
  const T alpha = boost ? shape + T(1) : shape;
  const T d = alpha - T(1) / T(3);
  const T c = T(1) / Math::sqrt(T(9) * d);
  const std::uint32_t base = 2u * kGammaMaxAttempts * k;
  T boost_u = T(0.5);
  T x = d;
  for (std::uint32_t t = 0; t < kGammaMaxAttempts; ++t) {
    std::uint32_t w[4];
    stream_block(a, base + 2 * t, w);
    T z, z_unused, u, ub;
    if constexpr (sizeof(T) == 4) {
      box_muller<T, T, Math>(uniform_float<T, std::uint32_t, Math>(w[0]),
                          uniform_float<T, std::uint32_t, Math>(w[1]), z, z_unused);
      u = uniform_float<T, std::uint32_t, Math>(w[2]);
      ub = uniform_float<T, std::uint32_t, Math>(w[3]);
    } else {
      box_muller<T, T, Math>(uniform_double<T, std::uint32_t, Math>(w[0], w[1]),
                          uniform_double<T, std::uint32_t, Math>(w[2], w[3]), z, z_unused);
      std::uint32_t w2[4];
      stream_block(a, base + 2 * t + 1, w2);
      u = uniform_double<T, std::uint32_t, Math>(w2[0], w2[1]);
      ub = uniform_double<T, std::uint32_t, Math>(w2[2], w2[3]);
    }
    if (t == 0) boost_u = ub;
    const T one_cz = T(1) + c * z;
    if (one_cz <= T(0)) continue;
    const T v = one_cz * one_cz * one_cz;
    if (Math::log(u) < T(0.5) * z * z + d - d * v + d * Math::log(v)) {
      x = d * v;
      break;
    }
  }
  // U^(1/a) = exp(log U / a)
  return boost ? x * Math::exp(Math::log(boost_u) / shape) : x;
}

// Chi-square with `dof` degrees of freedom (> 0): 2·Gamma(dof/2).
template <class T, class Math = ScalarMath>
LSA_HD_LOCAL T chi_square_variate(const StreamAddress& a, std::uint32_t k, T dof) {
  return T(2) * gamma_variate<T, Math>(a, k, T(0.5) * dof);
}

}  // namespace lsa_native::rng
