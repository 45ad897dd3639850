// The array adapter of the bindings: every operand of a view entry point (a numpy array, an object
// with __cuda_array_interface__ such as a PyTorch CUDA tensor or a CuPy array, or one with
// __dlpack__) becomes one ArrayView (lsa_native/array_view.hpp) here, once, without copies; the
// dispatcher validates the views and picks the backend from them. PyCallSite makes the outputs the
// caller did not pass (numpy arrays for host prompts; for CUDA prompts, arrays of their library
// through lsa_native.cuda.empty) and releases the GIL around the kernels.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "lsa_native/array_view.hpp"
#include "lsa_native/device.hpp"
#include "numpy_views.hpp"

namespace lsa_native::bindings {

namespace py = pybind11;

// DLPack ABI (dlpack.h v0.8, the unversioned "dltensor" capsule every array library understands).
struct DLDevice {
  std::int32_t device_type;  // 1 CPU, 2 CUDA, 3 CUDA host (pinned), 13 CUDA managed
  std::int32_t device_id;
};
struct DLDataType {
  std::uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat, 5 complex, 6 bool
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // in elements; null = C-contiguous
  std::uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};
constexpr std::int32_t kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13;

namespace adapter {

inline void set_dtype(ArrayView& v, bool is_float, int itemsize, const std::string& other_name) {
  v.itemsize = itemsize;
  if (is_float && itemsize == 4) {
    v.dtype = DType::float32;
    v.dtype_name = "float32";
  } else if (is_float && itemsize == 8) {
    v.dtype = DType::float64;
    v.dtype_name = "float64";
  } else {
    v.dtype = DType::other;
    v.dtype_name = other_name;
  }
}

// Byte strides of a C-contiguous array of `shape`.
inline std::vector<index_t> contiguous_strides(const std::vector<index_t>& shape, int itemsize) {
  std::vector<index_t> strides(shape.size());
  index_t step = itemsize;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = step;
    step *= std::max<index_t>(shape[i], 1);
  }
  return strides;
}

inline ArrayView from_numpy(const py::array& a) {
  ArrayView v;
  v.data = const_cast<void*>(a.data());
  v.shape.assign(a.shape(), a.shape() + a.ndim());
  v.strides.assign(a.strides(), a.strides() + a.ndim());
  const auto* descr = py::detail::array_descriptor_proxy(py::detail::array_proxy(a.ptr())->descr);
  const bool native_float = descr->kind == 'f' && descr->byteorder != '>';
  const int itemsize = static_cast<int>(a.itemsize());
  set_dtype(v, native_float, itemsize,
            native_float && (itemsize == 4 || itemsize == 8) ? "" : std::string(py::str(a.dtype())));
  v.readonly = !a.writeable();
  return v;
}

// obj.attr(attr), or None when obj has no such attribute; other errors (e.g. PyTorch refusing to
// export a tensor that requires grad) become a TypeError naming the argument, `what` it is and
// the library's own message ("Type: message", without pybind11's traceback).
inline py::object optional_attr(const py::handle& obj, const char* attr, const char* name,
                                const char* what) {
  PyObject* p = PyObject_GetAttrString(obj.ptr(), attr);
  if (p) return py::reinterpret_steal<py::object>(p);
  if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
    PyErr_Clear();
    return py::none();
  }
  py::error_already_set e;
  const std::string type = py::str(e.type().attr("__name__")), message = py::str(e.value());
  throw ArgumentTypeError(std::string(name) + ": cannot read the " + what + " (" + type + ": " +
                          message + ")");
}

inline ArrayView from_cuda_array_interface(const py::dict& cai, const char* name) {
  if (cai.contains("mask") && !cai["mask"].is_none())
    throw Error(std::string(name) + ": masked CUDA arrays are not supported");
  ArrayView v;
  for (auto e : cai["shape"]) v.shape.push_back(e.cast<index_t>());
  const auto typestr = cai["typestr"].cast<std::string>();
  const bool is_float = typestr.size() == 3 && typestr[1] == 'f' && typestr[0] != '>';
  const int itemsize = typestr.size() >= 3 ? std::atoi(typestr.c_str() + 2) : 0;
  set_dtype(v, is_float, itemsize,
            is_float && (itemsize == 4 || itemsize == 8) ? ""
                                                         : std::string(py::str(py::dtype(typestr))));
  const auto data = cai["data"].cast<py::tuple>();
  v.data = reinterpret_cast<void*>(data[0].cast<std::uintptr_t>());
  v.readonly = data[1].cast<bool>();
  py::object strides = cai.contains("strides") ? py::object(cai["strides"]) : py::none();
  if (strides.is_none()) {
    v.strides = contiguous_strides(v.shape, v.itemsize);
  } else {
    for (auto e : strides) v.strides.push_back(e.cast<index_t>());
  }
  // The interface names no device: the pointer's owner does (0 where it cannot be asked: a build
  // without CUDA, or host memory presented as a CUDA array).
  v.device = std::max(0, cuda_pointer_device(v.data));
  return v;
}

