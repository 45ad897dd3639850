// Philox4x32-10 counter-based random bits (Salmon, Moraes, Dror, Shaw, SC11 "Parallel random
// numbers: as easy as 1, 2, 3"), written once for the CPU (scalars or GCC vectors of uint32) and
// CUDA (scalars).
//
// Why 4x32-10: a round needs two 32x32->64 multiplies, which are native on GPUs (__umulhi) and in
// AVX2 (vpmuludq, 4 per instruction), while 4x64 needs 64x64->128 products that neither has in
// SIMD form. It is the generator of cuRAND and of PyTorch's CUDA backend; its known-answer vectors
// are published with Random123 (checked in tests/test_sampling.py and cpp/tests/test_random.cpp).
//
// Addressing (the one layout every lsa_native sampler uses; a variate is a pure function of it,
// never of thread count, chunking or device):
//   key     = (k0, k1) = (low, high) 32 bits of the 64-bit seed, 0 <= seed < 2^64;
//   counter = (c0, c1, c2, c3) = (block, prompt, step, stream):
//     c0 block : index of the 4-word block along one stream (positions 4·block .. 4·block+3),
//     c1 prompt: prompt index within the batch (B <= 2^32),
//     c2 step  : training step (0 <= step < 2^32),
//     c3 stream: what the words are for (random.hpp: enum Stream), so that x, w, noise... of one
//                prompt never share words.
// A stream holds 2^32 blocks = 2^34 words, far beyond any prompt.
#pragma once

#include <cstdint>

#include "common/hd.hpp"

namespace lsa_native::rng {

// Multipliers and Weyl key increments of Philox4x32 [Random123 philox.h].
constexpr std::uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr std::uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr std::uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr std::uint32_t kPhiloxW1 = 0xBB67AE85u;
constexpr int kPhiloxRounds = 10;

// Word operations for scalar uint32 (host and device). A SIMD word type supplies its own policy
// with the same member (cpu/simd_random.hpp), so the round below is the one recipe for all.
struct ScalarWordOps {
  // hi:lo = m · a (full 64-bit product of two 32-bit words).
  LSA_HD static void mulhilo(std::uint32_t m, std::uint32_t a, std::uint32_t& hi, std::uint32_t& lo) {
#if defined(__CUDA_ARCH__)
    hi = __umulhi(m, a);
    lo = m * a;
#else
    const std::uint64_t p = static_cast<std::uint64_t>(m) * a;
    hi = static_cast<std::uint32_t>(p >> 32);
    lo = static_cast<std::uint32_t>(p);
#endif
  }
};

// One Philox4x32 round on counter words c[0..3] (W: uint32 or a vector of uint32, lanes being
// independent counters) with the round key (k0, k1), the same for all lanes.
template <class W, class Ops>
LSA_HD_LOCAL void philox4x32_round(W (&c)[4], std::uint32_t k0, std::uint32_t k1) {
  W hi0, lo0, hi1, lo1;
  Ops::mulhilo(kPhiloxM0, c[0], hi0, lo0);
  Ops::mulhilo(kPhiloxM1, c[2], hi1, lo1);
  const W n0 = hi1 ^ c[1] ^ k0;
  const W n2 = hi0 ^ c[3] ^ k1;
  c[0] = n0;
  c[1] = lo1;
  c[2] = n2;
  c[3] = lo0;
}

// Philox4x32-10: c <- the 4 random words of counter c under key (k0, k1), in place.
template <class W, class Ops = ScalarWordOps>
LSA_HD_LOCAL void philox4x32_10(W (&c)[4], std::uint32_t k0, std::uint32_t k1) {
  for (int r = 0; r < kPhiloxRounds; ++r) {
    if (r > 0) {  // the key schedule bumps the key before every round but the first
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    philox4x32_round<W, Ops>(c, k0, k1);
  }
}

// The key of a 64-bit seed (low word first).
struct PhiloxKey {
  std::uint32_t k0, k1;
};
LSA_HD_LOCAL PhiloxKey philox_key(std::uint64_t seed) {
  return {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
}

// The 4 words at (block, prompt, step, stream) under `key`: the scalar entry point of the layout.
LSA_HD_LOCAL void philox_block(PhiloxKey key, std::uint32_t block, std::uint32_t prompt, std::uint32_t step,
                         std::uint32_t stream, std::uint32_t (&out)[4]) {
  out[0] = block;
  out[1] = prompt;
  out[2] = step;
  out[3] = stream;
  philox4x32_10(out, key.k0, key.k1);
}

}  // namespace lsa_native::rng
