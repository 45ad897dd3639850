// Gradient flow dθ/dt = −∇L(θ) [ZFB (3.9)]: adaptive Dormand–Prince 5(4), fixed-step RK4, the
// Rosenbrock–W method ROS34PW2 for the stiff phase near a minimum, and the automatic switch from
// the first to the third (population.hpp has the methods' summary; docs/population.md the detail).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "common/interrupt.hpp"
#include "common/parallel.hpp"
#include "common/small_matrix.hpp"
#include "lsa_native/population.hpp"

namespace lsa_native {
namespace {

using Method = FlowOptions::Method;

// ROS34PW2 [Rang & Angermann, BIT 45 (2005) 761-787; coefficients as in PETSc's TSROSW
// "ra34pw2"]: Y_i = y + Σ_{j<i} a_ij k_j, (I − hγA) k_i = h f(Y_i) + h A Σ_{j<i} γ_ij k_j,
// y_{n+1} = y + Σ b_i k_i, error estimate Σ (b_i − b̂_i) k_i (b̂: the embedded order-2 weights).
// The order-3 conditions hold for any A (a W-method); stiffly accurate (b = the last row of a + γ).
namespace ros34pw2 {
constexpr int kStages = 4;
constexpr double kGamma = 4.3586652150845900e-01;
constexpr double kA[kStages][kStages - 1] = {{0, 0, 0},
                                             {8.7173304301691801e-01, 0, 0},
                                             {8.4457060015369423e-01, -1.1299064236484185e-01, 0},
                                             {0, 0, 1}};
constexpr double kG[kStages][kStages - 1] = {
    {0, 0, 0},
    {-8.7173304301691801e-01, 0, 0},
    {-9.0338057013044082e-01, 5.4180672388095326e-02, 0},
    {2.4212380706095346e-01, -1.2232505839045147e+00, 5.4526025533510214e-01}};
constexpr double kB[kStages] = {2.4212380706095346e-01, -1.2232505839045147e+00,
                                1.5452602553351020e+00, 4.3586652150845900e-01};
constexpr double kBhat[kStages] = {3.7810903145819369e-01, -9.6042292212423178e-02,
                                   5.0000000000000000e-01, 2.1793326075422950e-01};
// A factorisation made at step h_f serves steps h with h_f/h in [1/kGrow, kShrink]: the W-method
// with A = (h_f/h) J, whose stability function |R| stays <= 1 on J's real spectrum <= 0 for every
// h_f/h >= 0.7 (checked numerically up to 1e8; 0.5 is unstable). Past kShrink it refactors: a
// large h_f/h is stable but damps stiff components poorly.
constexpr double kGrow = 1.25, kShrink = 8.0;
}  // namespace ros34pw2

// The matrices of the Rosenbrock stages: J ≈ ∂f/∂θ (f = −∇L, so J = −∇²L, symmetric) restricted
// to the parameters whose row of J is not zero (the others, e.g. entries of W^PV and W^KQ that do
// not reach ŷ, have k_i = h f_i exactly), and the Cholesky factor of I − h_f γ J on them.
class StiffMatrices {
 public:
  // J [n x n] row-major, symmetric.
  void set_jacobian(const std::vector<double>& J, size_t n) {
    active_.clear();
    for (size_t i = 0; i < n; ++i)
      for (size_t k = 0; k < n; ++k)
        if (J[i * n + k] != 0) {
          active_.push_back(i);
          break;
        }
    const size_t m = active_.size();
    J_.assign(m * m, 0.0);
    for (size_t i = 0; i < m; ++i)
      for (size_t k = 0; k < m; ++k) J_[i * m + k] = J[active_[i] * n + active_[k]];
    factor_step_ = 0;  // no factorisation for this J yet
  }
  // Factors I − h γ J; false when it is not numerically positive definite (J has an eigenvalue
  // >= 1/(hγ): the step is too long for a growing direction, e.g. near a saddle).
  bool factor(double h) {
    const size_t m = active_.size();
    L_.resize(m * m);
    for (size_t i = 0; i < m * m; ++i) L_[i] = -h * ros34pw2::kGamma * J_[i];
    for (size_t i = 0; i < m; ++i) L_[i * m + i] += 1.0;
    // Ctrl-C inside the O(m³) factorization too (m up to 6000: tens of seconds).
    const bool ok = detail::cholesky_in_place(L_.data(), static_cast<int>(m),
                                              [] { detail::poll_interrupt(); });
    factor_step_ = ok ? h : 0;
    return ok;
  }
  bool serves(double h, bool landing) const {
    if (!(factor_step_ > 0) || h > ros34pw2::kGrow * factor_step_) return false;
    return landing || h * ros34pw2::kShrink >= factor_step_;  // a landing step may be any shorter
  }
  double factor_step() const { return factor_step_; }
  // x <- (I − h_f γ J)^{-1} x over all n entries.
  void solve(std::vector<double>& x) {
    gather(x);
    const int m = static_cast<int>(active_.size());
    detail::lower_solve(L_.data(), m, work_.data());
    detail::lower_t_solve(L_.data(), m, work_.data());
    scatter(x);
  }
  // out = c J v + out over all n entries (J is zero off the active set).
  void add_jacobian_times(double c, const std::vector<double>& v, std::vector<double>& out) {
    gather(v);
    const size_t m = active_.size();
    for (size_t i = 0; i < m; ++i)
      out[active_[i]] += c * detail::dot(J_.data() + i * m, work_.data(), static_cast<int>(m));
  }

