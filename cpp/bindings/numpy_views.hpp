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

}  // namespace lsa_native::bindings
