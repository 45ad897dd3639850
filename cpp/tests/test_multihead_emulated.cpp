// The H-head CUDA kernels (cpp/src/cuda/multihead_kernels.cuh) run on the CPU by the CUDA emulator
// (cuda_emulation.hpp), against the CPU kernels: indexing, shared-memory layouts, grid-stride loops,
// per-warp/block partial sums and the epilogues on machines without a GPU. And the per-prompt
// Wishart route of common/multihead_recipe.hpp against the token route on the same G.
#include "cuda_emulation.hpp"  // first: defines the CUDA keywords the kernels use

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/multihead_recipe.hpp"
#include "cuda/multihead_kernels.cuh"
#include "emulated_helpers.hpp"
#include "lsa_native/multihead.hpp"

namespace {

using lsa_native::index_t;
using lsa_native::LsaShape;
namespace k = lsa_native::cuda::kernels;
using lsa_native::testing::expect_close;
using lsa_native::testing::reduce;
using lsa_native::testing::tolerance;

template <class T>
std::vector<T> normals(index_t n, unsigned seed, double scale = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  std::vector<T> v(static_cast<size_t>(n));
  for (auto& x : v) x = T(scale * normal(gen));
  return v;
}

struct Config {
  index_t B, d, N, H;
  int warps;      // prediction kernels: warps per block
  unsigned grid;  // blocks (grid-stride loops cover the batch)
  int group = 0;        // prediction kernels: lanes per prompt (0: HeadsLayout::default_group)
  bool spread = true;  // prediction kernels: token stride 4 mod 8 (else the least multiple of 4)
};

// max |a − b| / max |b|.
template <class T>
double relative_gap(const std::vector<T>& a, const std::vector<T>& b) {
  double scale = 0, err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::abs(double(b[i])));
    err = std::max(err, std::abs(double(a[i]) - double(b[i])));
  }
  return err / scale;
}

// Power of the comparisons above: kernels with a dropped head, heads' p and q paired across heads,
// or 1/(N+1) for 1/N would fail them (their results differ from the kernel's by far more than the
// tolerance). These run hand-made wrong formulas on the CPU, not the kernel: they show that the
// tolerance detects such defects, not that the kernel is free of them (the comparisons above do).
template <class T>
void expect_wrong_formulas_rejected(const LsaShape& sh, index_t H, const std::vector<T>& E,
                                    const std::vector<T>& W_pv, const std::vector<T>& W_kq,
                                    const std::vector<T>& y, const std::vector<T>& d_kq) {
  const int rows = int(sh.dim + 1), cols = int(sh.context + 1), n2 = rows * rows;
  const double margin = 10 * tolerance<T>();
  std::vector<T> alt(sh.batch);
  lsa_native::multihead_lsa_predict(sh, H - 1, E.data(), W_pv.data(), W_kq.data(), alt.data());
  EXPECT_GT(relative_gap(alt, y), margin) << "a dropped head";
  std::vector<T> W_pv_next(W_pv.size());  // head h's p with head h+1's W^KQ
  for (index_t i = 0; i < index_t(W_pv.size()); ++i) W_pv_next[i] = W_pv[(i + n2) % W_pv.size()];
  lsa_native::multihead_lsa_predict(sh, H, E.data(), W_pv_next.data(), W_kq.data(), alt.data());
  EXPECT_GT(relative_gap(alt, y), margin) << "cross-head pairing";
  const double n = double(sh.context), wrong = n / (n + 1);
  for (index_t b = 0; b < sh.batch; ++b) {
    const T label = E[b * rows * cols + (rows - 1) * cols + cols - 1];
    alt[b] = T(label + (double(y[b]) - label) * wrong);
  }
  EXPECT_GT(relative_gap(alt, y), margin) << "1/(N+1) for 1/N in the prediction";
  std::vector<T> alt_kq(d_kq.size());
  for (size_t i = 0; i < d_kq.size(); ++i) alt_kq[i] = T(double(d_kq[i]) * wrong);
  EXPECT_GT(relative_gap(alt_kq, d_kq), margin) << "1/(N+1) for 1/N in d_W_kq";
}

