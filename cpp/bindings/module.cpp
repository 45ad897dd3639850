// lsa_native._core: the private compiled module; the public API lives in python/lsa_native.
#include <pybind11/pybind11.h>

#include <pybind11/numpy.h>

#include "lsa_native/bench.hpp"
#include "lsa_native/config.hpp"
#include "lsa_native/device.hpp"
#include "lsa_native/interrupt.hpp"

namespace py = pybind11;

namespace lsa_native::bindings {
void bind_lsa(py::module_& m);
void bind_multihead(py::module_& m);
void bind_population(py::module_& m);
void bind_kernel_attention(py::module_& m);
void bind_kernel_gp(py::module_& m);
void bind_sampling(py::module_& m);
void bind_cuda(py::module_& m);
void bind_optim(py::module_& m);
}  // namespace lsa_native::bindings
namespace lsa_native::detail {
void emulate_cuda_on_cpu(bool on);  // tests only (cpp/src/dispatch.hpp)
}  // namespace lsa_native::detail

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
// Native calls release the GIL; this check, run by the entering thread every few milliseconds,
// takes it back to run Python's signal handlers, so Ctrl-C interrupts a long kernel or flow.
bool python_signal_pending() {
  py::gil_scoped_acquire gil;
  return PyErr_CheckSignals() != 0;  // the handler's exception (KeyboardInterrupt) stays set
}
}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "Compiled core of lsa_native (private; use the lsa_native package).";
  m.attr("__version__") = LSA_NATIVE_VERSION_STRING;
  lsa_native::set_interrupt_check(&python_signal_pending);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const lsa_native::Interrupted&) {
      // The signal handler's exception is already set; raise KeyboardInterrupt if it was cleared.
      if (!PyErr_Occurred()) PyErr_SetNone(PyExc_KeyboardInterrupt);
    } catch (const lsa_native::ArgumentTypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const lsa_native::NonFiniteError& e) {
      PyErr_SetString(PyExc_FloatingPointError, e.what());
    } catch (const lsa_native::DeviceMemoryError& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    }
  });
  m.def("cuda_compiled", &lsa_native::cuda_compiled, "True when CUDA kernels were compiled in.");
  m.def("cuda_available", &lsa_native::cuda_available,
        "True when CUDA kernels were compiled in and a GPU is visible.");
  m.def("emulate_cuda_on_cpu_for_tests", &lsa_native::detail::emulate_cuda_on_cpu, py::arg("on"),
        "Tests only: calls routed to CUDA run the CPU kernels on the same pointers (host memory "
        "presented as CUDA arrays), so the GPU route is tested without a GPU.");
  m.def("num_threads", &lsa_native::num_threads, "CPU threads used by batched kernels.");
  m.def("set_num_threads", &lsa_native::set_num_threads, py::arg("n"),
        "Set the CPU thread count (n < 1 restores the default) and return the count in use: less "
        "than n when the system refused more threads. Results do not depend on it.");
  m.def("cpu_kernel_isa", &lsa_native::cpu_kernel_isa,
        "Instruction set the CPU kernels dispatched to.");
  bind_stream_sum<float>(m);
  bind_stream_sum<double>(m);
  lsa_native::bindings::bind_lsa(m);
  lsa_native::bindings::bind_multihead(m);
  lsa_native::bindings::bind_population(m);
  lsa_native::bindings::bind_kernel_attention(m);
  lsa_native::bindings::bind_kernel_gp(m);
  lsa_native::bindings::bind_sampling(m);
  lsa_native::bindings::bind_cuda(m);
  lsa_native::bindings::bind_optim(m);
}
