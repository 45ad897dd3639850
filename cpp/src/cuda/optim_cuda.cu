// CUDA backend of optimizer_step: one block (optim_kernels.cuh) on the legacy default stream,
// after the kernels that wrote the gradient; nothing waits.
#include "cuda/optim_cuda.hpp"
#include "cuda/optim_kernels.cuh"
#include "cuda/runtime.cuh"

namespace lsa_native::cuda {

template <class T>
void optimizer_step(const OptimizerStep& step, index_t n, const double* theta_in, double* theta_out,
                    const T* grad, const OptimizerState& state, double norm, double* status,
                    T* model_copy) {
  DeviceScope scope({theta_in, theta_out, grad, status});
  for (const void* p : {static_cast<const void*>(theta_in), static_cast<const void*>(theta_out),
                        static_cast<const void*>(grad), static_cast<const void*>(status)})
    detail::require(scope.on_device(p), "optimizer_step: theta, grad and status must be device "
                                        "memory of one GPU");
  kernels::optimizer_step_kernel<T><<<1, optim::kNormLanes, 0, stream()>>>(
      step, n, theta_in, theta_out, grad, state, norm, status, model_copy);
  check_launch("optimizer_step_kernel");
}

template void optimizer_step<float>(const OptimizerStep&, index_t, const double*, double*,
                                    const float*, const OptimizerState&, double, double*, float*);
template void optimizer_step<double>(const OptimizerStep&, index_t, const double*, double*,
                                     const double*, const OptimizerState&, double, double*, double*);

}  // namespace lsa_native::cuda
