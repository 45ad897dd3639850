// Index type, the error type, and argument checks shared by every lsa_native entry point.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace lsa_native {

// 64-bit indices everywhere: B·(d+1)·(N+1) overflows 32 bits at realistic sizes.
using index_t = std::int64_t;

// Thrown for every invalid argument; the message names the argument and what was expected.
// The Python bindings map it to ValueError.
class Error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Thrown for an argument of the wrong type or dtype (a subclass of Error: C++ callers catch both
// as Error). The Python bindings map it to TypeError.
class ArgumentTypeError : public Error {
 public:
  using Error::Error;
};

// Thrown when finite inputs produced a non-finite output (overflow, or 0·inf inside the math);
// the message names the output. The Python bindings map it to FloatingPointError.
class NonFiniteError : public std::overflow_error {
 public:
  using std::overflow_error::overflow_error;
};

// Thrown when a GPU has not the memory a call needs (the message says how much was asked and how
// much is free); the process stays usable. The Python bindings map it to MemoryError.
class DeviceMemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
inline void require(bool ok, const std::string& message) {
  if (!ok) throw Error(message);
}
inline void require_pointer(const void* p, const char* name) {
  require(p != nullptr, std::string(name) + ": must not be null");
}
}  // namespace detail

}  // namespace lsa_native

// (a, b, c) → a, b, c: the parameter lists of the entry-point lists (lsa.hpp, kernel_attention.hpp).
#define LSA_NATIVE_UNPAREN(...) __VA_ARGS__
