// The operand rules of the view entry points (array_view.hpp), written once and used by every
// dispatcher's validate(): dtypes, shapes, layouts, outputs, the device a call runs on, and the
// finiteness check of host results computed on the GPU. Each message names the argument.
#pragma once

#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/finite.hpp"
#include "dispatch.hpp"
#include "lsa_native/array_view.hpp"
#include "lsa_native/lsa.hpp"

namespace lsa_native::detail {

// "(3, 4)", "(5,)", "()": numpy's spelling of a shape.
inline std::string shape_string(const std::vector<index_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// The prompts (E of LSA, Z0 of kernel attention) set the dtype of the call: float32 or float64.
inline void require_float_prompts(const ArrayView& prompts) {
  if (prompts.dtype == DType::other)
    throw ArgumentTypeError(std::string(prompts.name) + ": expected dtype float32 or float64, got " +
                            prompts.dtype_name);
}

// C-contiguous (axes of extent 1 may have any stride): the kernels read rows in place.
inline void require_layout(const ArrayView& a) {
  std::vector<index_t> expected(a.shape.size());
  index_t step = a.itemsize;
  bool ok = true;
  for (size_t i = a.shape.size(); i-- > 0;) {
    expected[i] = step;
    ok = ok && (a.shape[i] <= 1 || a.strides[i] == step);
    step *= a.shape[i];
  }
  if (ok) return;
  throw Error(std::string(a.name) + (a.on_cuda() ? ": CUDA arrays" : ": arrays") +
              " must be C-contiguous (byte strides " + shape_string(expected) + "), got " +
              shape_string(a.strides) +
              "; pass a contiguous copy (np.ascontiguousarray, tensor.contiguous(), "
              "cupy.ascontiguousarray)");
}

// The prompts [B, d+1, N+1] (E of LSA, Z0 of kernel attention): float32 or float64, 3-d,
// C-contiguous; the extents' rules are the shape's validate() (lsa.hpp, kernel_attention.hpp).
inline void require_prompts(const ArrayView& prompts) {
  require_float_prompts(prompts);
  if (prompts.shape.size() != 3)
    throw Error(std::string(prompts.name) + ": expected a 3-d array [B, d+1, N+1], got shape " +
                shape_string(prompts.shape));
  require_layout(prompts);
}

// E [B, d+1, N+1] of LSA and the multi-head model, float32 or float64, C-contiguous: its (B, d, N)
// after the extents' rules (validate(LsaShape), dispatch.cpp).
inline LsaShape prompt_shape(const ArrayView& E) {
  require_prompts(E);
  const LsaShape s{E.shape[0], E.shape[1] - 1, E.shape[2] - 1};
  validate(s);
  return s;
}

inline void require_shape(const ArrayView& a, const std::vector<index_t>& shape) {
  if (a.shape != shape)
    throw Error(std::string(a.name) + ": expected shape " + shape_string(shape) + ", got " +
                shape_string(a.shape));
}

// Whether the input may hold NaN/inf: parameters and labels may not (checked here, in host
// memory: they are small), prompts and upstream gradients may (a non-finite output names them).
enum class Finite { required, any };

// An input of `shape` in the prompts' dtype (the Python layer converts host arrays to it; CUDA
// arrays are used as they are).
inline void require_input(const ArrayView& a, const std::vector<index_t>& shape,
                          const ArrayView& prompts, Finite finite = Finite::required) {
  require(a.present, std::string(a.name) + ": missing (None)");
  if (a.dtype != prompts.dtype)
    throw ArgumentTypeError(std::string(a.name) + ": expected dtype " + prompts.dtype_name + " (" +
                            prompts.name + "'s dtype), got " + a.dtype_name);
  require_shape(a, shape);
  require_layout(a);
  if (finite == Finite::any || a.on_cuda()) return;
  const bool ok = a.dtype == DType::float32 ? all_finite(a.as<const float>(), a.size())
                                            : all_finite(a.as<const double>(), a.size());
  require(ok, std::string(a.name) + ": contains non-finite values (NaN or inf)");
}

// An output passed by the caller (absent ones are made later, like the prompts): on the prompts'
// side, their dtype, `shape`, C-contiguous, writeable, and sharing no memory with `inputs`.
inline void require_output(const ArrayView& out, const std::vector<index_t>& shape,
                           const ArrayView& prompts, std::initializer_list<const ArrayView*> inputs,
                           DType dtype, const std::string& dtype_name) {
  if (!out.present) return;
  if (prompts.on_cuda() && !out.on_cuda())
    throw ArgumentTypeError(std::string(out.name) + ": expected a CUDA array (" + prompts.name +
                            " is one), got a host array");
  if (!prompts.on_cuda() && out.on_cuda())
    throw ArgumentTypeError(std::string(out.name) + ": expected a numpy.ndarray (" + prompts.name +
                            " is a host array), got a CUDA array");
  if (out.dtype != dtype)
    throw ArgumentTypeError(std::string(out.name) + ": expected dtype " + dtype_name + ", got " +
                            out.dtype_name);
  require_shape(out, shape);
  require_layout(out);
  require(!out.readonly, std::string(out.name) + ": must be writeable");
  for (const ArrayView* in : inputs)
    require(!overlaps(out, *in), std::string(out.name) + ": overlaps the memory of " + in->name +
                                     "; pass a separate output array (or out=None)");
}
// An output in the prompts' dtype.
inline void require_output(const ArrayView& out, const std::vector<index_t>& shape,
                           const ArrayView& prompts, std::initializer_list<const ArrayView*> inputs) {
  require_output(out, shape, prompts, inputs, prompts.dtype, prompts.dtype_name);
}
// The loss output of a loss entry point (`loss=`): float64 [1] on the prompts' side. The loss is
// written there instead of returned, so that on the GPU nothing waits for it (a training loop
// keeps its losses in device memory and reads them back at its record steps).
inline void require_loss_output(const ArrayView& loss, const ArrayView& prompts,
                                std::initializer_list<const ArrayView*> inputs) {
  require_output(loss, {1}, prompts, inputs, DType::float64, "float64");
}

// The outputs a loss entry point's caller passed (LSA's, the H-head model's): the gradients
// d_W_pv, d_W_kq of `parameters`' shape, y_hat [B] and the float64 [1] loss, on the prompts' side.
inline void require_loss_outputs(const ArrayView& d_W_pv, const ArrayView& d_W_kq,
                                 const ArrayView& y_hat, const ArrayView& loss,
                                 const std::vector<index_t>& parameters, index_t batch,
                                 const ArrayView& prompts,
                                 std::initializer_list<const ArrayView*> inputs) {
  require_output(d_W_pv, parameters, prompts, inputs);
  require_output(d_W_kq, parameters, prompts, inputs);
  require_output(y_hat, {batch}, prompts, inputs);
  require_loss_output(loss, prompts, inputs);
}

// Writes a loss computed on the host into the caller's loss output (when given).
inline void store_loss(const ArrayView& loss_out, double loss) {
  if (loss_out.present) *loss_out.as<double>() = loss;
}

// The backend of a call: CUDA when `choice` says so or any view is a CUDA array (then CUDA must be
// usable: use_cuda), else the CPU. Errors for device='cpu' with a CUDA array and for CUDA arrays
// on two devices, naming the arrays. `gpu` (when given): use_cuda's answer, for a caller that picks
// the backend itself (false for CPU, and for CUDA emulated on the CPU in tests).
inline Device choose_device(DeviceChoice choice, std::initializer_list<const ArrayView*> views,
                            bool* gpu = nullptr) {
  const ArrayView* first_cuda = nullptr;
  for (const ArrayView* v : views) {
    if (!v->present || !v->on_cuda()) continue;
    if (choice == DeviceChoice::cpu)
      throw Error(std::string("device='cpu' but ") + v->name +
                  " is a CUDA array; copy it to the host first (e.g. tensor.cpu().numpy(), "
                  "cupy.asnumpy) or use device='cuda'");
    if (first_cuda && first_cuda->device != v->device)
      throw Error(std::string(v->name) + ": on CUDA device " + std::to_string(v->device) + ", but " +
                  first_cuda->name + " is on CUDA device " + std::to_string(first_cuda->device) +
                  "; pass the arrays of one call on one device");
    if (!first_cuda) first_cuda = v;
  }
  const Device device = (first_cuda || choice == DeviceChoice::cuda) ? Device::cuda : Device::cpu;
  const bool on_gpu = use_cuda(device);  // Error naming what is missing when CUDA cannot run
  if (gpu) *gpu = on_gpu;
  return device;
}

// The outputs not passed by the caller, made like the prompts.
inline void make_outputs(CallSite& site, const ArrayView& prompts,
                         std::initializer_list<std::pair<ArrayView*, std::vector<index_t>>> outs) {
  for (const auto& [out, shape] : outs)
    if (!out->present && out->make) *out = site.make_output(out->name, shape, prompts);
}

// The pointer of a validated view for the typed backends (null when absent).
template <class T>
const T* in(const ArrayView& a) {
  return a.present ? a.as<const T>() : nullptr;
}
template <class T>
T* out(const ArrayView& a) {
  return a.present ? a.as<T>() : nullptr;
}

// f(T{}) with T the C++ type of the prompts' dtype (validated: float32 or float64).
template <class F>
auto with_float(const ArrayView& prompts, F&& f) {
  return prompts.dtype == DType::float32 ? f(float{}) : f(double{});
}

// A host input of a call, for the finiteness messages (null when absent or on the GPU).
template <class T>
NamedInput<T> host_input(const ArrayView& a) {
  const bool host = a.present && !a.on_cuda();
  return {a.name, host ? a.template as<const T>() : nullptr, host ? a.size() : 0};
}

// The CPU kernels flag non-finite outputs while they write them; the GPU kernels do not, so a GPU
// call on host arrays checks its host outputs here: `outputs` are (message name, view) pairs.
template <class T>
void check_host_outputs(std::initializer_list<std::pair<const char*, const ArrayView*>> outputs,
                        std::initializer_list<NamedInput<T>> inputs) {
  for (const auto& [name, out] : outputs)
    if (out->present && !out->on_cuda())
      check_output<T>(all_finite(out->template as<const T>(), out->size()), name, inputs);
}

}  // namespace lsa_native::detail
