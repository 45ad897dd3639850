// The AVX-512 table's Philox (simd_random.hpp's philox_wide, 4 groups of 8 counters per range-fill
// call) on portable 64-byte vectors: the same source as the AVX-512 unit's but its 32x32->64
// products, so its layout and the 4-group fills' heads, tails and packed calls run on every CPU.
#define LSA_NATIVE_WIDE_PHILOX_PORTABLE 1
#define LSA_FILL_SUITE WideFills
#include "random_fill_checks.inl"

static_assert(lsa_native::cpu::simd::kFillGroups == 4, "test_random_wide.cpp: the wide Philox is not selected");
