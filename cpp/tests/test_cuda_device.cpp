// The C++ API with Device::cuda: on a GPU, results equal the CPU's to rounding (host pointers, so
// the backend's own staging is exercised); without one, a clear Error. (The Python suite,
// tests/test_cuda.py, covers device pointers, dtypes and layouts.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ka_problem.hpp"
#include "lsa_native/device.hpp"
#include "lsa_native/kernel_attention.hpp"
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

// ---- kernel attention ----

// A device buffer filled from host values (NaN-poisoned outputs: every entry must be written).
template <class T>
struct DeviceBuffer {
  std::vector<T> host;
  T* dev;
  explicit DeviceBuffer(std::vector<T> values) : host(std::move(values)) {
    dev = static_cast<T*>(lsa_native::cuda_allocate(sizeof(T) * host.size()));
    lsa_native::cuda_copy(dev, host.data(), sizeof(T) * host.size());
  }
  DeviceBuffer(std::size_t n, T fill) : DeviceBuffer(std::vector<T>(n, fill)) {}
  ~DeviceBuffer() { lsa_native::cuda_free(dev); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::vector<T> read() const {
    std::vector<T> out(host.size());
    lsa_native::cuda_copy(out.data(), dev, sizeof(T) * host.size());
    return out;
  }
};

template <class T>
void compare_ka_with_cpu(const lsa_native::KernelAttentionShape& s, lsa_native::Activation act) {
  using lsa_native::Activation;
  SCOPED_TRACE(testing::Message() << "B=" << s.batch << " d=" << s.dim << " n=" << s.context
                                  << " L=" << s.layers << " H=" << s.heads << " act=" << int(act)
                                  << " bytes=" << sizeof(T));
  const auto pr = lsa_native::testing::random_ka_problem<T>(
      s, std::vector<Activation>(std::size_t(s.heads), act), unsigned(s.batch + 7 * s.context), 0.5);
  const double tol = sizeof(T) == 4 ? 2e-4 : 1e-12;
  auto close = [&](const std::vector<T>& a, const std::vector<T>& b, const char* what) {
    double err = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(std::isfinite(double(a[i]))) << what << ": entry " << i << " not written";
      err = std::max(err, std::abs(double(a[i]) - double(b[i])));
      scale = std::max(scale, std::abs(double(b[i])));
    }
    EXPECT_LE(err, tol * scale) << what;
  };
  const std::size_t nz = pr.Z0.size(), np = std::size_t(s.batch * (s.layers + 1));
  const std::size_t nV = pr.V.size(), nB = pr.Bq.size();
  const std::size_t nctx = std::size_t(s.batch * lsa_native::kernel_attention_context_size<T>(s));
  std::vector<T> Z(nz), p(np), ctx(nctx), dV(nV), dB(nB), dC(nB), dZ0(nz), lV(nV), lB(nB), lC(nB),
      lZ0(nz);
  const auto* a = pr.acts.data();
  lsa_native::kernel_attention_forward(s, pr.Z0.data(), pr.V.data(), pr.Bq.data(), pr.Ck.data(), a,
                                       Z.data(), p.data(), ctx.data());
  lsa_native::kernel_attention_vjp(s, pr.Z0.data(), pr.V.data(), pr.Bq.data(), pr.Ck.data(), a,
                                   pr.d_Z.data(), dV.data(), dB.data(), dC.data(), dZ0.data(),
                                   static_cast<const T*>(nullptr));
  const double L = lsa_native::kernel_attention_loss_and_grad(
      s, pr.Z0.data(), pr.y_q.data(), pr.V.data(), pr.Bq.data(), pr.Ck.data(), a, lV.data(),
      lB.data(), lC.data(), lZ0.data(), static_cast<T*>(nullptr));
  const T nan = T(NAN);
  DeviceBuffer<T> z0(pr.Z0), y(pr.y_q), V(pr.V), Bq(pr.Bq), Ck(pr.Ck), dz(pr.d_Z);
  DeviceBuffer<T> gZ(nz, nan), gp(np, nan), gctx(nctx, nan);
  lsa_native::kernel_attention_forward(s, z0.dev, V.dev, Bq.dev, Ck.dev, a, gZ.dev, gp.dev,
                                       gctx.dev, lsa_native::PredictionOutput::tf, Device::cuda);
  close(gZ.read(), Z, "forward Z_L");
  close(gp.read(), p, "forward predictions");
  close(gctx.read(), ctx, "forward context");
  for (const T* context : {static_cast<const T*>(nullptr), static_cast<const T*>(gctx.dev)}) {
    DeviceBuffer<T> gV(nV, nan), gB(nB, nan), gC(nB, nan), gZ0(nz, nan);
    lsa_native::kernel_attention_vjp(s, z0.dev, V.dev, Bq.dev, Ck.dev, a, dz.dev, gV.dev, gB.dev,
                                     gC.dev, gZ0.dev, context, Device::cuda);
    close(gV.read(), dV, "vjp d_V");
    close(gB.read(), dB, "vjp d_B");
    close(gC.read(), dC, "vjp d_C");
    close(gZ0.read(), dZ0, "vjp d_Z0");
  }
  // Host pointers: the backend stages them.
  std::vector<T> hV(nV, nan), hB(nB, nan), hC(nB, nan), hZ0(nz, nan);
  const double gL = lsa_native::kernel_attention_loss_and_grad(
      s, pr.Z0.data(), pr.y_q.data(), pr.V.data(), pr.Bq.data(), pr.Ck.data(), a, hV.data(),
      hB.data(), hC.data(), hZ0.data(), static_cast<T*>(nullptr), Device::cuda);
  EXPECT_NEAR(gL, L, tol * L) << "loss";
  close(hV, lV, "loss d_V");
  close(hB, lB, "loss d_B");
  close(hC, lC, "loss d_C");
  close(hZ0, lZ0, "loss d_Z0");
}

TEST(CudaDevice, KernelAttentionMatchesTheCpuKernels) {
  if (!lsa_native::cuda_available()) GTEST_SKIP() << "no CUDA device visible";
  for (int code = 0; code < lsa_native::kActivationCount; ++code)
    for (const lsa_native::KernelAttentionShape& s :
         {lsa_native::KernelAttentionShape{1, 1, 1, 1, 1}, {37, 5, 30, 3, 1}, {9, 3, 7, 2, 3},
          {2, 4, 500, 1, 1}}) {
      compare_ka_with_cpu<float>(s, lsa_native::activation_from_code(code));
      compare_ka_with_cpu<double>(s, lsa_native::activation_from_code(code));
    }
}

TEST(CudaDevice, KernelAttentionWithoutGpuIsAClearError) {
  if (lsa_native::cuda_available()) GTEST_SKIP() << "a GPU is visible";
  const std::vector<double> Z0 = {1, 2, 3, 0}, V = {0, 0, 0, 1}, I = {1};
  const lsa_native::Activation act = lsa_native::Activation::softmax;
  std::vector<double> Z(4);
  EXPECT_THROW(lsa_native::kernel_attention_forward(lsa_native::KernelAttentionShape{1, 1, 1, 1, 1},
                                                    Z0.data(), V.data(), I.data(), I.data(), &act,
                                                    Z.data(), static_cast<double*>(nullptr),
                                                    static_cast<double*>(nullptr),
                                                    lsa_native::PredictionOutput::tf, Device::cuda),
               lsa_native::Error);
}

}  // namespace
