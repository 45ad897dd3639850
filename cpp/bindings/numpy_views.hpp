// numpy array → raw pointer views for the bindings: exact dtype, C-contiguous, shape-checked.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lsa_native/types.hpp"

namespace lsa_native::bindings {

namespace py = pybind11;

// Zero-copy contract: the Python layer converts (visibly); the bindings never copy.
template <class T>
using CArray = py::array_t<T, py::array::c_style>;

inline std::string shape_string(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

inline void require_shape(const py::array& a, const std::vector<index_t>& expected,
                          const char* name) {
  bool ok = a.ndim() == static_cast<py::ssize_t>(expected.size());
  for (size_t i = 0; ok && i < expected.size(); ++i) ok = a.shape(i) == expected[i];
  if (!ok) {
    std::string e = "(";
    for (size_t i = 0; i < expected.size(); ++i)
      e += (i ? ", " : "") + std::to_string(expected[i]);
    e += expected.size() == 1 ? ",)" : ")";
    throw Error(std::string(name) + ": expected shape " + e + ", got " + shape_string(a));
  }
}

template <class T>
const T* in_ptr(const CArray<T>& a) {
  return a.data();
}

template <class T>
T* out_ptr(CArray<T>& a, const char* name) {
  if (!a.writeable()) throw Error(std::string(name) + " must be writeable");
  return a.mutable_data();
}

// Pointer to an optional output array after checking its shape; nullptr when absent.
template <class T>
T* optional_out(std::optional<CArray<T>>& a, const std::vector<index_t>& shape, const char* name) {
  if (!a) return nullptr;
  require_shape(*a, shape, name);
  return out_ptr(*a, name);
}

// ---- Device::cuda entry points on raw addresses (the Python layer checks CUDA arrays and passes
// their addresses; address 0 = argument absent) ----
template <class T>
const T* in_addr(std::uintptr_t a) {
  return reinterpret_cast<const T*>(a);
}
template <class T>
T* out_addr(std::uintptr_t a) {
  return reinterpret_cast<T*>(a);
}

// f(T{}) for T = float ("float32") or double ("float64"): the dtype name of a Python call picks T.
template <class F>
auto with_dtype(const std::string& dtype, F&& f) {
  if (dtype == "float32") return f(float{});
  if (dtype == "float64") return f(double{});
  throw Error("dtype: expected 'float32' or 'float64', got '" + dtype + "'");
}

using Address = std::uintptr_t;

}  // namespace lsa_native::bindings
