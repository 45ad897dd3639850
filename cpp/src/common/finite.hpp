// Output checks raised in the writing pass: kernels OR a "non-finite seen" flag while they store
// their outputs (no second read of large arrays); an entry point turns a raised flag into an error
// naming the output and saying whether the inputs were finite (overflow) or held NaN/inf.
#pragma once

#include <initializer_list>
#include <string>

#include "common/hd.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native::detail {

// x − x is 0 for finite x and NaN for ±inf or NaN: summing it over stored values leaves a NaN
// exactly when one of them was non-finite (no branch, vectorizes; needs IEEE, no -ffast-math).
template <class T>
LSA_HD_LOCAL T poison(T x) {
  return x - x;
}
template <class T>
LSA_HD_LOCAL bool poison_clear(T sum) {
  return sum == T(0);
}

template <class T>
bool all_finite(const T* a, index_t n) {
  T sum = T(0);
  for (index_t i = 0; i < n; ++i) sum += poison(a[i]);
  return poison_clear(sum);
}

// An input of the call, named for the error message (data may be null: an absent input).
template <class T>
struct NamedInput {
  const char* name;
  const T* data;
  index_t size;
};

// Nothing when `finite`. Otherwise (the rare path, so the inputs are scanned only now): Error
// (ValueError) naming the first input holding NaN/inf, else NonFiniteError (FloatingPointError)
// naming `output` — finite inputs overflowed.
template <class T>
void check_output(bool finite, const char* output, std::initializer_list<NamedInput<T>> inputs) {
  if (finite) return;
  for (const auto& in : inputs)
    if (in.data && !all_finite(in.data, in.size))
      throw Error(std::string(in.name) + ": contains non-finite values (NaN or inf), so the output " +
                  output + " is non-finite");
  throw NonFiniteError(std::string(output) +
                       ": overflowed to non-finite values from finite inputs (rescale the inputs "
                       "or parameters, or use float64)");
}

}  // namespace lsa_native::detail
