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

// "(3, 4)", "(5,)": numpy's spelling of a shape.
inline std::string shape_string(const std::vector<index_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

inline std::string shape_string(const py::array& a) {
  return shape_string(std::vector<index_t>(a.shape(), a.shape() + a.ndim()));
}

inline void require_shape(const py::array& a, const std::vector<index_t>& expected,
                          const char* name) {
  bool ok = a.ndim() == static_cast<py::ssize_t>(expected.size());
  for (size_t i = 0; ok && i < expected.size(); ++i) ok = a.shape(i) == expected[i];
  if (!ok)
    throw Error(std::string(name) + ": expected shape " + shape_string(expected) + ", got " +
                shape_string(a));
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
