// One optimizer step (SGD, Adam, AdamW with torch's rules and gradient-norm clipping) on a flat
// float64 parameter vector, on the CPU or on a GPU without a host round trip: the rule, the
// gradient norm and the divergence checks all run where the parameters live. The per-element
// math (common/optim_recipe.hpp) is shared by both backends.
#pragma once

#include "lsa_native/device.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native {

namespace optim {
enum Rule : int { kSgd = 0, kAdam = 1, kAdamW = 2 };
enum Status : int { kOk = 0, kBadGradient = 1, kBadParameters = 2, kBadLoss = 3 };
// Status record, doubles: [‖g‖₂ of the step (before clipping), its Status, the step index of the
// first failure (−1 while none)].
constexpr int kStatusNorm = 0, kStatusCode = 1, kStatusStep = 2, kStatusSize = 3;
}  // namespace optim

// The scalars of one step, computed by the caller for the step being taken (t = steps taken
// after it): η_t, 1 − β₁ᵗ, 1 − β₂ᵗ, 1 − η_t λ — so both backends and the Python optimizers use
// the same numbers.
struct OptimizerStep {
  int rule = optim::kSgd;
  double lr = 0;                // η_t
  double weight_decay = 0;      // λ
  double decoupled_decay = 1;   // AdamW: 1 − η_t λ
  double momentum = 0;          // SGD μ
  double one_minus_dampening = 1;
  int nesterov = 0;
  int first = 0;                // t == 1 (SGD: the momentum buffer starts at g)
  double beta1 = 0, one_minus_beta1 = 1, beta2 = 0, one_minus_beta2 = 1, eps = 0;
  int amsgrad = 0;
  double bias1 = 1, bias2 = 1;  // 1 − β₁ᵗ, 1 − β₂ᵗ
  double clip_norm = 0;         // <= 0: no clipping
  double step_index = 0;        // the 0-based training step (recorded with a failure)
};

// The optimizer state the rule uses, n doubles each (unused ones may be null: Adam/AdamW need
// exp_avg and exp_avg_sq, AMSGrad also max_exp_avg_sq, SGD with momentum momentum_buffer).
struct OptimizerState {
  double* exp_avg = nullptr;
  double* exp_avg_sq = nullptr;
  double* max_exp_avg_sq = nullptr;
  double* momentum_buffer = nullptr;
  // The loss of the step (one double where the step runs; may be null): when it is not finite the
  // step leaves θ alone and records kBadLoss (a training loop whose losses stay on the device).
  const double* loss = nullptr;
  // Each entry's rate factor (n doubles >= 0; null: all 1): entry i steps at η·rates[i] (a
  // parameter group's rate, as torch.optim's per-group lr: AdamW's decay 1 − η·rates[i]·λ too).
  // A 0 entry is not a parameter: its gradient is read as 0 (left out of the norm and the
  // update), so a flat buffer may hold fixed entries among the parameters (a sparse V's zeros in
  // the [V | B | C] buffer the model reads).
  const double* rates = nullptr;
};

// θ_out = step(θ_in, grad) for n parameters, the state advanced in place. `norm` >= 0: the
// gradient's norm, given (the host has it); < 0: computed here (fixed order, the same on both
// backends). `status` [kStatusSize] is read and written (see common/optim_recipe.hpp: a step
// after a recorded failure does nothing). `model_copy` (may be null): θ_out also written in T,
// the model's dtype. θ_out may be θ_in. Device::cuda: every pointer device memory of one GPU
// (the call only queues the kernel: nothing waits).
template <class T>
void optimizer_step(const OptimizerStep& step, index_t n, const double* theta_in, double* theta_out,
                    const T* grad, const OptimizerState& state, double norm, double* status,
                    T* model_copy, Device device);

}  // namespace lsa_native
