// Public population-loss entry points (population.hpp): every argument rule checked once, here,
// with errors naming the argument; then the CPU implementation (cpu/population_cpu.cpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "cpu/population_cpu.hpp"
#include "cpu/small_matrix_cpu.hpp"
#include "lsa_native/population.hpp"

namespace lsa_native {
namespace {

// d >= 1, N >= 1, and every size the implementation forms ((d+1)², count·d²) fits in index_t and
// its per-matrix indices in int (common/small_matrix.hpp).
void check_sizes(index_t d, index_t N, index_t count = 1) {
  detail::require(d >= 1, "dimension d must be >= 1, got " + std::to_string(d));
  detail::require(N >= 1, "training prompt length N must be >= 1, got " + std::to_string(N));
  detail::require(d < 46340, "dimension d: expected (d+1)^2 < 2^31, got d = " + std::to_string(d));
  detail::require(count <= std::numeric_limits<index_t>::max() / (d * d),
                  "S*d*d overflows a 64-bit index (S = " + std::to_string(count) + ")");
}

void check_params(index_t d, const double* W_pv, const double* W_kq) {
  detail::require_pointer(W_pv, "W_pv");
  detail::require_pointer(W_kq, "W_kq");
  for (index_t i = 0; i < (d + 1) * (d + 1); ++i) {
    if (!std::isfinite(W_pv[i])) throw Error("W_pv: contains non-finite values (NaN or inf)");
    if (!std::isfinite(W_kq[i])) throw Error("W_kq: contains non-finite values (NaN or inf)");
  }
}

void check_noise(const LabelNoise& noise) {
  detail::require(std::isfinite(noise.std) && noise.std >= 0,
                  "noise_std: expected sigma >= 0, got " + std::to_string(noise.std));
}

}  // namespace

double population_loss(index_t d, const double* W_pv, const double* W_kq, const double* Lambda,
                       index_t N, double* d_W_pv, double* d_W_kq, const LabelNoise& noise) {
  check_sizes(d, N);
  check_params(d, W_pv, W_kq);
  check_noise(noise);
  detail::require_pointer(Lambda, "Lambda");
  cpu::require_symmetric_positive_definite(Lambda, d, "Lambda");
  return cpu::population_loss(d, W_pv, W_kq, Lambda, N, d_W_pv, d_W_kq, noise);
}

double population_loss_random_diagonal(index_t d, const double* W_pv, const double* W_kq,
                                       const double* moments, index_t N, double* d_W_pv,
                                       double* d_W_kq, const LabelNoise& noise) {
  check_sizes(d, N);
  check_params(d, W_pv, W_kq);
  check_noise(noise);
  detail::require_pointer(moments, "moments");
  const double *m1 = moments, *m2 = moments + d;
  for (index_t i = 0; i < d; ++i)
    detail::require(m2[i] - m1[i] * m1[i] >= -1e-12 * std::max(1.0, m2[i]),
                    "moments: E[λ_i²] − E[λ_i]² must be >= 0, entry " + std::to_string(i));
  return cpu::population_loss_random_diagonal(d, W_pv, W_kq, moments, N, d_W_pv, d_W_kq, noise);
}

double population_loss_samples(index_t d, const double* W_pv, const double* W_kq,
                               const double* Lambdas, index_t n_samples, index_t N,
                               double* d_W_pv, double* d_W_kq, const LabelNoise& noise) {
  check_sizes(d, N, std::max<index_t>(n_samples, 1));
  check_params(d, W_pv, W_kq);
  check_noise(noise);
  detail::require_pointer(Lambdas, "Lambdas");
  detail::require(n_samples >= 1,
                  "Lambdas: need at least one covariance sample, got " + std::to_string(n_samples));
  for (index_t s = 0; s < n_samples; ++s) cpu::require_symmetric_positive_definite(Lambdas + s * d * d, d, "Lambdas", s);
  return cpu::population_loss_samples(d, W_pv, W_kq, Lambdas, n_samples, N, d_W_pv, d_W_kq, noise);
}

double reduced_loss(index_t d, const double* U11, double u, const double* Lambda, index_t N,
                    double* d_U11, double* d_u) {
  check_sizes(d, N);
  detail::require_pointer(U11, "U11");
  detail::require_pointer(Lambda, "Lambda");
  cpu::require_symmetric_positive_definite(Lambda, d, "Lambda");
  return cpu::reduced_loss(d, U11, u, Lambda, N, d_U11, d_u);
}

}  // namespace lsa_native
