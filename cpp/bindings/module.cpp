// lsa_native._core: the private compiled module; the public API lives in python/lsa_native.
#include <pybind11/pybind11.h>

#include <pybind11/numpy.h>

#include "lsa_native/bench.hpp"
#include "lsa_native/config.hpp"
#include "lsa_native/device.hpp"

namespace py = pybind11;

namespace lsa_native::bindings {
void bind_lsa(py::module_& m);
void bind_population(py::module_& m);
void bind_kernel_attention(py::module_& m);
void bind_cuda(py::module_& m);
}  // namespace lsa_native::bindings

namespace {
template <class T>
void bind_stream_sum(py::module_& m) {
  m.def(
      "stream_sum",
      [](const py::array_t<T, py::array::c_style>& x) {
        const T* p = x.data();
        const auto n = static_cast<lsa_native::index_t>(x.size());
        py::gil_scoped_release release;
        return lsa_native::stream_sum(p, n);
      },
      py::arg("x").noconvert(),
      "Sum of an array read once on all threads: the read-bandwidth probe of the benchmarks.");
}
}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "Compiled core of lsa_native (private; use the lsa_native package).";
  m.attr("__version__") = LSA_NATIVE_VERSION_STRING;
  m.def("cuda_compiled", &lsa_native::cuda_compiled, "True when CUDA kernels were compiled in.");
  m.def("cuda_available", &lsa_native::cuda_available,
        "True when CUDA kernels were compiled in and a GPU is visible.");
  m.def("num_threads", &lsa_native::num_threads, "CPU threads used by batched kernels.");
  m.def("set_num_threads", &lsa_native::set_num_threads, py::arg("n"),
        "Set the CPU thread count (n < 1 restores the default). Results do not depend on it.");
  m.def("cpu_kernel_isa", &lsa_native::cpu_kernel_isa,
        "Instruction set the CPU kernels dispatched to.");
  bind_stream_sum<float>(m);
  bind_stream_sum<double>(m);
  lsa_native::bindings::bind_lsa(m);
  lsa_native::bindings::bind_population(m);
  lsa_native::bindings::bind_kernel_attention(m);
  lsa_native::bindings::bind_cuda(m);
}