template <class T>
void check_prediction(const Config& c) {
  SCOPED_TRACE(testing::Message() << "B=" << c.B << " d=" << c.d << " N=" << c.N << " H=" << c.H
                                  << " warps=" << c.warps << " grid=" << c.grid << " group=" << c.group
                                  << " spread=" << c.spread << " bytes=" << sizeof(T));
  const unsigned seed = unsigned(c.B * 131 + c.d * 7 + c.N * 3 + c.H);
  const LsaShape sh{c.B, c.d, c.N};
  const int rows = int(c.d + 1), cols = int(c.N + 1);
  const index_t nW = c.H * rows * rows, nE = c.B * rows * cols;
  const auto E = normals<T>(nE, seed), y_q = normals<T>(c.B, seed + 1),
             W_pv = normals<T>(nW, seed + 2, 0.5), W_kq = normals<T>(nW, seed + 3, 0.5);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> y_cpu(c.B), g_pv(nW), g_kq(nW), y_loss_cpu(c.B);
  lsa_native::multihead_lsa_predict(sh, c.H, E.data(), W_pv.data(), W_kq.data(), y_cpu.data());
  const double L = lsa_native::multihead_lsa_loss_and_grad(sh, c.H, E.data(), y_q.data(), W_pv.data(),
                                                           W_kq.data(), g_pv.data(), g_kq.data(),
                                                           y_loss_cpu.data());
  using Mode = k::PredictionMode;
  const unsigned threads = unsigned(32 * c.warps);
  // Prediction only.
  const int group = c.group > 0 ? c.group : k::HeadsLayout::default_group(int(c.H), rows);
  auto lay = k::HeadsLayout::make<T>(int(c.H), rows, cols, c.warps, false, false, group, c.spread);
  std::vector<T> y(c.B, nan);
  lsa_emu::launch(c.grid, threads, lay.total(), k::multihead_prediction_kernel<T, Mode::predict>, sh,
                  lay, E.data(), static_cast<const T*>(nullptr), W_pv.data(), W_kq.data(), y.data(),
                  static_cast<double*>(nullptr), static_cast<T*>(nullptr));
  expect_close(y, y_cpu, tolerance<T>(), "predict");
  // Loss and gradient: kernel, fixed-order reduction, epilogue.
  lay = k::HeadsLayout::make<T>(int(c.H), rows, cols, c.warps, true, false, group, c.spread);
  const int width = lay.acc_width();
  std::vector<T> y_loss(c.B, nan), d_pv(nW, nan), d_kq(nW, nan);
  std::vector<double> partial(c.grid * width, std::numeric_limits<double>::quiet_NaN());
  lsa_emu::launch(c.grid, threads, lay.total(), k::multihead_prediction_kernel<T, Mode::loss>, sh, lay,
                  E.data(), y_q.data(), W_pv.data(), W_kq.data(), y_loss.data(), partial.data(),
                  static_cast<T*>(nullptr));
  auto total = reduce(partial, int(c.grid), width);
  double loss = std::numeric_limits<double>::quiet_NaN();
  lsa_emu::launch(1, k::kReduceThreads, 0, k::heads_prediction_epilogue_kernel<T>, total.data(),
                  int(c.H), rows, 1.0 / double(c.B), d_pv.data(), d_kq.data(), &loss);
  expect_close(y_loss, y_loss_cpu, tolerance<T>(), "loss y_hat");
  EXPECT_NEAR(loss, L, tolerance<T>() * L) << "loss";
  expect_close(d_pv, g_pv, tolerance<T>(), "d_W_pv");
  expect_close(d_kq, g_kq, tolerance<T>(), "d_W_kq");
  expect_wrong_formulas_rejected(sh, c.H, E, W_pv, W_kq, y, d_kq);
  // Prediction VJP for the upstream d_y = y_q (any vector).
  std::vector<T> v_pv(nW), v_kq(nW), dE_cpu(nE), dE(nE, nan);
  lsa_native::multihead_lsa_predict_vjp(sh, c.H, E.data(), W_pv.data(), W_kq.data(), y_q.data(),
                                        v_pv.data(), v_kq.data(), dE_cpu.data());
  lay = k::HeadsLayout::make<T>(int(c.H), rows, cols, c.warps, true, true, group, c.spread);
  std::fill(partial.begin(), partial.end(), std::numeric_limits<double>::quiet_NaN());
  std::fill(d_pv.begin(), d_pv.end(), nan);
  std::fill(d_kq.begin(), d_kq.end(), nan);
  lsa_emu::launch(c.grid, threads, lay.total(), k::multihead_prediction_kernel<T, Mode::vjp>, sh, lay,
                  E.data(), y_q.data(), W_pv.data(), W_kq.data(), static_cast<T*>(nullptr),
                  partial.data(), dE.data());
  total = reduce(partial, int(c.grid), width);
  lsa_emu::launch(1, k::kReduceThreads, 0, k::heads_prediction_epilogue_kernel<T>, total.data(),
                  int(c.H), rows, 1.0, d_pv.data(), d_kq.data(), static_cast<double*>(nullptr));
  expect_close(d_pv, v_pv, tolerance<T>(), "predict_vjp d_W_pv");
  expect_close(d_kq, v_kq, tolerance<T>(), "predict_vjp d_W_kq");
  expect_close(dE, dE_cpu, tolerance<T>(), "predict_vjp d_E");
}

