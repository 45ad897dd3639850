// Gradient flow dθ/dt = −∇L(θ) [ZFB (3.9)]: adaptive Dormand–Prince 5(4) or fixed-step RK4.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "common/interrupt.hpp"
#include "common/small_matrix.hpp"
#include "lsa_native/population.hpp"

namespace lsa_native {
namespace {

double norm2(const std::vector<double>& v) {
  return std::sqrt(detail::dot(v.data(), v.data(), static_cast<int>(v.size())));
}

class Flow {
 public:
  Flow(const LossAndGrad& f, std::vector<double> theta, const FlowOptions& o, FlowResult& r,
       double final_time)
      : f_(f), o_(o), r_(r), n_(theta.size()), y_(std::move(theta)), k1_(n_), h_(o.step),
        final_time_(final_time) {
    loss_ = eval(y_, k1_);  // k = −∇L
    detail::require(finite(loss_, k1_),
                    "gradient_flow: the loss or its gradient is non-finite at the initial parameters");
  }

  // Advances to time `target`; false when a stopping tolerance was met first.
  bool advance_to(double target) {
    while (t_ < target) {
      detail::poll_interrupt();
      if (r_.steps >= o_.max_steps)
        throw Error("gradient_flow: max_steps = " + std::to_string(o_.max_steps) +
                    " exceeded at t = " + std::to_string(t_) + " before reaching t = " +
                    std::to_string(target) + "; raise max_steps or request shorter times");
      const double h = std::min(h_, target - t_);
      const bool landing = h == target - t_;
      if (o_.method == FlowOptions::Method::rk4) {
        rk4_step(h);
      } else if (!dopri5_step(h)) {
        continue;  // rejected: h_ was reduced
      }
      if (landing) t_ = target;  // no drift past the requested time
      ++r_.steps;
      if (converged()) return false;
      refuse_hopeless_request();
    }
    return true;
  }
  double time() const { return t_; }
  double loss() const { return loss_; }
  const std::vector<double>& theta() const { return y_; }

