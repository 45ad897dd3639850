// Bindings of the exact population losses and the native gradient flow (population.hpp).
#include <pybind11/stl.h>

#include <cmath>
#include <string>

#include "lsa_native/population.hpp"
#include "lsa_native/population_multihead.hpp"
#include "numpy_views.hpp"

namespace lsa_native::bindings {
namespace {

using Arr = CArray<double>;

index_t param_dim(const Arr& W_pv, const Arr& W_kq) {
  if (W_pv.ndim() != 2 || W_pv.shape(0) != W_pv.shape(1) || W_pv.shape(0) < 2)
    throw Error("W_pv: expected shape (d+1, d+1) with d >= 1, got " + shape_string(W_pv));
  const index_t d = W_pv.shape(0) - 1;
  require_shape(W_kq, {d + 1, d + 1}, "W_kq");
  return d;
}

// The objective selected by `kind` over θ = (W_pv.flat, W_kq.flat), reading `data`:
// "fixed": Λ [d, d]; "random_diagonal": moments [3, d]; "samples": Λ samples [S, d, d].
LossAndGrad population_objective(const std::string& kind, index_t d, const Arr& data, index_t N,
                                 const LabelNoise& noise = {}) {
  const double* p = data.data();
  const index_t n2 = (d + 1) * (d + 1);
  if (kind == "fixed") {
    require_shape(data, {d, d}, "Lambda");
    return [=](const double* th, double* g) {
      return population_loss(d, th, th + n2, p, N, g, g + n2, noise);
    };
  }
  if (kind == "random_diagonal") {
    require_shape(data, {3, d}, "moments");
    return [=](const double* th, double* g) {
      return population_loss_random_diagonal(d, th, th + n2, p, N, g, g + n2, noise);
    };
  }
  if (kind == "samples") {
    if (data.ndim() != 3) throw Error("Lambdas: expected shape (S, d, d), got " + shape_string(data));
    require_shape(data, {data.shape(0), d, d}, "Lambdas");
    const index_t S = data.shape(0);
    return [=](const double* th, double* g) {
      return population_loss_samples(d, th, th + n2, p, S, N, g, g + n2, noise);
    };
  }
  throw Error("kind: expected 'fixed', 'random_diagonal' or 'samples', got '" + kind + "'");
}

py::dict run_flow(const LossAndGrad& f, std::vector<double> theta0, const std::vector<double>& times,
                  const std::string& method, double rtol, double atol, double step, double grad_tol,
                  double loss_target, double gap_tol, index_t max_steps) {
  FlowOptions o;
  if (method == "dopri5") o.method = FlowOptions::Method::dopri5;
  else if (method == "rk4") o.method = FlowOptions::Method::rk4;
  else if (method == "rosenbrock") o.method = FlowOptions::Method::rosenbrock;
  else if (method == "auto") o.method = FlowOptions::Method::automatic;
  else
    throw Error("method: expected 'dopri5', 'rk4', 'rosenbrock' or 'auto', got '" + method + "'");
  o.rtol = rtol;
  o.atol = atol;
  o.step = step;
  o.grad_tol = grad_tol;
  o.loss_target = loss_target;
  o.gap_tol = gap_tol;
  o.max_steps = max_steps;
  FlowResult r;
  {
    py::gil_scoped_release release;
    r = gradient_flow(f, theta0, times, o);
  }
  const auto n = static_cast<py::ssize_t>(theta0.size());
  const auto k = static_cast<py::ssize_t>(r.times.size());
  Arr thetas({k, n});
  std::copy(r.thetas.begin(), r.thetas.end(), thetas.mutable_data());
  py::dict out;
  out["times"] = Arr(k, r.times.data());
  out["thetas"] = thetas;
  out["losses"] = Arr(k, r.losses.data());
  out["final_time"] = r.final_time;
  out["final_theta"] = Arr(n, r.final_theta.data());
  out["final_loss"] = r.final_loss;
  out["steps"] = r.steps;
  out["rejected_steps"] = r.rejected_steps;
  out["gradient_evaluations"] = r.gradient_evaluations;
  out["jacobian_evaluations"] = r.jacobian_evaluations;
  out["factorizations"] = r.factorizations;
  out["stiff_steps"] = r.stiff_steps;
  out["switch_time"] = r.switch_time >= 0 ? py::object(py::float_(r.switch_time)) : py::none();
  out["method"] = r.method_used;
  out["stopped_by_tolerance"] = r.stopped_by_tolerance;
  return out;
}

// ---- H heads (population_multihead.hpp) ----

// θ = (W_pv, W_kq) flattened (merged, rank 0) or (W_pv, W_k, W_q) (separate, rank r), and the
// multi-head loss over it for the covariance law `law` ("fixed": Λ [d, d]; "random_diagonal":
// moments [3, d]).
struct MultiheadProblem {
  index_t d = 0, heads = 0, rank = 0;
  PopulationCovariance law = PopulationCovariance::fixed;
  std::vector<const Arr*> arrays;  // W_pv, then keys: θ's parts (the call's own arrays)
  std::vector<index_t> sizes;      // entries of each array in θ
  std::vector<double> theta() const {
    std::vector<double> th;
    for (const Arr* a : arrays) th.insert(th.end(), a->data(), a->data() + a->size());
    return th;
  }
};

MultiheadProblem multihead_problem(const std::string& law, const Arr& W_pv,
                                   const std::vector<Arr>& keys, const Arr& data) {
  MultiheadProblem p;
  if (W_pv.ndim() != 3 || W_pv.shape(1) != W_pv.shape(2) || W_pv.shape(1) < 2 || W_pv.shape(0) < 1)
    throw Error("W_pv: expected shape (H, d+1, d+1) with H >= 1, d >= 1, got " + shape_string(W_pv));
  p.heads = W_pv.shape(0);
  p.d = W_pv.shape(1) - 1;
  const index_t n1 = p.d + 1;
  p.arrays = {&W_pv};
  if (keys.size() == 1) {
    require_shape(keys[0], {p.heads, n1, n1}, "W_kq");
    p.arrays.push_back(&keys[0]);
  } else {
    if (keys[0].ndim() != 3 || keys[0].shape(0) != p.heads || keys[0].shape(2) != n1)
      throw Error("W_k: expected shape (H, r, d+1) = (" + std::to_string(p.heads) + ", r, " +
                  std::to_string(n1) + "), got " + shape_string(keys[0]));
    p.rank = keys[0].shape(1);
    detail::require(p.rank >= 1 && p.rank <= n1, "W_k: rank r = " + std::to_string(p.rank) +
                                                     " out of range 1 <= r <= d+1 = " + std::to_string(n1));
    require_shape(keys[1], {p.heads, p.rank, n1}, "W_q");
    p.arrays.push_back(&keys[0]);
    p.arrays.push_back(&keys[1]);
  }
  for (const Arr* a : p.arrays) p.sizes.push_back(a->size());
  if (law == "fixed") {
    require_shape(data, {p.d, p.d}, "Lambda");
  } else if (law == "random_diagonal") {
    require_shape(data, {3, p.d}, "moments");
    p.law = PopulationCovariance::random_diagonal;
  } else {
    throw Error("law: expected 'fixed' or 'random_diagonal', got '" + law + "'");
  }
  return p;
}

LossAndGrad multihead_objective(const MultiheadProblem& p, const double* data, index_t N,
                                const LabelNoise& noise) {
  const index_t d = p.d, H = p.heads, r = p.rank, s0 = p.sizes[0], s1 = p.sizes[1];
  const PopulationCovariance law = p.law;
  check_multihead_population_law(d, law, data);  // once per flow, not per evaluation
  if (r == 0)
    return [=](const double* th, double* g) {
      return multihead_population_loss(d, H, th, th + s0, law, data, N, g, g ? g + s0 : nullptr, noise,
                                       true);
    };
  return [=](const double* th, double* g) {
    return multihead_population_loss_separate(d, H, r, th, th + s0, th + s0 + s1, law, data, N, g,
                                              g ? g + s0 : nullptr, g ? g + s0 + s1 : nullptr, noise,
                                              true);
  };
}

// The entries of θ that reach ŷ (the flow runs on these only; the others have zero gradient and
// stay put): W_pv[h, d, :], then W_kq[h, :, :d] (merged) or all of W_k and W_q[h, :, :d].
std::vector<index_t> effective_entries(const MultiheadProblem& p) {
  const index_t d = p.d, n1 = d + 1;
  std::vector<index_t> idx;
  for (index_t h = 0; h < p.heads; ++h)
    for (index_t c = 0; c <= d; ++c) idx.push_back(h * n1 * n1 + d * n1 + c);
  index_t base = p.sizes[0];
  if (p.rank == 0) {
    for (index_t h = 0; h < p.heads; ++h)
      for (index_t r = 0; r <= d; ++r)
        for (index_t c = 0; c < d; ++c) idx.push_back(base + h * n1 * n1 + r * n1 + c);
    return idx;
  }
  for (index_t i = 0; i < p.sizes[1]; ++i) idx.push_back(base + i);
  base += p.sizes[1];
  for (index_t row = 0; row < p.heads * p.rank; ++row)
    for (index_t c = 0; c < d; ++c) idx.push_back(base + row * n1 + c);
  return idx;
}

// f restricted to the entries idx of θ, the other entries held at theta_full's values.
LossAndGrad on_entries(LossAndGrad f, std::vector<double> theta_full, std::vector<index_t> idx) {
  return [f = std::move(f), theta_full = std::move(theta_full), idx = std::move(idx)](
             const double* th, double* g) {
    std::vector<double> x = theta_full, gx(g ? x.size() : 0);  // per call: thread-safe
    for (size_t k = 0; k < idx.size(); ++k) x[idx[k]] = th[k];
    const double loss = f(x.data(), g ? gx.data() : nullptr);
    if (g)
      for (size_t k = 0; k < idx.size(); ++k) g[k] = gx[idx[k]];
    return loss;
  };
}

LabelNoise label_noise(double std, bool query) {
  LabelNoise noise;
  noise.std = std;
  noise.query = query;
  return noise;
}

}  // namespace

void bind_population(py::module_& m) {
  m.def(
      "population_loss",
      [](const std::string& kind, const Arr& W_pv, const Arr& W_kq, const Arr& data, index_t N,
         double noise_std, bool query_noise) {
        const index_t d = param_dim(W_pv, W_kq);
        LabelNoise noise;
        noise.std = noise_std;
        noise.query = query_noise;
        const LossAndGrad f = population_objective(kind, d, data, N, noise);
        Arr d_W_pv({d + 1, d + 1}), d_W_kq({d + 1, d + 1});
        std::vector<double> theta(W_pv.data(), W_pv.data() + W_pv.size());
        theta.insert(theta.end(), W_kq.data(), W_kq.data() + W_kq.size());
        std::vector<double> grad(theta.size());
        double loss;
        {
          py::gil_scoped_release release;
          loss = f(theta.data(), grad.data());
        }
        std::copy(grad.begin(), grad.begin() + W_pv.size(), d_W_pv.mutable_data());
        std::copy(grad.begin() + W_pv.size(), grad.end(), d_W_kq.mutable_data());
        return py::make_tuple(loss, d_W_pv, d_W_kq);
      },
      py::arg("kind"), py::arg("W_pv").noconvert(), py::arg("W_kq").noconvert(),
      py::arg("data").noconvert(), py::arg("N"), py::arg("noise_std") = 0.0,
      py::arg("query_noise") = false);
  m.def(
      "reduced_loss",
      [](const Arr& U11, double u, const Arr& Lambda, index_t N) {
        if (U11.ndim() != 2 || U11.shape(0) != U11.shape(1))
          throw Error("U11: expected a square (d, d) array, got " + shape_string(U11));
        const index_t d = U11.shape(0);
        require_shape(Lambda, {d, d}, "Lambda");
        Arr d_U11({d, d});
        double d_u = 0, loss;
        double* dU = d_U11.mutable_data();
        {
          py::gil_scoped_release release;
          loss = reduced_loss(d, U11.data(), u, Lambda.data(), N, dU, &d_u);
        }
        return py::make_tuple(loss, d_U11, d_u);
      },
      py::arg("U11").noconvert(), py::arg("u"), py::arg("Lambda").noconvert(), py::arg("N"));
  m.def(
      "gradient_flow_population",
      [](const std::string& kind, const Arr& W_pv, const Arr& W_kq, const Arr& data, index_t N,
         const std::vector<double>& times, const std::string& method, double rtol, double atol,
         double step, double grad_tol, double loss_target, double gap_tol, index_t max_steps,
         double noise_std, bool query_noise) {
        const index_t d = param_dim(W_pv, W_kq);
        std::vector<double> theta(W_pv.data(), W_pv.data() + W_pv.size());
        theta.insert(theta.end(), W_kq.data(), W_kq.data() + W_kq.size());
        LabelNoise noise;
        noise.std = noise_std;
        noise.query = query_noise;
        return run_flow(population_objective(kind, d, data, N, noise), theta, times, method, rtol,
                        atol, step, grad_tol, loss_target, gap_tol, max_steps);
      },
      py::arg("kind"), py::arg("W_pv").noconvert(), py::arg("W_kq").noconvert(),
      py::arg("data").noconvert(), py::arg("N"), py::arg("times"), py::arg("method"),
      py::arg("rtol"), py::arg("atol"), py::arg("step"), py::arg("grad_tol"),
      py::arg("loss_target"), py::arg("gap_tol"), py::arg("max_steps"), py::arg("noise_std") = 0.0,
      py::arg("query_noise") = false);
  m.def(
      "gradient_flow_reduced",
      [](const Arr& U11, double u, const Arr& Lambda, index_t N, const std::vector<double>& times,
         const std::string& method, double rtol, double atol, double step, double grad_tol,
         double loss_target, double gap_tol, index_t max_steps) {
        if (U11.ndim() != 2 || U11.shape(0) != U11.shape(1))
          throw Error("U11: expected a square (d, d) array, got " + shape_string(U11));
        const index_t d = U11.shape(0);
        require_shape(Lambda, {d, d}, "Lambda");
        const double* L = Lambda.data();
        std::vector<double> theta(U11.data(), U11.data() + U11.size());
        theta.push_back(u);
        const LossAndGrad f = [=](const double* th, double* g) {
          return reduced_loss(d, th, th[d * d], L, N, g, g + d * d);
        };
        return run_flow(f, theta, times, method, rtol, atol, step, grad_tol, loss_target, gap_tol,
                        max_steps);
      },
      py::arg("U11").noconvert(), py::arg("u"), py::arg("Lambda").noconvert(), py::arg("N"),
      py::arg("times"), py::arg("method"), py::arg("rtol"), py::arg("atol"), py::arg("step"),
      py::arg("grad_tol"), py::arg("loss_target"), py::arg("gap_tol"), py::arg("max_steps"));
  m.def(
      "multihead_population_loss",
      [](const std::string& law, const Arr& W_pv, const std::vector<Arr>& keys, const Arr& data,
         index_t N, double noise_std, bool query_noise) {
        if (keys.size() != 1 && keys.size() != 2)
          throw Error("keys: expected [W_kq] (merged) or [W_k, W_q] (separate)");
        const MultiheadProblem p = multihead_problem(law, W_pv, keys, data);
        const LabelNoise noise = label_noise(noise_std, query_noise);
        // the gradients written straight into the returned arrays, θ read from the call's own
        std::vector<Arr> grads;
        for (const Arr* a : p.arrays) grads.emplace_back(std::vector<py::ssize_t>(a->shape(), a->shape() + 3));
        std::vector<double*> g;
        for (Arr& a : grads) g.push_back(a.mutable_data());
        const double *th0 = W_pv.data(), *th1 = keys[0].data(), *th2 = keys.back().data();
        double loss;
        bool finite;
        {
          py::gil_scoped_release release;
          loss = p.rank == 0 ? multihead_population_loss(p.d, p.heads, th0, th1, p.law, data.data(), N,
                                                         g[0], g[1], noise)
                             : multihead_population_loss_separate(p.d, p.heads, p.rank, th0, th1, th2,
                                                                  p.law, data.data(), N, g[0], g[1],
                                                                  g[2], noise);
          bool bad = !std::isfinite(loss);  // no early exit: the loops vectorise
          for (size_t k = 0; k < g.size(); ++k)
            for (index_t i = 0; i < p.sizes[k]; ++i) bad |= !std::isfinite(g[k][i]);
          finite = !bad;
        }
        if (!finite)
          throw NonFiniteError("multihead_loss_and_grad: the loss or its gradient overflowed to a "
                               "non-finite value from finite parameters; rescale W_pv/W_kq");
        py::tuple out(1 + grads.size());
        out[0] = loss;
        for (size_t k = 0; k < grads.size(); ++k) out[k + 1] = grads[k];
        return out;
      },
      py::arg("law"), py::arg("W_pv").noconvert(), py::arg("keys"), py::arg("data").noconvert(),
      py::arg("N"), py::arg("noise_std") = 0.0, py::arg("query_noise") = false);
  m.def(
      "gradient_flow_multihead",
      [](const std::string& law, const Arr& W_pv, const std::vector<Arr>& keys, const Arr& data,
         index_t N, const std::vector<double>& times, const std::string& method, double rtol,
         double atol, double step, double grad_tol, double loss_target, double gap_tol,
         index_t max_steps, double noise_std, bool query_noise) {
        if (keys.size() != 1 && keys.size() != 2)
          throw Error("keys: expected [W_kq] (merged) or [W_k, W_q] (separate)");
        const MultiheadProblem p = multihead_problem(law, W_pv, keys, data);
        const std::vector<index_t> idx = effective_entries(p);
        const std::vector<double> theta = p.theta();
        std::vector<double> theta0(idx.size());
        for (size_t k = 0; k < idx.size(); ++k) theta0[k] = theta[idx[k]];
        py::dict out = run_flow(
            on_entries(multihead_objective(p, data.data(), N, label_noise(noise_std, query_noise)),
                       theta, idx),
            theta0, times, method, rtol, atol, step, grad_tol, loss_target, gap_tol, max_steps);
        // back to full-size θ (the entries that do not reach ŷ keep their initial values)
        const Arr eff = out["thetas"].cast<Arr>(), eff_final = out["final_theta"].cast<Arr>();
        const auto n = static_cast<py::ssize_t>(theta.size());
        Arr thetas({eff.shape(0), n}), final_theta(n);
        for (py::ssize_t t = 0; t <= eff.shape(0); ++t) {
          double* row = t < eff.shape(0) ? thetas.mutable_data() + t * n : final_theta.mutable_data();
          const double* src = t < eff.shape(0) ? eff.data() + t * eff.shape(1) : eff_final.data();
          std::copy(theta.begin(), theta.end(), row);
          for (size_t k = 0; k < idx.size(); ++k) row[idx[k]] = src[k];
        }
        out["thetas"] = thetas;
        out["final_theta"] = final_theta;
        return out;
      },
      py::arg("law"), py::arg("W_pv").noconvert(), py::arg("keys"), py::arg("data").noconvert(),
      py::arg("N"), py::arg("times"), py::arg("method"), py::arg("rtol"), py::arg("atol"),
      py::arg("step"), py::arg("grad_tol"), py::arg("loss_target"), py::arg("gap_tol"),
      py::arg("max_steps"), py::arg("noise_std") = 0.0, py::arg("query_noise") = false);
}

}  // namespace lsa_native::bindings
