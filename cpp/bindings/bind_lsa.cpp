// Bindings of the batched LSA kernels (lsa.hpp): shape checks, GIL released around native calls.
#include "lsa_native/lsa.hpp"
#include "numpy_views.hpp"

#include <pybind11/stl.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace lsa_native::bindings {
namespace {

// (B, d, N) of prompts E with `dims` [B, d+1, N+1]: numpy arrays here, CUDA arrays in
// lsa_native._lsa_cuda (exposed as lsa_shape). The extents are checked by validate() (dispatch.cpp).
LsaShape prompt_shape(const std::vector<index_t>& dims) {
  if (dims.size() != 3) {
    std::string got = "(";
    for (size_t i = 0; i < dims.size(); ++i) got += (i ? ", " : "") + std::to_string(dims[i]);
    throw Error("E: expected a 3-d array [B, d+1, N+1], got shape " + got +
                (dims.size() == 1 ? ",)" : ")"));
  }
  LsaShape s{dims[0], dims[1] - 1, dims[2] - 1};
  validate(s);
  return s;
}

template <class T>
LsaShape prompt_shape(const CArray<T>& E) {
  return prompt_shape(std::vector<index_t>(E.shape(), E.shape() + E.ndim()));
}

template <class T>
void require_params(const LsaShape& s, const CArray<T>& W_pv, const CArray<T>& W_kq) {
  require_shape(W_pv, {s.dim + 1, s.dim + 1}, "W_pv");
  require_shape(W_kq, {s.dim + 1, s.dim + 1}, "W_kq");
}

// NAME(E, W_pv, W_kq, upstream, d_W_pv, d_W_kq, d_E=None) for a VJP entry point `vjp`: upstream
// [B, d+1, N+1] when per_token, else [B]; d_E written when given.
template <class T>
void def_vjp(py::module_& m, const char* name, const char* upstream, bool per_token,
             void (*vjp)(const LsaShape&, const T*, const T*, const T*, const T*, T*, T*, T*, Device)) {
  m.def(
      name,
      [upstream, per_token, vjp](const CArray<T>& E, const CArray<T>& W_pv, const CArray<T>& W_kq,
                                 const CArray<T>& up, CArray<T> d_W_pv, CArray<T> d_W_kq,
                                 std::optional<CArray<T>> d_E) {
        const LsaShape s = prompt_shape(E);
        require_params(s, W_pv, W_kq);
        const std::vector<index_t> prompts = {s.batch, s.dim + 1, s.context + 1};
        require_shape(up, per_token ? prompts : std::vector<index_t>{s.batch}, upstream);
        require_shape(d_W_pv, {s.dim + 1, s.dim + 1}, "d_W_pv");
        require_shape(d_W_kq, {s.dim + 1, s.dim + 1}, "d_W_kq");
        T* de = optional_out(d_E, prompts, "d_E");
        T* dpv = out_ptr(d_W_pv, "d_W_pv");
        T* dkq = out_ptr(d_W_kq, "d_W_kq");
        py::gil_scoped_release release;
        vjp(s, E.data(), W_pv.data(), W_kq.data(), up.data(), dpv, dkq, de, Device::cpu);
      },
      py::arg("E").noconvert(), py::arg("W_pv").noconvert(), py::arg("W_kq").noconvert(),
      py::arg(upstream).noconvert(), py::arg("d_W_pv").noconvert(),
      py::arg("d_W_kq").noconvert(), py::arg("d_E").noconvert() = py::none());
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
  // The two VJPs differ only in the upstream: d_F [B, d+1, N+1] (full output) or d_y [B] (ŷ).
  def_vjp<T>(m, "lsa_vjp", "d_F", /*per_token=*/true, &lsa_vjp<T>);
  def_vjp<T>(m, "lsa_predict_vjp", "d_y", /*per_token=*/false, &lsa_predict_vjp<T>);
}

// ---- Device::cuda entry points on raw addresses: NAME_cuda(dtype, shape, addresses...) ----
// Generated from the list of entry points (LSA_NATIVE_LSA_API): one
// address per pointer parameter, in the order and with the names of the C++ signature. The Python
// layer (lsa_native._lsa_cuda) checks shapes, dtypes and layouts of CUDA arrays
// (__cuda_array_interface__ / __dlpack__) and of host arrays and passes their addresses here; the
// C++ dispatcher validates the shape, and the CUDA backend uses device memory in place and copies
// host memory in and out. Address 0 = argument absent.

// P with float replaced by T: const float* -> const T*, float* -> T*; other types unchanged.
template <class P, class T>
struct WithScalar {
  using type = P;
};
template <class T>
struct WithScalar<const float*, T> {
  using type = const T*;
};
template <class T>
struct WithScalar<float*, T> {
  using type = T*;
};
template <std::size_t>
using Addr = std::uintptr_t;

// Parameter names of a parenthesized C++ parameter list "(const T* E, T* y_hat)": the last
// identifier of each comma-separated entry. Kept alive for py::arg (which stores the pointer).
const std::vector<std::string>& parameter_names(const char* params) {
  static std::deque<std::vector<std::string>> keep;
  std::vector<std::string> names;
  std::string item;
  auto flush = [&] {
    const auto end = item.find_last_not_of(" )");
    const auto begin = item.find_last_of(" *&(", end);
    names.push_back(item.substr(begin + 1, end - begin));
    item.clear();
  };
  for (const char* c = params; *c; ++c) (*c == ',' ? flush() : void(item += *c));
  flush();
  return keep.emplace_back(std::move(names));
}

// NAME_cuda for the entry point with float instantiation f32 and double instantiation f64:
// A = (const LsaShape&, pointers..., Device); addresses a[I] are cast to the I-th pointer type.
template <class R, class... A, std::size_t... I>
void def_cuda_entry(py::module_& m, const std::string& name, const char* params, R (*f32)(A...),
                    R (*f64)(typename WithScalar<A, double>::type...), std::index_sequence<I...>) {
  using Params = std::tuple<A...>;
  static_assert(sizeof...(I) + 2 == sizeof...(A), "A = (shape, pointers..., Device)");
  const std::vector<std::string>& names = parameter_names(params);  // shape, pointers...
  m.def(
      (name + "_cuda").c_str(),
      [f32, f64](const std::string& dtype, const LsaShape& s, Addr<I>... a) -> R {
        if (dtype == "float32") {
          py::gil_scoped_release release;
          return f32(s, reinterpret_cast<std::tuple_element_t<I + 1, Params>>(a)..., Device::cuda);
        }
        if (dtype == "float64") {
          py::gil_scoped_release release;
          return f64(s,
                     reinterpret_cast<typename WithScalar<std::tuple_element_t<I + 1, Params>,
                                                          double>::type>(a)...,
                     Device::cuda);
        }
        throw Error("dtype: expected 'float32' or 'float64', got '" + dtype + "'");
      },
      py::arg("dtype"), py::arg("shape"), py::arg(names[I + 1].c_str())...);
}

template <class R, class... A>
void def_cuda_entry(py::module_& m, const std::string& name, const char* params, R (*f32)(A...),
                    R (*f64)(typename WithScalar<A, double>::type...)) {
  def_cuda_entry(m, name, params, f32, f64, std::make_index_sequence<sizeof...(A) - 2>{});
}

void bind_cuda_entry_points(py::module_& m) {
#define LSA_NATIVE_BIND_CUDA(R, name, params) \
  def_cuda_entry<R>(m, #name, #params, &name<float>, &name<double>);
  LSA_NATIVE_LSA_API(LSA_NATIVE_BIND_CUDA, T)
#undef LSA_NATIVE_BIND_CUDA
}

}  // namespace

void bind_lsa(py::module_& m) {
  bind_dtype<float>(m);
  bind_dtype<double>(m);
  // (B, d, N) of a batch, as the CUDA entry points take it.
  py::class_<LsaShape>(m, "LsaShape")
      .def(py::init([](index_t B, index_t d, index_t N) { return LsaShape{B, d, N}; }),
           py::arg("batch"), py::arg("dim"), py::arg("context"))
      .def_readonly("batch", &LsaShape::batch)
      .def_readonly("dim", &LsaShape::dim)
      .def_readonly("context", &LsaShape::context);
  m.def(
      "lsa_shape", [](const std::vector<index_t>& shape) { return prompt_shape(shape); },
      py::arg("shape"), "(B, d, N) of prompts with shape [B, d+1, N+1], checked (Error naming E).");
  bind_cuda_entry_points(m);
}

}  // namespace lsa_native::bindings
