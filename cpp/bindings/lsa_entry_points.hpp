// The Python signatures of the LSA-shaped view entry points (E, W_pv, W_kq, ...: LSA, lsa.hpp, and
// the multi-head model, multihead.hpp): each operand becomes one array view (array_view.hpp), the
// entry point's validate() checks them and runs the backend their devices ask for, with the GIL
// released (PyCallSite).
#pragma once

#include <pybind11/pybind11.h>

#include "array_view.hpp"

namespace lsa_native::bindings {

using ForwardEntry = void (*)(const ArrayView&, const ArrayView&, const ArrayView&, ArrayView&,
                              DeviceChoice, CallSite&);
using LossEntry = double (*)(const ArrayView&, const ArrayView&, const ArrayView&,
                             const ArrayView&, ArrayView&, ArrayView&, ArrayView&, DeviceChoice,
                             CallSite&);
using VjpEntry = void (*)(const ArrayView&, const ArrayView&, const ArrayView&, const ArrayView&,
                          ArrayView&, ArrayView&, ArrayView&, DeviceChoice, CallSite&);

// NAME(E, W_pv, W_kq, out=None, device="auto") → out (ŷ [B] or F [B, d+1, N+1]).
inline void def_forward(py::module_& m, const char* name, ForwardEntry forward, const char* doc) {
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

// NAME(E, y_q, W_pv, W_kq, return_predictions=False, device="auto") → (loss, dW_pv, dW_kq[, y_hat]).
inline void def_loss_and_grad(py::module_& m, const char* name, LossEntry loss_and_grad,
                              const char* doc) {
  m.def(
      name,
      [loss_and_grad](const py::object& E, const py::object& y_q, const py::object& W_pv,
                      const py::object& W_kq, bool return_predictions, const py::object& device) {
        PyCallSite site;
        const ArrayView e = site.prompts(E, "E"), y = site.operand(y_q, "y_q"),
                        pv = site.operand(W_pv, "W_pv"), kq = site.operand(W_kq, "W_kq");
        ArrayView d_pv = site.output(py::none(), "dW_pv"), d_kq = site.output(py::none(), "dW_kq"),
                  y_hat = site.output(py::none(), "y_hat", return_predictions);
        const double loss =
            loss_and_grad(e, y, pv, kq, d_pv, d_kq, y_hat, device_choice(device), site);
        if (return_predictions)
          return py::tuple(
              py::make_tuple(loss, site.result(d_pv), site.result(d_kq), site.result(y_hat)));
        return py::tuple(py::make_tuple(loss, site.result(d_pv), site.result(d_kq)));
      },
      py::arg("E"), py::arg("y_q"), py::arg("W_pv"), py::arg("W_kq"),
      py::arg("return_predictions") = false, py::arg("device") = "auto", doc);
}

// NAME(E, W_pv, W_kq, upstream, with_input_grad=True, device="auto") → (dW_pv, dW_kq, dE or None).
inline void def_vjp(py::module_& m, const char* name, const char* upstream, VjpEntry vjp,
                    const char* doc) {
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

}  // namespace lsa_native::bindings
