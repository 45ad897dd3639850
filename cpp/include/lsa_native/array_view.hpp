// One view of an array operand, whatever library it came from: what the Python bindings make of a
// numpy array, a __cuda_array_interface__ object (PyTorch CUDA tensors, CuPy, Numba) or a
// __dlpack__ object, once per operand (cpp/bindings/array_view.hpp), and what the dispatchers
// (dispatch.cpp, kernel_attention_dispatch.cpp) validate and route: the views' devices pick the
// backend, the prompts' dtype picks T. C++ callers with raw pointers use the typed entry points
// of lsa.hpp / kernel_attention.hpp instead.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lsa_native/types.hpp"

namespace lsa_native {

enum class DType : int { float32, float64, other };

// Host memory (numpy, CPU DLPack); a CUDA view holds its device ordinal (>= 0).
inline constexpr int kHostDevice = -1;

struct ArrayView {
  const char* name = "";         // the argument's name, for messages
  bool present = false;          // false: the argument was not passed (None)
  bool make = false;             // an output the call makes (CallSite::make_output) when absent
  void* data = nullptr;
  std::vector<index_t> shape;
  std::vector<index_t> strides;  // in bytes, one per axis
  DType dtype = DType::other;
  std::string dtype_name;        // numpy's spelling ("float32", "int64", "<U12", ">f8")
  int itemsize = 0;
  int device = kHostDevice;      // CUDA device ordinal, or kHostDevice
  bool readonly = false;

  bool on_cuda() const { return device >= 0; }
  index_t size() const {
    index_t n = 1;
    for (index_t e : shape) n *= e;
    return n;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// Whether the bytes [data, data + size·itemsize) of two C-contiguous views intersect (absent or
// empty views overlap nothing).
inline bool overlaps(const ArrayView& a, const ArrayView& b) {
  if (!a.present || !b.present || a.size() == 0 || b.size() == 0) return false;
  const char* a0 = static_cast<const char*>(a.data);
  const char* b0 = static_cast<const char*>(b.data);
  return a0 < b0 + b.size() * b.itemsize && b0 < a0 + a.size() * a.itemsize;
}

// Where a call may run: "auto" follows the arrays (any CUDA array → CUDA), "cpu" refuses CUDA
// arrays, "cuda" runs on the GPU (host arrays are copied in and out by the call).
enum class DeviceChoice { automatic, cpu, cuda };

// The caller's side of a view entry point: it makes the outputs the caller did not pass (like the
// prompts: their dtype, on their side: numpy arrays for host prompts, arrays of the prompts'
// library for CUDA ones) and runs the kernels (the Python bindings release the GIL there).
class CallSite {
 public:
  virtual ~CallSite() = default;
  virtual ArrayView make_output(const char* name, const std::vector<index_t>& shape,
                                const ArrayView& like) = 0;
  virtual void run(const std::function<void()>& kernels) { kernels(); }
};

}  // namespace lsa_native
