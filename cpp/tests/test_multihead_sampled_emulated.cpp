// The CUDA kernels of the H-head fused Wishart step and of the separate parametrization
// (cpp/src/cuda/multihead_sampled_kernels.cuh) on the CPU through the CUDA execution-model emulator,
// against the CPU backends of the same (seed, step): the emulated GPU step equals the CPU H-head
// Wishart step (SIMD lanes over prompts, multihead_kernels.inl) to rounding — float64 1e-12 and
// float32 2e-4 relative to the largest entry (tolerance<T>(): the draws differ by the rounding of
// the CPU's SIMD log/sin/cos, the sums by their order) — for H = 1 and H > 1, odd batch tails,
// several rounds per block, grids of 1-3 blocks, per-thread work in shared and in global memory;
// the merge and chain-rule kernels equal the CPU backend bit for bit in emulation (one host
// compiler; on a GPU nvcc contracts their multiply-adds to FMA, so there they equal it to rounding).
#include "cuda_emulation.hpp"  // first: defines the CUDA keywords the kernels use

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/linear_prompts.hpp"
#include "cuda/multihead_kernels.cuh"
#include "cuda/multihead_sampled_kernels.cuh"
#include "emulated_helpers.hpp"
#include "lsa_native/multihead.hpp"
#include "lsa_native/sampling.hpp"