 private:
  // L(y) with k = −∇L(y); the caller checks finiteness (a trial stage may overflow).
  double eval(const std::vector<double>& y, std::vector<double>& k) {
    for (double v : y)  // an overflowed trial state: objectives refuse non-finite parameters
      if (!std::isfinite(v)) return std::numeric_limits<double>::quiet_NaN();
    const double loss = f_(y.data(), k.data());
    for (double& v : k) v = -v;
    ++r_.gradient_evaluations;
    return loss;
  }
  static bool finite(double loss, const std::vector<double>& k) {
    if (!std::isfinite(loss)) return false;
    for (double v : k)
      if (!std::isfinite(v)) return false;
    return true;
  }
  [[noreturn]] void diverged(double h, const char* hint) const {
    throw Error("gradient_flow: diverged at t = " + std::to_string(t_) +
                ": the loss or its gradient is non-finite after a step of " + std::to_string(h) +
                "; " + hint);
  }
  // Near a minimum explicit DOPRI5 is stability-limited: the step stops growing and the step count
  // grows linearly with the time span (e.g. ~18 steps per unit time for d = 3, so t = 1e7 needs
  // ~2e8 steps). Once max_steps/100 steps (at least 10000) are done, a request whose projection at
  // the recent rate (the last 1024 steps) exceeds 10 x max_steps is refused then, in seconds,
  // instead of after max_steps steps (minutes). Early transients (small steps) are not projected;
  // nor are flows with a stopping tolerance, which may end early.
  void refuse_hopeless_request() {
    if (o_.method != FlowOptions::Method::dopri5 || o_.grad_tol > 0 || o_.gap_tol > 0) return;
    if (r_.steps % 1024 != 0) return;
    const double window_time = t_ - window_start_;
    window_start_ = t_;
    if (r_.steps < std::max<index_t>(10000, o_.max_steps / 100) || !(window_time > 0)) return;
    const double projected = double(r_.steps) + 1024.0 / window_time * (final_time_ - t_);
    if (projected > 10.0 * double(o_.max_steps))
      throw Error("gradient_flow: max_steps: reaching t = " + std::to_string(final_time_) +
                  " needs about " + std::to_string(projected) + " steps at the recent rate (" +
                  std::to_string(r_.steps) + " steps to t = " + std::to_string(t_) +
                  ") > 10 x max_steps = " + std::to_string(o_.max_steps) +
                  "; request shorter times, a stopping tolerance, or raise max_steps");
  }
  bool converged() const {
    if (o_.grad_tol > 0 && norm2(k1_) <= o_.grad_tol) return true;
    return o_.gap_tol > 0 && loss_ - o_.loss_target <= o_.gap_tol;
  }
  void combine(std::vector<double>& out, double h, std::initializer_list<std::pair<double, const std::vector<double>*>> terms) {
    for (size_t i = 0; i < n_; ++i) {
      double s = 0;
      for (const auto& [c, k] : terms) s += c * (*k)[i];
      out[i] = y_[i] + h * s;
    }
  }
  void rk4_step(double h) {
    constexpr const char* hint = "fixed-step RK4 cannot shrink its step: use a smaller step or method='dopri5'";
    std::vector<double> k2(n_), k3(n_), k4(n_), tmp(n_);
    combine(tmp, h, {{0.5, &k1_}});
    if (!finite(eval(tmp, k2), k2)) diverged(h, hint);
    combine(tmp, h, {{0.5, &k2}});
    if (!finite(eval(tmp, k3), k3)) diverged(h, hint);
    combine(tmp, h, {{1.0, &k3}});
    if (!finite(eval(tmp, k4), k4)) diverged(h, hint);
    combine(y_, h, {{1.0 / 6, &k1_}, {1.0 / 3, &k2}, {1.0 / 3, &k3}, {1.0 / 6, &k4}});
    t_ += h;
    loss_ = eval(y_, k1_);
    if (!finite(loss_, k1_)) diverged(h, hint);
  }
  // Smallest DOPRI5 step before giving up: relative to t, as the error-control floor.
  double step_floor() const { return 1e-14 * std::max(1.0, std::fabs(t_)); }
  // A trial stage overflowed: the step was too long for this region, not necessarily the flow
  // divergent. Shrink and retry; report divergence only once the step is at its floor.
  bool reject_non_finite(double h) {
    h_ = 0.25 * h;
    ++r_.rejected_steps;
    if (h_ < step_floor())
      diverged(h, "every step down to the floor overflows: the flow itself diverges (check the "
                  "initial parameters and Λ)");
    return false;
  }
  bool dopri5_step(double h) {
    std::vector<double> k2(n_), k3(n_), k4(n_), k5(n_), k6(n_), k7(n_), tmp(n_), y5(n_);
    combine(tmp, h, {{1.0 / 5, &k1_}});
    if (!finite(eval(tmp, k2), k2)) return reject_non_finite(h);
    combine(tmp, h, {{3.0 / 40, &k1_}, {9.0 / 40, &k2}});
    if (!finite(eval(tmp, k3), k3)) return reject_non_finite(h);
    combine(tmp, h, {{44.0 / 45, &k1_}, {-56.0 / 15, &k2}, {32.0 / 9, &k3}});
    if (!finite(eval(tmp, k4), k4)) return reject_non_finite(h);
    combine(tmp, h, {{19372.0 / 6561, &k1_}, {-25360.0 / 2187, &k2}, {64448.0 / 6561, &k3}, {-212.0 / 729, &k4}});
    if (!finite(eval(tmp, k5), k5)) return reject_non_finite(h);
    combine(tmp, h, {{9017.0 / 3168, &k1_}, {-355.0 / 33, &k2}, {46732.0 / 5247, &k3}, {49.0 / 176, &k4}, {-5103.0 / 18656, &k5}});
    if (!finite(eval(tmp, k6), k6)) return reject_non_finite(h);
    combine(y5, h, {{35.0 / 384, &k1_}, {500.0 / 1113, &k3}, {125.0 / 192, &k4}, {-2187.0 / 6784, &k5}, {11.0 / 84, &k6}});
    const double loss5 = eval(y5, k7);  // FSAL: k7 = f(y5) starts the next step
    if (!finite(loss5, k7)) return reject_non_finite(h);
    // Embedded 4th-order error estimate: h Σ (b_i − b*_i) k_i.
    double err = 0;
    for (size_t i = 0; i < n_; ++i) {
      const double e = h * (71.0 / 57600 * k1_[i] - 71.0 / 16695 * k3[i] + 71.0 / 1920 * k4[i] -
                            17253.0 / 339200 * k5[i] + 22.0 / 525 * k6[i] - 1.0 / 40 * k7[i]);
      const double scale = o_.atol + o_.rtol * std::max(std::fabs(y_[i]), std::fabs(y5[i]));
      err += (e / scale) * (e / scale);
    }
    err = std::sqrt(err / double(n_));
    const double factor = err == 0 ? 5.0 : std::clamp(0.9 * std::pow(err, -0.2), 0.2, 5.0);
    if (err > 1.0) {
      h_ = h * std::min(factor, 0.9);
      ++r_.rejected_steps;
      if (h_ < step_floor())
        throw Error("gradient_flow: step size underflow at t = " + std::to_string(t_) +
                    " (the error tolerance cannot be met: raise rtol/atol)");
      return false;
    }
    y_.swap(y5);
    k1_.swap(k7);
    loss_ = loss5;
    t_ += h;
    h_ = std::max(h_, h) * factor;  // a step shortened to land on a time does not shrink h_
    return true;
  }

