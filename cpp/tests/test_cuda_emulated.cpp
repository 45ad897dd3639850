// The CUDA kernels of cpp/src/cuda/lsa_kernels.cuh run on the CPU by a small emulator of the CUDA
// execution model (cuda_emulation.hpp: host threads, barriers, shuffles, shared memory), against
// the CPU kernels. Checks indexing, shared-memory layouts, grid-stride loops, the per-warp/block
// partial sums and the fixed-order reductions on machines without a GPU.
#include "cuda_emulation.hpp"  // first: defines the CUDA keywords the kernels use

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "cuda/lsa_kernels.cuh"
#include "cuda/random_kernels.cuh"
#include "lsa_native/lsa.hpp"
#include "emulated_helpers.hpp"
#include "lsa_problem.hpp"
#include "lsa_native/sampling.hpp"

namespace {

using lsa_native::index_t;
using lsa_native::LsaShape;
namespace k = lsa_native::cuda::kernels;

template <class T>
using Problem = lsa_native::testing::LsaProblem<T>;
using lsa_native::testing::random_lsa_problem;

using lsa_native::testing::expect_close;
using lsa_native::testing::reduce;
using lsa_native::testing::tolerance;

TEST(CudaKernelsEmulated, ReducePartialsOrder) {
  const int count = 600, width = 3;
  std::mt19937_64 gen(5);
  std::normal_distribution<double> normal;
  std::vector<double> partial(count * width);
  for (auto& x : partial) x = normal(gen) * std::exp(4 * normal(gen));  // wide range: order shows
  std::vector<double> total(width, std::numeric_limits<double>::quiet_NaN());
  lsa_emu::launch(unsigned(width), k::kReduceThreads, 0, k::reduce_partials_kernel, partial.data(),
                  count, width, total.data());
  const auto expected = reduce(partial, count, width);
  for (int i = 0; i < width; ++i) EXPECT_EQ(total[i], expected[i]);
}

struct Config {
  index_t B, d, N;
  int warps;      // prediction kernels: warps per block
  unsigned grid;  // blocks (grid-stride loops cover the batch)
};

template <class T>
void check_prediction(const Config& c) {
  SCOPED_TRACE(testing::Message() << "B=" << c.B << " d=" << c.d << " N=" << c.N << " warps="
                                  << c.warps << " grid=" << c.grid << " bytes=" << sizeof(T));
  auto pr = random_lsa_problem<T>(c.B, c.d, c.N, unsigned(c.B * 131 + c.d * 7 + c.N));
  const int rows = int(c.d + 1), cols = int(c.N + 1), n2 = rows * rows;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> y_cpu(c.B), g_pv(n2), g_kq(n2), y_loss_cpu(c.B);
  lsa_native::lsa_predict(pr.shape, pr.E.data(), pr.W_pv.data(), pr.W_kq.data(), y_cpu.data());
  const double L = lsa_native::lsa_loss_and_grad(pr.shape, pr.E.data(), pr.y_q.data(), pr.W_pv.data(),
                                                 pr.W_kq.data(), g_pv.data(), g_kq.data(),
                                                 y_loss_cpu.data());
  // Prediction only.
  auto lay = k::PredictionLayout::make<T>(rows, cols, c.warps, false);
  std::vector<T> y(c.B, nan);
  lsa_emu::launch(c.grid, unsigned(32 * c.warps), lay.total(), k::lsa_prediction_kernel<T, false>,
                  pr.shape, lay, pr.E.data(), static_cast<const T*>(nullptr), pr.W_pv.data(),
                  pr.W_kq.data(), y.data(), static_cast<double*>(nullptr));
  expect_close(y, y_cpu, tolerance<T>(), "predict");
  // Loss and gradient: kernel, fixed-order reduction, epilogue.
  lay = k::PredictionLayout::make<T>(rows, cols, c.warps, true);
  std::vector<T> y_loss(c.B, nan), d_pv(n2, nan), d_kq(n2, nan);
  std::vector<double> partial(c.grid * lay.acc_width(), std::numeric_limits<double>::quiet_NaN());
  lsa_emu::launch(c.grid, unsigned(32 * c.warps), lay.total(), k::lsa_prediction_kernel<T, true>,
                  pr.shape, lay, pr.E.data(), pr.y_q.data(), pr.W_pv.data(), pr.W_kq.data(),
                  y_loss.data(), partial.data());
  const auto total = reduce(partial, int(c.grid), lay.acc_width());
  double loss = std::numeric_limits<double>::quiet_NaN();
  lsa_emu::launch(1, k::kReduceThreads, 0, k::loss_grad_epilogue_kernel<T>, total.data(), rows,
                  c.B, d_pv.data(), d_kq.data(), &loss);
  expect_close(y_loss, y_loss_cpu, tolerance<T>(), "loss y_hat");
  EXPECT_NEAR(loss, L, tolerance<T>() * L) << "loss";
  expect_close(d_pv, g_pv, tolerance<T>(), "d_W_pv");
  expect_close(d_kq, g_kq, tolerance<T>(), "d_W_kq");
}

template <class T>
void check_forward_and_vjp(const Config& c, bool with_input_grad) {
  SCOPED_TRACE(testing::Message() << "B=" << c.B << " d=" << c.d << " N=" << c.N << " grid="
                                  << c.grid << " bytes=" << sizeof(T));
  auto pr = random_lsa_problem<T>(c.B, c.d, c.N, unsigned(c.B * 17 + c.d * 5 + c.N));
  const int rows = int(c.d + 1), cols = int(c.N + 1), n2 = rows * rows;
  const index_t size = c.B * rows * cols;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> F_cpu(size), g_pv(n2), g_kq(n2), dE_cpu(size);
  lsa_native::lsa_forward(pr.shape, pr.E.data(), pr.W_pv.data(), pr.W_kq.data(), F_cpu.data());
  lsa_native::lsa_vjp(pr.shape, pr.E.data(), pr.W_pv.data(), pr.W_kq.data(), pr.d_F.data(),
                      g_pv.data(), g_kq.data(), dE_cpu.data());
  std::vector<T> F(size, nan);
  lsa_emu::launch(c.grid, k::kBlockThreads, k::forward_smem<T>(rows, cols), k::lsa_forward_kernel<T>,
                  pr.shape, pr.E.data(), pr.W_pv.data(), pr.W_kq.data(), F.data());
  expect_close(F, F_cpu, tolerance<T>(), "forward");
  std::vector<T> dE(size, nan), d_pv(n2, nan), d_kq(n2, nan);
  std::vector<double> partial(c.grid * 2 * n2, std::numeric_limits<double>::quiet_NaN());
  lsa_emu::launch(c.grid, k::kBlockThreads, k::vjp_smem<T>(rows, cols), k::lsa_vjp_kernel<T>,
                  pr.shape, pr.E.data(), pr.W_pv.data(), pr.W_kq.data(), pr.d_F.data(),
                  with_input_grad ? dE.data() : static_cast<T*>(nullptr), partial.data());
  const auto total = reduce(partial, int(c.grid), 2 * n2);
  lsa_emu::launch(1, k::kReduceThreads, 0, k::vjp_epilogue_kernel<T>, total.data(), n2, d_pv.data(),
                  d_kq.data());
  expect_close(d_pv, g_pv, tolerance<T>(), "vjp d_W_pv");
  expect_close(d_kq, g_kq, tolerance<T>(), "vjp d_W_kq");
  if (with_input_grad) expect_close(dE, dE_cpu, tolerance<T>(), "vjp d_E");
}

// d = 1, N = 1, odd sizes, more prompts than warps (grid-stride), idle warps (B < warps), N + 1 > 32
// tokens (several per lane), d + 1 > 32 rows (several per lane).
const Config kPrediction[] = {{1, 1, 1, 1, 1}, {3, 1, 5, 4, 1}, {7, 3, 7, 2, 2}, {11, 4, 40, 2, 3},
                              {5, 34, 3, 1, 2}, {2, 20, 100, 4, 1}};
const Config kFull[] = {{1, 1, 1, 0, 1}, {5, 3, 7, 0, 2}, {4, 6, 40, 0, 3}, {3, 17, 2, 0, 2}};

TEST(CudaKernelsEmulated, PredictionAndLossGradientFloat64) {
  for (const Config& c : kPrediction) check_prediction<double>(c);
}
TEST(CudaKernelsEmulated, PredictionAndLossGradientFloat32) {
  for (const Config& c : kPrediction) check_prediction<float>(c);
}
TEST(CudaKernelsEmulated, ForwardAndVjpFloat64) {
  for (const Config& c : kFull) check_forward_and_vjp<double>(c, true);
  check_forward_and_vjp<double>(kFull[1], false);
}
TEST(CudaKernelsEmulated, ForwardAndVjpFloat32) {
  for (const Config& c : kFull) check_forward_and_vjp<float>(c, true);
}

// Counter-based variates: raw words bit for bit, uniforms bit for bit, normals to the rounding of
// log/sin/cos (the CPU fills ranges with its SIMD math; the kernels use the scalar recipe).
TEST(CudaKernelsEmulated, PhiloxWordsAndVariatesMatchTheCpu) {
  const index_t n = 1000;
  std::vector<std::uint32_t> counters(4 * n), words(4 * n), expected(4 * n);
  std::mt19937 gen(11);
  for (auto& c : counters) c = std::uint32_t(gen());
  const std::uint64_t seed = 0x0123456789abcdefULL;
  lsa_emu::launch(3, 64, 0, k::philox_kernel, static_cast<const std::uint32_t*>(counters.data()), n,
                  lsa_native::rng::philox_key(seed), words.data());
  lsa_native::philox4x32_10(counters.data(), n, seed, expected.data());
  EXPECT_EQ(words, expected);

  lsa_native::StreamId id;
  id.seed = seed;
  id.step = 7;
  id.prompt = 3;
  id.stream = 0x1000;
  const lsa_native::rng::StreamAddress a{lsa_native::rng::philox_key(id.seed), id.prompt, id.step,
                                         id.stream};
  const std::uint64_t start = 5;  // not a block boundary
  auto check = [&](auto zero, double tol) {
    using T = decltype(zero);
    std::vector<T> z(n, T(NAN)), z_cpu(n), u(n, T(NAN)), u_cpu(n);
    lsa_emu::launch(2, 128, 0, k::variates_kernel<T, true>, a, start, n, z.data());
    lsa_emu::launch(2, 128, 0, k::variates_kernel<T, false>, a, start, n, u.data());
    lsa_native::random_normals(id, start, n, z_cpu.data());
    lsa_native::random_uniforms(id, start, n, u_cpu.data());
    EXPECT_EQ(u, u_cpu);
    for (index_t i = 0; i < n; ++i) ASSERT_NEAR(z[i], z_cpu[i], tol) << "normal " << i;
  };
  check(float{}, 8e-6);
  check(double{}, 5e-14);
}

}  // namespace
