// The CUDA kernels of cpp/src/cuda/lsa_kernels.cuh run on the CPU by a small emulator of the CUDA
// execution model (cuda_emulation.hpp: host threads, barriers, shuffles, shared memory), against
// the CPU kernels. Checks indexing, shared-memory layouts, grid-stride loops, the per-warp/block
// partial sums and the fixed-order reductions on machines without a GPU.
#include "cuda_emulation.hpp"  // first: defines the CUDA keywords the kernels use

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <iterator>
#include <random>
#include <utility>
#include <vector>

#include "cuda/ka_kernels.cuh"
#include "cuda/ka_warp_kernels.cuh"
#include "cuda/lsa_kernels.cuh"
#include "cuda/random_kernels.cuh"
#include "ka_problem.hpp"
#include "lsa_native/kernel_attention.hpp"
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
  using Mode = k::PredictionMode;
  // Prediction only.
  auto lay = k::PredictionLayout::make<T>(rows, cols, c.warps, false);
  std::vector<T> y(c.B, nan);
  lsa_emu::launch(c.grid, unsigned(32 * c.warps), lay.total(),
                  k::lsa_prediction_kernel<T, Mode::predict>, pr.shape, lay, pr.E.data(),
                  static_cast<const T*>(nullptr), pr.W_pv.data(), pr.W_kq.data(), y.data(),
                  static_cast<double*>(nullptr), static_cast<T*>(nullptr));
  expect_close(y, y_cpu, tolerance<T>(), "predict");
  // Loss and gradient: kernel, fixed-order reduction, epilogue.
  lay = k::PredictionLayout::make<T>(rows, cols, c.warps, true);
  std::vector<T> y_loss(c.B, nan), d_pv(n2, nan), d_kq(n2, nan);
  std::vector<double> partial(c.grid * lay.acc_width(), std::numeric_limits<double>::quiet_NaN());
  lsa_emu::launch(c.grid, unsigned(32 * c.warps), lay.total(), k::lsa_prediction_kernel<T, Mode::loss>,
                  pr.shape, lay, pr.E.data(), pr.y_q.data(), pr.W_pv.data(), pr.W_kq.data(),
                  y_loss.data(), partial.data(), static_cast<T*>(nullptr));
  auto total = reduce(partial, int(c.grid), lay.acc_width());
  double loss = std::numeric_limits<double>::quiet_NaN();
  lsa_emu::launch(1, k::kReduceThreads, 0, k::prediction_epilogue_kernel<T>, total.data(), rows,
                  1.0 / double(c.B), d_pv.data(), d_kq.data(), &loss);
  expect_close(y_loss, y_loss_cpu, tolerance<T>(), "loss y_hat");
  EXPECT_NEAR(loss, L, tolerance<T>() * L) << "loss";
  expect_close(d_pv, g_pv, tolerance<T>(), "d_W_pv");
  expect_close(d_kq, g_kq, tolerance<T>(), "d_W_kq");
  // Prediction VJP for the upstream d_y = y_q (any vector): kernel, reduction, epilogue vs the CPU.
  std::vector<T> v_pv(n2), v_kq(n2), dE_cpu(c.B * rows * cols), dE(dE_cpu.size(), nan);
  lsa_native::lsa_predict_vjp(pr.shape, pr.E.data(), pr.W_pv.data(), pr.W_kq.data(),
                              pr.y_q.data(), v_pv.data(), v_kq.data(), dE_cpu.data());
  std::fill(partial.begin(), partial.end(), std::numeric_limits<double>::quiet_NaN());
  std::fill(d_pv.begin(), d_pv.end(), nan);
  std::fill(d_kq.begin(), d_kq.end(), nan);
  lsa_emu::launch(c.grid, unsigned(32 * c.warps), lay.total(), k::lsa_prediction_kernel<T, Mode::vjp>,
                  pr.shape, lay, pr.E.data(), pr.y_q.data(), pr.W_pv.data(), pr.W_kq.data(),
                  static_cast<T*>(nullptr), partial.data(), dE.data());
  total = reduce(partial, int(c.grid), lay.acc_width());
  lsa_emu::launch(1, k::kReduceThreads, 0, k::prediction_epilogue_kernel<T>, total.data(), rows,
                  1.0, d_pv.data(), d_kq.data(), static_cast<double*>(nullptr));
  expect_close(d_pv, v_pv, tolerance<T>(), "predict_vjp d_W_pv");
  expect_close(d_kq, v_kq, tolerance<T>(), "predict_vjp d_W_kq");
  expect_close(dE, dE_cpu, tolerance<T>(), "predict_vjp d_E");
}

// The full forward / VJP kernels: the tiled ones (default) or the old ones (LSA_NATIVE_CUDA_OLD_KERNELS).
enum class FullKernels { old, tiled };

