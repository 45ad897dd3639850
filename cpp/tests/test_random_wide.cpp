// The AVX-512 table's 16-lane paths of simd_random.hpp (philox_wide, 4 groups of 8 counters per
// range-fill call; the float64 normals' and uniforms' 8-lane transform) on portable 64-byte vectors:
// the AVX-512 unit's source but its intrinsics (32x32->64 products, sqrt), so the layout, the
// 4-group fills' heads, tails and packed calls, and the 8-lane values run on every CPU.
#define LSA_NATIVE_SIMD_WIDE_PORTABLE 1
#define LSA_FILL_SUITE WideFills
#include "random_fill_checks.inl"

static_assert(lsa_native::cpu::simd::kFillGroups == 4, "test_random_wide.cpp: the 16-lane paths are not selected");