 private:
  void gather(const std::vector<double>& x) {
    work_.resize(active_.size());
    for (size_t i = 0; i < active_.size(); ++i) work_[i] = x[active_[i]];
  }
  void scatter(std::vector<double>& x) const {
    for (size_t i = 0; i < active_.size(); ++i) x[active_[i]] = work_[i];
  }

  std::vector<size_t> active_;
  std::vector<double> J_, L_, work_;
  double factor_step_ = 0;  // the h_f of L_, 0: none
};

double norm2(const std::vector<double>& v) {
  return std::sqrt(detail::dot(v.data(), v.data(), static_cast<int>(v.size())));
}

// ∂f/∂θ for f = −∇L by central differences of the exact gradient, columns in parallel, symmetrised
// (the exact −∇²L is symmetric): step ε_j = ∛eps·max(1, |θ_j|), error O(ε²) ~ 1e-11 relative (the
// population losses are quartic in θ, so the error term is (ε²/6)·∂³(∇L)[e_j, e_j], a constant).
std::vector<double> central_difference_jacobian(const LossAndGrad& f,
                                                const std::vector<double>& y) {
  const size_t n = y.size();
  const double rel = std::cbrt(std::numeric_limits<double>::epsilon());
  std::vector<double> Jt(n * n);  // row j = column j of J
  detail::parallel_for(static_cast<index_t>(n), [&](index_t j) {
    std::vector<double> z(y), gp(n), gm(n);
    const double e = rel * std::max(1.0, std::fabs(y[j]));
    z[j] = y[j] + e;
    const double up = z[j] - y[j];  // the representable steps actually taken
    f(z.data(), gp.data());
    z[j] = y[j] - e;
    const double down = y[j] - z[j];
    f(z.data(), gm.data());
    for (size_t i = 0; i < n; ++i) Jt[j * n + i] = -(gp[i] - gm[i]) / (up + down);
  });
  std::vector<double> J(n * n);
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 0; k < n; ++k) J[i * n + k] = 0.5 * (Jt[i * n + k] + Jt[k * n + i]);
  return J;
}

class Flow {
 public:
  Flow(const LossAndGrad& f, std::vector<double> theta, const FlowOptions& o, FlowResult& r,
       double final_time)
      : f_(f), o_(o), r_(r), n_(theta.size()), y_(std::move(theta)), k1_(n_), h_(o.step),
        final_time_(final_time), stiff_(o.method == Method::rosenbrock) {
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
      if (o_.method == Method::rk4) {
        rk4_step(h);
      } else if (stiff_) {
        if (!rosenbrock_step(h, landing)) continue;  // rejected: h_ was reduced
        ++r_.stiff_steps;
      } else if (!dopri5_step(h)) {
        continue;
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
  // nor are flows with a stopping tolerance, which may end early, nor stiff (Rosenbrock) steps.
  void refuse_hopeless_request() {
    if (o_.method == Method::rk4 || stiff_ || o_.grad_tol > 0 || o_.gap_tol > 0) return;
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
                  "; request shorter times, a stopping tolerance, or raise max_steps" +
                  (o_.method == Method::dopri5
                       ? " (or method='auto', which switches to a stiff integrator)"
                       : ""));
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
  // RMS over components of e_i / (atol + rtol·max(|y_i|, |y_new_i|)): <= 1 accepts a step.
  double error_norm(const std::vector<double>& e, const std::vector<double>& y_new) const {
    double err = 0;
    for (size_t i = 0; i < n_; ++i) {
      const double scale = o_.atol + o_.rtol * std::max(std::fabs(y_[i]), std::fabs(y_new[i]));
      err += (e[i] / scale) * (e[i] / scale);
    }
    return std::sqrt(err / double(n_));
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
  // Smallest adaptive step before giving up: relative to t, as the error-control floor.
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
  // The error estimate exceeded the tolerance: retry with h_ = h·factor (factor < 1).
  bool reject_inaccurate(double h, double factor) {
    h_ = h * std::min(factor, 0.9);
    ++r_.rejected_steps;
    if (h_ < step_floor())
      throw Error("gradient_flow: step size underflow at t = " + std::to_string(t_) +
                  " (the error tolerance cannot be met: raise rtol/atol)");
    return false;
  }
  void accept(std::vector<double>& y_new, std::vector<double>& k_new, double loss_new, double h,
              double factor) {
    y_.swap(y_new);
    k1_.swap(k_new);
    loss_ = loss_new;
    t_ += h;
    h_ = std::max(h_, h) * factor;  // a step shortened to land on a time does not shrink h_
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
    std::vector<double> e(n_);
    for (size_t i = 0; i < n_; ++i)
      e[i] = h * (71.0 / 57600 * k1_[i] - 71.0 / 16695 * k3[i] + 71.0 / 1920 * k4[i] -
                  17253.0 / 339200 * k5[i] + 22.0 / 525 * k6[i] - 1.0 / 40 * k7[i]);
    const double err = error_norm(e, y5);
    const double factor = err == 0 ? 5.0 : std::clamp(0.9 * std::pow(err, -0.2), 0.2, 5.0);
    if (err > 1.0) return reject_inaccurate(h, factor);
    if (o_.method == Method::automatic) detect_stiffness(h, y5, tmp, k7, k6);
    accept(y5, k7, loss5, h, factor);
    return true;
  }
  // automatic: counts accepted DOPRI5 steps at the edge of the stability region, h·ρ̂ > 3.25 with
  // ρ̂ = ‖f(y_{n+1}) − f(Y6)‖/‖y_{n+1} − Y6‖ (the two stages at c = 1); 15 of them without 6
  // consecutive steps below switch to the Rosenbrock method for the rest of the flow [Hairer &
  // Wanner, Solving ODEs II, Sec. IV.2 "Stiffness detection", and Hairer's DOPRI5 code].
  void detect_stiffness(double h, const std::vector<double>& y_new, const std::vector<double>& y6,
                        const std::vector<double>& f_new, const std::vector<double>& f6) {
    if (n_ > size_t(kMaxStiffParameters)) return;
    double num = 0, den = 0;
    for (size_t i = 0; i < n_; ++i) {
      num += (f_new[i] - f6[i]) * (f_new[i] - f6[i]);
      den += (y_new[i] - y6[i]) * (y_new[i] - y6[i]);
    }
    if (!(den > 0)) return;
    if (h * std::sqrt(num / den) > 3.25) {
      nonstiff_run_ = 0;
      if (++stiff_count_ == 15) {
        stiff_ = true;
        r_.switch_time = t_ + h;
      }
    } else if (++nonstiff_run_ == 6) {
      stiff_count_ = 0;
    }
  }
  // J at the current state, factorisation dropped; fresh until the next accepted step.
  void refresh_jacobian() {
    const std::vector<double> J = central_difference_jacobian(f_, y_);
    ++r_.jacobian_evaluations;
    r_.gradient_evaluations += 2 * static_cast<index_t>(n_);
    for (double v : J)
      if (!std::isfinite(v))
        throw Error("gradient_flow: rosenbrock: the Jacobian (central differences of the "
                    "gradient) is non-finite at t = " + std::to_string(t_));
    matrices_.set_jacobian(J, n_);
    y_jacobian_ = y_;
    jacobian_fresh_ = true;
  }
  // One ROS34PW2 step (see ros34pw2 and StiffMatrices). J is re-evaluated after an accepted step
  // that leaves the state 20% away from J's, and before retrying a rejected step whose J is from
  // an earlier state when either the error exceeded the tolerance by far (> kStaleJacobianError:
  // a J that misses a stiff direction treats it explicitly and the error explodes) or the state
  // has moved by 0.1% since J (in a transient a rejection then usually means J has drifted: from
  // Assumption 3.3 at d = 3, 5 this rule kept rejections at 0.1-0.2% of steps, refreshing only on
  // error > 10 let them rise to 23%). Mild
  // rejections at a J from (nearly) this state are ordinary step control (near a minimum at rtol
  // ~1e-12 the estimate also meets rounding noise), where a new J (2n gradients) buys nothing.
  static constexpr double kStaleJacobianError = 10.0;
  bool rosenbrock_step(double h, bool landing) {
    using namespace ros34pw2;
    if (y_jacobian_.empty()) refresh_jacobian();
    if (!matrices_.serves(h, landing)) {
      ++r_.factorizations;
      if (!matrices_.factor(h)) return reject_indefinite(h);
    }
    const double hf = matrices_.factor_step();
    std::vector<std::vector<double>> k(kStages, std::vector<double>(n_));
    std::vector<double> stage(n_), f_stage(n_), rhs(n_), coupling(n_);
    for (int i = 0; i < kStages; ++i) {
      const std::vector<double>* f_i = &k1_;  // stage 1 is at y_n
      if (i > 0) {
        for (size_t p = 0; p < n_; ++p) {
          double s = 0;
          for (int j = 0; j < i; ++j) s += kA[i][j] * k[j][p];
          stage[p] = y_[p] + s;
        }
        if (!finite(eval(stage, f_stage), f_stage)) return reject_non_finite(h);
        f_i = &f_stage;
      }
      for (size_t p = 0; p < n_; ++p) {
        rhs[p] = h * (*f_i)[p];
        double s = 0;
        for (int j = 0; j < i; ++j) s += kG[i][j] * k[j][p];
        coupling[p] = s;
      }
      if (i > 0) matrices_.add_jacobian_times(hf, coupling, rhs);  // h A Σ γ_ij k_j, A = (h_f/h) J
      matrices_.solve(rhs);
      k[i].swap(rhs);
    }
    std::vector<double> y_new(n_), e(n_), f_new(n_);
    for (size_t p = 0; p < n_; ++p) {
      double s = 0, se = 0;
      for (int i = 0; i < kStages; ++i) {
        s += kB[i] * k[i][p];
        se += (kB[i] - kBhat[i]) * k[i][p];
      }
      y_new[p] = y_[p] + s;
      e[p] = se;
    }
    const double err = error_norm(e, y_new);
    const double factor = err == 0 ? 5.0 : std::clamp(0.9 * std::pow(err, -1.0 / 3), 0.2, 5.0);
    if (err > 1.0) {
      if (!jacobian_fresh_ && (err > kStaleJacobianError || moved_since_jacobian(1e-3)))
        refresh_jacobian();
      return reject_inaccurate(h, factor);
    }
    const double loss_new = eval(y_new, f_new);
    if (!finite(loss_new, f_new)) return reject_non_finite(h);
    accept(y_new, f_new, loss_new, h, factor);
    jacobian_fresh_ = false;
    if (moved_since_jacobian(0.2)) refresh_jacobian();
    return true;
  }
  // ‖θ − θ_J‖ > fraction·‖θ_J‖, θ_J where J was evaluated. A W-method keeps its order with a
  // stale J, but its error constant grows with J's error: re-evaluating J after 20% moves cut the
  // step count ~3.4x in transients (d = 3, 5: 20% and 10% gave the same steps, 100% and never
  // 1.7x and 3.4x more).
  bool moved_since_jacobian(double fraction) const {
    double dy = 0, yy = 0;
    for (size_t i = 0; i < n_; ++i) {
      dy += (y_[i] - y_jacobian_[i]) * (y_[i] - y_jacobian_[i]);
      yy += y_jacobian_[i] * y_jacobian_[i];
    }
    return dy > fraction * fraction * yy;
  }
  // I − hγJ is not positive definite: J has a growing direction faster than 1/(hγ). With a stale
  // J re-evaluate it, else halve the step.
  bool reject_indefinite(double h) {
    if (!jacobian_fresh_) {
      refresh_jacobian();
      h_ = h;
      return false;
    }
    h_ = 0.5 * h;
    ++r_.rejected_steps;
    if (h_ < step_floor())
      throw Error("gradient_flow: rosenbrock: I − hγ∇²L is not positive definite down to the step "
                  "floor at t = " + std::to_string(t_) + " (the Hessian has a huge negative "
                  "eigenvalue: check the initial parameters)");
    return false;
  }

  const LossAndGrad& f_;
  const FlowOptions& o_;
  FlowResult& r_;
  size_t n_;
  std::vector<double> y_, k1_;
  double h_;  // current step: the RK4 step, or the adaptive methods' step
  double final_time_;         // the last requested time (for refuse_hopeless_request)
  double window_start_ = 0;  // time at the previous 1024-step mark
  double t_ = 0, loss_ = 0;
  bool stiff_;  // the Rosenbrock method runs (from the start, or after automatic's switch)
  int stiff_count_ = 0, nonstiff_run_ = 0;  // automatic's stiffness detection
  StiffMatrices matrices_;
  std::vector<double> y_jacobian_;  // where J was evaluated (empty: not yet)
  bool jacobian_fresh_ = false;  // J was evaluated at the current state
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
  if (options.method == FlowOptions::Method::rosenbrock)
    detail::require(theta0.size() <= size_t(kMaxStiffParameters),
                    "gradient_flow: method rosenbrock: " + std::to_string(theta0.size()) +
                        " parameters > " + std::to_string(kMaxStiffParameters) +
                        " (its Jacobian is dense); use method='dopri5'");
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
  result.method_used = options.method == FlowOptions::Method::rk4          ? "rk4"
                       : options.method == FlowOptions::Method::rosenbrock ? "rosenbrock"
                       : result.switch_time >= 0                           ? "dopri5+rosenbrock"
                                                                           : "dopri5";
  return result;
}

}  // namespace lsa_native