namespace {

using lsa_native::CovarianceLaw;
using lsa_native::FusedMethod;
using lsa_native::index_t;
using lsa_native::testing::Case;
using lsa_native::testing::expect_close;
using lsa_native::testing::reduce;
using lsa_native::testing::SpecHolder;
using lsa_native::testing::tolerance;
namespace k = lsa_native::cuda::kernels;
namespace linear = lsa_native::linear;

// Wishart laws (Gaussian covariates, N >= d, d + 1 with label noise).
const Case kLaws[] = {
    {"plain d=1 N=1", 1, 1},
    {"Lambda, noise, query noise", 4, 9, 0.4, true, 0, CovarianceLaw::fixed, 0, 0, 0, false, true},
    {"task pool, noise", 2, 3, 0.2, false, 3},
    {"gamma law", 3, 20, 0, false, 0, CovarianceLaw::gamma, 0.6, 2.0},
    {"two-point law, noise", 2, 9, 0.5, true, 0, CovarianceLaw::two_point, 0.5, 3.0, 0.4},
};

template <class T>
std::vector<T> wave(index_t n, double scale, double freq, double phase) {
  std::vector<T> v(n);
  for (index_t i = 0; i < n; ++i) v[i] = T(scale * std::sin(freq * double(i) + phase));
  return v;
}

struct Launch {
  unsigned grid;
  int threads;
  bool work_in_shared;
  index_t B;
};

// The emulated GPU step (kernel, fixed-order reduction, epilogue): (loss, d_W_pv, d_W_kq), and the
// blocks' partials in *partial_out.
template <class T>
double gpu_step(const linear::Law<T>& law, index_t H, const std::vector<T>& W_pv,
                const std::vector<T>& W_kq, const Launch& g, std::vector<T>& d_pv,
                std::vector<T>& d_kq, std::vector<double>* partial_out = nullptr) {
  const k::HeadsWishartLayout lay{int(law.d), int(lsa_native::wishart::noise_dim(law)), int(H),
                                  g.threads, g.work_in_shared};
  const index_t width = lay.width(), rows = law.d + 1;
  std::vector<double> partial(g.grid * width, std::numeric_limits<double>::quiet_NaN());
  std::vector<T> work(g.work_in_shared ? 0 : size_t(g.grid) * size_t(g.threads) * size_t(lay.thread_values()),
                      std::numeric_limits<T>::quiet_NaN());
  lsa_emu::launch(g.grid, unsigned(g.threads), lay.shared_bytes<T>(), k::multihead_wishart_kernel<T>,
                  law, g.B, lay, static_cast<const T*>(W_pv.data()), static_cast<const T*>(W_kq.data()),
                  g.work_in_shared ? static_cast<T*>(nullptr) : work.data(), partial.data());
  const std::vector<double> total = reduce(partial, int(g.grid), int(width));
  const T nan = std::numeric_limits<T>::quiet_NaN();
  d_pv.assign(H * rows * rows, nan);
  d_kq.assign(H * rows * rows, nan);
  double loss = std::numeric_limits<double>::quiet_NaN();
  lsa_emu::launch(1, k::kReduceThreads, 0, k::heads_prediction_epilogue_kernel<T>, total.data(),
                  int(H), int(rows), 1.0 / double(g.B), d_pv.data(), d_kq.data(), &loss);
  if (partial_out) *partial_out = partial;
  return loss;
}

// The emulated H-head Wishart step vs the CPU step of the same (seed, step).
template <class T>
void check_step(const Case& c, index_t H, const Launch& g) {
  SCOPED_TRACE(std::string(c.name) + (sizeof(T) == 4 ? " float32" : " float64") + " H " +
               std::to_string(H) + " grid " + std::to_string(g.grid) + " threads " +
               std::to_string(g.threads) + (g.work_in_shared ? "" : " global work") + " B " +
               std::to_string(g.B));
  const SpecHolder s(c, 0x7e57ULL + std::uint64_t(c.d * 13 + c.N));
  const std::uint32_t step = 5;
  const index_t rows = c.d + 1, n = H * rows * rows;
  const std::vector<T> W_pv = wave<T>(n, 0.4, 1.3, 0.2), W_kq = wave<T>(n, 0.5, 0.7, 0.1);
  std::vector<T> g_pv(n), g_kq(n);
  const double L = lsa_native::linear_prompts_multihead_loss_and_grad(
      s.spec, g.B, step, FusedMethod::wishart, H, W_pv.data(), W_kq.data(), g_pv.data(), g_kq.data());
  const linear::Plan<T> P(s.spec, step);
  std::vector<T> d_pv, d_kq;
  const double loss = gpu_step<T>(P, H, W_pv, W_kq, g, d_pv, d_kq);
  EXPECT_NEAR(loss, L, tolerance<T>() * L) << "loss";
  expect_close(d_pv, g_pv, tolerance<T>(), "d_W_pv");
  expect_close(d_kq, g_kq, tolerance<T>(), "d_W_kq");
}

TEST(MultiHeadSampledEmulated, WishartStepEqualsTheCpuStep) {
  for (const Case& c : kLaws)
    for (index_t H : {1, 3}) {
      check_step<double>(c, H, {2, 64, true, 75});
      check_step<float>(c, H, {1, 32, true, 75});  // three rounds in one block
    }
  // odd tails: fewer prompts than one block, a last round of 13 prompts, grid-stride over 3 blocks
  check_step<double>(kLaws[1], 4, {2, 64, true, 5});
  check_step<double>(kLaws[1], 2, {2, 64, true, 77});
  check_step<double>(kLaws[3], 5, {3, 32, true, 200});
  // per-thread work in global memory
  check_step<double>(kLaws[4], 3, {2, 64, false, 77});
  check_step<float>(kLaws[2], 2, {1, 64, false, 130});
}

// Bitwise reproducible: the same launch twice gives the same partials; and the comparison has
// power: another step's draws or the heads' parameters paired across heads fail it.
TEST(MultiHeadSampledEmulated, ReproducibleAndTheComparisonHasPower) {
  const Case& c = kLaws[1];
  const SpecHolder s(c, 99);
  const index_t H = 3, rows = c.d + 1, n = H * rows * rows, B = 70;
  const std::vector<double> W_pv = wave<double>(n, 0.4, 1.3, 0.2), W_kq = wave<double>(n, 0.5, 0.7, 0.1);
  const linear::Plan<double> P(s.spec, 4), Q(s.spec, 5);
  std::vector<double> a_pv, a_kq, b_pv, b_kq, pa, pb;
  const Launch g{2, 64, true, B};
  const double la = gpu_step<double>(P, H, W_pv, W_kq, g, a_pv, a_kq, &pa);
  const double lb = gpu_step<double>(P, H, W_pv, W_kq, g, b_pv, b_kq, &pb);
  EXPECT_EQ(pa, pb);
  EXPECT_EQ(la, lb);
  const int width = int(pa.size() / 2);  // the emulated reduction kernel: the host order's bits
  std::vector<double> dev(width, std::numeric_limits<double>::quiet_NaN());
  lsa_emu::launch(unsigned(width), k::kReduceThreads, 0, k::reduce_partials_kernel,
                  static_cast<const double*>(pa.data()), 2, width, dev.data());
  EXPECT_EQ(dev, reduce(pa, 2, width));
  std::vector<double> g_pv(n), g_kq(n);
  const double L = lsa_native::linear_prompts_multihead_loss_and_grad(
      s.spec, B, 4, FusedMethod::wishart, H, W_pv.data(), W_kq.data(), g_pv.data(), g_kq.data());
  EXPECT_NEAR(la, L, 1e-12 * L);
  const double other = gpu_step<double>(Q, H, W_pv, W_kq, g, b_pv, b_kq);  // another step
  EXPECT_GT(std::abs(other - L), 1e3 * 1e-12 * L);
  std::vector<double> W_pv_next(n);  // head h's p with head h+1's W^KQ
  for (index_t i = 0; i < n; ++i) W_pv_next[i] = W_pv[(i + rows * rows) % n];
  const double paired = gpu_step<double>(P, H, W_pv_next, W_kq, g, b_pv, b_kq);
  EXPECT_GT(std::abs(paired - L), 1e3 * 1e-12 * L);
}

// The merge and chain-rule kernels: the CPU backend's bits, and the definitions
// W^KQ_h = W^K_hᵀ W^Q_h, dW^K_h = W^Q_h dW^KQ_hᵀ, dW^Q_h = W^K_h dW^KQ_h by plain loops.
template <class T>
void check_separate(index_t H, index_t r, index_t rows, unsigned grid, unsigned threads) {
  SCOPED_TRACE((sizeof(T) == 4 ? std::string("float32") : std::string("float64")) + " H " +
               std::to_string(H) + " r " + std::to_string(r) + " rows " + std::to_string(rows));
  const index_t nk = H * r * rows, nw = H * rows * rows;
  const std::vector<T> W_k = wave<T>(nk, 0.7, 0.9, 0.3), W_q = wave<T>(nk, 0.6, 1.7, 0.5),
                       d_kq = wave<T>(nw, 0.8, 0.4, 0.9);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> W_kq(nw, nan), cpu_kq(nw), d_k(nk, nan), d_q(nk, nan), cpu_k(nk), cpu_q(nk);
  lsa_emu::launch(grid, threads, 0, k::merge_kq_kernel<T>, H, r, rows, W_k.data(), W_q.data(), W_kq.data());
  lsa_emu::launch(grid, threads, 0, k::chain_kq_kernel<T>, H, r, rows, W_k.data(), W_q.data(),
                  d_kq.data(), d_k.data(), d_q.data());
  lsa_native::multihead_merge_kq(H, r, rows, W_k.data(), W_q.data(), cpu_kq.data());
  lsa_native::multihead_chain_kq(H, r, rows, W_k.data(), W_q.data(), d_kq.data(), cpu_k.data(),
                                 cpu_q.data());
  EXPECT_EQ(W_kq, cpu_kq);
  EXPECT_EQ(d_k, cpu_k);
  EXPECT_EQ(d_q, cpu_q);
  std::vector<double> ref_kq(nw, 0.0), ref_k(nk, 0.0), ref_q(nk, 0.0);
  for (index_t h = 0; h < H; ++h)
    for (index_t i = 0; i < r; ++i)
      for (index_t a = 0; a < rows; ++a)
        for (index_t b = 0; b < rows; ++b) {
          const double k = W_k[(h * r + i) * rows + a], q = W_q[(h * r + i) * rows + b],
                       g = d_kq[(h * rows + a) * rows + b];
          ref_kq[(h * rows + a) * rows + b] += k * q;
          ref_k[(h * r + i) * rows + a] += q * g;
          ref_q[(h * r + i) * rows + b] += k * g;
        }
  const double tol = sizeof(T) == 4 ? 1e-5 : 1e-14;
  expect_close(W_kq, ref_kq, tol, "W_kq");
  expect_close(d_k, ref_k, tol, "d_W_k");
  expect_close(d_q, ref_q, tol, "d_W_q");
}

TEST(MultiHeadSampledEmulated, MergeAndChainKernelsEqualTheCpuBackend) {
  check_separate<double>(1, 1, 2, 1, 32);
  check_separate<double>(4, 2, 6, 2, 64);  // grid-stride: fewer threads than entries
  check_separate<double>(3, 5, 5, 1, 32);  // full rank r = d + 1
  check_separate<float>(5, 1, 6, 3, 32);
}

}  // namespace
