// One optimizer step on a flat float64 parameter vector, written once for the CPU
// (cpu/optim_cpu.cpp) and the GPU (cuda/optim_kernels.cuh): torch.optim's rules as
// python/lsa_native/train/optim.py writes them, operation for operation, so that the native step
// equals the Python one bitwise in float64 given the same gradient norm (no FMA contraction: the
// files compiling this recipe turn it off).
//
// Per step, with g the gradient (of the model's dtype, read as double) and t the step count after
// this step (the host computes every scalar that depends on t: lr, 1 − β₁ᵗ, 1 − β₂ᵗ, 1 − ηλ; with a
// rate factor ≠ 1, 1 − η·rate·λ is formed here per entry):
//   clipping (clip_grad_norm_): g ← g · c/(‖g‖₂ + 1e-6) when that factor is < 1;
//   SGD: g ← g + λθ; momentum: b ← g (t = 1), b ← μb + (1 − τ)g; g ← g + μb (Nesterov) or b;
//        θ ← θ − η g;
//   Adam: g ← g + λθ; m ← β₁m + (1 − β₁)g; v ← β₂v + (1 − β₂)g·g; (AMSGrad: v̂max ← max(v̂max, v),
//        v ← v̂max); θ ← θ − η (m/(1 − β₁ᵗ)) / (√(v/(1 − β₂ᵗ)) + ε);
//   AdamW: θ ← θ(1 − ηλ), then Adam without λθ.
// With per-entry rate factors (OptimizerState::rates) η is η·rates[i] for entry i, formed first
// (as the Python step's η vector): a factor of 1 gives the plain step bit for bit.
// ‖g‖₂ is summed in a fixed order both backends share: kNormLanes strided partial sums of g_i²
// (lane j adds i = j, j + kNormLanes, … in order), then halving pairwise (p_j += p_{j+s}).
//
// Divergence without a host round trip: the step reads and writes a small status record. A step
// whose gradient norm (or given loss) is not finite leaves θ alone and records kBadGradient
// (kBadLoss); a step whose result
// is not finite records kBadParameters (θ_out then holds it; θ_in, the last finite parameters, is
// untouched when θ_out is another buffer); a step that finds a failure already recorded does
// nothing, so the parameters of the first failure survive until the host reads the record.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/hd.hpp"
#include "lsa_native/optim.hpp"

