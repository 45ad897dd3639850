// Bindings of the K-GP sampler (kernel_gp.hpp) and the batched small-matrix kit (small_matrix.hpp):
// shape checks, GIL released.
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "lsa_native/device.hpp"
#include "lsa_native/kernel_gp.hpp"
#include "lsa_native/small_matrix.hpp"
#include "numpy_views.hpp"

namespace lsa_native::bindings {
namespace {

using OptionalArray = std::optional<CArray<double>>;

// The law of a call: Σ [d, d] and K♦'s diagonals g1, g2 [d] (kernel == composite) shape-checked.
KernelGPLaw law_of(index_t d, index_t n, int kernel, double bandwidth, const OptionalArray& Sigma,
                   double alpha, const OptionalArray& g1, const OptionalArray& g2) {
  if (Sigma) require_shape(*Sigma, {d, d}, "Sigma");
  if (g1) require_shape(*g1, {d}, "g1");
  if (g2) require_shape(*g2, {d}, "g2");
  KernelGPLaw law{d, n, static_cast<GPKernel>(kernel), bandwidth, Sigma ? Sigma->data() : nullptr};
  law.alpha = alpha;
  law.g1 = g1 ? g1->data() : nullptr;
  law.g2 = g2 ? g2->data() : nullptr;
  return law;
}

template <class T>
void bind_dtype(py::module_& m) {
  m.def(
      "kernel_gp_sample",
      [](std::uint64_t seed, std::uint64_t step, int kernel, double bandwidth,
         OptionalArray Sigma, CArray<T> Z0, CArray<T> y_q,
         std::optional<CArray<T>> xi, std::optional<CArray<std::int32_t>> method, double alpha,
         OptionalArray g1, OptionalArray g2) {
        if (Z0.ndim() != 3 || Z0.shape(1) < 2 || Z0.shape(2) < 2)
          throw Error("Z0: expected shape [B, d+1, n+1] with d >= 1 and n >= 1, got " +
                      shape_string(Z0));
        const index_t B = Z0.shape(0), d = Z0.shape(1) - 1, n = Z0.shape(2) - 1;
        require_shape(y_q, {B}, "y_q");
        const KernelGPLaw law = law_of(d, n, kernel, bandwidth, Sigma, alpha, g1, g2);
        T* z = out_ptr(Z0, "Z0");
        T* yq = out_ptr(y_q, "y_q");
        T* x = optional_out(xi, {B, n + 1, d}, "xi");
        std::int32_t* me = optional_out(method, {B}, "method");
        py::gil_scoped_release release;
        sample_kernel_gp(seed, step, B, law, z, yq, x, me);
      },
      py::arg("seed"), py::arg("step"), py::arg("kernel"), py::arg("bandwidth"),
      py::arg("Sigma").noconvert(), py::arg("Z0").noconvert(), py::arg("y_q").noconvert(),
      py::arg("xi").noconvert() = py::none(), py::arg("method").noconvert() = py::none(),
      py::arg("alpha") = 0.0, py::arg("g1").noconvert() = py::none(),
      py::arg("g2").noconvert() = py::none());
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

// The sampler into CUDA arrays given by address (Z0 [B, d+1, n+1], y_q [B], xi [B, n+1, d] or 0);
// Python has read their shapes and dtype (sampling/kernel_gp.py); the driver routes to the GPU
// because Z0 is device memory.
template <class T>
void sample_at(std::uint64_t seed, std::uint64_t step, const KernelGPLaw& law, index_t batch,
               std::uintptr_t Z0, std::uintptr_t y_q, std::uintptr_t xi) {
  py::gil_scoped_release release;
  sample_kernel_gp(seed, step, batch, law, reinterpret_cast<T*>(Z0), reinterpret_cast<T*>(y_q),
                   reinterpret_cast<T*>(xi), static_cast<std::int32_t*>(nullptr));
}

}  // namespace

void bind_kernel_gp(py::module_& m) {
  m.attr("kernel_gp_max_exp_scale") = kKernelGPMaxExpScale;
  bind_dtype<float>(m);
  bind_dtype<double>(m);
  m.def(
      "kernel_gp_sample_cuda",
      [](const std::string& dtype, std::uint64_t seed, std::uint64_t step, int kernel,
         double bandwidth, OptionalArray Sigma, index_t batch, index_t d,
         index_t n, std::uintptr_t Z0, std::uintptr_t y_q, std::uintptr_t xi, double alpha,
         OptionalArray g1, OptionalArray g2) {
        const KernelGPLaw law = law_of(d, n, kernel, bandwidth, Sigma, alpha, g1, g2);
        if (cuda_pointer_device(reinterpret_cast<const void*>(Z0)) < 0)
          throw Error("Z0: expected device memory");
        if (dtype == "float32")
          sample_at<float>(seed, step, law, batch, Z0, y_q, xi);
        else if (dtype == "float64")
          sample_at<double>(seed, step, law, batch, Z0, y_q, xi);
        else
          throw Error("dtype: expected 'float32' or 'float64', got '" + dtype + "'");
      },
      py::arg("dtype"), py::arg("seed"), py::arg("step"), py::arg("kernel"), py::arg("bandwidth"),
      py::arg("Sigma").noconvert(), py::arg("batch"), py::arg("d"), py::arg("n"), py::arg("Z0"),
      py::arg("y_q"), py::arg("xi"), py::arg("alpha") = 0.0, py::arg("g1").noconvert() = py::none(),
      py::arg("g2").noconvert() = py::none(),
      "K-GP prompts sampled on the GPU into CUDA arrays given by address.");
}

}  // namespace lsa_native::bindings
