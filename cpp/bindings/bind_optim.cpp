// Binding of optimizer_step (lsa_native/optim.hpp) for lsa_native.train's native optimizer step
// (train/native_optim.py). Private and pointer-based: that module owns every buffer (host numpy
// arrays or device arrays allocated once per run), checks them once, and passes their addresses
// at each step, so that a step costs one call and no conversions. The step's scalars come as a
// host float64 array in the order of `optimizer_step_fields`.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "lsa_native/optim.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native::bindings {

namespace py = pybind11;

namespace {

// The fields of OptimizerStep, in the order of the scalar array (the one list: Python reads it).
constexpr const char* kFields[] = {"rule", "lr", "weight_decay", "decoupled_decay", "momentum",
                                   "one_minus_dampening", "nesterov", "first", "beta1",
                                   "one_minus_beta1", "beta2", "one_minus_beta2", "eps", "amsgrad",
                                   "bias1", "bias2", "clip_norm", "step_index"};
constexpr int kFieldCount = sizeof(kFields) / sizeof(kFields[0]);

OptimizerStep step_from(const double* v) {
  OptimizerStep s;
  s.rule = int(v[0]);
  s.lr = v[1];
  s.weight_decay = v[2];
  s.decoupled_decay = v[3];
  s.momentum = v[4];
  s.one_minus_dampening = v[5];
  s.nesterov = int(v[6]);
  s.first = int(v[7]);
  s.beta1 = v[8];
  s.one_minus_beta1 = v[9];
  s.beta2 = v[10];
  s.one_minus_beta2 = v[11];
  s.eps = v[12];
  s.amsgrad = int(v[13]);
  s.bias1 = v[14];
  s.bias2 = v[15];
  s.clip_norm = v[16];
  s.step_index = v[17];
  return s;
}
static_assert(kFieldCount == 18, "step_from reads every field");

template <class P>
P* at(std::uintptr_t address) {
  return reinterpret_cast<P*>(address);
}

template <class T>
void step(std::uintptr_t scalars, index_t n, std::uintptr_t theta_in, std::uintptr_t theta_out,
          std::uintptr_t grad, const OptimizerState& state, double norm, std::uintptr_t status,
          std::uintptr_t model_copy, Device device) {
  optimizer_step<T>(step_from(at<const double>(scalars)), n, at<const double>(theta_in),
                    at<double>(theta_out), at<const T>(grad), state, norm, at<double>(status),
                    at<T>(model_copy), device);
}

}  // namespace

void bind_optim(py::module_& m) {
  py::tuple fields(kFieldCount);
  for (int i = 0; i < kFieldCount; ++i) fields[i] = kFields[i];
  m.attr("optimizer_step_fields") = fields;
  m.def(
      "optimizer_step",
      [](std::uintptr_t scalars, index_t n, std::uintptr_t theta_in, std::uintptr_t theta_out,
         std::uintptr_t grad, std::uintptr_t exp_avg, std::uintptr_t exp_avg_sq,
         std::uintptr_t max_exp_avg_sq, std::uintptr_t momentum_buffer, double norm,
         std::uintptr_t status, std::uintptr_t model_copy, const std::string& grad_dtype,
         const std::string& device, std::uintptr_t loss, std::uintptr_t rates) {
        detail::require(scalars != 0, "scalars: null pointer");
        detail::require(device == "cpu" || device == "cuda", "device: expected 'cpu' or 'cuda'");
        const Device dev = device == "cuda" ? Device::cuda : Device::cpu;
        OptimizerState st;
        st.exp_avg = at<double>(exp_avg);
        st.exp_avg_sq = at<double>(exp_avg_sq);
        st.max_exp_avg_sq = at<double>(max_exp_avg_sq);
        st.momentum_buffer = at<double>(momentum_buffer);
        st.loss = at<const double>(loss);
        st.rates = at<const double>(rates);
        py::gil_scoped_release release;
        if (grad_dtype == "float32")
          step<float>(scalars, n, theta_in, theta_out, grad, st, norm, status, model_copy, dev);
        else if (grad_dtype == "float64")
          step<double>(scalars, n, theta_in, theta_out, grad, st, norm, status, model_copy, dev);
        else
          throw Error("grad_dtype: expected 'float32' or 'float64', got '" + grad_dtype + "'");
      },
      py::arg("scalars"), py::arg("n"), py::arg("theta_in"), py::arg("theta_out"), py::arg("grad"),
      py::arg("exp_avg"), py::arg("exp_avg_sq"), py::arg("max_exp_avg_sq"),
      py::arg("momentum_buffer"), py::arg("norm"), py::arg("status"), py::arg("model_copy"),
      py::arg("grad_dtype"), py::arg("device"), py::arg("loss") = 0, py::arg("rates") = 0,
      "One optimizer step on buffers given by address (private: lsa_native.train.native_optim "
      "owns and checks them). scalars: host float64 [len(optimizer_step_fields)]; status: 3 "
      "doubles (norm, code, step of the first failure) in the memory of `device`; loss: the step's "
      "loss (one double there; a non-finite one records code 3 and leaves θ alone); rates: n doubles "
      "there, each entry's rate factor (η·rates[i]; 0 where an entry is not a parameter, its "
      "gradient read as 0); 0 = null.");
}

}  // namespace lsa_native::bindings
