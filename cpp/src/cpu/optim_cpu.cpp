// CPU backend of optimizer_step (lsa_native/optim.hpp) and the entry point choosing the backend:
// the recipe of common/optim_recipe.hpp, one pass per part (norm, update), in the order the CUDA
// block uses (so both give the same bits).
#include <cmath>
#include <vector>

#include "common/optim_recipe.hpp"
#include "dispatch.hpp"
#include "lsa_native/optim.hpp"

#if LSA_NATIVE_HAVE_CUDA
#include "cuda/optim_cuda.hpp"
#endif

namespace lsa_native {
namespace {

template <class T>
double gradient_norm(const OptimizerState& st, const T* grad, index_t n) {
  std::vector<double> p(optim::kNormLanes);
  for (int j = 0; j < optim::kNormLanes; ++j) p[j] = optim::norm_partial(st, grad, n, j);
  optim::halving_sum(p.data());
  if (optim::finite(p[0])) return std::sqrt(p[0]);
  for (int j = 0; j < optim::kNormLanes; ++j) p[j] = optim::abs_max_partial(st, grad, n, j);
  optim::halving_max(p.data());
  const double big = p[0];
  if (!optim::finite(big)) return big;  // a NaN or inf entry: the norm is not finite
  for (int j = 0; j < optim::kNormLanes; ++j) p[j] = optim::scaled_partial(st, grad, n, j, big);
  optim::halving_sum(p.data());
  return big * std::sqrt(p[0]);
}

template <class T>
void step_cpu(const OptimizerStep& s, index_t n, const double* theta_in, double* theta_out,
              const T* grad, const OptimizerState& st, double norm, double* status, T* model_copy) {
  if (status[optim::kStatusCode] != optim::kOk) return;  // a failure waits for the host
  if (optim::loss_fails(st)) {
    status[optim::kStatusCode] = optim::kBadLoss;
    status[optim::kStatusStep] = s.step_index;
    return;
  }
  if (norm < 0) norm = gradient_norm(st, grad, n);
  status[optim::kStatusNorm] = norm;
  if (!optim::finite(norm)) {
    status[optim::kStatusCode] = optim::kBadGradient;
    status[optim::kStatusStep] = s.step_index;
    return;
  }
  const double coef = optim::clip_coefficient(s, norm);
  bool bad = false;
  for (index_t i = 0; i < n; ++i) {
    const double next = optim::step_element(s, st, i, theta_in[i], grad, coef);
    theta_out[i] = next;
    if (model_copy) model_copy[i] = static_cast<T>(next);
    bad = bad || !optim::finite(next);
  }
  if (bad) {
    status[optim::kStatusCode] = optim::kBadParameters;
    status[optim::kStatusStep] = s.step_index;
  }
}

void check_state(const OptimizerStep& s, const OptimizerState& st) {
  using detail::require;
  require(s.rule == optim::kSgd || s.rule == optim::kAdam || s.rule == optim::kAdamW,
          "rule: expected SGD (0), Adam (1) or AdamW (2)");
  if (s.rule == optim::kSgd) {
    require(s.momentum == 0 || st.momentum_buffer, "momentum_buffer: needed with momentum > 0");
  } else {
    require(st.exp_avg && st.exp_avg_sq, "exp_avg, exp_avg_sq: needed by Adam/AdamW");
    require(!s.amsgrad || st.max_exp_avg_sq, "max_exp_avg_sq: needed with amsgrad");
  }
}

}  // namespace

template <class T>
void optimizer_step(const OptimizerStep& step, index_t n, const double* theta_in, double* theta_out,
                    const T* grad, const OptimizerState& state, double norm, double* status,
                    T* model_copy, Device device) {
  detail::require(n >= 0, "n: expected >= 0");
  detail::require(theta_in && theta_out && grad && status, "theta, grad, status: null pointer");
  check_state(step, state);
  if (detail::use_cuda(device)) {
#if LSA_NATIVE_HAVE_CUDA
    cuda::optimizer_step<T>(step, n, theta_in, theta_out, grad, state, norm, status, model_copy);
    return;
#endif
  }
  step_cpu<T>(step, n, theta_in, theta_out, grad, state, norm, status, model_copy);
}

template void optimizer_step<float>(const OptimizerStep&, index_t, const double*, double*,
                                    const float*, const OptimizerState&, double, double*, float*,
                                    Device);
template void optimizer_step<double>(const OptimizerStep&, index_t, const double*, double*,
                                     const double*, const OptimizerState&, double, double*,
                                     double*, Device);

}  // namespace lsa_native
