// Bindings of the K-GP sampler (kernel_gp.hpp) and the batched small-matrix kit (small_matrix.hpp):
// shape checks, GIL released.
#include <pybind11/stl.h>

#include <optional>

#include "lsa_native/kernel_gp.hpp"
#include "lsa_native/small_matrix.hpp"
#include "numpy_views.hpp"

namespace lsa_native::bindings {
namespace {

template <class T>
void bind_dtype(py::module_& m) {
  m.def(
      "kernel_gp_sample",
      [](std::uint64_t seed, std::uint64_t step, int kernel, double bandwidth,
         std::optional<CArray<double>> Sigma, CArray<T> Z0, CArray<T> y_q,
         std::optional<CArray<T>> xi, std::optional<CArray<std::int32_t>> method) {
        if (Z0.ndim() != 3 || Z0.shape(1) < 2 || Z0.shape(2) < 2)
          throw Error("Z0: expected shape [B, d+1, n+1] with d >= 1 and n >= 1, got " +
                      shape_string(Z0));
        const index_t B = Z0.shape(0), d = Z0.shape(1) - 1, n = Z0.shape(2) - 1;
        require_shape(y_q, {B}, "y_q");
        if (Sigma) require_shape(*Sigma, {d, d}, "Sigma");
        KernelGPLaw law{d, n, static_cast<GPKernel>(kernel), bandwidth,
                        Sigma ? Sigma->data() : nullptr};
        T* z = out_ptr(Z0, "Z0");
        T* yq = out_ptr(y_q, "y_q");
        T* x = optional_out(xi, {B, n + 1, d}, "xi");
        std::int32_t* me = optional_out(method, {B}, "method");
        py::gil_scoped_release release;
        sample_kernel_gp(seed, step, B, law, z, yq, x, me);
      },
      py::arg("seed"), py::arg("step"), py::arg("kernel"), py::arg("bandwidth"),
      py::arg("Sigma").noconvert(), py::arg("Z0").noconvert(), py::arg("y_q").noconvert(),
      py::arg("xi").noconvert() = py::none(), py::arg("method").noconvert() = py::none());
  m.def(
      "batched_cholesky",
      [](CArray<T> a, CArray<std::int32_t> ok) {
        if (a.ndim() != 3 || a.shape(1) != a.shape(2))
          throw Error("a: expected shape [B, n, n], got " + shape_string(a));
        const index_t B = a.shape(0), n = a.shape(1);
        require_shape(ok, {B}, "ok");
        T* p = out_ptr(a, "a");
        std::int32_t* o = out_ptr(ok, "ok");
        py::gil_scoped_release release;
        batched_cholesky(B, n, p, o);
      },
      py::arg("a").noconvert(), py::arg("ok").noconvert());
  m.def(
      "batched_symmetric_eigen",
      [](CArray<T> a, CArray<T> w, CArray<T> v, CArray<std::int32_t> sweeps, int max_sweeps) {
        if (a.ndim() != 3 || a.shape(1) != a.shape(2))
          throw Error("a: expected shape [B, n, n], got " + shape_string(a));
        const index_t B = a.shape(0), n = a.shape(1);
        require_shape(w, {B, n}, "w");
        require_shape(v, {B, n, n}, "v");
        require_shape(sweeps, {B}, "sweeps");
        T* pa = out_ptr(a, "a");
        T* pw = out_ptr(w, "w");
        T* pv = out_ptr(v, "v");
        std::int32_t* ps = out_ptr(sweeps, "sweeps");
        py::gil_scoped_release release;
        batched_symmetric_eigen(B, n, pa, pw, pv, ps, max_sweeps);
      },
      py::arg("a").noconvert(), py::arg("w").noconvert(), py::arg("v").noconvert(),
      py::arg("sweeps").noconvert(), py::arg("max_sweeps") = 30);
}

}  // namespace

void bind_kernel_gp(py::module_& m) {
  m.attr("kernel_gp_max_exp_scale") = kKernelGPMaxExpScale;
  bind_dtype<float>(m);
  bind_dtype<double>(m);
}

}  // namespace lsa_native::bindings
