// The C++ API with Device::cuda: on a GPU, results equal the CPU's to rounding (host pointers, so
// the backend's own staging is exercised); without one, a clear Error. (The Python suite,
// tests/test_cuda.py, covers device pointers, dtypes and layouts.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "lsa_native/device.hpp"
#include "lsa_native/lsa.hpp"

namespace {

using lsa_native::Device;
using lsa_native::index_t;
using lsa_native::LsaShape;

TEST(CudaDevice, WithoutGpuDeviceCudaIsAClearError) {
  if (lsa_native::cuda_available()) GTEST_SKIP() << "a GPU is visible";
  const std::vector<double> E = {1, 2, 3, 0}, W = {1, 0, 0, 1};
  double y = 0;
  try {
    lsa_native::lsa_predict(LsaShape{1, 1, 1}, E.data(), W.data(), W.data(), &y, Device::cuda);
    FAIL() << "expected lsa_native::Error";
  } catch (const lsa_native::Error& e) {
    EXPECT_NE(std::string(e.what()).find("device='cuda'"), std::string::npos) << e.what();
  }
}

template <class T>
void compare_with_cpu(index_t B, index_t d, index_t N) {
  SCOPED_TRACE(testing::Message() << "B=" << B << " d=" << d << " N=" << N << " bytes=" << sizeof(T));
  std::mt19937_64 gen(unsigned(B + 7 * d + 31 * N));
  std::normal_distribution<double> normal;
  const index_t rc = (d + 1) * (N + 1), n2 = (d + 1) * (d + 1);
  std::vector<T> E(B * rc), y_q(B), P(n2), K(n2), dF(B * rc);
  for (auto* v : {&E, &y_q, &P, &K, &dF})
    for (auto& x : *v) x = T(normal(gen));
  const LsaShape s{B, d, N};
  const double tol = sizeof(T) == 4 ? 2e-4 : 1e-12;
  auto close = [&](const std::vector<T>& a, const std::vector<T>& b, const char* what) {
    double err = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      err = std::max(err, std::abs(double(a[i]) - double(b[i])));
      scale = std::max(scale, std::abs(double(b[i])));
    }
    EXPECT_LE(err, tol * scale) << what;
  };
  std::vector<T> y[2], gp[2], gk[2], F[2], dE[2], vp[2], vk[2];
  double L[2];
  for (int k = 0; k < 2; ++k) {
    const Device dev = k == 0 ? Device::cpu : Device::cuda;
    y[k].assign(B, T(NAN));
    gp[k].assign(n2, T(NAN));
    gk[k].assign(n2, T(NAN));
    F[k].assign(B * rc, T(NAN));
    dE[k].assign(B * rc, T(NAN));
    vp[k].assign(n2, T(NAN));
    vk[k].assign(n2, T(NAN));
    lsa_native::lsa_predict(s, E.data(), P.data(), K.data(), y[k].data(), dev);
    L[k] = lsa_native::lsa_loss_and_grad(s, E.data(), y_q.data(), P.data(), K.data(), gp[k].data(),
                                         gk[k].data(), static_cast<T*>(nullptr), dev);
    lsa_native::lsa_forward(s, E.data(), P.data(), K.data(), F[k].data(), dev);
    lsa_native::lsa_vjp(s, E.data(), P.data(), K.data(), dF.data(), vp[k].data(), vk[k].data(),
                        dE[k].data(), dev);
  }
  close(y[1], y[0], "predict");
  EXPECT_NEAR(L[1], L[0], tol * L[0]) << "loss";
  close(gp[1], gp[0], "d_W_pv");
  close(gk[1], gk[0], "d_W_kq");
  close(F[1], F[0], "forward");
  close(vp[1], vp[0], "vjp d_W_pv");
  close(vk[1], vk[0], "vjp d_W_kq");
  close(dE[1], dE[0], "vjp d_E");
}

TEST(CudaDevice, MatchesTheCpuKernels) {
  if (!lsa_native::cuda_available()) GTEST_SKIP() << "no CUDA device visible";
  for (auto [B, d, N] : {std::tuple<index_t, index_t, index_t>{1, 1, 1}, {7, 3, 5}, {300, 20, 100},
                         {33, 40, 9}}) {
    compare_with_cpu<float>(B, d, N);
    compare_with_cpu<double>(B, d, N);
  }
}

}  // namespace
