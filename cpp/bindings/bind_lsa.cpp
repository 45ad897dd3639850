// Bindings of the batched LSA kernels (lsa.hpp): shape checks, GIL released around native calls.
#include "lsa_native/lsa.hpp"
#include "numpy_views.hpp"

#include <pybind11/stl.h>

#include <optional>

namespace lsa_native::bindings {
namespace {

template <class T>
LsaShape prompt_shape(const CArray<T>& E) {
  if (E.ndim() != 3)
    throw Error("E: expected a 3-d array [B, d+1, N+1], got shape " + shape_string(E));
  if (E.shape(1) < 2 || E.shape(2) < 2)
    throw Error("E: expected shape [B, d+1, N+1] with d >= 1 and N >= 1, got " + shape_string(E));
  LsaShape s{E.shape(0), E.shape(1) - 1, E.shape(2) - 1};
  validate(s);
  return s;
}

template <class T>
void require_params(const LsaShape& s, const CArray<T>& W_pv, const CArray<T>& W_kq) {
  require_shape(W_pv, {s.dim + 1, s.dim + 1}, "W_pv");
  require_shape(W_kq, {s.dim + 1, s.dim + 1}, "W_kq");
}

template <class T>
void bind_dtype(py::module_& m) {
  m.def(
      "lsa_predict",
      [](const CArray<T>& E, const CArray<T>& W_pv, const CArray<T>& W_kq, CArray<T> y_hat) {
        const LsaShape s = prompt_shape(E);
        require_params(s, W_pv, W_kq);
        require_shape(y_hat, {s.batch}, "out");
        T* out = out_ptr(y_hat, "out");
        py::gil_scoped_release release;
        lsa_predict(s, E.data(), W_pv.data(), W_kq.data(), out);
      },
      py::arg("E").noconvert(), py::arg("W_pv").noconvert(), py::arg("W_kq").noconvert(),
      py::arg("out").noconvert());
  m.def(
      "lsa_loss_and_grad",
      [](const CArray<T>& E, const CArray<T>& y_q, const CArray<T>& W_pv, const CArray<T>& W_kq,
         CArray<T> d_W_pv, CArray<T> d_W_kq, std::optional<CArray<T>> y_hat) {
        const LsaShape s = prompt_shape(E);
        require_params(s, W_pv, W_kq);
        require_shape(y_q, {s.batch}, "y_q");
        require_shape(d_W_pv, {s.dim + 1, s.dim + 1}, "d_W_pv");
        require_shape(d_W_kq, {s.dim + 1, s.dim + 1}, "d_W_kq");
        T* yh = optional_out(y_hat, {s.batch}, "y_hat");
        T* dpv = out_ptr(d_W_pv, "d_W_pv");
        T* dkq = out_ptr(d_W_kq, "d_W_kq");
        py::gil_scoped_release release;
        return lsa_loss_and_grad(s, E.data(), y_q.data(), W_pv.data(), W_kq.data(), dpv, dkq, yh);
      },
      py::arg("E").noconvert(), py::arg("y_q").noconvert(), py::arg("W_pv").noconvert(),
      py::arg("W_kq").noconvert(), py::arg("d_W_pv").noconvert(), py::arg("d_W_kq").noconvert(),
      py::arg("y_hat").noconvert() = py::none());
  m.def(
      "lsa_forward",
      [](const CArray<T>& E, const CArray<T>& W_pv, const CArray<T>& W_kq, CArray<T> F) {
        const LsaShape s = prompt_shape(E);
        require_params(s, W_pv, W_kq);
        require_shape(F, {s.batch, s.dim + 1, s.context + 1}, "out");
        T* out = out_ptr(F, "out");
        py::gil_scoped_release release;
        lsa_forward(s, E.data(), W_pv.data(), W_kq.data(), out);
      },
      py::arg("E").noconvert(), py::arg("W_pv").noconvert(), py::arg("W_kq").noconvert(),
      py::arg("out").noconvert());
  m.def(
      "lsa_vjp",
      [](const CArray<T>& E, const CArray<T>& W_pv, const CArray<T>& W_kq, const CArray<T>& d_F,
         CArray<T> d_W_pv, CArray<T> d_W_kq, std::optional<CArray<T>> d_E) {
        const LsaShape s = prompt_shape(E);
        require_params(s, W_pv, W_kq);
        require_shape(d_F, {s.batch, s.dim + 1, s.context + 1}, "d_F");
        require_shape(d_W_pv, {s.dim + 1, s.dim + 1}, "d_W_pv");
        require_shape(d_W_kq, {s.dim + 1, s.dim + 1}, "d_W_kq");
        T* de = optional_out(d_E, {s.batch, s.dim + 1, s.context + 1}, "d_E");
        T* dpv = out_ptr(d_W_pv, "d_W_pv");
        T* dkq = out_ptr(d_W_kq, "d_W_kq");
        py::gil_scoped_release release;
        lsa_vjp(s, E.data(), W_pv.data(), W_kq.data(), d_F.data(), dpv, dkq, de);
      },
      py::arg("E").noconvert(), py::arg("W_pv").noconvert(), py::arg("W_kq").noconvert(),
      py::arg("d_F").noconvert(), py::arg("d_W_pv").noconvert(), py::arg("d_W_kq").noconvert(),
      py::arg("d_E").noconvert() = py::none());
}

}  // namespace

void bind_lsa(py::module_& m) {
  bind_dtype<float>(m);
  bind_dtype<double>(m);
}

}  // namespace lsa_native::bindings
