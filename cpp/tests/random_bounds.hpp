// The bound on transformed variates across kernel tables and against the scalar recipe: each
// table's log, sqrt, sin/cos round differently (a few ulp), so a normal z agrees with
// rng::normal_at (libm) and with the baseline table within kNormalBound<T> · max(1, |z|); the
// uniforms behind them are the same bits in every table (Philox is integer arithmetic, the
// word-to-real conversion exact). tests/test_isa_tables.py's NORMAL_BOUND states the same numbers.
#pragma once

#include <type_traits>

namespace lsa_native::test {
template <class T>
constexpr double kNormalBound = std::is_same<T, float>::value ? 4e-6 : 1e-14;
}  // namespace lsa_native::test