template <class T>
void check_forward_and_vjp(const Config& c, bool with_input_grad) {
  SCOPED_TRACE(testing::Message() << "B=" << c.B << " d=" << c.d << " N=" << c.N << " H=" << c.H
                                  << " grid=" << c.grid << " bytes=" << sizeof(T) << " dE=" << with_input_grad);
  const unsigned seed = unsigned(c.B * 17 + c.d * 5 + c.N + c.H * 11);
  const LsaShape sh{c.B, c.d, c.N};
  const int rows = int(c.d + 1), cols = int(c.N + 1);
  const index_t nW = c.H * rows * rows, nE = c.B * rows * cols;
  const auto E = normals<T>(nE, seed), d_F = normals<T>(nE, seed + 1),
             W_pv = normals<T>(nW, seed + 2, 0.5), W_kq = normals<T>(nW, seed + 3, 0.5);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> F_cpu(nE), g_pv(nW), g_kq(nW), dE_cpu(nE);
  lsa_native::multihead_lsa_forward(sh, c.H, E.data(), W_pv.data(), W_kq.data(), F_cpu.data());
  lsa_native::multihead_lsa_vjp(sh, c.H, E.data(), W_pv.data(), W_kq.data(), d_F.data(), g_pv.data(),
                                g_kq.data(), dE_cpu.data());
  std::vector<T> F(nE, nan);
  lsa_emu::launch(c.grid, k::kBlockThreads, k::multihead_forward_smem<T>(int(c.H), rows, cols),
                  k::multihead_forward_kernel<T>, sh, int(c.H), E.data(), W_pv.data(), W_kq.data(),
                  F.data());
  expect_close(F, F_cpu, tolerance<T>(), "forward");
  std::vector<T> dE(nE, nan), d_pv(nW, nan), d_kq(nW, nan);
  std::vector<double> partial(c.grid * 2 * nW, std::numeric_limits<double>::quiet_NaN());
  lsa_emu::launch(c.grid, k::kBlockThreads, k::multihead_vjp_smem<T>(int(c.H), rows, cols),
                  k::multihead_vjp_kernel<T>, sh, int(c.H), E.data(), W_pv.data(), W_kq.data(),
                  d_F.data(), with_input_grad ? dE.data() : static_cast<T*>(nullptr), partial.data());
  std::vector<double> total(2 * nW, std::numeric_limits<double>::quiet_NaN());  // the device's reduction
  lsa_emu::launch(unsigned(2 * nW), k::kReduceThreads, 0, k::reduce_partials_kernel, partial.data(),
                  int(c.grid), int(2 * nW), total.data());
  lsa_emu::launch(1, k::kReduceThreads, 0, k::vjp_epilogue_kernel<T>, total.data(), int(nW),
                  d_pv.data(), d_kq.data());
  expect_close(d_pv, g_pv, tolerance<T>(), "vjp d_W_pv");
  expect_close(d_kq, g_kq, tolerance<T>(), "vjp d_W_kq");
  if (with_input_grad) expect_close(dE, dE_cpu, tolerance<T>(), "vjp d_E");
}

