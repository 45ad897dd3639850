// K-GP sampler (kernel_gp.hpp) and its per-prompt recipe (common/kernel_gp.hpp): layout, sphere
// points, the Cholesky / eigen roots, determinism across thread counts, argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/kernel_gp.hpp"
#include "lsa_native/device.hpp"
#include "lsa_native/kernel_gp.hpp"

namespace {

using namespace lsa_native;

TEST(KernelGP, SpherePointsHaveUnitNorm) {
  const int n1 = 9, d = 4;
  std::vector<double> xi(n1 * d);
  detail::kgp::sphere_points({rng::philox_key(3), 5, 1, detail::kgp::kStreamGPPoints}, n1, d, xi.data());
  for (int i = 0; i < n1; ++i) {
    double s = 0;
    for (int k = 0; k < d; ++k) s += xi[i * d + k] * xi[i * d + k];
    EXPECT_NEAR(s, 1.0, 4e-16);
  }
}

// Y = R z with R R^T = K_+: rebuild R from the recipe's own z and check the labels for each method.
TEST(KernelGP, LabelsAreRootTimesNormals) {
  const int n1 = 8, d = 3;
  std::vector<double> xi(n1 * d), y(n1), work(detail::kgp::gp_workspace(n1, d)), z(n1), K(n1 * n1);
  const rng::StreamAddress pts{rng::philox_key(11), 2, 0, detail::kgp::kStreamGPPoints};
  const rng::StreamAddress lab{rng::philox_key(11), 2, 0, detail::kgp::kStreamGPLabels};
  detail::kgp::sphere_points(pts, n1, d, xi.data());
  detail::kgp::stream_normals(lab, n1, z.data());
  for (int kernel : {detail::kgp::kExp, detail::kgp::kRelu, detail::kgp::kLinear}) {
    const detail::kgp::Kernel kern{kernel, 0.8};
    const int m = detail::kgp::gp_labels(kern, xi.data(), n1, d, lab, work.data(), y.data());
    detail::kgp::kernel_matrix(kern, xi.data(), n1, d, K.data());
    std::vector<double> want(n1, 0.0);
    if (kernel == detail::kgp::kExp) {
      ASSERT_EQ(m, detail::kgp::kMethodCholesky);
      ASSERT_TRUE(detail::cholesky_in_place(K.data(), n1));
      detail::lower_matvec(K.data(), n1, z.data(), want.data());
    } else if (kernel == detail::kgp::kRelu) {
      // K = Q T Qᵀ, T = S D Sᵀ: y = Q S |D|^{1/2} z, with S and Q rebuilt by the kit.
      ASSERT_EQ(m, detail::kgp::kMethodEigen);
      std::vector<double> w(n1), off(n1), scratch(2 * n1), St(n1 * n1, 0.0), Kq(K);
      detail::householder_tridiagonal(Kq.data(), n1, w.data(), off.data(), scratch.data());
      for (int i = 0; i < n1; ++i) St[i * n1 + i] = 1;
      ASSERT_GE(detail::tridiagonal_ql(w.data(), off.data(), n1, St.data()), 0);
      for (int j = 0; j < n1; ++j)
        for (int i = 0; i < n1; ++i) want[i] += St[j * n1 + i] * std::sqrt(std::fabs(w[j])) * z[j];
      detail::householder_apply(Kq.data(), n1, want.data());
      // And U|D|Uᵀ = K_+ (the same as the Jacobi's, which is basis-free): covariance of y.
      std::vector<double> wj(n1), Vj(n1 * n1), Kj(K);
      ASSERT_GE(detail::jacobi_eigen(Kj.data(), n1, wj.data(), Vj.data()), 0);
      std::vector<double> U(n1 * n1);
      for (int j = 0; j < n1; ++j) {
        std::vector<double> col(St.begin() + j * n1, St.begin() + (j + 1) * n1);
        detail::householder_apply(Kq.data(), n1, col.data());
        for (int i = 0; i < n1; ++i) U[i * n1 + j] = col[i];
      }
      for (int i = 0; i < n1; ++i)
        for (int k = 0; k < n1; ++k) {
          double ours = 0, jac = 0;
          for (int j = 0; j < n1; ++j) {
            ours += U[i * n1 + j] * std::fabs(w[j]) * U[k * n1 + j];
            jac += Vj[i * n1 + j] * std::fabs(wj[j]) * Vj[k * n1 + j];
          }
          EXPECT_NEAR(ours, jac, 1e-12) << i << ", " << k;
        }
    } else {
      ASSERT_EQ(m, detail::kgp::kMethodGram);
      for (int i = 0; i < n1; ++i)
        for (int k = 0; k < d; ++k) want[i] += xi[i * d + k] * z[k];  // θ = the first d normals
    }
    for (int i = 0; i < n1; ++i) EXPECT_NEAR(y[i], want[i], 1e-12) << "kernel " << kernel;
  }
}

// K♦ = α<G₁u, G₁v> + (1 − α)exp<G₂u, G₂v> [CCS Appendix D]: the kernel matrix against the formula,
// α < 1 by the Cholesky of K♦ (Y = L z), α = 1 by the Gram root Y = ΞG₁θ.
TEST(KernelGP, CompositeKernelMatrixAndRoutes) {
  const int n1 = 9, d = 3;
  std::vector<double> xi(n1 * d), y(n1), work(detail::kgp::gp_workspace(n1, d)), z(n1), K(n1 * n1);
  const rng::StreamAddress pts{rng::philox_key(5), 1, 2, detail::kgp::kStreamGPPoints};
  const rng::StreamAddress lab{rng::philox_key(5), 1, 2, detail::kgp::kStreamGPLabels};
  detail::kgp::sphere_points(pts, n1, d, xi.data());
  detail::kgp::stream_normals(lab, n1, z.data());
  for (double alpha : {0.0, 0.3, 1.0}) {
    const double p[7] = {alpha, 1.0, -0.5, 0.0, 0.2, 0.0, 1.5};  // α, g1, g2
    const detail::kgp::Kernel k{detail::kgp::kComposite, 1.0, p};
    detail::kgp::kernel_matrix(k, xi.data(), n1, d, K.data());
    for (int i = 0; i < n1; ++i)
      for (int j = 0; j < n1; ++j) {
        const double* u = &xi[i * d];
        const double* v = &xi[j * d];
        const double t1 = u[0] * v[0] + 0.25 * u[1] * v[1];
        const double t2 = 0.04 * u[0] * v[0] + 2.25 * u[2] * v[2];
        EXPECT_NEAR(K[i * n1 + j], alpha * t1 + (1 - alpha) * std::exp(t2), 1e-14);
      }
    const int m = detail::kgp::gp_labels(k, xi.data(), n1, d, lab, work.data(), y.data());
    std::vector<double> want(n1, 0.0);
    if (alpha < 1) {
      ASSERT_EQ(m, detail::kgp::kMethodCholesky);
      ASSERT_TRUE(detail::cholesky_in_place(K.data(), n1));
      detail::lower_matvec(K.data(), n1, z.data(), want.data());
    } else {
      ASSERT_EQ(m, detail::kgp::kMethodGram);
      for (int i = 0; i < n1; ++i)
        for (int c = 0; c < d; ++c) want[i] += xi[i * d + c] * p[1 + c] * z[c];
    }
    for (int i = 0; i < n1; ++i) EXPECT_NEAR(y[i], want[i], 1e-12) << "alpha " << alpha;
  }
}

TEST(KernelGP, LayoutAndThreadCountIndependence) {
  const index_t B = 300, d = 5, n = 30;
  std::vector<double> sigma(d * d, 0.0);
  for (index_t i = 0; i < d; ++i) sigma[i * d + i] = 1.0 + 0.25 * static_cast<double>(i);
  const KernelGPLaw law{d, n, GPKernel::exp, 1.0, sigma.data()};
  std::vector<double> z1(B * (d + 1) * (n + 1)), z2(z1.size()), y1(B), y2(B), xi(B * (n + 1) * d);
  const int before = num_threads();
  set_num_threads(1);
  sample_kernel_gp<double>(9, 4, B, law, z1.data(), y1.data(), xi.data(), nullptr);
  set_num_threads(2);
  sample_kernel_gp<double>(9, 4, B, law, z2.data(), y2.data(), nullptr, nullptr);
  set_num_threads(before);
  EXPECT_EQ(z1, z2);
  EXPECT_EQ(y1, y2);
  for (index_t b = 0; b < B; ++b) {
    EXPECT_EQ(z1[b * (d + 1) * (n + 1) + d * (n + 1) + n], 0.0);  // (x_q; 0)
    for (index_t k = 0; k < d; ++k)  // x = Σ^{1/2} ξ with diagonal Σ
      EXPECT_NEAR(z1[b * (d + 1) * (n + 1) + k * (n + 1) + 3],
                  std::sqrt(sigma[k * d + k]) * xi[b * (n + 1) * d + 3 * d + k], 1e-15);
  }
}

TEST(KernelGP, RejectsBadArguments) {
  std::vector<double> z(2 * 3 * 4), y(2);
  KernelGPLaw law{2, 3, GPKernel::exp, 1.0, nullptr};
  law.bandwidth = 0.0;
  EXPECT_THROW(sample_kernel_gp<double>(0, 0, 2, law, z.data(), y.data(), nullptr, nullptr), Error);
  law.bandwidth = NAN;
  EXPECT_THROW(sample_kernel_gp<double>(0, 0, 2, law, z.data(), y.data(), nullptr, nullptr), Error);
  law.bandwidth = 1.0;
  law.kernel = static_cast<GPKernel>(5);
  EXPECT_THROW(sample_kernel_gp<double>(0, 0, 2, law, z.data(), y.data(), nullptr, nullptr), Error);
  law.kernel = GPKernel::relu;
  const double bad[4] = {1.0, 2.0, 2.0, 1.0};
  law.sigma = bad;
  EXPECT_THROW(sample_kernel_gp<double>(0, 0, 2, law, z.data(), y.data(), nullptr, nullptr), Error);
  law.sigma = nullptr;
  law.context = 0;
  EXPECT_THROW(sample_kernel_gp<double>(0, 0, 2, law, z.data(), y.data(), nullptr, nullptr), Error);
  law.context = 3;
  EXPECT_THROW(sample_kernel_gp<double>(0, std::uint64_t(1) << 32, 2, law, z.data(), y.data(),
                                        nullptr, nullptr), Error);
}

TEST(KernelGP, RejectsBadCompositeParameters) {
  std::vector<double> z(2 * 3 * 4), y(2);
  const double g[2] = {1.0, 0.5}, g_nan[2] = {1.0, NAN}, g_big[2] = {0.0, 25.0};
  KernelGPLaw law{2, 3, GPKernel::composite, 1.0, nullptr, 0.5, g, g};
  const auto sample = [&] {
    sample_kernel_gp<double>(0, 0, 2, law, z.data(), y.data(), nullptr, nullptr);
  };
  EXPECT_NO_THROW(sample());
  for (double alpha : {-0.1, 1.5, double(NAN)}) {
    law.alpha = alpha;
    EXPECT_THROW(sample(), Error) << alpha;
  }
  law.alpha = 0.5;
  law.g2 = nullptr;
  EXPECT_THROW(sample(), Error);
  law.g2 = g_nan;
  EXPECT_THROW(sample(), Error);
  law.g2 = g_big;  // max g2² = 625 > kKernelGPMaxExpScale
  EXPECT_THROW(sample(), Error);
  law.g2 = g;
  law.g1 = g_nan;
  EXPECT_THROW(sample(), Error);
}

}  // namespace
