// Bindings of kernel attention (kernel_attention.hpp): each operand becomes one array view
// (array_view.hpp), the activations one ActivationChoice; the dispatcher
// (kernel_attention_dispatch.cpp) validates them once and runs the backend the views ask for.
#include <pybind11/stl.h>

#include <algorithm>
#include <iterator>
#include <utility>
#include <string>
#include <vector>

#include "lsa_native/kernel_attention.hpp"
#include "array_view.hpp"

namespace lsa_native::bindings {
namespace {

// The activation names of the table, sorted, as Python prints a list: "['exp', 'linear', ...]".
std::string sorted_names() {
  std::vector<std::string> names(std::begin(activation_names), std::end(activation_names));
  std::sort(names.begin(), names.end());
  std::string s = "[";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", '" : "'") + names[i] + "'";
  return s + "]";
}

// One activation of a list: a name of the table (or its code, range-checked by the dispatcher).
Activation activation_of(const py::handle& a, const char* name) {
  if (py::isinstance<py::str>(a)) {
    const auto s = a.cast<std::string>();
    for (int code = 0; code < kActivationCount; ++code)
      if (s == activation_names[code]) return static_cast<Activation>(code);
  } else if (py::isinstance<py::int_>(a) && !py::isinstance<py::bool_>(a)) {
    return static_cast<Activation>(a.cast<int>());
  }
  throw Error(std::string(name) + ": unknown name " + std::string(py::repr(a)) +
              "; expected one of " + sorted_names());
}

// `activation` as the caller gave it: one name for every head, or a list of names (one per head).
ActivationChoice activation_choice(const py::handle& activation, const char* name) {
  ActivationChoice choice;
  choice.name = name;
  if (py::isinstance<py::str>(activation)) {
    choice.activations = {activation_of(activation, name)};
    choice.shared = true;
  } else if (py::isinstance<py::list>(activation) || py::isinstance<py::tuple>(activation)) {
    for (auto a : activation) choice.activations.push_back(activation_of(a, name));
  } else {
    throw ArgumentTypeError(std::string(name) +
                            ": expected a name or a list of names (one per head) from " +
                            sorted_names() + ", got " +
                            std::string(py::str(py::type::handle_of(activation).attr("__name__"))));
  }
  return choice;
}

// y_hat: the predictions output holds ŷ = −TF (Python's predict()) instead of TF; every_layer:
// for ℓ = 0..L [B, L+1], else ŷ_L alone [B] (with y_hat only).
PredictionOutput prediction_output(bool y_hat, bool every_layer) {
  if (!every_layer) {
    if (!y_hat) throw Error("every_layer: False needs y_hat=True (the final TF_L is -y_hat)");
    return PredictionOutput::y_hat_final;
  }
  return y_hat ? PredictionOutput::y_hat : PredictionOutput::tf;
}

// (B, d, n, L, H) of a validated call, the shape a ForwardContext records.
py::tuple call_shape(const ArrayView& Z0, const ArrayView& V) {
  return py::make_tuple(Z0.shape[0], Z0.shape[1] - 1, Z0.shape[2] - 1, V.shape[0], V.shape[1]);
}

// A ForwardContext (an object with .data and .shape) as the context view and its recorded shape.
std::pair<ArrayView, std::vector<index_t>> context_of(PyCallSite& site, const py::object& context) {
  if (context.is_none()) return {site.operand(context, "context"), {}};
  py::object data = py::getattr(context, "data", py::none());
  py::object recorded = py::getattr(context, "shape", py::none());
  if (data.is_none() || !py::isinstance<py::tuple>(recorded) || py::len(recorded) != 5)
    throw Error("context: expected the ForwardContext of forward(..., return_context=True), got " +
                std::string(py::str(py::type::handle_of(context).attr("__name__"))));
  std::vector<index_t> shape;
  for (auto e : recorded) shape.push_back(py::isinstance<py::int_>(e) ? e.cast<index_t>() : -1);
  return {site.operand(data, "context"), shape};
}

}  // namespace

