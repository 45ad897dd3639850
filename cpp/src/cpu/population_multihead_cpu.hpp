// CPU implementation of the multi-head population loss (population_multihead.hpp); arguments are
// validated by population_multihead.cpp before these run. Same parameters and results.
#pragma once

#include "lsa_native/population_multihead.hpp"

namespace lsa_native::cpu {

double multihead_population_loss(index_t d, index_t heads, const double* W_pv, const double* W_kq,
                                 PopulationCovariance law, const double* covariance, index_t N,
                                 double* d_W_pv, double* d_W_kq, const LabelNoise& noise);

double multihead_population_loss_separate(index_t d, index_t heads, index_t rank,
                                          const double* W_pv, const double* W_k, const double* W_q,
                                          PopulationCovariance law, const double* covariance, index_t N,
                                          double* d_W_pv, double* d_W_k, double* d_W_q,
                                          const LabelNoise& noise);

}  // namespace lsa_native::cpu
