// Bindings of the multi-head LSA kernels (multihead.hpp): numpy views, shape checks, GIL released.
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "lsa_native/multihead.hpp"
#include "numpy_views.hpp"

namespace lsa_native::bindings {
namespace {

template <class T>
LsaShape prompts_of(const CArray<T>& E) {
  if (E.ndim() != 3)
    throw Error("E: expected a 3-d array [B, d+1, N+1], got shape " + shape_string(E));
  LsaShape s{E.shape(0), E.shape(1) - 1, E.shape(2) - 1};
  validate(s);
  return s;
}

// H of W_pv [H, d+1, d+1], with W_kq of the same shape (the one place of the head-shape rules).
template <class T>
index_t heads_of(const LsaShape& s, const CArray<T>& W_pv, const CArray<T>& W_kq) {
  if (W_pv.ndim() != 3)
    throw Error("W_pv: expected a 3-d array [H, d+1, d+1], got shape " + shape_string(W_pv));
  const index_t H = W_pv.shape(0);
  validate_heads(s, H);
  require_shape(W_pv, {H, s.dim + 1, s.dim + 1}, "W_pv");
  require_shape(W_kq, {H, s.dim + 1, s.dim + 1}, "W_kq");
  return H;
}

template <class T>
void bind_typed(py::module_& m) {
  m.def(
      "multihead_lsa_predict",
      [](const CArray<T>& E, const CArray<T>& W_pv, const CArray<T>& W_kq, CArray<T> y_hat) {
        const LsaShape s = prompts_of(E);
        const index_t H = heads_of(s, W_pv, W_kq);
        require_shape(y_hat, {s.batch}, "out");
        T* out = out_ptr(y_hat, "out");
        py::gil_scoped_release release;
        multihead_lsa_predict(s, H, E.data(), W_pv.data(), W_kq.data(), out);
      },
      py::arg("E").noconvert(), py::arg("W_pv").noconvert(), py::arg("W_kq").noconvert(),
      py::arg("out").noconvert());
  m.def(
      "multihead_lsa_loss_and_grad",
      [](const CArray<T>& E, const CArray<T>& y_q, const CArray<T>& W_pv, const CArray<T>& W_kq,
         CArray<T> d_W_pv, CArray<T> d_W_kq, std::optional<CArray<T>> y_hat) {
        const LsaShape s = prompts_of(E);
        const index_t H = heads_of(s, W_pv, W_kq);
        require_shape(y_q, {s.batch}, "y_q");
        require_shape(d_W_pv, {H, s.dim + 1, s.dim + 1}, "d_W_pv");
        require_shape(d_W_kq, {H, s.dim + 1, s.dim + 1}, "d_W_kq");
        T* yh = optional_out(y_hat, {s.batch}, "y_hat");
        T* dpv = out_ptr(d_W_pv, "d_W_pv");
        T* dkq = out_ptr(d_W_kq, "d_W_kq");
        py::gil_scoped_release release;
        return multihead_lsa_loss_and_grad(s, H, E.data(), y_q.data(), W_pv.data(), W_kq.data(),
                                           dpv, dkq, yh);
      },
      py::arg("E").noconvert(), py::arg("y_q").noconvert(), py::arg("W_pv").noconvert(),
      py::arg("W_kq").noconvert(), py::arg("d_W_pv").noconvert(), py::arg("d_W_kq").noconvert(),
      py::arg("y_hat").noconvert() = py::none());
  m.def(
      "multihead_lsa_forward",
      [](const CArray<T>& E, const CArray<T>& W_pv, const CArray<T>& W_kq, CArray<T> F) {
        const LsaShape s = prompts_of(E);
        const index_t H = heads_of(s, W_pv, W_kq);
        require_shape(F, {s.batch, s.dim + 1, s.context + 1}, "out");
        T* out = out_ptr(F, "out");
        py::gil_scoped_release release;
        multihead_lsa_forward(s, H, E.data(), W_pv.data(), W_kq.data(), out);
      },
      py::arg("E").noconvert(), py::arg("W_pv").noconvert(), py::arg("W_kq").noconvert(),
      py::arg("out").noconvert());
  // The two VJPs differ only in the upstream: d_F [B, d+1, N+1] (full output) or d_y [B] (ŷ).
  using Vjp = void (*)(const LsaShape&, index_t, const T*, const T*, const T*, const T*, T*, T*,
                       T*, Device);
  auto def_vjp = [&m](const char* name, const char* upstream, bool per_token, Vjp vjp) {
    m.def(
        name,
        [upstream, per_token, vjp](const CArray<T>& E, const CArray<T>& W_pv,
                                   const CArray<T>& W_kq, const CArray<T>& up, CArray<T> d_W_pv,
                                   CArray<T> d_W_kq, std::optional<CArray<T>> d_E) {
          const LsaShape s = prompts_of(E);
          const index_t H = heads_of(s, W_pv, W_kq);
          const std::vector<index_t> prompts = {s.batch, s.dim + 1, s.context + 1};
          require_shape(up, per_token ? prompts : std::vector<index_t>{s.batch}, upstream);
          require_shape(d_W_pv, {H, s.dim + 1, s.dim + 1}, "d_W_pv");
          require_shape(d_W_kq, {H, s.dim + 1, s.dim + 1}, "d_W_kq");
          T* de = optional_out(d_E, prompts, "d_E");
          T* dpv = out_ptr(d_W_pv, "d_W_pv");
          T* dkq = out_ptr(d_W_kq, "d_W_kq");
          py::gil_scoped_release release;
          vjp(s, H, E.data(), W_pv.data(), W_kq.data(), up.data(), dpv, dkq, de, Device::cpu);
        },
        py::arg("E").noconvert(), py::arg("W_pv").noconvert(), py::arg("W_kq").noconvert(),
        py::arg(upstream).noconvert(), py::arg("d_W_pv").noconvert(),
        py::arg("d_W_kq").noconvert(), py::arg("d_E").noconvert() = py::none());
  };
  def_vjp("multihead_lsa_vjp", "d_F", true, &multihead_lsa_vjp<T>);
  def_vjp("multihead_lsa_predict_vjp", "d_y", false, &multihead_lsa_predict_vjp<T>);
}

}  // namespace

void bind_multihead(py::module_& m) {
  bind_typed<float>(m);
  bind_typed<double>(m);
}

}  // namespace lsa_native::bindings