inline std::string dlpack_dtype_name(const DLDataType& t) {
  static const char* kinds[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  const std::string kind = t.code < 7 ? kinds[t.code] : "code" + std::to_string(t.code);
  return kind + std::to_string(int(t.bits)) + (t.lanes != 1 ? "x" + std::to_string(t.lanes) : "");
}

// The capsule of obj.__dlpack__() (kept alive by the caller while the view is used).
inline ArrayView from_dlpack(const py::handle& obj, const char* name, py::list& keep) {
  py::object capsule;
  try {
    capsule = obj.attr("__dlpack__")(py::arg("stream") = py::none());
  } catch (py::error_already_set& e) {
    throw ArgumentTypeError(std::string(name) + ": cannot read the array through __dlpack__ (" +
                            e.what() + ")");
  }
  keep.append(capsule);
  // A capsule first (GetName on another object would leave Python's error indicator set).
  const char* cname = PyCapsule_CheckExact(capsule.ptr()) ? PyCapsule_GetName(capsule.ptr()) : nullptr;
  if (cname == nullptr) PyErr_Clear();
  if (cname == nullptr || std::string(cname) != "dltensor")
    throw ArgumentTypeError(std::string(name) + ": __dlpack__ returned no unconsumed 'dltensor' capsule");
  const auto* managed =
      static_cast<const DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  const DLTensor& t = managed->dl_tensor;
  ArrayView v;
  v.data = static_cast<char*>(t.data) + t.byte_offset;
  v.shape.assign(t.shape, t.shape + t.ndim);
  const bool is_float = t.dtype.code == 2 && t.dtype.lanes == 1;
  set_dtype(v, is_float, t.dtype.bits / 8, dlpack_dtype_name(t.dtype));
  if (t.strides == nullptr) {
    v.strides = contiguous_strides(v.shape, v.itemsize);
  } else {
    for (int i = 0; i < t.ndim; ++i) v.strides.push_back(t.strides[i] * v.itemsize);
  }
  const int type = t.device.device_type;
  if (type == kDLCUDA || type == kDLCUDAManaged) {
    v.device = t.device.device_id;
  } else if (type != kDLCPU && type != kDLCUDAHost) {
    throw ArgumentTypeError(std::string(name) + ": DLPack device type " + std::to_string(type) +
                            " is neither the CPU nor a CUDA device");
  }
  return v;
}

}  // namespace adapter

