// Exact Gaussian population losses of the one-layer LSA and their gradients [ZFB (3.8), Lemma 5.2,
// Lemma A.1, Appendix C], and gradient flow on them [ZFB (3.9)].
//
// Training distribution (SPEC 3.1): w ~ N(0, I_d), x_1..x_N, x_q iid N(0, Λ), y = <w, x>.
// L(W^PV, W^KQ; Λ, N) = ½ E[(ŷ − <w, x_q>)^2] in closed form (Isserlis/Wick; derivation in
// docs/population.md) for ANY parameters, O(d^3) per evaluation, float64.
//
// Arrays are row-major: W_pv, W_kq, d_W_pv, d_W_kq [d+1, d+1]; Lambda [d, d] symmetric positive
// definite. Every argument rule is checked here (cpp/src/population.cpp): invalid sizes, null
// pointers, non-finite parameters, asymmetric or indefinite covariances throw Error naming the
// argument. Gradients are full-size with exact zeros where a parameter does not affect ŷ. All
// functions are thread-safe.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lsa_native/types.hpp"

namespace lsa_native {

// Label noise y_i = <w, x_i> + σ ε_i, ε_i ~ N(0, 1) iid; with `query`, also the target
// y_q = <w, x_q> + σ ε_q (default: the noiseless target). Adds the exact terms of
// docs/population.md ("Label noise") to every population loss below.
struct LabelNoise {
  double std = 0;  // σ >= 0
  bool query = false;
};

// L(W^PV, W^KQ; Λ, N); gradients written when d_W_pv and d_W_kq are not null.
double population_loss(index_t d, const double* W_pv, const double* W_kq, const double* Lambda,
                       index_t N, double* d_W_pv = nullptr, double* d_W_kq = nullptr,
                       const LabelNoise& noise = {});

// E_Λτ L(·; Λτ, N) for Λτ = diag(λ_1..λ_d) with independent entries given by their raw moments
// moments [3, d] = (E λ_i, E λ_i², E λ_i³). Exact: L is a cubic polynomial in the λ_i, so
// E L = L(μ) + ½ Σ_i Var(λ_i) ∂²L/∂λ_i² + (1/6) Σ_i κ3(λ_i) ∂³L/∂λ_i³, and each one-dimensional
// cubic's derivatives are taken exactly from 4 evaluations (ZFB 4.3 / Appendix C, any parameters).
double population_loss_random_diagonal(index_t d, const double* W_pv, const double* W_kq,
                                       const double* moments, index_t N, double* d_W_pv = nullptr,
                                       double* d_W_kq = nullptr, const LabelNoise& noise = {});

// (1/S) Σ_s L(·; Λ_s, N) for samples Lambdas [S, d, d]: the exact conditional loss averaged over
// the supplied covariances (parallel over samples, deterministic order).
double population_loss_samples(index_t d, const double* W_pv, const double* W_kq,
                               const double* Lambdas, index_t n_samples, index_t N,
                               double* d_W_pv = nullptr, double* d_W_kq = nullptr,
                               const LabelNoise& noise = {});

// Reduced objective on the invariant manifold [ZFB Lemma A.1]:
// ℓ̃(U11, u) = tr[½ u² Γ Λ U11 Λ U11^T − u Λ² U11^T], Γ = (1 + 1/N)Λ + tr(Λ)/N · I, so that
// L = ℓ̃ + ½ tr(Λ) when p1 = 0, k2 = 0. U11, d_U11 [d, d]; d_u scalar (written when not null).
double reduced_loss(index_t d, const double* U11, double u, const double* Lambda, index_t N,
                    double* d_U11 = nullptr, double* d_u = nullptr);

// ---- gradient flow dθ/dt = −∇L(θ)  [ZFB (3.9)] ----

// Loss at θ [n] with its gradient written to grad [n]. Must be thread-safe: the stiff integrator
// evaluates the columns of its Jacobian in parallel.
using LossAndGrad = std::function<double(const double* theta, double* grad)>;

// Integrators (docs/population.md, "Gradient-flow integrators"):
// - dopri5: adaptive Dormand–Prince 5(4), explicit, FSAL: ~6 gradients per step. Near a minimum
//   its step is held by stability at h ≈ 3.3/ρ(∇²L), not by accuracy.
// - rk4: fixed-step classical RK4 (`step`).
// - rosenbrock: the linearly implicit Rosenbrock–W method ROS34PW2 [Rang & Angermann, BIT 45
//   (2005)]: 4 stages, order 3 with ANY matrix A in place of the Jacobian (a W-method), embedded
//   order 2, L-stable, stiffly accurate. Stage i solves (I − h_f γ J) k_i = h f(Y_i) + h_f J Σ_j
//   γ_ij k_j with f = −∇L and J ≈ ∂f/∂θ = −∇²L by central differences of the exact gradient (2n
//   gradients, columns in parallel), through a Cholesky factorisation of I − h_f γ J (symmetric;
//   restricted to the parameters whose row of J is not zero) made at a step h_f and kept for steps
//   h_f/8 <= h <= 1.25 h_f (any shorter step that lands on a requested time): the W-method with
//   A = (h_f/h) J, which keeps order 3 and is A-stable on J's real spectrum for h_f/h >= 0.7. J is
//   re-evaluated after the state moves 20% from J's, and on a rejection far beyond the tolerance
//   or after a 0.1% move (gradient_flow.cpp). Per step: 4 gradients, 4 pairs of triangular solves;
//   per J: 2n gradients; per factorisation m³/3 flops (m: parameters in the Cholesky).
// - automatic: dopri5 until it stalls on stability, then rosenbrock to the end. Stall: after an
//   accepted step, h·ρ̂ > 3.25 with ρ̂ = ‖k7 − k6‖/‖y_{n+1} − Y6‖ (the two stages at c = 1: an
//   estimate of the dominant eigenvalue's size), on 15 accepted steps with no 6 consecutive steps
//   below it [Hairer & Wanner, Solving ODEs II, Sec. IV.2 "Stiffness detection"; Hairer's DOPRI5
//   code].
struct FlowOptions {
  enum class Method { dopri5, rk4, rosenbrock, automatic } method = Method::dopri5;
  double rtol = 1e-12, atol = 1e-14;  // dopri5/rosenbrock error control (mixed per component)
  double step = 1e-2;                 // rk4 step; initial step of the adaptive methods
  double grad_tol = 0;                // stop when ‖∇L‖ <= grad_tol (0: off)
  double loss_target = 0;             // with gap_tol > 0: stop when L − loss_target <= gap_tol
  double gap_tol = 0;
  index_t max_steps = 10'000'000;
};

// Largest parameter count n for which the stiff integrator runs (its Jacobian holds n² doubles):
// method rosenbrock refuses more, automatic then stays with dopri5.
inline constexpr index_t kMaxStiffParameters = 6000;

struct FlowResult {
  std::vector<double> times;   // the requested times reached (a prefix when stopped early)
  std::vector<double> thetas;  // [times.size(), n]
  std::vector<double> losses;  // [times.size()]
  double final_time = 0;       // where integration stopped
  std::vector<double> final_theta;
  double final_loss = 0;
  // steps: accepted steps of every integrator that ran; gradient_evaluations include the
  // Jacobians' (2n each).
  index_t steps = 0, rejected_steps = 0, gradient_evaluations = 0;
  index_t jacobian_evaluations = 0, factorizations = 0;  // rosenbrock only
  index_t stiff_steps = 0;    // accepted rosenbrock steps (part of steps)
  double switch_time = -1;    // automatic: when it switched to rosenbrock (−1: it did not)
  std::string method_used;    // "dopri5", "rk4", "rosenbrock" or "dopri5+rosenbrock"
  bool stopped_by_tolerance = false;
};

// Integrates from θ(0) = theta0 [n] and records θ at `times` (non-decreasing, >= 0).
FlowResult gradient_flow(const LossAndGrad& loss_and_grad, const std::vector<double>& theta0,
                         const std::vector<double>& times, const FlowOptions& options);

}  // namespace lsa_native
