// Public multi-head population-loss entry points (population_multihead.hpp): every argument rule
// checked once, here, with errors naming the argument; then the CPU implementation
// (cpu/population_multihead_cpu.cpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "cpu/population_multihead_cpu.hpp"
#include "cpu/small_matrix_cpu.hpp"
#include "lsa_native/population_multihead.hpp"

namespace lsa_native {
namespace {

void check_sizes(index_t d, index_t heads, index_t N) {
  detail::require(d >= 1, "dimension d must be >= 1, got " + std::to_string(d));
  detail::require(d < 46340, "dimension d: expected (d+1)^2 < 2^31, got d = " + std::to_string(d));
  detail::require(heads >= 1, "heads: expected H >= 1, got " + std::to_string(heads));
  detail::require(heads <= std::numeric_limits<int>::max() / ((d + 1) * (d + 1)),
                  "heads: H*(d+1)^2 overflows (H = " + std::to_string(heads) + ")");
  detail::require(N >= 1, "training prompt length N must be >= 1, got " + std::to_string(N));
}

void require_finite(const double* p, index_t count, const char* name) {
  detail::require_pointer(p, name);
  for (index_t i = 0; i < count; ++i)
    if (!std::isfinite(p[i])) throw Error(std::string(name) + ": contains non-finite values (NaN or inf)");
}

void check_law(index_t d, PopulationCovariance law, const double* covariance) {
  if (law == PopulationCovariance::fixed) {
    detail::require_pointer(covariance, "Lambda");
    cpu::require_symmetric_positive_definite(covariance, d, "Lambda");
    return;
  }
  require_finite(covariance, 3 * d, "moments");
  const double *m1 = covariance, *m2 = covariance + d;
  for (index_t i = 0; i < d; ++i) {
    detail::require(m1[i] > 0, "moments: E[λ_i] must be > 0, entry " + std::to_string(i));
    detail::require(m2[i] - m1[i] * m1[i] >= -1e-12 * std::max(1.0, m2[i]),
                    "moments: E[λ_i²] − E[λ_i]² must be >= 0, entry " + std::to_string(i));
  }
}

void check_noise(const LabelNoise& noise) {
  detail::require(std::isfinite(noise.std) && noise.std >= 0,
                  "noise_std: expected sigma >= 0, got " + std::to_string(noise.std));
}

}  // namespace

void check_multihead_population_law(index_t d, PopulationCovariance law, const double* covariance) {
  detail::require(d >= 1, "dimension d must be >= 1, got " + std::to_string(d));
  check_law(d, law, covariance);
}

double multihead_population_loss(index_t d, index_t heads, const double* W_pv, const double* W_kq,
                                 PopulationCovariance law, const double* covariance, index_t N,
                                 double* d_W_pv, double* d_W_kq, const LabelNoise& noise,
                                 bool law_checked) {
  check_sizes(d, heads, N);
  require_finite(W_pv, heads * (d + 1) * (d + 1), "W_pv");
  require_finite(W_kq, heads * (d + 1) * (d + 1), "W_kq");
  if (!law_checked) check_law(d, law, covariance);
  check_noise(noise);
  return cpu::multihead_population_loss(d, heads, W_pv, W_kq, law, covariance, N, d_W_pv, d_W_kq,
                                        noise);
}

double multihead_population_loss_separate(index_t d, index_t heads, index_t rank,
                                          const double* W_pv, const double* W_k, const double* W_q,
                                          PopulationCovariance law, const double* covariance, index_t N,
                                          double* d_W_pv, double* d_W_k, double* d_W_q,
                                          const LabelNoise& noise, bool law_checked) {
  check_sizes(d, heads, N);
  detail::require(rank >= 1 && rank <= d + 1, "rank: expected 1 <= r <= d+1 = " +
                                                  std::to_string(d + 1) + ", got " + std::to_string(rank));
  require_finite(W_pv, heads * (d + 1) * (d + 1), "W_pv");
  require_finite(W_k, heads * rank * (d + 1), "W_k");
  require_finite(W_q, heads * rank * (d + 1), "W_q");
  if (!law_checked) check_law(d, law, covariance);
  check_noise(noise);
  return cpu::multihead_population_loss_separate(d, heads, rank, W_pv, W_k, W_q, law, covariance, N,
                                                 d_W_pv, d_W_k, d_W_q, noise);
}

}  // namespace lsa_native
