// Bindings of the batched LSA entry points (lsa.hpp): each operand becomes one array view (numpy,
// __cuda_array_interface__ or __dlpack__: array_view.hpp), the dispatcher (dispatch.cpp)
// validates them once and runs the backend their devices ask for, with the GIL released.
#include <pybind11/pybind11.h>

#include "array_view.hpp"
#include "lsa_native/lsa.hpp"

namespace lsa_native::bindings {
namespace {

// NAME(E, W_pv, W_kq, upstream, with_input_grad, device) → (dW_pv, dW_kq, dE or None) for the
// view entry point `vjp`.
template <class Vjp>
void def_vjp(py::module_& m, const char* name, const char* upstream, Vjp vjp, const char* doc) {
  m.def(
      name,
      [upstream, vjp](const py::object& E, const py::object& W_pv, const py::object& W_kq,
                      const py::object& up, bool with_input_grad, const py::object& device) {
        PyCallSite site;
        const ArrayView e = site.prompts(E, "E"), pv = site.operand(W_pv, "W_pv"),
                        kq = site.operand(W_kq, "W_kq"), u = site.operand(up, upstream);
        ArrayView d_pv = site.output(py::none(), "dW_pv"), d_kq = site.output(py::none(), "dW_kq"),
                  d_e = site.output(py::none(), "dE", with_input_grad);
        vjp(e, pv, kq, u, d_pv, d_kq, d_e, device_choice(device), site);
        return py::make_tuple(site.result(d_pv), site.result(d_kq), site.result(d_e));
      },
      py::arg("E"), py::arg("W_pv"), py::arg("W_kq"), py::arg(upstream),
      py::arg("with_input_grad") = true, py::arg("device") = "auto", doc);
}

// NAME(E, W_pv, W_kq, out=None, device="auto") → out (ŷ [B] or F [B, d+1, N+1]).
template <class Forward>
void def_forward(py::module_& m, const char* name, Forward forward, const char* doc) {
  m.def(
      name,
      [forward](const py::object& E, const py::object& W_pv, const py::object& W_kq,
                const py::object& out, const py::object& device) {
        PyCallSite site;
        const ArrayView e = site.prompts(E, "E"), pv = site.operand(W_pv, "W_pv"),
                        kq = site.operand(W_kq, "W_kq");
        ArrayView o = site.output(out, "out");
        forward(e, pv, kq, o, device_choice(device), site);
        return site.result(o);
      },
      py::arg("E"), py::arg("W_pv"), py::arg("W_kq"), py::arg("out") = py::none(),
      py::arg("device") = "auto", doc);
}

using ForwardEntry = void (*)(const ArrayView&, const ArrayView&, const ArrayView&, ArrayView&,
                              DeviceChoice, CallSite&);
using VjpEntry = void (*)(const ArrayView&, const ArrayView&, const ArrayView&, const ArrayView&,
                          ArrayView&, ArrayView&, ArrayView&, DeviceChoice, CallSite&);

}  // namespace

void bind_lsa(py::module_& m) {
  def_forward(m, "lsa_predict", static_cast<ForwardEntry>(&lsa_predict),
              "ŷ [B] of prompts E [B, d+1, N+1] (lsa.hpp), written into `out` when given.");
  def_forward(m, "lsa_forward", static_cast<ForwardEntry>(&lsa_forward),
              "F [B, d+1, N+1] (lsa.hpp), written into `out` when given.");
  m.def(
      "lsa_loss_and_grad",
      [](const py::object& E, const py::object& y_q, const py::object& W_pv,
         const py::object& W_kq, bool return_predictions, const py::object& device) {
        PyCallSite site;
        const ArrayView e = site.prompts(E, "E"), y = site.operand(y_q, "y_q"),
                        pv = site.operand(W_pv, "W_pv"), kq = site.operand(W_kq, "W_kq");
        ArrayView d_pv = site.output(py::none(), "dW_pv"), d_kq = site.output(py::none(), "dW_kq"),
                  y_hat = site.output(py::none(), "y_hat", return_predictions);
        const double loss =
            lsa_loss_and_grad(e, y, pv, kq, d_pv, d_kq, y_hat, device_choice(device), site);
        if (return_predictions)
          return py::tuple(
              py::make_tuple(loss, site.result(d_pv), site.result(d_kq), site.result(y_hat)));
        return py::tuple(py::make_tuple(loss, site.result(d_pv), site.result(d_kq)));
      },
      py::arg("E"), py::arg("y_q"), py::arg("W_pv"), py::arg("W_kq"),
      py::arg("return_predictions") = false, py::arg("device") = "auto",
      "(loss, dW_pv, dW_kq[, y_hat]) of lsa.hpp's lsa_loss_and_grad.");
  def_vjp(m, "lsa_vjp", "d_F", static_cast<VjpEntry>(&lsa_vjp),
          "(dW_pv, dW_kq, dE) of lsa_forward for the upstream d_F [B, d+1, N+1].");
  def_vjp(m, "lsa_predict_vjp", "d_y", static_cast<VjpEntry>(&lsa_predict_vjp),
          "(dW_pv, dW_kq, dE) of lsa_predict for the upstream d_y [B].");
}

}  // namespace lsa_native::bindings
