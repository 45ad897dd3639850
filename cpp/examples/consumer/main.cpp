// Samples linear-regression prompts in C++, runs the batched LSA prediction and loss gradient,
// checks both against a direct evaluation of f(E) = E + W^PV E (E^T W^KQ E)/N, and takes one
// gradient step on the exact population loss. Exit code 0 = OK.
#include <lsa_native/device.hpp>
#include <lsa_native/lsa.hpp>
#include <lsa_native/population.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {

// [f(E)]_{d+1,N+1} for one prompt, straight from [ZFB (3.3)] with the attention matrix.
double naive_prediction(const double* E, const double* W_pv, const double* W_kq, long d, long N) {
  const long rows = d + 1, cols = N + 1;
  std::vector<double> A(cols), WE(rows * cols, 0.0);  // A = E^T W^KQ e_q (last column only)
  for (long r = 0; r < rows; ++r)
    for (long c = 0; c < rows; ++c)
      for (long j = 0; j < cols; ++j) WE[r * cols + j] += W_kq[r * rows + c] * E[c * cols + j];
  for (long i = 0; i < cols; ++i) {
    A[i] = 0;
    for (long r = 0; r < rows; ++r) A[i] += E[r * cols + i] * WE[r * cols + N];
  }
  double y = E[d * cols + N];
  for (long s = 0; s < rows; ++s)
    for (long i = 0; i < cols; ++i) y += W_pv[d * rows + s] * E[s * cols + i] * A[i] / double(N);
  return y;
}

}  // namespace

int main() {
  const long B = 257, d = 4, N = 9, rows = d + 1, cols = N + 1;
  std::mt19937_64 gen(7);
  std::normal_distribution<double> normal;
  std::vector<double> E(B * rows * cols), y_q(B), W_pv(rows * rows), W_kq(rows * rows);
  for (long b = 0; b < B; ++b) {  // w ~ N(0, I), x ~ N(0, I), y = <w, x>   [ZFB 3.3]
    std::vector<double> w(d);
    for (auto& v : w) v = normal(gen);
    double* Eb = E.data() + b * rows * cols;
    for (long j = 0; j < cols; ++j) {
      double y = 0;
      for (long r = 0; r < d; ++r) {
        Eb[r * cols + j] = normal(gen);
        y += w[r] * Eb[r * cols + j];
      }
      if (j < N) Eb[d * cols + j] = y; else { Eb[d * cols + j] = 0; y_q[b] = y; }
    }
  }
  for (auto& v : W_pv) v = normal(gen);
  for (auto& v : W_kq) v = normal(gen);

  std::vector<double> y_hat(B), d_W_pv(rows * rows), d_W_kq(rows * rows);
  const lsa_native::LsaShape shape{B, d, N};
  lsa_native::lsa_predict(shape, E.data(), W_pv.data(), W_kq.data(), y_hat.data());
  const double loss = lsa_native::lsa_loss_and_grad(shape, E.data(), y_q.data(), W_pv.data(),
                                                     W_kq.data(), d_W_pv.data(), d_W_kq.data());
  double max_err = 0, direct_loss = 0;
  for (long b = 0; b < B; ++b) {
    const double y = naive_prediction(E.data() + b * rows * cols, W_pv.data(), W_kq.data(), d, N);
    max_err = std::fmax(max_err, std::fabs(y - y_hat[b]) / (1 + std::fabs(y)));
    direct_loss += 0.5 * (y - y_q[b]) * (y - y_q[b]) / double(B);
  }
  // One step of gradient descent on the exact population loss (Λ = I): it must decrease.
  std::vector<double> Lambda(d * d, 0.0);
  for (long i = 0; i < d; ++i) Lambda[i * d + i] = 1.0;
  const double before = lsa_native::population_loss(d, W_pv.data(), W_kq.data(), Lambda.data(), N,
                                                    d_W_pv.data(), d_W_kq.data());
  for (long i = 0; i < rows * rows; ++i) {
    W_pv[i] -= 1e-4 * d_W_pv[i];
    W_kq[i] -= 1e-4 * d_W_kq[i];
  }
  const double after = lsa_native::population_loss(d, W_pv.data(), W_kq.data(), Lambda.data(), N);
  const bool ok = max_err < 1e-12 && std::fabs(loss - direct_loss) < 1e-12 * (1 + direct_loss) &&
                  after < before;
  std::printf("lsa_native %s (%s kernels): predict max rel err %.2e, loss %.6f vs direct %.6f, "
              "population loss %.6f -> %.6f after one GD step: %s\n",
              LSA_NATIVE_VERSION_STRING, lsa_native::cpu_kernel_isa(), max_err, loss, direct_loss,
              before, after, ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