// d = 1, N = 1, H = 2; odd sizes; more prompts than warps (grid-stride); idle warps (B < warps);
// N + 1 > 32 tokens and H (d+1) > 32 head entries (several per lane); (d+1)² > 32.
// Lanes per prompt 4, 8, 16, 32 (several prompts per warp; a round's last slots past the batch);
// d + 1 > 4 (several G tiles, partial edge tiles), d + 1 > 32 (more G tiles than lanes); the
// least token stride (d + 1 = 8: no padding; d + 1 = 21); 8 warps a block.
const Config kPrediction[] = {{1, 1, 1, 2, 1, 1},      {3, 1, 5, 3, 4, 1},     {7, 3, 7, 2, 2, 2},
                              {11, 4, 40, 5, 2, 3},    {5, 9, 3, 4, 1, 2},     {2, 6, 70, 8, 4, 1},
                              {13, 5, 20, 5, 2, 2, 4}, {9, 2, 33, 3, 1, 3, 8}, {21, 6, 9, 2, 2, 1, 16},
                              {3, 34, 4, 2, 1, 2, 32}, {6, 7, 5, 3, 2, 2, 8, false},
                              {4, 20, 12, 3, 2, 1, 32, false}, {70, 3, 6, 3, 8, 2, 8}};
// (The block kernels' emulation is slow: 256 host threads and 2H + 4 barriers per prompt.)
const Config kFull[] = {{1, 1, 1, 2, 0, 1}, {3, 3, 7, 3, 0, 2}, {1, 9, 2, 2, 0, 1}};

TEST(MultiHeadCudaEmulated, PredictionLossAndPredictVjpFloat64) {
  for (const Config& c : kPrediction) check_prediction<double>(c);
}
TEST(MultiHeadCudaEmulated, PredictionLossAndPredictVjpFloat32) {
  for (const Config& c : kPrediction) check_prediction<float>(c);
}
TEST(MultiHeadCudaEmulated, ForwardAndVjpFloat64) {
  for (const Config& c : kFull) check_forward_and_vjp<double>(c, true);
  check_forward_and_vjp<double>(kFull[1], false);
}
TEST(MultiHeadCudaEmulated, ForwardAndVjpFloat32) { check_forward_and_vjp<float>(kFull[1], true); }

// ---- the Wishart route equals the token route on the same G ------------------------------------

// Lower Cholesky factor of the SPD [n, n] matrix A (row-major).
std::vector<double> cholesky(const std::vector<double>& A, index_t n) {
  std::vector<double> L(static_cast<size_t>(n * n), 0.0);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j <= i; ++j) {
      double s = A[i * n + j];
      for (index_t m = 0; m < j; ++m) s -= L[i * n + m] * L[j * n + m];
      L[i * n + j] = i == j ? std::sqrt(s) : s / L[j * n + j];
    }
  return L;
}