template <class T>
void check_forward_and_vjp(const Config& c, bool with_input_grad, FullKernels which = FullKernels::old) {
  const bool tiled = which == FullKernels::tiled;
  SCOPED_TRACE(testing::Message() << "B=" << c.B << " d=" << c.d << " N=" << c.N << " grid="
                                  << c.grid << " bytes=" << sizeof(T) << " dE=" << with_input_grad
                                  << (tiled ? " tiled" : " old"));
  auto pr = random_lsa_problem<T>(c.B, c.d, c.N, unsigned(c.B * 17 + c.d * 5 + c.N));
  const int rows = int(c.d + 1), cols = int(c.N + 1), n2 = rows * rows;
  const index_t size = c.B * rows * cols;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> F_cpu(size), g_pv(n2), g_kq(n2), dE_cpu(size);
  lsa_native::lsa_forward(pr.shape, pr.E.data(), pr.W_pv.data(), pr.W_kq.data(), F_cpu.data());
  lsa_native::lsa_vjp(pr.shape, pr.E.data(), pr.W_pv.data(), pr.W_kq.data(), pr.d_F.data(),
                      g_pv.data(), g_kq.data(), dE_cpu.data());
  std::vector<T> F(size, nan);
  if (tiled)
    lsa_emu::launch(c.grid, k::kTiledThreads, k::tiled_forward_smem<T>(rows, cols),
                    k::lsa_forward_tiled_kernel<T>, pr.shape, pr.E.data(), pr.W_pv.data(),
                    pr.W_kq.data(), F.data());
  else
    lsa_emu::launch(c.grid, k::kBlockThreads, k::forward_smem<T>(rows, cols), k::lsa_forward_kernel<T>,
                    pr.shape, pr.E.data(), pr.W_pv.data(), pr.W_kq.data(), F.data());
  expect_close(F, F_cpu, tolerance<T>(), "forward");
  std::vector<T> dE(size, nan);
  // d_W_pv, d_W_kq of the VJP kernel with or without dE.
  auto vjp = [&](T* dE_arg) {
    std::vector<T> d_pv(n2, nan), d_kq(n2, nan);
    std::vector<double> partial(c.grid * 2 * n2, std::numeric_limits<double>::quiet_NaN());
    if (tiled)
      lsa_emu::launch(c.grid, k::kTiledThreads, k::tiled_vjp_smem<T>(rows, cols),
                      k::lsa_vjp_tiled_kernel<T>, pr.shape, pr.E.data(), pr.W_pv.data(),
                      pr.W_kq.data(), pr.d_F.data(), dE_arg, partial.data());
    else
      lsa_emu::launch(c.grid, k::kBlockThreads, k::vjp_smem<T>(rows, cols), k::lsa_vjp_kernel<T>,
                      pr.shape, pr.E.data(), pr.W_pv.data(), pr.W_kq.data(), pr.d_F.data(), dE_arg,
                      partial.data());
    const auto total = reduce(partial, int(c.grid), 2 * n2);
    lsa_emu::launch(1, k::kReduceThreads, 0, k::vjp_epilogue_kernel<T>, total.data(), n2,
                    d_pv.data(), d_kq.data());
    return std::make_pair(d_pv, d_kq);
  };
  const auto [d_pv, d_kq] = vjp(with_input_grad ? dE.data() : static_cast<T*>(nullptr));
  expect_close(d_pv, g_pv, tolerance<T>(), "vjp d_W_pv");
  expect_close(d_kq, g_kq, tolerance<T>(), "vjp d_W_kq");
  if (with_input_grad) {  // asking for dE leaves d_W bitwise unchanged (the same summation order)
    const auto [pv_only, kq_only] = vjp(nullptr);
    EXPECT_EQ(pv_only, d_pv);
    EXPECT_EQ(kq_only, d_kq);
  }
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

// The tiled kernels: d = 1, N = 1, odd sizes, N + 1 <= 32 / <= 64 / > 64 tokens (1, 2, 4 tokens
// per lane) and > 128 (two token groups), rows not a multiple of the tiles (3, 7) or of the 8-row
// chunks, d = 20 / N = 100 (3 Gram tiles of 7 exactly), the largest d = 64, more prompts than
// blocks (grid-stride), 1-3 blocks; with and without dE.
const Config kTiled[] = {{1, 1, 1, 0, 1},   {5, 3, 7, 0, 2},   {4, 6, 40, 0, 3},  {3, 17, 2, 0, 2},
                         {3, 8, 70, 0, 2},  {2, 2, 150, 0, 1}, {3, 20, 100, 0, 2}, {2, 64, 5, 0, 2},
                         {2, 9, 31, 0, 3}};

TEST(CudaKernelsEmulated, TiledForwardAndVjpFloat64) {
  for (const Config& c : kTiled) check_forward_and_vjp<double>(c, true, FullKernels::tiled);
  check_forward_and_vjp<double>(kTiled[1], false, FullKernels::tiled);
  check_forward_and_vjp<double>(kTiled[6], false, FullKernels::tiled);
}
TEST(CudaKernelsEmulated, TiledForwardAndVjpFloat32) {
  for (const Config& c : kTiled) check_forward_and_vjp<float>(c, true, FullKernels::tiled);
  check_forward_and_vjp<float>(kTiled[2], false, FullKernels::tiled);
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

// ---- kernel attention (ka_kernels.cuh) -------------------------------------------------------

using lsa_native::Activation;
using lsa_native::KernelAttentionShape;

struct KaConfig {
  KernelAttentionShape shape;
  unsigned grid, threads;  // ka_warp_kernel: threads / 32 warps per block at most
  std::size_t max_shared;  // bytes the layout may use: large (all shared), 0 (all global), between
};

enum class KaKernel { block, warp };  // ka_kernel, ka_warp_kernel

// Forward (Z_L, predictions, the saved context), VJP with and without that context, and
// loss_and_grad through the emulated kernels, the fixed-order reduction and the epilogue, against
// the CPU kernels. Outputs start as NaN (unwritten entries fail); the GPU's context must equal the
// CPU's (one layout, recipe::KaContext).
// The loss and the predictions-only forward run the last layer as the query layer (KaArgs::
// query_only); loss_and_grad and the ŷ forward also run with the full last layer
// (query_layer = false), which must agree with the CPU as well. sparse_v: V = [[A, 0], [0, r]]
// (CCS Assumption 4.4; V[d, :] = r e_d is all the query layer reads of V).
template <class T>
void check_kernel_attention(const KaConfig& c, std::vector<Activation> acts, KaKernel kernel,
                            double logit_scale = 0.5, bool sparse_v = false) {
  const KernelAttentionShape& s = c.shape;
  SCOPED_TRACE(testing::Message() << (kernel == KaKernel::warp ? "warp kernel" : "block kernel")
                                  << " B=" << s.batch << " d=" << s.dim << " n=" << s.context
                                  << " L=" << s.layers << " H=" << s.heads << " act0=" << int(acts[0])
                                  << " grid=" << c.grid << " threads=" << c.threads
                                  << " max_shared=" << c.max_shared << " bytes=" << sizeof(T)
                                  << (sparse_v ? " sparse V" : ""));
  auto pr = lsa_native::testing::random_ka_problem<T>(s, acts, unsigned(s.batch * 31 + s.dim * 7 + s.context), logit_scale);
  if (sparse_v)
    for (index_t p = 0; p < s.layers * s.heads; ++p)
      for (index_t k = 0; k < s.dim; ++k) {
        pr.V[std::size_t(p * (s.dim + 1) * (s.dim + 1) + s.dim * (s.dim + 1) + k)] = T(0);  // V[d, k]
        pr.V[std::size_t(p * (s.dim + 1) * (s.dim + 1) + k * (s.dim + 1) + s.dim)] = T(0);  // V[k, d]
      }
  const index_t d = s.dim, D = d + 1, LH = s.layers * s.heads;
  const index_t nV = LH * D * D, nB = LH * d * d, np = s.batch * (s.layers + 1);
  const index_t ctx = lsa_native::kernel_attention_context_size<T>(s);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  // CPU kernels
  std::vector<T> Z_cpu(pr.Z0.size()), p_cpu(np), cx_cpu(s.batch * ctx), dV(nV), dB(nB), dC(nB),
      dZ0(pr.Z0.size()), lV(nV), lB(nB), lC(nB), lZ0(pr.Z0.size()), lp(np);
  lsa_native::kernel_attention_forward(s, pr.Z0.data(), pr.V.data(), pr.Bq.data(), pr.Ck.data(),
                                       pr.acts.data(), Z_cpu.data(), p_cpu.data(), cx_cpu.data());
  lsa_native::kernel_attention_vjp(s, pr.Z0.data(), pr.V.data(), pr.Bq.data(), pr.Ck.data(),
                                   pr.acts.data(), pr.d_Z.data(), dV.data(), dB.data(), dC.data(),
                                   dZ0.data(), static_cast<const T*>(nullptr));
  const double loss_cpu = lsa_native::kernel_attention_loss_and_grad(
      s, pr.Z0.data(), pr.y_q.data(), pr.V.data(), pr.Bq.data(), pr.Ck.data(), pr.acts.data(),
      lV.data(), lB.data(), lC.data(), lZ0.data(), lp.data());

  // Runs the kernel; returns the rows of *partial and their width.
  auto run = [&](auto mode_tag, k::KaArgs<T> args, std::vector<double>* partial) {
    constexpr k::KaMode kMode = decltype(mode_tag)::value;
    auto poison = [&](int rows, int width) {
      if (!partial) return;
      partial->assign(std::size_t(rows) * std::size_t(width), std::numeric_limits<double>::quiet_NaN());
      args.partial = partial->data();
    };
    if (kernel == KaKernel::warp) {
      const auto lay = k::KaWarpLayout::make<T>(s, kMode, c.max_shared, int(c.threads / 32),
                                                args.context != nullptr);
      EXPECT_GT(lay.warps, 0);
      const int rows = int(c.grid) * lay.warps;
      poison(rows, lay.acc_width());
      lsa_emu::launch(c.grid, unsigned(32 * lay.warps), lay.shared_bytes(), k::ka_warp_kernel<T, kMode>,
                      s, lay, args);
      return std::make_pair(rows, lay.acc_width());
    }
    const auto lay = k::KaLayout::make<T>(s, kMode, c.max_shared);
    std::vector<T> scratch(lay.state_shared ? 0 : std::size_t(c.grid) * lay.state_values, nan);
    args.scratch = scratch.empty() ? nullptr : scratch.data();
    poison(int(c.grid), lay.acc_width());
    lsa_emu::launch(c.grid, c.threads, lay.shared_bytes(), k::ka_kernel<T, kMode>, s, lay, args);
    return std::make_pair(int(c.grid), lay.acc_width());
  };
  using Fwd = std::integral_constant<k::KaMode, k::KaMode::forward>;
  using Vjp = std::integral_constant<k::KaMode, k::KaMode::vjp>;
  using Loss = std::integral_constant<k::KaMode, k::KaMode::loss_grad>;
  auto gradients = [&](const std::vector<double>& partial, std::pair<int, int> rows_width,
                       std::vector<T>& gV, std::vector<T>& gB, std::vector<T>& gC, double* loss) {
    const auto total = reduce(partial, rows_width.first, rows_width.second);
    gV.assign(nV, nan);
    gB.assign(nB, nan);
    gC.assign(nB, nan);
    lsa_emu::launch(1, 64, 0, k::ka_epilogue_kernel<T>, total.data(), int(nV), int(nB), s.batch,
                    gV.data(), gB.data(), gC.data(), loss);
  };
  const double tol = tolerance<T>();
  // Forward with context
  std::vector<T> Z(pr.Z0.size(), nan), p(np, nan), cx(s.batch * ctx, nan);
  k::KaArgs<T> fa{pr.Z0.data(), nullptr, pr.V.data(), pr.Bq.data(), pr.Ck.data(), pr.acts.data(),
                  nullptr, cx.data(), Z.data(), p.data(), nullptr, nullptr, nullptr};
  run(Fwd{}, fa, nullptr);
  expect_close(Z, Z_cpu, tol, "forward Z_L");
  expect_close(p, p_cpu, tol, "forward predictions");
  expect_close(cx, cx_cpu, tol, "forward context");
  // Forward without the context (the warp kernel's compact workspace)
  std::vector<T> Z2(pr.Z0.size(), nan), p2(np, nan);
  k::KaArgs<T> fa2{pr.Z0.data(), nullptr, pr.V.data(), pr.Bq.data(), pr.Ck.data(), pr.acts.data(),
                   nullptr, nullptr, Z2.data(), p2.data(), nullptr, nullptr, nullptr};
  run(Fwd{}, fa2, nullptr);
  expect_close(Z2, Z_cpu, tol, "forward Z_L (no context)");
  expect_close(p2, p_cpu, tol, "forward predictions (no context)");
  // Forward writing ŷ = −TF (PredictionOutput::y_hat) alone: the last layer is the query layer;
  // with it off, the full forward's predictions negated bitwise.
  std::vector<T> p3(np, nan), p4(np, nan), minus_p_cpu(np);
  k::KaArgs<T> fa3 = fa2;
  fa3.Z_out = nullptr;
  fa3.predictions = p3.data();
  fa3.prediction_output = lsa_native::PredictionOutput::y_hat;
  EXPECT_TRUE(fa3.query_only(k::KaMode::forward));
  run(Fwd{}, fa3, nullptr);
  for (index_t i = 0; i < np; ++i) minus_p_cpu[std::size_t(i)] = -p_cpu[std::size_t(i)];
  expect_close(p3, minus_p_cpu, tol, "forward y_hat (query layer)");
  k::KaArgs<T> fa4 = fa3;
  fa4.predictions = p4.data();
  fa4.query_layer = false;
  run(Fwd{}, fa4, nullptr);
  for (index_t i = 0; i < np; ++i) EXPECT_EQ(p4[i], -p2[i]) << "forward y_hat (full last layer) " << i;
  // ŷ_L alone (PredictionOutput::y_hat_final, predictions [B]): the last column of the ŷ forward
  // bitwise, on the device and on the CPU; nothing written past B (the buffer is [B, L+1], NaN).
  const index_t L = s.layers;
  std::vector<T> p5(np, nan), p5_cpu(np, nan);
  k::KaArgs<T> fa5 = fa3;
  fa5.predictions = p5.data();
  fa5.prediction_output = lsa_native::PredictionOutput::y_hat_final;
  run(Fwd{}, fa5, nullptr);
  lsa_native::kernel_attention_forward(s, pr.Z0.data(), pr.V.data(), pr.Bq.data(), pr.Ck.data(),
                                       pr.acts.data(), static_cast<T*>(nullptr), p5_cpu.data(),
                                       static_cast<T*>(nullptr),
                                       lsa_native::PredictionOutput::y_hat_final);
  std::vector<T> last(std::size_t(s.batch)), last_cpu(std::size_t(s.batch));
  for (index_t b = 0; b < s.batch; ++b) {
    EXPECT_EQ(p5[b], p3[b * (L + 1) + L]) << "forward y_hat_final " << b;
    last[b] = p5[b];
    last_cpu[b] = -p_cpu[b * (L + 1) + L];
  }
  for (index_t i = s.batch; i < np; ++i) EXPECT_TRUE(std::isnan(p5[i]) && std::isnan(p5_cpu[i])) << i;
  expect_close(last, last_cpu, tol, "forward y_hat_final vs the CPU's full forward");
  p5_cpu.resize(std::size_t(s.batch));
  expect_close(p5_cpu, last_cpu, tol, "CPU forward y_hat_final");
  // VJP without and with the context, with and without the input gradient
  for (int variant = 0; variant < 3; ++variant) {
    const T* context = variant == 0 ? nullptr : cx.data();
    const bool input_grad = variant < 2;
    SCOPED_TRACE(testing::Message() << (context ? "vjp with context" : "vjp recomputing the forward")
                                    << (input_grad ? "" : ", no input gradient"));
    std::vector<T> gZ0(pr.Z0.size(), nan), gV, gB, gC;
    std::vector<double> partial;
    k::KaArgs<T> va{pr.Z0.data(), nullptr, pr.V.data(), pr.Bq.data(), pr.Ck.data(), pr.acts.data(),
                    pr.d_Z.data(), const_cast<T*>(context), nullptr, nullptr,
                    input_grad ? gZ0.data() : nullptr, nullptr, nullptr};
    gradients(partial, run(Vjp{}, va, &partial), gV, gB, gC, nullptr);
    expect_close(gV, dV, tol, "vjp d_V");
    expect_close(gB, dB, tol, "vjp d_B");
    expect_close(gC, dC, tol, "vjp d_C");
    if (input_grad) expect_close(gZ0, dZ0, tol, "vjp d_Z0");
  }
  // loss_and_grad: the query layer last (the default), then the full last layer
  for (const bool query_layer : {true, false}) {
    SCOPED_TRACE(query_layer ? "loss with the query layer" : "loss with the full last layer");
    std::vector<T> gZ0(pr.Z0.size(), nan), gp(np, nan), gV, gB, gC;
    std::vector<double> partial;
    k::KaArgs<T> la{pr.Z0.data(), pr.y_q.data(), pr.V.data(), pr.Bq.data(), pr.Ck.data(), pr.acts.data(),
                    nullptr, nullptr, nullptr, gp.data(), gZ0.data(), nullptr, nullptr};
    la.query_layer = query_layer;
    EXPECT_EQ(la.query_only(k::KaMode::loss_grad), query_layer);
    const auto rows_width = run(Loss{}, la, &partial);
    double loss = std::numeric_limits<double>::quiet_NaN();
    gradients(partial, rows_width, gV, gB, gC, &loss);
    EXPECT_NEAR(loss, loss_cpu, tol * loss_cpu) << "loss";
    expect_close(gV, lV, tol, "loss d_V");
    expect_close(gB, lB, tol, "loss d_B");
    expect_close(gC, lC, tol, "loss d_C");
    expect_close(gZ0, lZ0, tol, "loss d_Z0");
    expect_close(gp, lp, tol, "loss predictions");
  }
  // predict_vjp: the query backward with y_q = d_y and the seed −d_y (KaMode::predict_vjp) against
  // the CPU's predict_vjp, with and without the input gradient; its loss slot stays 0. d_y is the
  // problem's y_q plus one: values of both signs.
  using PredictVjp = std::integral_constant<k::KaMode, k::KaMode::predict_vjp>;
  std::vector<T> d_y(pr.y_q);
  for (T& v : d_y) v += T(1);
  std::vector<T> pV(nV), pB(nB), pC(nB), pZ0(pr.Z0.size());
  lsa_native::kernel_attention_predict_vjp(s, pr.Z0.data(), pr.V.data(), pr.Bq.data(), pr.Ck.data(),
                                           pr.acts.data(), d_y.data(), pV.data(), pB.data(), pC.data(),
                                           pZ0.data());
  for (int variant = 0; variant < 3; ++variant) {
    const bool query_layer = variant != 1, input_grad = variant != 2;
    SCOPED_TRACE(testing::Message() << "predict_vjp" << (query_layer ? "" : " with the full last layer")
                                    << (input_grad ? "" : ", no input gradient"));
    std::vector<T> gZ0(pr.Z0.size(), nan), gV, gB, gC;
    std::vector<double> partial;
    k::KaArgs<T> pa{pr.Z0.data(), d_y.data(), pr.V.data(), pr.Bq.data(), pr.Ck.data(), pr.acts.data(),
                    nullptr, nullptr, nullptr, nullptr, input_grad ? gZ0.data() : nullptr, nullptr,
                    nullptr};
    pa.query_layer = query_layer;
    double loss = std::numeric_limits<double>::quiet_NaN();
    gradients(partial, run(PredictVjp{}, pa, &partial), gV, gB, gC, &loss);
    EXPECT_EQ(loss, 0.0) << "predict_vjp keeps no loss";
    expect_close(gV, pV, tol, "predict_vjp d_V");
    expect_close(gB, pB, tol, "predict_vjp d_B");
    expect_close(gC, pC, tol, "predict_vjp d_C");
    if (input_grad) expect_close(gZ0, pZ0, tol, "predict_vjp d_Z0");
  }
}

// d = 1, n = 1, odd sizes, layers and heads, more prompts than blocks (grid-stride), fewer
// threads than entries, and the three memory placements: all shared, workspace global, all global.
constexpr std::size_t kAllShared = std::size_t(1) << 30;
const KaConfig kKaConfigs[] = {
    {{1, 1, 1, 1, 1}, 1, 32, kAllShared},   {{5, 2, 5, 2, 1}, 2, 64, kAllShared},
    {{3, 1, 9, 3, 1}, 2, 32, 0},            {{4, 3, 1, 2, 1}, 3, 64, kAllShared},
    {{3, 5, 30, 3, 1}, 2, 128, kAllShared}, {{3, 3, 7, 2, 2}, 2, 64, 2048}};

// The warp kernel: d = 1, n = 1, n + 1 = 32 (even: the workspace stride is padded to 33), n + 1 > 32
// (two token columns per lane), d + 1 > kKaTile rows (two and three register passes), layers and
// heads, 1-3 warps per block, 1-3 blocks, fewer and more prompts than warps, and the largest n the
// warp kernel takes at d = 5, L = 3 in float32 on an H100 (n = 106: four tokens per lane; L = 2
// here, as L = 3 overflows float32 with exp at this n).
const KaConfig kKaWarpConfigs[] = {
    {{1, 1, 1, 1, 1}, 1, 32, kAllShared},    {{5, 2, 5, 2, 1}, 2, 64, kAllShared},
    {{7, 3, 31, 2, 1}, 3, 96, kAllShared},   {{4, 3, 40, 2, 2}, 2, 64, kAllShared},
    {{3, 9, 6, 2, 2}, 1, 96, kAllShared},    {{6, 5, 30, 3, 1}, 2, 64, kAllShared},
    {{2, 12, 70, 1, 2}, 2, 32, kAllShared},  {{2, 5, 106, 2, 1}, 1, 32, kAllShared},
    {{3, 20, 10, 1, 1}, 2, 64, kAllShared}};

template <class T>
void check_kernel_attention_all(KaKernel kernel) {
  for (int code = 0; code < lsa_native::kActivationCount; ++code) {
    const Activation a = lsa_native::activation_from_code(code);
    const auto configs = kernel == KaKernel::warp
                             ? std::vector<KaConfig>(std::begin(kKaWarpConfigs), std::end(kKaWarpConfigs))
                             : std::vector<KaConfig>(std::begin(kKaConfigs), std::end(kKaConfigs));
    for (const KaConfig& c : configs) {
      std::vector<Activation> acts(std::size_t(c.shape.heads), a);
      if (c.shape.heads > 1) acts[1] = Activation::softmax;
      check_kernel_attention<T>(c, acts, kernel);
    }
    check_kernel_attention<T>({{3, 3, 7, 2, 2}, 2, 64, kAllShared}, {a, Activation::softmax}, kernel, 0.5,
                              /*sparse_v=*/true);
  }
}

TEST(CudaKernelsEmulated, KernelAttentionFloat64) { check_kernel_attention_all<double>(KaKernel::block); }
TEST(CudaKernelsEmulated, KernelAttentionFloat32) { check_kernel_attention_all<float>(KaKernel::block); }
TEST(CudaKernelsEmulated, KernelAttentionWarpFloat64) { check_kernel_attention_all<double>(KaKernel::warp); }
TEST(CudaKernelsEmulated, KernelAttentionWarpFloat32) { check_kernel_attention_all<float>(KaKernel::warp); }

// Softmax logits far beyond e^88 (float32's range): the column max must be subtracted.
TEST(CudaKernelsEmulated, KernelAttentionWarpLargeLogits) {
  const KaConfig c{{3, 4, 9, 2, 1}, 2, 32, kAllShared};
  check_kernel_attention<float>(c, {Activation::softmax}, KaKernel::warp, 12.0);
  check_kernel_attention<double>(c, {Activation::softmax}, KaKernel::warp, 12.0);
}

// The recomputing workspace (KaWarpLayout::recompute, ka_warp_kernel<T, kMode, true>; the default,
// LSA_NATIVE_KA_RECOMPUTE=0 turns it off): the loss (query layer on and off) and the VJP without a
// context give the stored workspace's results bit for bit (the backward recomputes U, W, h̃, Y with
// the forward's code), in a smaller workspace.
template <class T>
void check_recompute_workspace(const KaConfig& c, const std::vector<Activation>& acts) {
  const KernelAttentionShape& s = c.shape;
  SCOPED_TRACE(testing::Message() << "recompute B=" << s.batch << " d=" << s.dim << " n=" << s.context
                                  << " L=" << s.layers << " H=" << s.heads << " act0=" << int(acts[0])
                                  << " bytes=" << sizeof(T));
  auto pr = lsa_native::testing::random_ka_problem<T>(s, acts, unsigned(s.batch * 17 + s.context), 0.5);
  const index_t D = s.dim + 1, LH = s.layers * s.heads;
  const index_t nV = LH * D * D, nB = LH * s.dim * s.dim, np = s.batch * (s.layers + 1);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  struct Out {
    std::vector<T> gV, gB, gC, dZ0, preds;
    double loss = std::numeric_limits<double>::quiet_NaN();
    std::size_t state_bytes = 0;
  };
  auto run = [&](auto mode_tag, bool recompute, bool query_layer) {
    constexpr k::KaMode kMode = decltype(mode_tag)::value;
    constexpr bool kLoss = kMode == k::KaMode::loss_grad;
    Out o;
    o.dZ0.assign(pr.Z0.size(), nan);
    o.preds.assign(np, nan);
    k::KaArgs<T> args{pr.Z0.data(), kLoss ? pr.y_q.data() : nullptr, pr.V.data(), pr.Bq.data(),
                      pr.Ck.data(), pr.acts.data(), kLoss ? nullptr : pr.d_Z.data(), nullptr, nullptr,
                      kLoss ? o.preds.data() : nullptr, o.dZ0.data(), nullptr, nullptr};
    args.query_layer = query_layer;
    const auto lay = k::KaWarpLayout::make<T>(s, kMode, c.max_shared, int(c.threads / 32), false, recompute);
    EXPECT_EQ(lay.recompute, recompute);
    EXPECT_GT(lay.warps, 0);
    o.state_bytes = lay.state_bytes;
    const int rows = int(c.grid) * lay.warps;
    std::vector<double> partial(std::size_t(rows) * std::size_t(lay.acc_width()),
                                std::numeric_limits<double>::quiet_NaN());
    args.partial = partial.data();
    const unsigned threads = unsigned(32 * lay.warps);
    if (recompute)
      lsa_emu::launch(c.grid, threads, lay.shared_bytes(), k::ka_warp_kernel<T, kMode, true>, s, lay, args);
    else
      lsa_emu::launch(c.grid, threads, lay.shared_bytes(), k::ka_warp_kernel<T, kMode, false>, s, lay, args);
    const auto total = reduce(partial, rows, lay.acc_width());
    o.gV.assign(nV, nan);
    o.gB.assign(nB, nan);
    o.gC.assign(nB, nan);
    lsa_emu::launch(1, 64, 0, k::ka_epilogue_kernel<T>, total.data(), int(nV), int(nB), s.batch,
                    o.gV.data(), o.gB.data(), o.gC.data(), kLoss ? &o.loss : nullptr);
    return o;
  };
  auto same = [](const std::vector<T>& a, const std::vector<T>& b, const char* what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(std::isfinite(a[i])) << what << " " << i << " unwritten or non-finite";
      EXPECT_EQ(a[i], b[i]) << what << " " << i;
    }
  };
  using Vjp = std::integral_constant<k::KaMode, k::KaMode::vjp>;
  using Loss = std::integral_constant<k::KaMode, k::KaMode::loss_grad>;
  for (const bool query_layer : {true, false}) {
    SCOPED_TRACE(query_layer ? "loss, query layer" : "loss, full last layer");
    const Out a = run(Loss{}, false, query_layer), b = run(Loss{}, true, query_layer);
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_TRUE(std::isfinite(b.loss));
    same(b.gV, a.gV, "d_V");
    same(b.gB, a.gB, "d_B");
    same(b.gC, a.gC, "d_C");
    same(b.dZ0, a.dZ0, "d_Z0");
    same(b.preds, a.preds, "predictions");
    if (s.layers * s.heads > 1) {  // equal at L = H = 1
      EXPECT_LT(b.state_bytes, a.state_bytes);
    }
  }
  const Out a = run(Vjp{}, false, true), b = run(Vjp{}, true, true);
  same(b.gV, a.gV, "vjp d_V");
  same(b.gB, a.gB, "vjp d_B");
  same(b.gC, a.gC, "vjp d_C");
  same(b.dZ0, a.dZ0, "vjp d_Z0");
  if (s.layers * s.heads > 1) {
    EXPECT_LT(b.state_bytes, a.state_bytes);
  }
}

template <class T>
void check_recompute_workspace_all() {
  for (int code = 0; code < lsa_native::kActivationCount; ++code) {
    const Activation a = lsa_native::activation_from_code(code);
    for (const KaConfig& c : kKaWarpConfigs) {
      std::vector<Activation> acts(std::size_t(c.shape.heads), a);
      if (c.shape.heads > 1) acts[1] = Activation::softmax;
      check_recompute_workspace<T>(c, acts);
    }
    check_recompute_workspace<T>({{5, 3, 9, 3, 3}, 2, 64, kAllShared},
                                 {a, Activation::softmax, Activation::relu});
  }
}

TEST(CudaKernelsEmulated, KernelAttentionRecomputeWorkspaceFloat64) { check_recompute_workspace_all<double>(); }
TEST(CudaKernelsEmulated, KernelAttentionRecomputeWorkspaceFloat32) { check_recompute_workspace_all<float>(); }

// The warp kernel's boundary: the CCS size fits several warps per block in float and double; the
// workspace row stride is an odd number of 16-byte units; a warp whose workspace does not fit the
// budget gets 0 warps (the launch then takes ka_kernel).
TEST(CudaKernelsEmulated, KernelAttentionWarpLayout) {
  const KernelAttentionShape ccs{30000, 5, 30, 3, 1};
  const std::size_t h100 = 227 * 1024;
  for (auto mode : {k::KaMode::forward, k::KaMode::vjp, k::KaMode::loss_grad}) {
    const auto f = k::KaWarpLayout::make<float>(ccs, mode, h100);
    EXPECT_GE(f.warps, 3);
    EXPECT_LE(f.shared_bytes(), h100);
    EXPECT_EQ(f.Sw, 36);  // 31 tokens: 9 units of 4 floats
    if (mode == k::KaMode::forward) {  // without the context: Z_ℓ, Z_{ℓ+1}, one head's state
      const auto compact = k::KaWarpLayout::make<float>(ccs, mode, h100, 4, false);
      EXPECT_EQ(compact.state_bytes, std::size_t(4 * 36 * (2 * 6 + 2 * 5 + 30 + 6)));  // 58 rows
      EXPECT_EQ(f.state_bytes, std::size_t(4 * 36 * (4 * 6 + 3 * (2 * 5 + 30 + 6))));  // 162 rows
    }
    const auto g = k::KaWarpLayout::make<double>(ccs, mode, h100);
    EXPECT_GE(g.warps, 1);
    EXPECT_EQ(g.Sw, 34);  // 17 units of 2 doubles
  }
  // The recomputing workspace at the CCS size (loss, float): Z_0..Z_3, one head slot and the
  // backward scratch, 128 rows (220 by default) — 18 KiB instead of 31 KiB a warp.
  const auto loss = k::KaWarpLayout::make<float>(ccs, k::KaMode::loss_grad, h100, 4, false);
  const auto lean = k::KaWarpLayout::make<float>(ccs, k::KaMode::loss_grad, h100, 4, false, true);
  EXPECT_EQ(loss.state_bytes, std::size_t(4 * 36 * (4 * 6 + 3 * (2 * 5 + 30 + 6) + 3 * 6 + 30 + 2 * 5)));
  EXPECT_EQ(lean.state_bytes, std::size_t(4 * 36 * (4 * 6 + (2 * 5 + 30 + 6) + 3 * 6 + 30 + 2 * 5)));
  EXPECT_FALSE(k::KaWarpLayout::make<float>(ccs, k::KaMode::vjp, h100, 4, true, true).recompute);
  EXPECT_FALSE(k::KaWarpLayout::make<float>(ccs, k::KaMode::forward, h100, 4, false, true).recompute);
  const auto big = k::KaWarpLayout::make<float>({8, 20, 400, 2, 1}, k::KaMode::loss_grad, h100);
  EXPECT_EQ(big.warps, 0);
  EXPECT_GT(big.params_bytes + big.warp_bytes(), h100);
}

// The placement the layout picks: the CCS size fits shared memory entirely (~30 KB in float); a
// tight budget moves the workspace out first, then the parameters, then the accumulators.
TEST(CudaKernelsEmulated, KernelAttentionLayoutPlacement) {
  const KernelAttentionShape ccs{30000, 5, 30, 3, 1};
  const auto all = k::KaLayout::make<float>(ccs, k::KaMode::loss_grad, 227 * 1024);
  EXPECT_TRUE(all.state_shared && all.params_shared && all.acc_shared);
  EXPECT_LT(all.shared_bytes(), std::size_t(48 * 1024));
  const auto tight = k::KaLayout::make<float>(ccs, k::KaMode::loss_grad, 4096);
  EXPECT_FALSE(tight.state_shared);
  EXPECT_TRUE(tight.params_shared && tight.acc_shared);
  const auto none = k::KaLayout::make<float>(ccs, k::KaMode::loss_grad, 0);
  EXPECT_FALSE(none.state_shared || none.params_shared || none.acc_shared);
  EXPECT_EQ(none.shared_bytes(), std::size_t(0));
}

}  // namespace
