// Bindings of the native samplers (sampling.hpp): raw Philox words, variate streams, linear
// prompts and the fused LSA steps. The spec arrives as a dict built by lsa_native.sampling.
#include <pybind11/stl.h>

#include <cstdint>
#include <algorithm>
#include <optional>
#include <string>

#include "lsa_native/multihead.hpp"
#include "lsa_native/sampling.hpp"
#include "array_view.hpp"
#include "numpy_views.hpp"

namespace lsa_native::bindings {
namespace {

// The law named `name`: "fixed" or a row of the table LSA_NATIVE_COVARIANCE_LAWS (sampling.hpp).
CovarianceLaw covariance_law(const std::string& name) {
  if (name == "fixed") return CovarianceLaw::fixed;
  for (const CovarianceLawInfo& law : covariance_laws)
    if (name == law.name) return law.law;
  throw Error("covariance_law: unknown law '" + name + "'");
}

// {name: (parameter names...)} of the random laws, in table order: lsa_native._core.COVARIANCE_LAWS.
py::dict covariance_law_parameters() {
  py::dict out;
  for (const CovarianceLawInfo& law : covariance_laws) {
    py::list params;
    for (const char* param : law.params)
      if (param != nullptr) params.append(param);
    out[law.name] = py::tuple(params);
  }
  return out;
}

// A LinearPromptSpec viewing the arrays of `d` (which the caller keeps alive).
LinearPromptSpec spec_from_dict(const py::dict& d) {
  LinearPromptSpec s;
  s.dim = d["dim"].cast<index_t>();
  s.context = d["context"].cast<index_t>();
  s.seed = d["seed"].cast<std::uint64_t>();
  auto factor = [&](const char* key, const char* name) -> const double* {
    if (!d.contains(key) || d[key].is_none()) return nullptr;
    py::object obj = d[key];
    if (!py::isinstance<CArray<double>>(obj))
      throw Error(std::string(name) + ": expected a C-contiguous float64 array");
    auto a = obj.cast<CArray<double>>();  // a view: no copy for a matching array
    require_shape(a, {s.dim, s.dim}, name);
    return a.data();  // the dict's array owns the data
  };
  s.chol = factor("chol", "Lambda");
  s.query_chol = factor("query_chol", "query_Lambda");
  s.noise_std = d["noise_std"].cast<double>();
  s.query_noise = d["query_noise"].cast<bool>();
  s.tasks = d["tasks"].cast<index_t>();
  s.law = covariance_law(d["law"].cast<std::string>());
  s.law_a = d["law_a"].cast<double>();
  s.law_b = d["law_b"].cast<double>();
  s.law_p = d["law_p"].cast<double>();
  const std::string cov = d["covariates"].cast<std::string>();
  if (cov == "gaussian") s.covariates = Covariates::gaussian;
  else if (cov == "sphere") s.covariates = Covariates::sphere;
  else throw Error("covariates: expected 'gaussian' or 'sphere', got '" + cov + "'");
  validate(s);
  return s;
}

StreamId stream_id(std::uint64_t seed, std::uint32_t step, std::uint32_t prompt, std::uint32_t stream) {
  StreamId id;
  id.seed = seed;
  id.step = step;
  id.prompt = prompt;
  id.stream = stream;
  return id;
}

FusedMethod fused_method(const std::string& method) {
  if (method == "tokens") return FusedMethod::tokens;
  if (method == "wishart") return FusedMethod::wishart;
  throw Error("method: expected 'tokens' or 'wishart', got '" + method + "'");
}

template <class T>
void bind_dtype(py::module_& m) {
  m.def(
      "random_normals",
      [](std::uint64_t seed, std::uint32_t step, std::uint32_t prompt, std::uint32_t stream,
         std::uint64_t start, CArray<T> out) {
        T* o = out_ptr(out, "out");
        const auto n = static_cast<index_t>(out.size());
        py::gil_scoped_release release;
        random_normals(stream_id(seed, step, prompt, stream), start, n, o);
      },
      py::arg("seed"), py::arg("step"), py::arg("prompt"), py::arg("stream"), py::arg("start"),
      py::arg("out").noconvert());
  m.def(
      "random_uniforms",
      [](std::uint64_t seed, std::uint32_t step, std::uint32_t prompt, std::uint32_t stream,
         std::uint64_t start, CArray<T> out) {
        T* o = out_ptr(out, "out");
        const auto n = static_cast<index_t>(out.size());
        py::gil_scoped_release release;
        random_uniforms(stream_id(seed, step, prompt, stream), start, n, o);
      },
      py::arg("seed"), py::arg("step"), py::arg("prompt"), py::arg("stream"), py::arg("start"),
      py::arg("out").noconvert());
  m.def(
      "random_gammas",
      [](std::uint64_t seed, std::uint32_t step, std::uint32_t prompt, std::uint32_t stream,
         std::uint64_t start, double shape, CArray<T> out) {
        T* o = out_ptr(out, "out");
        const auto n = static_cast<index_t>(out.size());
        py::gil_scoped_release release;
        random_gammas(stream_id(seed, step, prompt, stream), start, n, T(shape), o);
      },
      py::arg("seed"), py::arg("step"), py::arg("prompt"), py::arg("stream"), py::arg("start"),
      py::arg("shape"), py::arg("out").noconvert());
  m.def(
      "simd_log",
      [](const CArray<T>& x, CArray<T> out) {
        require_shape(out, {static_cast<index_t>(x.size())}, "out");
        T* o = out_ptr(out, "out");
        py::gil_scoped_release release;
        simd_log(x.data(), static_cast<index_t>(x.size()), o);
      },
      py::arg("x").noconvert(), py::arg("out").noconvert());
  m.def(
      "simd_sincos_2pi",
      [](const CArray<T>& u, CArray<T> s, CArray<T> c) {
        const auto n = static_cast<index_t>(u.size());
        require_shape(s, {n}, "s");
        require_shape(c, {n}, "c");
        T* sp = out_ptr(s, "s");
        T* cp = out_ptr(c, "c");
        py::gil_scoped_release release;
        simd_sincos_2pi(u.data(), n, sp, cp);
      },
      py::arg("u").noconvert(), py::arg("s").noconvert(), py::arg("c").noconvert());
  m.def(
      "sample_linear_prompts",
      [](const py::dict& spec_dict, index_t batch, std::uint32_t step, std::optional<CArray<T>> E,
         std::optional<CArray<T>> y_q, std::optional<CArray<T>> X, std::optional<CArray<T>> y,
         std::optional<CArray<T>> w, std::optional<CArray<T>> x_q, std::optional<CArray<T>> lam) {
        const LinearPromptSpec s = spec_from_dict(spec_dict);  // batch: the dispatcher's check_batch
        const index_t d = s.dim, N = s.context;
        LinearPromptOutputs<T> o;
        o.E = optional_out(E, {batch, d + 1, N + 1}, "E");
        o.y_q = optional_out(y_q, {batch}, "y_q");
        o.X = optional_out(X, {batch, N, d}, "X");
        o.y = optional_out(y, {batch, N}, "y");
        o.w = optional_out(w, {batch, d}, "w");
        o.x_q = optional_out(x_q, {batch, d}, "x_q");
        o.lambda = optional_out(lam, {batch, d}, "lambda");
        py::gil_scoped_release release;
        sample_linear_prompts(s, batch, step, o);
      },
      py::arg("spec"), py::arg("batch"), py::arg("step"), py::arg("E").noconvert() = py::none(),
      py::arg("y_q").noconvert() = py::none(), py::arg("X").noconvert() = py::none(),
      py::arg("y").noconvert() = py::none(), py::arg("w").noconvert() = py::none(),
      py::arg("x_q").noconvert() = py::none(), py::arg("lam").noconvert() = py::none());
}

// sample_linear_prompts on the GPU into CUDA arrays (None: not written): each a writeable
// C-contiguous CUDA array of dtype T and its shape (the one check of these outputs, naming them).
template <class T>
void sample_on_device(const LinearPromptSpec& s, index_t batch, std::uint32_t step,
                      const py::dict& outputs) {
  const index_t d = s.dim, N = s.context;
  py::list keep;
  auto out = [&](const char* name, std::vector<index_t> shape) -> T* {
    const py::object obj = outputs[name];
    if (obj.is_none()) return nullptr;
    const ArrayView v = fused_operand<T>(obj, name, shape, Device::cuda, true, keep);
    if (!v.on_cuda())
      throw ArgumentTypeError(std::string(name) + ": expected a CUDA array with device='cuda' (the "
                              "prompts are drawn on the GPU), got " +
                              std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
    return v.as<T>();
  };
  LinearPromptOutputs<T> o;
  o.E = out("E", {batch, d + 1, N + 1});
  o.y_q = out("y_q", {batch});
  o.X = out("X", {batch, N, d});
  o.y = out("y", {batch, N});
  o.w = out("w", {batch, d});
  o.x_q = out("x_q", {batch, d});
  o.lambda = out("lam", {batch, d});
  py::gil_scoped_release release;
  sample_linear_prompts(s, batch, step, o, Device::cuda);
}

// The fused sampled step on array views (one binding for both dtypes: W_pv's picks T).
template <class T>
double fused_step(const LinearPromptSpec& s, index_t batch, std::uint32_t step, FusedMethod fm,
                  const py::object& W_pv, const py::object& W_kq, const py::object& d_W_pv,
                  const py::object& d_W_kq, Device dev, const py::object& loss) {
  const index_t r = s.dim + 1;
  py::list keep;  // the parameters and outputs: host or (device='cuda') CUDA arrays
  const ArrayView pv = fused_operand<T>(W_pv, "W_pv", {r, r}, dev, false, keep),
                  kq = fused_operand<T>(W_kq, "W_kq", {r, r}, dev, false, keep),
                  dpv = fused_operand<T>(d_W_pv, "d_W_pv", {r, r}, dev, true, keep),
                  dkq = fused_operand<T>(d_W_kq, "d_W_kq", {r, r}, dev, true, keep);
  double* loss_out = nullptr;
  if (!loss.is_none())
    loss_out = fused_operand<double>(loss, "loss", {1}, dev, true, keep).as<double>();
  py::gil_scoped_release release;
  return linear_prompts_lsa_loss_and_grad(s, batch, step, fm, pv.as<const T>(), kq.as<const T>(),
                                          dpv.as<T>(), dkq.as<T>(), dev, loss_out);
}

// The fused H-head step on array views (host arrays, or CUDA arrays with device='cuda'; W_pv's
// dtype picks T).
template <class T>
double multihead_fused_step(const LinearPromptSpec& s, index_t batch, std::uint32_t step,
                            FusedMethod fm, index_t H, const py::object& W_pv, const py::object& W_kq,
                            const py::object& d_W_pv, const py::object& d_W_kq, Device dev,
                            const py::object& loss) {
  const index_t r = s.dim + 1;
  py::list keep;
  const ArrayView pv = fused_operand<T>(W_pv, "W_pv", {H, r, r}, dev, false, keep),
                  kq = fused_operand<T>(W_kq, "W_kq", {H, r, r}, dev, false, keep),
                  dpv = fused_operand<T>(d_W_pv, "d_W_pv", {H, r, r}, dev, true, keep),
                  dkq = fused_operand<T>(d_W_kq, "d_W_kq", {H, r, r}, dev, true, keep);
  double* loss_out = nullptr;
  if (!loss.is_none())
    loss_out = fused_operand<double>(loss, "loss", {1}, dev, true, keep).as<double>();
  py::gil_scoped_release release;
  return linear_prompts_multihead_loss_and_grad(s, batch, step, fm, H, pv.as<const T>(),
                                                kq.as<const T>(), dpv.as<T>(), dkq.as<T>(), dev,
                                                loss_out);
}

// "cpu" or "cuda" (the device= of the fused steps).
Device fused_device(const std::string& device) {
  if (device != "cpu" && device != "cuda")
    throw Error("device: expected 'cpu' or 'cuda', got '" + device + "'");
  return device == "cuda" ? Device::cuda : Device::cpu;
}

void bind_fused_step(py::module_& m) {
  m.def(
      "sample_linear_prompts_cuda",
      [](const py::dict& spec_dict, index_t batch, std::uint32_t step, const py::object& dtype,
         const py::object& E, const py::object& y_q, const py::object& X, const py::object& y,
         const py::object& w, const py::object& x_q, const py::object& lam) {
        const LinearPromptSpec s = spec_from_dict(spec_dict);  // batch: the dispatcher's check_batch
        py::dict outputs;
        outputs["E"] = E, outputs["y_q"] = y_q, outputs["X"] = X, outputs["y"] = y;
        outputs["w"] = w, outputs["x_q"] = x_q, outputs["lam"] = lam;
        const py::dtype dt = py::dtype::from_args(dtype);
        if (dt.equal(py::dtype::of<float>()))
          sample_on_device<float>(s, batch, step, outputs);
        else if (dt.equal(py::dtype::of<double>()))
          sample_on_device<double>(s, batch, step, outputs);
        else
          throw ArgumentTypeError("dtype: expected float32 or float64, got " + std::string(py::str(dt)));
      },
      py::arg("spec"), py::arg("batch"), py::arg("step"), py::arg("dtype"),
      py::arg("E") = py::none(), py::arg("y_q") = py::none(), py::arg("X") = py::none(),
      py::arg("y") = py::none(), py::arg("w") = py::none(), py::arg("x_q") = py::none(),
      py::arg("lam") = py::none(),
      "sample_linear_prompts on the GPU: the prompts of `step` written into the given outputs "
      "(writeable C-contiguous CUDA arrays of `dtype`, float32 or float64, checked here; None: "
      "not written). Only queues the kernel.");
  m.def(
      "linear_prompts_lsa_loss_and_grad",
      [](const py::dict& spec_dict, index_t batch, std::uint32_t step, const std::string& method,
         const py::object& W_pv, const py::object& W_kq, const py::object& d_W_pv,
         const py::object& d_W_kq, const std::string& device, const py::object& loss) {
        const LinearPromptSpec s = spec_from_dict(spec_dict);
        const FusedMethod fm = fused_method(method);
        const Device dev = fused_device(device);
        py::list keep;
        const bool single = array_view(W_pv, "W_pv", keep).dtype == DType::float32;
        return single ? fused_step<float>(s, batch, step, fm, W_pv, W_kq, d_W_pv, d_W_kq, dev, loss)
                      : fused_step<double>(s, batch, step, fm, W_pv, W_kq, d_W_pv, d_W_kq, dev, loss);
      },
      py::arg("spec"), py::arg("batch"), py::arg("step"), py::arg("method"), py::arg("W_pv"),
      py::arg("W_kq"), py::arg("d_W_pv"), py::arg("d_W_kq"), py::arg("device") = "cpu",
      py::arg("loss") = py::none(),
      "The fused sampled LSA step: (loss, d_W_pv, d_W_kq written in place). W_pv, W_kq and the "
      "outputs: C-contiguous arrays of one dtype (float32 or float64), host arrays or "
      "(device='cuda') CUDA arrays; loss: float64 [1] (written there, NaN returned: on the GPU "
      "nothing waits).");
  m.def(
      "linear_prompts_multihead_loss_and_grad",
      [](const py::dict& spec_dict, index_t batch, std::uint32_t step, const std::string& method,
         const py::object& W_pv, const py::object& W_kq, const py::object& d_W_pv,
         const py::object& d_W_kq, const std::string& device, const py::object& loss) {
        const LinearPromptSpec s = spec_from_dict(spec_dict);
        const FusedMethod fm = fused_method(method);
        const Device dev = fused_device(device);
        py::list keep;
        const ArrayView pv = array_view(W_pv, "W_pv", keep);
        if (pv.shape.size() != 3)
          throw Error("W_pv: expected shape (H, d+1, d+1), got " + shape_string(pv.shape));
        return pv.dtype == DType::float32
                   ? multihead_fused_step<float>(s, batch, step, fm, pv.shape[0], W_pv, W_kq, d_W_pv,
                                                 d_W_kq, dev, loss)
                   : multihead_fused_step<double>(s, batch, step, fm, pv.shape[0], W_pv, W_kq,
                                                  d_W_pv, d_W_kq, dev, loss);
      },
      py::arg("spec"), py::arg("batch"), py::arg("step"), py::arg("method"), py::arg("W_pv"),
      py::arg("W_kq"), py::arg("d_W_pv"), py::arg("d_W_kq"), py::arg("device") = "cpu",
      py::arg("loss") = py::none(),
      "(L) of multihead.hpp's linear_prompts_multihead_loss_and_grad: the fused H-head step, the "
      "gradients written into d_W_pv, d_W_kq [H, d+1, d+1] (C-contiguous arrays of one dtype: host "
      "arrays, or with device='cuda' CUDA arrays); loss: float64 [1] (written there, NaN returned: "
      "on the GPU nothing waits).");
}

}  // namespace

void bind_sampling(py::module_& m) {
  m.def(
      "philox4x32",
      [](const CArray<std::uint32_t>& counters, std::uint64_t seed) {
        if (counters.ndim() != 2 || counters.shape(1) != 4)
          throw Error("counters: expected shape (n, 4), got " + shape_string(counters));
        const index_t n = counters.shape(0);
        CArray<std::uint32_t> out({static_cast<py::ssize_t>(n), py::ssize_t(4)});
        std::uint32_t* o = out.mutable_data();
        {
          py::gil_scoped_release release;
          philox4x32_10(counters.data(), n, seed, o);
        }
        return out;
      },
      py::arg("counters").noconvert(), py::arg("seed"),
      "Philox4x32-10 words of counters [n, 4] under key = (low, high) words of the 64-bit seed.");
  bind_dtype<float>(m);
  bind_dtype<double>(m);
  bind_fused_step(m);
  m.attr("COVARIANCE_LAWS") = covariance_law_parameters();
}

}  // namespace lsa_native::bindings