// The view of `obj` as argument `name` (None: an absent argument); `keep` holds what must stay
// alive while the view is used (DLPack capsules).
inline ArrayView array_view(const py::handle& obj, const char* name, py::list& keep) {
  ArrayView v;
  if (obj.is_none()) {
    v.name = name;
    return v;
  }
  if (py::isinstance<py::array>(obj)) {
    v = adapter::from_numpy(py::reinterpret_borrow<py::array>(obj));
  } else if (py::object cai =
                 adapter::optional_attr(obj, "__cuda_array_interface__", name, "CUDA array");
             !cai.is_none()) {
    v = adapter::from_cuda_array_interface(cai.cast<py::dict>(), name);
  } else if (py::hasattr(obj, "__dlpack__")) {
    v = adapter::from_dlpack(obj, name, keep);
  } else {
    throw ArgumentTypeError(std::string(name) +
                            ": expected an array (numpy, __cuda_array_interface__ or __dlpack__), "
                            "got " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  v.name = name;
  v.present = true;
  return v;
}

// The gradient outputs a loss binding writes in place, given as one tuple (`out=`): None (all
// made by the call) or a tuple with one array (or None) per gradient, in the order of `names`.
inline std::vector<py::object> output_tuple(const py::object& out, const char* name,
                                            std::initializer_list<const char*> names) {
  std::vector<py::object> objects(names.size(), py::none());
  if (out.is_none()) return objects;
  std::string expected;
  for (const char* n : names) expected += std::string(expected.empty() ? "" : ", ") + n;
  if (!py::isinstance<py::tuple>(out) || py::len(out) != names.size())
    throw ArgumentTypeError(std::string(name) + ": expected a tuple (" + expected +
                            ") of output arrays (or None entries), got " +
                            std::string(py::str(py::type::handle_of(out).attr("__name__"))));
  for (size_t i = 0; i < names.size(); ++i) objects[i] = out.cast<py::tuple>()[i];
  return objects;
}
inline std::pair<py::object, py::object> output_pair(const py::object& out, const char* name,
                                                     const char* first, const char* second) {
  auto objects = output_tuple(out, name, {first, second});
  return {objects[0], objects[1]};
}

// "auto", "cpu" or "cuda" (the device= keyword of the public functions).
inline DeviceChoice device_choice(const py::handle& device) {
  if (py::isinstance<py::str>(device)) {
    const auto s = device.cast<std::string>();
    if (s == "auto") return DeviceChoice::automatic;
    if (s == "cpu") return DeviceChoice::cpu;
    if (s == "cuda") return DeviceChoice::cuda;
  }
  throw Error("device: expected one of ('auto', 'cpu', 'cuda'), got " + std::string(py::repr(device)));
}

// One Python call of a view entry point: the operands' objects and views, the outputs made for
// it, and the kernel run without the GIL.
class PyCallSite : public CallSite {
 public:
  // An input (or an output the caller passed) as a view; None gives an absent view.
  ArrayView operand(const py::handle& obj, const char* name) {
    ArrayView v = array_view(obj, name, keep_);
    if (v.present) objects_.emplace_back(name, py::reinterpret_borrow<py::object>(obj));
    return v;
  }
  // An output: the caller's array, or (None) one the call makes when `wanted`.
  ArrayView output(const py::handle& obj, const char* name, bool wanted = true) {
    ArrayView v = operand(obj, name);
    v.make = wanted;
    return v;
  }
  // The prompts: an input whose object also templates outputs made on the GPU.
  ArrayView prompts(const py::handle& obj, const char* name) {
    prompts_ = py::reinterpret_borrow<py::object>(obj);
    return operand(obj, name);
  }

  ArrayView make_output(const char* name, const std::vector<index_t>& shape,
                        const ArrayView& like) override {
    py::object made;
    if (!like.on_cuda()) {
      made = like.dtype == DType::float32 ? py::object(py::array_t<float>(shape))
                                          : py::object(py::array_t<double>(shape));
    } else {
      made = py::module_::import("lsa_native.cuda").attr("empty")(
          prompts_, py::tuple(py::cast(shape)), like.dtype_name, like.device);
    }
    return operand(made, name);
  }

  void run(const std::function<void()>& kernels) override {
    py::gil_scoped_release release;
    kernels();
  }

  // The Python object of a view: the caller's or the made array; None when absent.
  py::object result(const ArrayView& v) const {
    if (v.present)
      for (const auto& [name, obj] : objects_)
        if (name == v.name) return obj;
    return py::none();
  }

 private:
  py::list keep_;
  py::object prompts_;
  std::vector<std::pair<std::string, py::object>> objects_;
};

// An operand of the fused step as a view: a C-contiguous array of dtype P and `shape`, writeable
// when `output`; a CUDA array only with device='cuda' (the kernels read it in place).
template <class P>
ArrayView fused_operand(const py::object& obj, const char* name, const std::vector<index_t>& shape,
                        Device device, bool output, py::list& keep) {
  const ArrayView v = array_view(obj, name, keep);
  const DType want = sizeof(P) == 4 ? DType::float32 : DType::float64;
  if (!v.present) throw Error(std::string(name) + ": missing (None)");
  if (v.dtype != want)
    throw ArgumentTypeError(std::string(name) + ": expected dtype " +
                            (sizeof(P) == 4 ? "float32" : "float64") + ", got " + v.dtype_name);
  const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();  // has no layout
  if (v.shape != shape || (!empty && v.strides != adapter::contiguous_strides(shape, v.itemsize)))
    throw Error(std::string(name) + ": expected a C-contiguous array of shape " +
                shape_string(shape) + ", got " + shape_string(v.shape));
  if (output && v.readonly) throw Error(std::string(name) + ": must be writeable");
  if (v.on_cuda() && device != Device::cuda)
    throw Error(std::string(name) + ": a CUDA array needs device='cuda'");
  return v;
}

}  // namespace lsa_native::bindings
