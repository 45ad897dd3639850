// CPU implementations of the exact population losses (population.hpp); arguments are validated by
// the dispatcher (population.cpp) before these run. Same parameters and results as the public
// functions.
#pragma once

#include "lsa_native/population.hpp"

namespace lsa_native::cpu {

double population_loss(index_t d, const double* W_pv, const double* W_kq, const double* Lambda,
                       index_t N, double* d_W_pv, double* d_W_kq, const LabelNoise& noise);
double population_loss_random_diagonal(index_t d, const double* W_pv, const double* W_kq,
                                       const double* moments, index_t N, double* d_W_pv,
                                       double* d_W_kq, const LabelNoise& noise);
double population_loss_samples(index_t d, const double* W_pv, const double* W_kq,
                               const double* Lambdas, index_t n_samples, index_t N,
                               double* d_W_pv, double* d_W_kq, const LabelNoise& noise);
double reduced_loss(index_t d, const double* U11, double u, const double* Lambda, index_t N,
                    double* d_U11, double* d_u);

}  // namespace lsa_native::cpu
