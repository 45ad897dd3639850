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
// Gamma variates (every attempt in SIMD; the boost of shapes < 1 by the vector log and exp) agree
// with rng::gamma_variate within kGammaBound · x relative: x = d·(1 + c·z)³ carries z's rounding
// (kNormalBound) times 3c. The boost U^(1/a) = exp(log U / a) adds the rounding of its exponent,
// an absolute error of a few ε·|log U / a| <= 4ε·|ln x| + ε, relative in x (the tests add it).
template <class T>
constexpr double kGammaBound = std::is_same<T, float>::value ? 2e-5 : 1e-13;
}  // namespace lsa_native::test
