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

// Loss at θ [n] with its gradient written to grad [n].
using LossAndGrad = std::function<double(const double* theta, double* grad)>;

struct FlowOptions {
  enum class Method { dopri5, rk4 } method = Method::dopri5;  // adaptive 5(4) or fixed-step RK4
  double rtol = 1e-12, atol = 1e-14;  // dopri5 error control (mixed per component)
  double step = 1e-2;                 // rk4 step; dopri5 initial step
  double grad_tol = 0;                // stop when ‖∇L‖ <= grad_tol (0: off)
  double loss_target = 0;             // with gap_tol > 0: stop when L − loss_target <= gap_tol
  double gap_tol = 0;
  index_t max_steps = 10'000'000;
};

struct FlowResult {
  std::vector<double> times;   // the requested times reached (a prefix when stopped early)
  std::vector<double> thetas;  // [times.size(), n]
  std::vector<double> losses;  // [times.size()]
  double final_time = 0;       // where integration stopped
  std::vector<double> final_theta;
  double final_loss = 0;
  index_t steps = 0, rejected_steps = 0, gradient_evaluations = 0;
  bool stopped_by_tolerance = false;
};

// Integrates from θ(0) = theta0 [n] and records θ at `times` (non-decreasing, >= 0).
FlowResult gradient_flow(const LossAndGrad& loss_and_grad, const std::vector<double>& theta0,
                         const std::vector<double>& times, const FlowOptions& options);

}  // namespace lsa_native