// Prompts built from whitened draws z_i [d'] (d' = d + 1: label noise) as the law does, e_i = Ã L̃ z_i
// (x_i = L z_i[:d], y_i = wᵀx_i + σ z_i[d]), and the Bartlett factor T = chol(Σ_i z_i z_iᵀ) of those
// very draws: then M Mᵀ + e_q e_qᵀ/N (wishart.hpp) is the prompt's G exactly, and the Wishart route
// (heads_residual + accumulate) must give the token route's loss and gradients to rounding.
TEST(MultiHeadWishart, EqualsTheTokenRouteOnTheSameGram) {
  const index_t B = 3, d = 3, N = 6, H = 3, rows = d + 1, dp = d + 1, n2 = rows * rows;
  std::mt19937_64 gen(11);
  std::normal_distribution<double> normal;
  std::vector<double> A(d * d), Lf;
  for (auto& x : A) x = normal(gen);
  std::vector<double> Lam(d * d, 0.0);  // Λ = A Aᵀ + I
  for (index_t i = 0; i < d; ++i)
    for (index_t j = 0; j < d; ++j) {
      for (index_t m = 0; m < d; ++m) Lam[i * d + j] += A[i * d + m] * A[j * d + m];
      if (i == j) Lam[i * d + j] += 1;
    }
  Lf = cholesky(Lam, d);
  lsa_native::linear::Law<double> P;
  P.d = d;
  P.N = N;
  P.L = Lf.data();
  P.sigma = 0.7;
  const auto W_pv = normals<double>(H * n2, 12, 0.5), W_kq = normals<double>(H * n2, 13, 0.5);
  std::vector<double> E(B * rows * (N + 1)), y_q(B), p_t(H * rows), W_kq_t(H * n2);
  lsa_native::multihead::heads_inner(H, rows, W_pv.data(), W_kq.data(), p_t.data(), W_kq_t.data());
  std::vector<double> acc(lsa_native::multihead::loss_grad_width(H, rows), 0.0);
  const index_t nz = lsa_native::wishart::bartlett_normals(d, dp);
  std::vector<double> work(lsa_native::wishart::Work<double>::size(d, dp) +
                           lsa_native::multihead::HeadsWork<double>::size(H, d, dp));
  const auto s = lsa_native::wishart::Work<double>::at(work.data(), d, dp);
  const auto h = lsa_native::multihead::HeadsWork<double>::at(
      work.data() + lsa_native::wishart::Work<double>::size(d, dp), H, d, dp);
  for (index_t b = 0; b < B; ++b) {
    double* Eb = E.data() + b * rows * (N + 1);
    std::vector<double> w(d), Z(N * dp), z(nz, 0.0), chi2(dp), S(dp * dp, 0.0);
    for (auto& x : w) x = normal(gen);
    for (auto& x : Z) x = normal(gen);
    for (index_t i = 0; i < N; ++i) {  // token i: x = L z[:d], y = wᵀx + σ z[d]
      double y = 0;
      for (index_t r = 0; r < d; ++r) {
        double x = 0;
        for (index_t m = 0; m <= r; ++m) x += Lf[r * d + m] * Z[i * dp + m];
        Eb[r * (N + 1) + i] = x;
        y += w[r] * x;
      }
      Eb[d * (N + 1) + i] = y + P.sigma * Z[i * dp + d];
      for (index_t a = 0; a < dp; ++a)
        for (index_t c = 0; c < dp; ++c) S[a * dp + c] += Z[i * dp + a] * Z[i * dp + c];
    }
    const auto Tm = cholesky(S, dp);  // T Tᵀ = Σ_i z_i z_iᵀ
    for (index_t r = 0; r < d; ++r) z[r] = normal(gen);  // x_q's normals
    index_t next = d;
    for (index_t i = 0; i < dp; ++i) {
      for (index_t j = 0; j < i; ++j) z[next++] = Tm[i * dp + j];
      chi2[i] = Tm[i * dp + i] * Tm[i * dp + i];
    }
    double yq = 0;  // the query column x_q = L z_q, label slot 0; y_q = wᵀx_q
    for (index_t r = 0; r < d; ++r) {
      double x = 0;
      for (index_t m = 0; m <= r; ++m) x += Lf[r * d + m] * z[m];
      Eb[r * (N + 1) + N] = x;
      yq += w[r] * x;
    }
    Eb[d * (N + 1) + N] = 0;
    y_q[b] = yq;
    const double r = lsa_native::multihead::heads_residual(P, H, p_t.data(), W_kq_t.data(), z.data(),
                                                           chi2.data(), w.data(), static_cast<const double*>(nullptr), s, h);
    lsa_native::multihead::accumulate(r, s.e_q, h, H, rows, acc.data());
  }
  std::vector<double> g_pv(H * n2), g_kq(H * n2);
  const double L = lsa_native::multihead_lsa_loss_and_grad(LsaShape{B, d, N}, H, E.data(), y_q.data(),
                                                           W_pv.data(), W_kq.data(), g_pv.data(),
                                                           g_kq.data());
  EXPECT_NEAR(0.5 * acc[0] / B, L, 1e-12 * L);
  const double* d_p = acc.data() + 1;
  const double* d_K = d_p + H * rows;
  for (index_t hh = 0; hh < H; ++hh)
    for (index_t c = 0; c < rows; ++c)
      EXPECT_NEAR(d_p[hh * rows + c] / B, g_pv[hh * n2 + d * rows + c], 1e-11) << "dW_pv " << hh;
  for (index_t i = 0; i < H * n2; ++i) EXPECT_NEAR(d_K[i] / B, g_kq[i], 1e-11) << "dW_kq " << i;
}

}  // namespace
