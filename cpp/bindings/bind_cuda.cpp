// Bindings of the CUDA device-memory API (device.hpp): DeviceArray, an owning device array that
// CuPy and PyTorch wrap without copies (__cuda_array_interface__, __dlpack__), and array_info: the
// view the array adapter (array_view.hpp) makes of an array.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "array_view.hpp"
#include "lsa_native/cuda_random.hpp"
#include "lsa_native/device.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native::bindings {

namespace py = pybind11;

namespace {

// The DLPack ABI structs are those of the array adapter (array_view.hpp).

// Owning, C-contiguous device array of float32 or float64.
class DeviceArray {
 public:
  DeviceArray(std::vector<index_t> shape, const py::dtype& dtype, int device)
      : shape_(std::move(shape)), dtype_(dtype) {
    if (!(dtype_.equal(py::dtype::of<float>()) || dtype_.equal(py::dtype::of<double>())))
      throw Error("DeviceArray: dtype must be float32 or float64, got " +
                  std::string(py::str(dtype_)));
    std::size_t n = 1;
    for (index_t e : shape_) {
      if (e < 0) throw Error("DeviceArray: negative extent in shape");
      n *= static_cast<std::size_t>(e);
    }
    nbytes_ = n * static_cast<std::size_t>(dtype_.itemsize());
    device_ = device >= 0 ? device : cuda_current_device();
    memory_ = std::shared_ptr<void>(cuda_allocate(nbytes_, device_), cuda_free);
  }

  std::uintptr_t ptr() const { return reinterpret_cast<std::uintptr_t>(memory_.get()); }
  const std::vector<index_t>& shape() const { return shape_; }
  const py::dtype& dtype() const { return dtype_; }
  int device() const { return device_; }
  std::size_t nbytes() const { return nbytes_; }

  py::dict cuda_array_interface() const {
    py::dict d;
    py::tuple shape(shape_.size());
    for (size_t i = 0; i < shape_.size(); ++i) shape[i] = shape_[i];
    d["shape"] = shape;
    d["typestr"] = dtype_.attr("str");
    d["data"] = py::make_tuple(ptr(), false);
    d["version"] = 3;
    d["strides"] = py::none();
    d["stream"] = 1;  // produced on the legacy default stream
    return d;
  }

  py::array copy_to_host() const {
    std::vector<py::ssize_t> shape(shape_.begin(), shape_.end());
    py::array out(dtype_, shape);
    void* dst = out.mutable_data();
    {
      py::gil_scoped_release release;
      cuda_copy(dst, memory_.get(), nbytes_);
    }
    return out;
  }

  void copy_from_host(const py::array& src) {
    if (static_cast<std::size_t>(src.nbytes()) != nbytes_ || !src.dtype().equal(dtype_) ||
        !(src.flags() & py::array::c_style))
      throw Error("DeviceArray.copy_from_host: expected a C-contiguous array of the same dtype "
                  "and size");
    const void* p = src.data();
    py::gil_scoped_release release;
    cuda_copy(memory_.get(), p, nbytes_);
  }

  // DLPack export: the capsule keeps the device memory alive until the consumer's deleter runs.
  py::object dlpack(py::object stream, py::object /*max_version*/, py::object /*dl_device*/,
                    py::object copy) const {
    if (!copy.is_none() && copy.cast<bool>())
      throw Error("DeviceArray.__dlpack__: copy=True is not supported (the export never copies)");
    // Work is queued on the legacy default stream; a consumer on another stream gets the data
    // once that work is done.
    if (!stream.is_none() && !(py::isinstance<py::int_>(stream) && stream.cast<long long>() == 1))
      cuda_synchronize();
    struct Context {
      std::shared_ptr<void> memory;
      std::vector<std::int64_t> shape;
      DLManagedTensor tensor;
    };
    auto* ctx = new Context{memory_, std::vector<std::int64_t>(shape_.begin(), shape_.end()), {}};
    DLTensor& t = ctx->tensor.dl_tensor;
    t.data = memory_.get();
    t.device = {kDLCUDA, device_};
    t.ndim = static_cast<std::int32_t>(shape_.size());
    t.dtype = {2, static_cast<std::uint8_t>(8 * dtype_.itemsize()), 1};
    t.shape = ctx->shape.data();
    t.strides = nullptr;
    t.byte_offset = 0;
    ctx->tensor.manager_ctx = ctx;
    ctx->tensor.deleter = [](DLManagedTensor* self) { delete static_cast<Context*>(self->manager_ctx); };
    PyObject* capsule = PyCapsule_New(&ctx->tensor, "dltensor", [](PyObject* cap) {
      if (PyCapsule_IsValid(cap, "used_dltensor")) return;  // consumed: the consumer deletes it
      auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      if (managed == nullptr) {
        PyErr_Clear();
        return;
      }
      managed->deleter(managed);
    });
    if (capsule == nullptr) {
      delete ctx;
      throw py::error_already_set();
    }
    return py::reinterpret_steal<py::object>(capsule);
  }

 private:
  std::vector<index_t> shape_;
  py::dtype dtype_;
  int device_ = 0;
  std::size_t nbytes_ = 0;
  std::shared_ptr<void> memory_;
};

}  // namespace