namespace lsa_native::optim {

constexpr int kNormLanes = 256;
constexpr double kClipEps = 1e-6;  // torch.nn.utils.clip_grad_norm_ adds it to the norm

using Step = OptimizerStep;
using State = OptimizerState;

// g[i] as the norm reads it: 0 where the rate factor (OptimizerState::rates) is 0 — entries of
// the device buffer that are not parameters (a sparse V's fixed zeros) take no part in the norm,
// and step_element leaves them as they are.
template <class T>
LSA_HD_LOCAL T grad_at(const State& st, const T* grad, index_t i) {
  return st.rates == nullptr || st.rates[i] != 0 ? grad[i] : T(0);
}

template <class T>
LSA_HD_LOCAL double square_of(T g) {
  const double x = static_cast<double>(g);
  return x * x;
}

// Partial sum of lane `lane` (strided, in index order).
template <class T>
LSA_HD_LOCAL double norm_partial(const State& st, const T* grad, index_t n, int lane) {
  double s = 0;
  for (index_t i = lane; i < n; i += kNormLanes) s += square_of(grad_at(st, grad, i));
  return s;
}

// np.maximum: NaN when either is NaN.
LSA_HD_LOCAL double max_propagating_nan(double a, double b) {
  if (a != a || b != b) return a + b;
  return a > b ? a : b;
}

// The factor g is multiplied by (1: none).
LSA_HD_LOCAL double clip_coefficient(const Step& s, double norm) {
  if (s.clip_norm <= 0) return 1.0;
  const double c = s.clip_norm / (norm + kClipEps);
  return c < 1.0 ? c : 1.0;
}

// θ_{t+1}[i] from θ_t[i] and g[i] at the rate η = s.lr·rate; advances the state at i.
template <class T>
LSA_HD_LOCAL double update_element(const Step& s, const State& st, index_t i, double theta, T grad,
                             double coef, double rate) {
  const double lr = rate == 1.0 ? s.lr : s.lr * rate;
  double g = static_cast<double>(grad);
  if (coef < 1.0) g = g * coef;
  if (s.rule == kSgd) {
    if (s.weight_decay != 0) g = g + s.weight_decay * theta;
    if (s.momentum > 0) {
      const double b = s.first ? g : st.momentum_buffer[i] * s.momentum + s.one_minus_dampening * g;
      st.momentum_buffer[i] = b;
      g = s.nesterov ? g + s.momentum * b : b;
    }
    return theta - lr * g;
  }
  if (s.rule == kAdamW) {
    if (s.weight_decay != 0)
      theta = theta * (rate == 1.0 ? s.decoupled_decay : 1 - lr * s.weight_decay);
  } else if (s.weight_decay != 0) {
    g = g + s.weight_decay * theta;
  }
  const double m = st.exp_avg[i] * s.beta1 + s.one_minus_beta1 * g;
  double v = st.exp_avg_sq[i] * s.beta2 + s.one_minus_beta2 * g * g;
  st.exp_avg[i] = m;
  st.exp_avg_sq[i] = v;
  if (s.amsgrad) {
    v = max_propagating_nan(st.max_exp_avg_sq[i], v);
    st.max_exp_avg_sq[i] = v;
  }
  const double m_hat = m / s.bias1, v_hat = v / s.bias2;
  return theta - lr * m_hat / (std::sqrt(v_hat) + s.eps);
}

// θ_{t+1}[i]: update_element at the entry's rate factor; an entry of factor 0 (not a parameter)
// keeps its value (and its state).
template <class T>
LSA_HD_LOCAL double step_element(const Step& s, const State& st, index_t i, double theta, const T* grad,
                           double coef) {
  const double rate = st.rates == nullptr ? 1.0 : st.rates[i];
  if (rate == 0) return theta;
  return update_element(s, st, i, theta, grad[i], coef, rate);
}

LSA_HD_LOCAL bool finite(double x) { return x - x == 0; }  // false for NaN and ±inf

// The step's loss (OptimizerState::loss) is given and not finite: the step records kBadLoss.
LSA_HD_LOCAL bool loss_fails(const State& st) { return st.loss != nullptr && !finite(*st.loss); }

}  // namespace lsa_native::optim

namespace lsa_native::optim {

// The halving sum of the kNormLanes partials, in place (p[0] holds the total): the order the CUDA
// block's tree takes, one level at a time.
LSA_HD_LOCAL void halving_sum(double* p) {
  for (int s = kNormLanes / 2; s > 0; s /= 2)
    for (int j = 0; j < s; ++j) p[j] += p[j + s];
}

// Lane partial of the rescaled sum Σ (g_i/big)² (the fallback when Σ g_i² overflows).
template <class T>
LSA_HD_LOCAL double scaled_partial(const State& st, const T* grad, index_t n, int lane, double big) {
  double s = 0;
  for (index_t i = lane; i < n; i += kNormLanes) {
    const double x = static_cast<double>(grad_at(st, grad, i)) / big;
    s += x * x;
  }
  return s;
}

// Lane partial of max |g_i| (NaN propagates).
template <class T>
LSA_HD_LOCAL double abs_max_partial(const State& st, const T* grad, index_t n, int lane) {
  double m = 0;
  for (index_t i = lane; i < n; i += kNormLanes)
    m = max_propagating_nan(m, std::fabs(static_cast<double>(grad_at(st, grad, i))));
  return m;
}

LSA_HD_LOCAL void halving_max(double* p) {
  for (int s = kNormLanes / 2; s > 0; s /= 2)
    for (int j = 0; j < s; ++j) p[j] = max_propagating_nan(p[j], p[j + s]);
}

}  // namespace lsa_native::optim
