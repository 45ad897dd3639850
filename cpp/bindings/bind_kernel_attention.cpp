// Bindings of kernel attention (kernel_attention.hpp): array shapes adapted to the C++ API (which
// validates the shape, pointers and activation codes once), GIL released; the Device::cuda entry
// points take addresses checked by lsa_native._ka_cuda.
#include <pybind11/stl.h>

#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "lsa_native/kernel_attention.hpp"
#include "numpy_views.hpp"

namespace lsa_native::bindings {
namespace {

template <class T>
KernelAttentionShape ka_shape(const CArray<T>& Z0, const CArray<T>& V, const CArray<T>& Bq,
                              const CArray<T>& Ck) {
  if (Z0.ndim() != 3 || Z0.shape(1) < 2 || Z0.shape(2) < 2)
    throw Error("Z0: expected shape [B, d+1, n+1] with d >= 1 and n >= 1, got " + shape_string(Z0));
  if (V.ndim() != 4)
    throw Error("V: expected shape [L, H, d+1, d+1], got " + shape_string(V));
  KernelAttentionShape s{Z0.shape(0), Z0.shape(1) - 1, Z0.shape(2) - 1, V.shape(0), V.shape(1)};
  require_shape(V, {s.layers, s.heads, s.dim + 1, s.dim + 1}, "V");
  require_shape(Bq, {s.layers, s.heads, s.dim, s.dim}, "B");
  require_shape(Ck, {s.layers, s.heads, s.dim, s.dim}, "C");
  return s;
}

// One code per head as Activations; the C++ API checks their range (the activation table).
std::vector<Activation> to_activations(const std::vector<int>& codes, index_t heads) {
  if (static_cast<index_t>(codes.size()) != heads)
    throw Error("activations: expected one per head (" + std::to_string(heads) + "), got " +
                std::to_string(codes.size()));
  std::vector<Activation> a;
  for (int c : codes) a.push_back(static_cast<Activation>(c));
  return a;
}

// y_hat: the predictions output holds ŷ = −TF (Python's predict()) instead of TF.
PredictionOutput prediction_output(bool y_hat) {
  return y_hat ? PredictionOutput::y_hat : PredictionOutput::tf;
}

template <class T>
void bind_dtype(py::module_& m) {
  m.def(
      "kernel_attention_forward",
      [](const CArray<T>& Z0, const CArray<T>& V, const CArray<T>& Bq, const CArray<T>& Ck,
         const std::vector<int>& codes, std::optional<CArray<T>> Z_out,
         std::optional<CArray<T>> predictions, std::optional<CArray<T>> context, bool y_hat) {
        const KernelAttentionShape s = ka_shape(Z0, V, Bq, Ck);
        const auto acts = to_activations(codes, s.heads);
        T* zo = optional_out(Z_out, {s.batch, s.dim + 1, s.context + 1}, "Z_out");
        T* pr = optional_out(predictions, {s.batch, s.layers + 1}, "predictions");
        T* cx = optional_out(context, {s.batch, kernel_attention_context_size<T>(s)}, "context");
        py::gil_scoped_release release;
        kernel_attention_forward(s, Z0.data(), V.data(), Bq.data(), Ck.data(), acts.data(), zo, pr,
                                 cx, prediction_output(y_hat));
      },
      py::arg("Z0").noconvert(), py::arg("V").noconvert(), py::arg("B").noconvert(),
      py::arg("C").noconvert(), py::arg("activations"), py::arg("Z_out").noconvert() = py::none(),
      py::arg("predictions").noconvert() = py::none(),
      py::arg("context").noconvert() = py::none(), py::arg("y_hat") = false);
  m.def(
      "kernel_attention_vjp",
      [](const CArray<T>& Z0, const CArray<T>& V, const CArray<T>& Bq, const CArray<T>& Ck,
         const std::vector<int>& codes, const CArray<T>& d_Z_out, CArray<T> d_V, CArray<T> d_B,
         CArray<T> d_C, std::optional<CArray<T>> d_Z0, std::optional<CArray<T>> context) {
        const KernelAttentionShape s = ka_shape(Z0, V, Bq, Ck);
        const auto acts = to_activations(codes, s.heads);
        require_shape(d_Z_out, {s.batch, s.dim + 1, s.context + 1}, "d_Z_out");
        require_shape(d_V, {s.layers, s.heads, s.dim + 1, s.dim + 1}, "d_V");
        require_shape(d_B, {s.layers, s.heads, s.dim, s.dim}, "d_B");
        require_shape(d_C, {s.layers, s.heads, s.dim, s.dim}, "d_C");
        T* dz = optional_out(d_Z0, {s.batch, s.dim + 1, s.context + 1}, "d_Z0");
        const T* cx = nullptr;
        if (context) {
          require_shape(*context, {s.batch, kernel_attention_context_size<T>(s)}, "context");
          cx = context->data();
        }
        T* dv = out_ptr(d_V, "d_V");
        T* db = out_ptr(d_B, "d_B");
        T* dc = out_ptr(d_C, "d_C");
        py::gil_scoped_release release;
        kernel_attention_vjp(s, Z0.data(), V.data(), Bq.data(), Ck.data(), acts.data(),
                             d_Z_out.data(), dv, db, dc, dz, cx);
      },
      py::arg("Z0").noconvert(), py::arg("V").noconvert(), py::arg("B").noconvert(),
      py::arg("C").noconvert(), py::arg("activations"), py::arg("d_Z_out").noconvert(),
      py::arg("d_V").noconvert(), py::arg("d_B").noconvert(), py::arg("d_C").noconvert(),
      py::arg("d_Z0").noconvert() = py::none(), py::arg("context").noconvert() = py::none());
  m.def(
      "kernel_attention_loss_and_grad",
      [](const CArray<T>& Z0, const CArray<T>& y_q, const CArray<T>& V, const CArray<T>& Bq,
         const CArray<T>& Ck, const std::vector<int>& codes, CArray<T> d_V, CArray<T> d_B,
         CArray<T> d_C, std::optional<CArray<T>> d_Z0, std::optional<CArray<T>> predictions) {
        const KernelAttentionShape s = ka_shape(Z0, V, Bq, Ck);
        const auto acts = to_activations(codes, s.heads);
        require_shape(y_q, {s.batch}, "y_q");
        require_shape(d_V, {s.layers, s.heads, s.dim + 1, s.dim + 1}, "d_V");
        require_shape(d_B, {s.layers, s.heads, s.dim, s.dim}, "d_B");
        require_shape(d_C, {s.layers, s.heads, s.dim, s.dim}, "d_C");
        T* dz = optional_out(d_Z0, {s.batch, s.dim + 1, s.context + 1}, "d_Z0");
        T* pr = optional_out(predictions, {s.batch, s.layers + 1}, "predictions");
        T* dv = out_ptr(d_V, "d_V");
        T* db = out_ptr(d_B, "d_B");
        T* dc = out_ptr(d_C, "d_C");
        py::gil_scoped_release release;
        return kernel_attention_loss_and_grad(s, Z0.data(), y_q.data(), V.data(), Bq.data(),
                                              Ck.data(), acts.data(), dv, db, dc, dz, pr);
      },
      py::arg("Z0").noconvert(), py::arg("y_q").noconvert(), py::arg("V").noconvert(),
      py::arg("B").noconvert(), py::arg("C").noconvert(), py::arg("activations"),
      py::arg("d_V").noconvert(), py::arg("d_B").noconvert(), py::arg("d_C").noconvert(),
      py::arg("d_Z0").noconvert() = py::none(), py::arg("predictions").noconvert() = py::none());
}

void bind_cuda_entry_points(py::module_& m) {
  m.def(
      "kernel_attention_forward_cuda",
      [](const std::string& dtype, const KernelAttentionShape& s, Address Z0, Address V, Address Bq,
         Address Ck, const std::vector<int>& codes, Address Z_out, Address predictions, Address context,
         bool y_hat) {
        const auto acts = to_activations(codes, s.heads);
        with_dtype(dtype, [&](auto t) {
          using T = decltype(t);
          py::gil_scoped_release release;
          kernel_attention_forward(s, in_addr<T>(Z0), in_addr<T>(V), in_addr<T>(Bq), in_addr<T>(Ck),
                                   acts.data(), out_addr<T>(Z_out), out_addr<T>(predictions),
                                   out_addr<T>(context), prediction_output(y_hat), Device::cuda);
        });
      },
      py::arg("dtype"), py::arg("shape"), py::arg("Z0"), py::arg("V"), py::arg("B"), py::arg("C"),
      py::arg("activations"), py::arg("Z_out"), py::arg("predictions"), py::arg("context"),
      py::arg("y_hat") = false);
  m.def(
      "kernel_attention_vjp_cuda",
      [](const std::string& dtype, const KernelAttentionShape& s, Address Z0, Address V, Address Bq,
         Address Ck, const std::vector<int>& codes, Address d_Z_out, Address d_V, Address d_B, Address d_C,
         Address d_Z0, Address context) {
        const auto acts = to_activations(codes, s.heads);
        with_dtype(dtype, [&](auto t) {
          using T = decltype(t);
          py::gil_scoped_release release;
          kernel_attention_vjp(s, in_addr<T>(Z0), in_addr<T>(V), in_addr<T>(Bq), in_addr<T>(Ck),
                               acts.data(), in_addr<T>(d_Z_out), out_addr<T>(d_V), out_addr<T>(d_B),
                               out_addr<T>(d_C), out_addr<T>(d_Z0), in_addr<T>(context),
                               Device::cuda);
        });
      },
      py::arg("dtype"), py::arg("shape"), py::arg("Z0"), py::arg("V"), py::arg("B"), py::arg("C"),
      py::arg("activations"), py::arg("d_Z_out"), py::arg("d_V"), py::arg("d_B"), py::arg("d_C"),
      py::arg("d_Z0"), py::arg("context"));
  m.def(
      "kernel_attention_loss_and_grad_cuda",
      [](const std::string& dtype, const KernelAttentionShape& s, Address Z0, Address y_q, Address V,
         Address Bq, Address Ck, const std::vector<int>& codes, Address d_V, Address d_B, Address d_C, Address d_Z0,
         Address predictions) {
        const auto acts = to_activations(codes, s.heads);
        return with_dtype(dtype, [&](auto t) {
          using T = decltype(t);
          py::gil_scoped_release release;
          return kernel_attention_loss_and_grad(s, in_addr<T>(Z0), in_addr<T>(y_q), in_addr<T>(V),
                                                in_addr<T>(Bq), in_addr<T>(Ck), acts.data(),
                                                out_addr<T>(d_V), out_addr<T>(d_B), out_addr<T>(d_C),
                                                out_addr<T>(d_Z0), out_addr<T>(predictions),
                                                Device::cuda);
        });
      },
      py::arg("dtype"), py::arg("shape"), py::arg("Z0"), py::arg("y_q"), py::arg("V"), py::arg("B"),
      py::arg("C"), py::arg("activations"), py::arg("d_V"), py::arg("d_B"), py::arg("d_C"),
      py::arg("d_Z0"), py::arg("predictions"));
}

}  // namespace

void bind_kernel_attention(py::module_& m) {
  // (B, d, n, L, H), as the CUDA entry points take it.
  py::class_<KernelAttentionShape>(m, "KernelAttentionShape")
      .def(py::init([](index_t B, index_t d, index_t n, index_t L, index_t H) {
             return KernelAttentionShape{B, d, n, L, H};
           }),
           py::arg("batch"), py::arg("dim"), py::arg("context"), py::arg("layers"), py::arg("heads"))
      .def_readonly("batch", &KernelAttentionShape::batch)
      .def_readonly("dim", &KernelAttentionShape::dim)
      .def_readonly("context", &KernelAttentionShape::context)
      .def_readonly("layers", &KernelAttentionShape::layers)
      .def_readonly("heads", &KernelAttentionShape::heads);
  bind_cuda_entry_points(m);
  // The activation table (kernel_attention.hpp): names in code order.
  m.attr("ACTIVATION_NAMES") = py::tuple(py::cast(std::vector<std::string>(
      std::begin(activation_names), std::end(activation_names))));
  m.def(
      "kernel_attention_context_size",
      [](index_t dim, index_t context, index_t layers, index_t heads, bool float64) {
        const KernelAttentionShape s{1, dim, context, layers, heads};
        return float64 ? kernel_attention_context_size<double>(s)
                       : kernel_attention_context_size<float>(s);
      },
      py::arg("dim"), py::arg("context"), py::arg("layers"), py::arg("heads"), py::arg("float64"),
      "Values per prompt of the saved forward context (see kernel_attention.hpp).");
  bind_dtype<float>(m);
  bind_dtype<double>(m);
}

}  // namespace lsa_native::bindings