void bind_cuda(py::module_& m) {
  py::class_<DeviceArray>(m, "DeviceArray",
                          "Owning C-contiguous CUDA device array (float32/float64). CuPy "
                          "(cupy.asarray) and PyTorch (torch.as_tensor, torch.from_dlpack) wrap it "
                          "without copies.")
      .def(py::init<std::vector<index_t>, const py::dtype&, int>(), py::arg("shape"),
           py::arg("dtype"), py::arg("device") = -1)
      .def_property_readonly("ptr", &DeviceArray::ptr)
      .def_property_readonly("shape",
                             [](const DeviceArray& a) {
                               py::tuple t(a.shape().size());
                               for (size_t i = 0; i < a.shape().size(); ++i) t[i] = a.shape()[i];
                               return t;
                             })
      .def_property_readonly("dtype", &DeviceArray::dtype)
      .def_property_readonly("device", &DeviceArray::device)
      .def_property_readonly("nbytes", &DeviceArray::nbytes)
      .def_property_readonly("__cuda_array_interface__", &DeviceArray::cuda_array_interface)
      .def("__dlpack__", &DeviceArray::dlpack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
           py::arg("copy") = py::none(),
           "DLPack export (an unversioned 'dltensor' capsule, which every consumer accepts).")
      .def("__dlpack_device__",
           [](const DeviceArray& a) { return py::make_tuple(kDLCUDA, a.device()); })
      .def("copy_to_host", &DeviceArray::copy_to_host, "A numpy copy of the array.")
      .def("copy_from_host", &DeviceArray::copy_from_host, py::arg("src"),
           "Overwrite with a C-contiguous numpy array of the same dtype and size.")
      .def("__repr__", [](const DeviceArray& a) {
        std::string s = "DeviceArray(shape=(";
        for (size_t i = 0; i < a.shape().size(); ++i)
          s += (i ? ", " : "") + std::to_string(a.shape()[i]);
        if (a.shape().size() == 1) s += ",";
        return s + "), dtype=" + std::string(py::str(a.dtype())) + ", device=" +
               std::to_string(a.device()) + ")";
      });
  m.def(
      "array_info",
      [](const py::object& a, const std::string& name) -> py::object {
        py::list keep;
        const ArrayView v = array_view(a, name.c_str(), keep);
        if (!v.present) return py::none();
        py::dict d;
        d["ptr"] = reinterpret_cast<std::uintptr_t>(v.data);
        d["shape"] = py::tuple(py::cast(v.shape));
        d["strides"] = py::tuple(py::cast(v.strides));
        d["dtype"] = v.dtype_name;
        d["device"] = v.device;
        d["readonly"] = v.readonly;
        return d;
      },
      py::arg("a"), py::arg("name") = "a",
      "The array view the native entry points make of `a` (numpy, __cuda_array_interface__ or "
      "__dlpack__): ptr, shape, byte strides, dtype name, device (-1: host), readonly.");
  m.def("cuda_pointer_device",
        [](std::uintptr_t p) { return cuda_pointer_device(reinterpret_cast<const void*>(p)); },
        py::arg("ptr"), "CUDA device owning the pointer (device or managed memory), else -1.");
  m.def("cuda_synchronize", &cuda_synchronize, "Wait for all work on the current CUDA device.");
  m.def("cuda_release_memory", &cuda_release_memory, py::call_guard<py::gil_scoped_release>(),
        "Return the scratch memory lsa_native keeps for reuse to the CUDA driver (waits for the "
        "devices first); a no-op without CUDA kernels.");
  using Words = py::array_t<std::uint32_t, py::array::c_style>;
  m.def(
      "cuda_philox4x32",
      [](const Words& counters, std::uint64_t seed, Words out) {
        if (counters.ndim() != 2 || counters.shape(1) != 4 || out.ndim() != 2 ||
            out.shape(0) != counters.shape(0) || out.shape(1) != 4)
          throw Error("counters, out: expected shape (n, 4)");
        const std::uint32_t* c = counters.data();
        std::uint32_t* o = out.mutable_data();
        const index_t n = counters.shape(0);
        py::gil_scoped_release release;
        cuda_philox4x32_10(c, n, seed, o);
      },
      py::arg("counters").noconvert(), py::arg("seed"), py::arg("out").noconvert(),
      "Philox4x32-10 words computed on the GPU (host arrays, copied in and out).");
  m.def(
      "cuda_random_variates",
      [](const std::string& dtype, bool normal, std::uint64_t seed, std::uint32_t step,
         std::uint32_t prompt, std::uint32_t stream, std::uint64_t start, index_t n,
         std::uintptr_t out) {
        StreamId id;
        id.seed = seed;
        id.step = step;
        id.prompt = prompt;
        id.stream = stream;
        py::gil_scoped_release release;
        if (dtype == "float32") {
          auto* o = reinterpret_cast<float*>(out);
          normal ? cuda_random_normals(id, start, n, o) : cuda_random_uniforms(id, start, n, o);
        } else if (dtype == "float64") {
          auto* o = reinterpret_cast<double*>(out);
          normal ? cuda_random_normals(id, start, n, o) : cuda_random_uniforms(id, start, n, o);
        } else {
          throw Error("dtype: expected 'float32' or 'float64', got '" + dtype + "'");
        }
      },
      py::arg("dtype"), py::arg("normal"), py::arg("seed"), py::arg("step"), py::arg("prompt"),
      py::arg("stream"), py::arg("start"), py::arg("n"), py::arg("out"),
      "Normals or uniforms of a stream computed on the GPU into the address `out` (device or host).");
}

}  // namespace lsa_native::bindings
