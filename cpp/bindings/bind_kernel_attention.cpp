// Bindings of kernel attention (kernel_attention.hpp): shape checks, GIL released.
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
                              const CArray<T>& Ck, const std::vector<int>& acts) {
  if (Z0.ndim() != 3 || Z0.shape(1) < 2 || Z0.shape(2) < 2)
    throw Error("Z0: expected shape [B, d+1, n+1] with d >= 1 and n >= 1, got " + shape_string(Z0));
  if (V.ndim() != 4)
    throw Error("V: expected shape [L, H, d+1, d+1], got " + shape_string(V));
  KernelAttentionShape s{Z0.shape(0), Z0.shape(1) - 1, Z0.shape(2) - 1, V.shape(0), V.shape(1)};
  validate(s);
  require_shape(V, {s.layers, s.heads, s.dim + 1, s.dim + 1}, "V");
  require_shape(Bq, {s.layers, s.heads, s.dim, s.dim}, "B");
  require_shape(Ck, {s.layers, s.heads, s.dim, s.dim}, "C");
  if (static_cast<index_t>(acts.size()) != s.heads)
    throw Error("activations: expected one per head (" + std::to_string(s.heads) + "), got " +
                std::to_string(acts.size()));
  return s;
}

std::vector<Activation> to_activations(const std::vector<int>& codes) {
  std::vector<Activation> a;
  for (int c : codes) a.push_back(activation_from_code(c));
  return a;
}

template <class T>
void bind_dtype(py::module_& m) {
  m.def(
      "kernel_attention_forward",
      [](const CArray<T>& Z0, const CArray<T>& V, const CArray<T>& Bq, const CArray<T>& Ck,
         const std::vector<int>& codes, std::optional<CArray<T>> Z_out,
         std::optional<CArray<T>> predictions, std::optional<CArray<T>> context) {
        const KernelAttentionShape s = ka_shape(Z0, V, Bq, Ck, codes);
        const auto acts = to_activations(codes);
        T* zo = optional_out(Z_out, {s.batch, s.dim + 1, s.context + 1}, "Z_out");
        T* pr = optional_out(predictions, {s.batch, s.layers + 1}, "predictions");
        T* cx = optional_out(context, {s.batch, kernel_attention_context_size<T>(s)}, "context");
        py::gil_scoped_release release;
        kernel_attention_forward(s, Z0.data(), V.data(), Bq.data(), Ck.data(), acts.data(), zo, pr,
                                 cx);
      },
      py::arg("Z0").noconvert(), py::arg("V").noconvert(), py::arg("B").noconvert(),
      py::arg("C").noconvert(), py::arg("activations"), py::arg("Z_out").noconvert() = py::none(),
      py::arg("predictions").noconvert() = py::none(),
      py::arg("context").noconvert() = py::none());
  m.def(
      "kernel_attention_vjp",
      [](const CArray<T>& Z0, const CArray<T>& V, const CArray<T>& Bq, const CArray<T>& Ck,
         const std::vector<int>& codes, const CArray<T>& d_Z_out, CArray<T> d_V, CArray<T> d_B,
         CArray<T> d_C, std::optional<CArray<T>> d_Z0, std::optional<CArray<T>> context) {
        const KernelAttentionShape s = ka_shape(Z0, V, Bq, Ck, codes);
        const auto acts = to_activations(codes);
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
        const KernelAttentionShape s = ka_shape(Z0, V, Bq, Ck, codes);
        const auto acts = to_activations(codes);
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

}  // namespace

void bind_kernel_attention(py::module_& m) {
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
