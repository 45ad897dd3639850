// CUDA backend of optimizer_step (lsa_native/optim.hpp): every pointer is device memory; the
// call queues one kernel and returns. No CUDA header here.
#pragma once

#include "lsa_native/optim.hpp"

namespace lsa_native::cuda {

template <class T>
void optimizer_step(const OptimizerStep& step, index_t n, const double* theta_in, double* theta_out,
                    const T* grad, const OptimizerState& state, double norm, double* status,
                    T* model_copy);

}  // namespace lsa_native::cuda
