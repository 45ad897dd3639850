// Public multi-head population-loss entry points (population_multihead.hpp): every argument rule
// checked once, here, with errors naming the argument; then the CPU implementation
// (cpu/population_multihead_cpu.cpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "common/finite.hpp"
#include "cpu/population_multihead_cpu.hpp"
#include "cpu/small_matrix_cpu.hpp"
#include "lsa_native/population_multihead.hpp"

namespace lsa_native {
namespace {

// Messages are built only on failure (the checks run on every evaluation of a flow).
void check_sizes(index_t d, index_t heads, index_t N) {
  if (d < 1) throw Error("dimension d must be >= 1, got " + std::to_string(d));
  if (d >= 46340) throw Error("dimension d: expected (d+1)^2 < 2^31, got d = " + std::to_string(d));
  if (heads < 1) throw Error("heads: expected H >= 1, got " + std::to_string(heads));
  if (heads > std::numeric_limits<int>::max() / ((d + 1) * (d + 1)))
    throw Error("heads: H*(d+1)^2 overflows (H = " + std::to_string(heads) + ")");
  if (N < 1) throw Error("training prompt length N must be >= 1, got " + std::to_string(N));
}

// Every entry finite: the poison sum of common/finite.hpp in four partial sums (independent chains
// that vectorise: this runs on every evaluation of a flow), the message only when one is not.
void require_finite(const double* p, index_t count, const char* name) {
  detail::require_pointer(p, name);
  double part[4] = {0, 0, 0, 0};
  index_t i = 0;
  for (; i + 4 <= count; i += 4)
    for (int k = 0; k < 4; ++k) part[k] += detail::poison(p[i + k]);
  double sum = (part[0] + part[1]) + (part[2] + part[3]);
  for (; i < count; ++i) sum += detail::poison(p[i]);
  if (!detail::poison_clear(sum)) throw Error(std::string(name) + ": contains non-finite values (NaN or inf)");
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
    if (!(m1[i] > 0)) throw Error("moments: E[λ_i] must be > 0, entry " + std::to_string(i));
    if (!(m2[i] - m1[i] * m1[i] >= -1e-12 * std::max(1.0, m2[i])))
      throw Error("moments: E[λ_i²] − E[λ_i]² must be >= 0, entry " + std::to_string(i));
  }
}

void check_noise(const LabelNoise& noise) {
  if (!(std::isfinite(noise.std) && noise.std >= 0))
    throw Error("noise_std: expected sigma >= 0, got " + std::to_string(noise.std));
}

}  // namespace

void check_multihead_population_law(index_t d, PopulationCovariance law, const double* covariance) {
  if (d < 1) throw Error("dimension d must be >= 1, got " + std::to_string(d));
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
  if (rank < 1 || rank > d + 1)
    throw Error("rank: expected 1 <= r <= d+1 = " + std::to_string(d + 1) + ", got " +
                std::to_string(rank));
  require_finite(W_pv, heads * (d + 1) * (d + 1), "W_pv");
  require_finite(W_k, heads * rank * (d + 1), "W_k");
  require_finite(W_q, heads * rank * (d + 1), "W_q");
  if (!law_checked) check_law(d, law, covariance);
  check_noise(noise);
  return cpu::multihead_population_loss_separate(d, heads, rank, W_pv, W_k, W_q, law, covariance, N,
                                                 d_W_pv, d_W_k, d_W_q, noise);
}

}  // namespace lsa_native
