// The Python signatures of the LSA-shaped view entry points (E, W_pv, W_kq, ...: LSA, lsa.hpp, and
// the multi-head model, multihead.hpp): each operand becomes one array view (array_view.hpp), the
// entry point's validate() checks them and runs the backend their devices ask for, with the GIL
// released (PyCallSite).
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <type_traits>
#include <utility>

#include "array_view.hpp"

namespace lsa_native::bindings {

using ForwardEntry = void (*)(const ArrayView&, const ArrayView&, const ArrayView&, ArrayView&,
                              DeviceChoice, CallSite&);
using LossEntry = double (*)(const ArrayView&, const ArrayView&, const ArrayView&,
                             const ArrayView&, ArrayView&, ArrayView&, ArrayView&, DeviceChoice,
                             CallSite&);
// LossEntry with the caller's loss output (float64 [1]; written there: on the GPU nothing waits).
using LossIntoEntry = double (*)(const ArrayView&, const ArrayView&, const ArrayView&,
                                 const ArrayView&, ArrayView&, ArrayView&, ArrayView&, ArrayView&,
                                 DeviceChoice, CallSite&);
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

// NAME(E, y_q, W_pv, W_kq, return_predictions=False, device="auto", *, out=None, loss=None) →
// (loss, dW_pv, dW_kq[, y_hat]): `out` = (dW_pv, dW_kq) written in place; with a LossIntoEntry,
// `loss` (float64 [1] on E's side) receives the loss, which is then the first result (the caller's
// array: on the GPU the call waits for nothing).
template <class Entry>
void def_loss_and_grad(py::module_& m, const char* name, Entry loss_and_grad, const char* doc) {
  m.def(
      name,
      [loss_and_grad, name](const py::object& E, const py::object& y_q, const py::object& W_pv,
                            const py::object& W_kq, bool return_predictions,
                            const py::object& device, const py::object& out,
                            const py::object& loss_out) {
        PyCallSite site;
        const ArrayView e = site.prompts(E, "E"), y = site.operand(y_q, "y_q"),
                        pv = site.operand(W_pv, "W_pv"), kq = site.operand(W_kq, "W_kq");
        const auto [out_pv, out_kq] = output_pair(out, "out", "dW_pv", "dW_kq");
        ArrayView d_pv = site.output(out_pv, "dW_pv"), d_kq = site.output(out_kq, "dW_kq"),
                  y_hat = site.output(py::none(), "y_hat", return_predictions);
        py::object loss;
        if constexpr (std::is_same_v<Entry, LossIntoEntry>) {
          ArrayView l = site.output(loss_out, "loss", false);
          const double value = loss_and_grad(e, y, pv, kq, d_pv, d_kq, y_hat, l,
                                             device_choice(device), site);
          loss = l.present ? site.result(l) : py::object(py::float_(value));
        } else {
          if (!loss_out.is_none())
            throw Error(std::string("loss: ") + name + " returns its loss (no loss= output)");
          loss = py::float_(loss_and_grad(e, y, pv, kq, d_pv, d_kq, y_hat, device_choice(device), site));
        }
        if (return_predictions)
          return py::tuple(
              py::make_tuple(loss, site.result(d_pv), site.result(d_kq), site.result(y_hat)));
        return py::tuple(py::make_tuple(loss, site.result(d_pv), site.result(d_kq)));
      },
      py::arg("E"), py::arg("y_q"), py::arg("W_pv"), py::arg("W_kq"),
      py::arg("return_predictions") = false, py::arg("device") = "auto", py::kw_only(),
      py::arg("out") = py::none(), py::arg("loss") = py::none(), doc);
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