  const LossAndGrad& f_;
  const FlowOptions& o_;
  FlowResult& r_;
  size_t n_;
  std::vector<double> y_, k1_;
  double h_;  // current step: the RK4 step, or DOPRI5's adapted step
  double final_time_;         // the last requested time (for refuse_hopeless_request)
  double window_start_ = 0;  // time at the previous 1024-step mark
  double t_ = 0, loss_ = 0;
};

}  // namespace

FlowResult gradient_flow(const LossAndGrad& loss_and_grad, const std::vector<double>& theta0,
                         const std::vector<double>& times, const FlowOptions& options) {
  detail::require(!theta0.empty(), "gradient_flow: theta0 must not be empty");
  detail::require(options.step > 0, "gradient_flow: step must be > 0");
  detail::require(std::isfinite(options.step), "gradient_flow: step must be finite");
  detail::require(options.rtol > 0 && options.atol >= 0 && std::isfinite(options.rtol) &&
                      std::isfinite(options.atol),
                  "gradient_flow: rtol must be finite and > 0, atol finite and >= 0");
  detail::require(options.grad_tol >= 0 && options.gap_tol >= 0 && std::isfinite(options.grad_tol) &&
                      std::isfinite(options.gap_tol) && std::isfinite(options.loss_target),
                  "gradient_flow: grad_tol and gap_tol must be finite and >= 0, loss_target finite");
  detail::require(options.max_steps >= 1, "gradient_flow: max_steps must be >= 1");
  for (size_t i = 0; i < times.size(); ++i) {
    detail::require(std::isfinite(times[i]) && times[i] >= 0, "gradient_flow: times must be finite and >= 0");
    detail::require(i == 0 || times[i] >= times[i - 1], "gradient_flow: times must be non-decreasing");
  }
  // Fixed steps: refuse a request that cannot finish instead of running until max_steps.
  if (options.method == FlowOptions::Method::rk4 && !times.empty()) {
    const double needed = std::ceil(times.back() / options.step);
    detail::require(needed <= double(options.max_steps),
                    "gradient_flow: step: reaching t = " + std::to_string(times.back()) +
                        " with RK4 step " + std::to_string(options.step) + " needs " +
                        std::to_string(needed) + " steps > max_steps = " +
                        std::to_string(options.max_steps) + "; raise step or max_steps");
  }
  FlowResult result;
  Flow flow(loss_and_grad, theta0, options, result, times.empty() ? 0.0 : times.back());
  for (double t : times) {
    const bool reached = flow.advance_to(t);
    if (!reached) {
      result.stopped_by_tolerance = true;
      break;
    }
    result.times.push_back(t);
    result.losses.push_back(flow.loss());
    result.thetas.insert(result.thetas.end(), flow.theta().begin(), flow.theta().end());
  }
  result.final_time = flow.time();
  result.final_theta = flow.theta();
  result.final_loss = flow.loss();
  return result;
}

}  // namespace lsa_native
