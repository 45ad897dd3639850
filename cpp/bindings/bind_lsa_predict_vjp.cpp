// Binding of lsa_predict_vjp (lsa.hpp, cpu/lsa_predict_vjp.cpp): shape checks, GIL released.
// Kept out of bind_lsa.cpp while the CUDA backend reworks it; fold it in when merging.
#include <pybind11/stl.h>

#include <optional>

#include "lsa_native/lsa.hpp"
#include "numpy_views.hpp"

namespace lsa_native::bindings {
namespace {

template <class T>
void bind_dtype(py::module_& m) {
  m.def(
      "lsa_predict_vjp",
      [](const CArray<T>& E, const CArray<T>& W_pv, const CArray<T>& W_kq, const CArray<T>& d_y,
         CArray<T> d_W_pv, CArray<T> d_W_kq, std::optional<CArray<T>> d_E) {
        if (E.ndim() != 3 || E.shape(1) < 2 || E.shape(2) < 2)
          throw Error("E: expected shape [B, d+1, N+1] with d >= 1 and N >= 1, got " +
                      shape_string(E));
        const LsaShape s{E.shape(0), E.shape(1) - 1, E.shape(2) - 1};
        validate(s);
        require_shape(W_pv, {s.dim + 1, s.dim + 1}, "W_pv");
        require_shape(W_kq, {s.dim + 1, s.dim + 1}, "W_kq");
        require_shape(d_y, {s.batch}, "d_y");
        require_shape(d_W_pv, {s.dim + 1, s.dim + 1}, "d_W_pv");
        require_shape(d_W_kq, {s.dim + 1, s.dim + 1}, "d_W_kq");
        T* de = optional_out(d_E, {s.batch, s.dim + 1, s.context + 1}, "d_E");
        T* dpv = out_ptr(d_W_pv, "d_W_pv");
        T* dkq = out_ptr(d_W_kq, "d_W_kq");
        py::gil_scoped_release release;
        lsa_predict_vjp(s, E.data(), W_pv.data(), W_kq.data(), d_y.data(), dpv, dkq, de);
      },
      py::arg("E").noconvert(), py::arg("W_pv").noconvert(), py::arg("W_kq").noconvert(),
      py::arg("d_y").noconvert(), py::arg("d_W_pv").noconvert(), py::arg("d_W_kq").noconvert(),
      py::arg("d_E").noconvert() = py::none());
}

}  // namespace

void bind_lsa_predict_vjp(py::module_& m) {
  bind_dtype<float>(m);
  bind_dtype<double>(m);
}

}  // namespace lsa_native::bindings