void bind_kernel_attention(py::module_& m) {
  // The activation table (kernel_attention.hpp): names in code order.
  m.attr("ACTIVATION_NAMES") = py::tuple(py::cast(std::vector<std::string>(
      std::begin(activation_names), std::end(activation_names))));
  m.def(
      "activation_codes",
      [](const py::object& activation, index_t heads, const std::string& name) {
        std::vector<int> codes;
        for (Activation a : activations_per_head(activation_choice(activation, name.c_str()), heads))
          codes.push_back(static_cast<int>(a));
        return codes;
      },
      py::arg("activation"), py::arg("heads"), py::arg("name") = "activation",
      "One code per head of `activation` (a name, or a list of one name per head), checked.");
  m.def(
      "kernel_attention_context_size",
      [](index_t dim, index_t context, index_t layers, index_t heads, bool float64) {
        const KernelAttentionShape s{1, dim, context, layers, heads};
        return float64 ? kernel_attention_context_size<double>(s)
                       : kernel_attention_context_size<float>(s);
      },
      py::arg("dim"), py::arg("context"), py::arg("layers"), py::arg("heads"), py::arg("float64"),
      "Values per prompt of the saved forward context (see kernel_attention.hpp).");
  m.def(
      "kernel_attention_forward",
      [](const py::object& Z0, const py::object& V, const py::object& Bq, const py::object& Ck,
         const py::object& activation, bool z_out, bool predictions, bool context, bool y_hat,
         bool every_layer, const py::object& device, const py::object& predictions_out) {
        PyCallSite site;
        const ArrayView z = site.prompts(Z0, "Z0"), v = site.operand(V, "V"),
                        b = site.operand(Bq, "B"), c = site.operand(Ck, "C");
        const ActivationChoice acts = activation_choice(activation, "activation");
        ArrayView zo = site.output(py::none(), "Z_L", z_out),
                  pr = site.output(predictions_out,
                                   predictions_out.is_none() ? "predictions" : "out", predictions),
                  cx = site.output(py::none(), "context", context);
        kernel_attention_forward(z, v, b, c, acts, zo, pr, cx, prediction_output(y_hat, every_layer),
                                 device_choice(device), site);
        return py::make_tuple(site.result(zo), site.result(pr), site.result(cx),
                              context ? py::object(call_shape(z, v)) : py::none());
      },
      py::arg("Z0"), py::arg("V"), py::arg("B"), py::arg("C"), py::arg("activation"),
      py::kw_only(), py::arg("z_out") = true, py::arg("predictions") = false,
      py::arg("context") = false, py::arg("y_hat") = false, py::arg("every_layer") = true,
      py::arg("device") = "auto", py::arg("predictions_out") = py::none(),
      "(Z_L, predictions, context data, context shape (B, d, n, L, H)), None where not asked; "
      "predictions [B, L+1] of TF (of ŷ = −TF with y_hat), or [B] of ŷ_L with every_layer=False, "
      "written into predictions_out (named 'out' in errors) when given.");
  m.def(
      "kernel_attention_vjp",
      [](const py::object& Z0, const py::object& V, const py::object& Bq, const py::object& Ck,
         const py::object& activation, const py::object& d_Z_out, const py::object& context,
         bool input_grad, const py::object& device) {
        PyCallSite site;
        const ArrayView z = site.prompts(Z0, "Z0"), v = site.operand(V, "V"),
                        b = site.operand(Bq, "B"), c = site.operand(Ck, "C"),
                        dz = site.operand(d_Z_out, "d_Z_out");
        const ActivationChoice acts = activation_choice(activation, "activation");
        const auto [cx, cx_shape] = context_of(site, context);
        ArrayView dv = site.output(py::none(), "d_V"), db = site.output(py::none(), "d_B"),
                  dc = site.output(py::none(), "d_C"),
                  dz0 = site.output(py::none(), "d_Z0", input_grad);
        kernel_attention_vjp(z, v, b, c, acts, dz, dv, db, dc, dz0, cx, cx_shape,
                             device_choice(device), site);
        return py::make_tuple(site.result(dv), site.result(db), site.result(dc), site.result(dz0));
      },
      py::arg("Z0"), py::arg("V"), py::arg("B"), py::arg("C"), py::arg("activation"),
      py::arg("d_Z_out"), py::kw_only(), py::arg("context") = py::none(),
      py::arg("input_grad") = true, py::arg("device") = "auto",
      "(dV, dB, dC, dZ0 or None) of kernel_attention_forward's Z_L for the upstream d_Z_out.");
  m.def(
      "kernel_attention_predict_vjp",
      [](const py::object& Z0, const py::object& V, const py::object& Bq, const py::object& Ck,
         const py::object& activation, const py::object& d_y, bool input_grad,
         const py::object& device) {
        PyCallSite site;
        const ArrayView z = site.prompts(Z0, "Z0"), v = site.operand(V, "V"),
                        b = site.operand(Bq, "B"), c = site.operand(Ck, "C"),
                        dy = site.operand(d_y, "d_y");
        const ActivationChoice acts = activation_choice(activation, "activation");
        ArrayView dv = site.output(py::none(), "d_V"), db = site.output(py::none(), "d_B"),
                  dc = site.output(py::none(), "d_C"),
                  dz0 = site.output(py::none(), "d_Z0", input_grad);
        kernel_attention_predict_vjp(z, v, b, c, acts, dy, dv, db, dc, dz0, device_choice(device),
                                     site);
        return py::make_tuple(site.result(dv), site.result(db), site.result(dc), site.result(dz0));
      },
      py::arg("Z0"), py::arg("V"), py::arg("B"), py::arg("C"), py::arg("activation"),
      py::arg("d_y"), py::kw_only(), py::arg("input_grad") = true, py::arg("device") = "auto",
      "(dV, dB, dC, dZ0 or None) of the predictions ŷ_L = −Z_L[:, d, n] for the upstream d_y [B].");
  m.def(
      "kernel_attention_loss_and_grad",
      [](const py::object& Z0, const py::object& y_q, const py::object& V, const py::object& Bq,
         const py::object& Ck, const py::object& activation, bool input_grad,
         bool return_predictions, const py::object& device, const py::object& grads,
         const py::object& loss_out) {
        PyCallSite site;
        const ArrayView z = site.prompts(Z0, "Z0"), y = site.operand(y_q, "y_q"),
                        v = site.operand(V, "V"), b = site.operand(Bq, "B"),
                        c = site.operand(Ck, "C");
        const ActivationChoice acts = activation_choice(activation, "activation");
        const auto outs = output_tuple(grads, "out", {"d_V", "d_B", "d_C"});
        ArrayView dv = site.output(outs[0], "d_V"), db = site.output(outs[1], "d_B"),
                  dc = site.output(outs[2], "d_C"),
                  dz0 = site.output(py::none(), "d_Z0", input_grad),
                  pr = site.output(py::none(), "predictions", return_predictions),
                  l = site.output(loss_out, "loss", false);
        const double loss = kernel_attention_loss_and_grad(z, y, v, b, c, acts, dv, db, dc, dz0, pr,
                                                           l, device_choice(device), site);
        py::list out;
        out.append(l.present ? site.result(l) : py::object(py::float_(loss)));
        for (const ArrayView* g : {&dv, &db, &dc}) out.append(site.result(*g));
        if (input_grad) out.append(site.result(dz0));
        if (return_predictions) out.append(site.result(pr));
        return py::tuple(out);
      },
      py::arg("Z0"), py::arg("y_q"), py::arg("V"), py::arg("B"), py::arg("C"),
      py::arg("activation"), py::kw_only(), py::arg("input_grad") = false,
      py::arg("return_predictions") = false, py::arg("device") = "auto",
      py::arg("out") = py::none(), py::arg("loss") = py::none(),
      "(loss, dV, dB, dC[, dZ0][, TF_l for every layer]) of kernel_attention_loss_and_grad; "
      "out=(d_V, d_B, d_C) written in place; loss= a float64 [1] array on Z0's side receiving "
      "the loss (returned in its place: on the GPU nothing waits).");
}

}  // namespace lsa_native::bindings
