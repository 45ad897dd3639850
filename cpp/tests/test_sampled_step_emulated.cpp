// The CUDA kernels of the GPU sampler and of the fused sampled LSA steps
// (cpp/src/cuda/sampled_kernels.cuh) on the CPU through the CUDA execution-model emulator, against
// the CPU sampler and the CPU fused steps of the same (seed, step): the GPU sampler's outputs (E,
// y_q, X, y, w, x_q, λ) equal sample_linear_prompts' (so the CPU row twin of
// linear::covariate / linear::label equals the recipe), and both GPU steps equal the CPU steps, to
// rounding (float64 1e-12 relative; the normals differ by the rounding of the SIMD log/sin/cos).
#include "cuda_emulation.hpp"  // first: defines the CUDA keywords the kernels use

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/linear_prompts.hpp"
#include "cuda/sampled_kernels.cuh"
#include "emulated_helpers.hpp"
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

// d = 1, N = 1, odd sizes, N + 1 > 32 tokens (several per lane), more normals than 32 Philox blocks,
// and every option of the law.
const Case kTokenCases[] = {
    {"plain d=1 N=1", 1, 1},
    {"plain", 3, 7},
    {"Lambda, long", 4, 45, 0, false, 0, CovarianceLaw::fixed, 0, 0, 0, false, true},
    {"query shift, noise", 5, 9, 0.3, true, 0, CovarianceLaw::fixed, 0, 0, 0, false, true, true},
    {"task pool", 2, 33, 0.1, false, 5},
    {"exponential law", 3, 6, 0, false, 0, CovarianceLaw::exponential, 2.0},
    {"gamma law", 3, 5, 0, false, 0, CovarianceLaw::gamma, 0.7, 1.5},
    {"uniform law", 2, 4, 0, false, 0, CovarianceLaw::uniform, 0.5, 2.0},
    {"two-point law", 4, 3, 0.2, true, 0, CovarianceLaw::two_point, 0.5, 3.0, 0.3},
    {"sphere", 5, 11, 0, false, 0, CovarianceLaw::fixed, 0, 0, 0, true, true},
    {"sphere d=1", 1, 2, 0, false, 0, CovarianceLaw::fixed, 0, 0, 0, true},
};

// Wishart needs Gaussian covariates and N >= d (d + 1 with noise).
const Case kWishartCases[] = {
    {"plain d=1 N=1", 1, 1},
    {"plain", 3, 7},
    {"Lambda, noise", 5, 20, 0.4, true, 0, CovarianceLaw::fixed, 0, 0, 0, false, true},
    {"query shift", 4, 4, 0, false, 0, CovarianceLaw::fixed, 0, 0, 0, false, true, true},
    {"task pool, noise", 2, 3, 0.2, false, 3},
    {"gamma law", 3, 40, 0, false, 0, CovarianceLaw::gamma, 0.6, 2.0},
    {"two-point law, noise", 2, 9, 0.5, true, 0, CovarianceLaw::two_point, 0.5, 3.0, 0.4},
};

// The outputs of one sample_linear_prompts call: E, y_q, X, y, w, x_q, lambda.
template <class T>
struct Sampled {
  std::vector<T> E, y_q, X, y, w, x_q, lambda;
  Sampled(index_t B, index_t d, index_t N, T fill)
      : E(B * (d + 1) * (N + 1), fill), y_q(B, fill), X(B * N * d, fill), y(B * N, fill),
        w(B * d, fill), x_q(B * d, fill), lambda(B * d, fill) {}
  lsa_native::LinearPromptOutputs<T> outputs() {
    return {E.data(), y_q.data(), X.data(), y.data(), w.data(), x_q.data(), lambda.data()};
  }
};

// linear_prompts_kernel (the GPU sampler: warp_generate copied out) on the emulator, grid blocks
// of `warps` warps, for law P.
template <class T>
Sampled<T> sample_emulated(const linear::Law<T>& P, index_t B, unsigned grid, int warps) {
  Sampled<T> g(B, P.d, P.N, std::numeric_limits<T>::quiet_NaN());
  const auto lay = k::PredictionLayout::make<T>(int(P.d + 1), int(P.N + 1), warps, false, 0,
                                                k::tokens_warp_extra(P.d));
  lsa_emu::launch(grid, unsigned(32 * warps), lay.total(), k::linear_prompts_kernel<T>, P, B, lay,
                  g.outputs());
  return g;
}

// Every output of the GPU sampler vs the CPU sampler: the transformed variates to rounding (float32:
// a few ulps of the normals through sums of d terms; float64 1e-13), the uniform-derived choices
// exactly: the two-point law's λ, and the pool task of every prompt (its w is the CPU's bit for bit
// when the normals are: the same stream position of the same task).
template <class T>
void check_generation(const Case& c, unsigned grid, int warps) {
  SCOPED_TRACE(std::string(c.name) + (sizeof(T) == 4 ? " float32" : " float64") + " grid " +
               std::to_string(grid) + " warps " + std::to_string(warps));
  const SpecHolder h(c, 0x5eed0000ULL + std::uint64_t(c.d * 31 + c.N));
  const std::uint32_t step = 3;
  const index_t B = 37;
  Sampled<T> cpu(B, c.d, c.N, T(0));
  lsa_native::sample_linear_prompts(h.spec, B, step, cpu.outputs());
  const linear::Plan<T> P(h.spec, step);
  const Sampled<T> gpu = sample_emulated<T>(P, B, grid, warps);
  const double tol = sizeof(T) == 4 ? 2e-6 * double(c.d + 1) : 1e-13;
  expect_close(gpu.E, cpu.E, tol, "E");
  expect_close(gpu.y_q, cpu.y_q, tol, "y_q");
  expect_close(gpu.X, cpu.X, tol, "X");
  expect_close(gpu.y, cpu.y, tol, "y");
  expect_close(gpu.w, cpu.w, tol, "w");
  expect_close(gpu.x_q, cpu.x_q, tol, "x_q");
  expect_close(gpu.lambda, cpu.lambda, tol, "lambda");
  if (c.law == CovarianceLaw::two_point) {
    EXPECT_EQ(gpu.lambda, cpu.lambda) << "two-point lambda";
  }
  if (c.tasks > 0) {  // the pool task of prompt b: the w of the CPU's task index, exactly the same
    for (index_t b = 0; b < B; ++b) {
      const std::uint32_t j = linear::task_index(P, b);
      for (index_t m = 0; m < c.d; ++m) {
        const T want = lsa_native::rng::normal_at<T>(linear::task_address(P, j), std::uint64_t(m));
        ASSERT_EQ(gpu.w[b * c.d + m], want) << "prompt " << b << " task " << j;
      }
    }
  }
}

// The fused step of `method` on the emulated kernel (grid blocks) vs the CPU step.
template <class T>
void check_step(const Case& c, FusedMethod method, unsigned grid, bool work_in_shared = true,
                index_t B = 75) {
  SCOPED_TRACE(std::string(c.name) + (sizeof(T) == 4 ? " float32" : " float64") + " grid " +
               std::to_string(grid) + (work_in_shared ? "" : " global work") + " B " + std::to_string(B));
  const SpecHolder h(c, 0xabcdef12ULL + std::uint64_t(c.d * 7 + c.N));
  const std::uint32_t step = 11;
  const index_t rows = c.d + 1, n2 = rows * rows;
  std::vector<T> W_pv(n2), W_kq(n2);
  for (index_t i = 0; i < n2; ++i) {
    W_pv[i] = T(0.4 * std::sin(1.3 * double(i) + 0.2));
    W_kq[i] = T(0.5 * std::cos(0.7 * double(i) + 0.1));
  }
  std::vector<T> g_pv(n2), g_kq(n2);
  const double L = lsa_native::linear_prompts_lsa_loss_and_grad(h.spec, B, step, method, W_pv.data(),
                                                                W_kq.data(), g_pv.data(), g_kq.data());
  const linear::Plan<T> P(h.spec, step);
  const linear::Law<T>& law = P;
  const int width = int(1 + rows + n2);
  std::vector<double> partial(grid * width, std::numeric_limits<double>::quiet_NaN());
  if (method == FusedMethod::tokens) {
    const auto lay = k::PredictionLayout::make<T>(int(rows), int(c.N + 1), 2, true, 0, k::tokens_warp_extra(c.d));
    lsa_emu::launch(grid, 64, lay.total(), k::sampled_tokens_kernel<T>, law, B, lay,
                    static_cast<const T*>(W_pv.data()), static_cast<const T*>(W_kq.data()), partial.data());
  } else {
    k::WishartLayout lay{int(c.d), int(lsa_native::wishart::noise_dim(law)), 2, work_in_shared};
    std::vector<T> work(work_in_shared ? 0 : size_t(grid) * 64 * size_t(lay.thread_values()),
                        std::numeric_limits<T>::quiet_NaN());
    lsa_emu::launch(grid, 64, lay.shared_bytes<T>(), k::sampled_wishart_kernel<T>, law, B, lay,
                    static_cast<const T*>(W_pv.data()), static_cast<const T*>(W_kq.data()),
                    work_in_shared ? static_cast<T*>(nullptr) : work.data(), partial.data());
  }
  std::vector<double> total = reduce(partial, int(grid), width);
  if (grid == 1) {  // the emulated reduction kernel itself (bitwise the host order)
    std::vector<double> dev(width, std::numeric_limits<double>::quiet_NaN());
    lsa_emu::launch(unsigned(width), k::kReduceThreads, 0, k::reduce_partials_kernel,
                    static_cast<const double*>(partial.data()), 1, width, dev.data());
    EXPECT_EQ(dev, total);
    total = dev;
  }
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> d_pv(n2, nan), d_kq(n2, nan);
  double loss = std::numeric_limits<double>::quiet_NaN();
  lsa_emu::launch(1, k::kReduceThreads, 0, k::prediction_epilogue_kernel<T>, total.data(), int(rows),
                  1.0 / double(B), d_pv.data(), d_kq.data(), &loss);
  EXPECT_NEAR(loss, L, tolerance<T>() * L) << "loss";
  expect_close(d_pv, g_pv, tolerance<T>(), "d_W_pv");
  expect_close(d_kq, g_kq, tolerance<T>(), "d_W_kq");
}

TEST(SampledStepEmulated, GeneratedPromptsEqualTheCpuSampler) {
  for (const Case& c : kTokenCases) {
    check_generation<double>(c, 3, 2);
    check_generation<float>(c, 2, 1);
  }
  check_generation<double>(kTokenCases[4], 1, 4);  // one block: grid-stride over all prompts
  // d > 32: lanes loop over the features of w, x_q, λ (and X's rows of more than 32 entries)
  const Case wide{"wide d, Lambda, query noise", 35, 3, 0.2, true, 0, CovarianceLaw::fixed, 0, 0, 0, false, true};
  check_generation<double>(wide, 2, 2);
  check_generation<float>(wide, 1, 1);
  const Case wide_law{"wide d, gamma law, task pool", 33, 2, 0, false, 3, CovarianceLaw::gamma, 0.8, 1.2};
  check_generation<double>(wide_law, 2, 1);
}

// Null outputs are not written; the others are the full call's.
TEST(SampledStepEmulated, GeneratorWritesOnlyTheGivenOutputs) {
  const SpecHolder h(kTokenCases[3], 7);
  const linear::Plan<double> P(h.spec, 2);
  const index_t B = 5, d = kTokenCases[3].d, N = kTokenCases[3].N;
  const Sampled<double> all = sample_emulated<double>(P, B, 2, 2);
  Sampled<double> some(B, d, N, -7.0);
  const auto lay = k::PredictionLayout::make<double>(int(d + 1), int(N + 1), 2, false, 0, k::tokens_warp_extra(d));
  lsa_native::LinearPromptOutputs<double> o;
  o.X = some.X.data();
  o.y_q = some.y_q.data();
  lsa_emu::launch(2, 64, lay.total(), k::linear_prompts_kernel<double>,
                  static_cast<const linear::Law<double>&>(P), B, lay, o);
  EXPECT_EQ(some.X, all.X);
  EXPECT_EQ(some.y_q, all.y_q);
  EXPECT_EQ(some.E, std::vector<double>(all.E.size(), -7.0));
  EXPECT_EQ(some.w, std::vector<double>(all.w.size(), -7.0));
}

TEST(SampledStepEmulated, TokensStepEqualsTheCpuStep) {
  for (const Case& c : kTokenCases) {
    check_step<double>(c, FusedMethod::tokens, 3);
    check_step<float>(c, FusedMethod::tokens, 2);
  }
  check_step<double>(kTokenCases[3], FusedMethod::tokens, 1);  // one block: grid-stride over all
}

TEST(SampledStepEmulated, WishartStepEqualsTheCpuStep) {
  for (const Case& c : kWishartCases) {
    check_step<double>(c, FusedMethod::wishart, 2);
    check_step<float>(c, FusedMethod::wishart, 1);
  }
  check_step<double>(kWishartCases[2], FusedMethod::wishart, 3, false);  // work in global memory
  check_step<float>(kWishartCases[5], FusedMethod::wishart, 1, false);
  // the CPU's last group of 8 prompts with 5 (B = 77): the second double vector partly idle
  check_step<double>(kWishartCases[0], FusedMethod::wishart, 2, true, 77);
  check_step<float>(kWishartCases[2], FusedMethod::wishart, 2, true, 77);
}

// A wrong law must fail the comparison (the test has power): the GPU step with another step index.
TEST(SampledStepEmulated, AnotherStepDiffers) {
  const SpecHolder h(kTokenCases[1], 99);
  const linear::Plan<double> P(h.spec, 12), Q(h.spec, 13);
  const index_t B = 4;
  const std::vector<double> E1 = sample_emulated<double>(P, B, 1, 1).E, E2 = sample_emulated<double>(Q, B, 1, 1).E;
  double diff = 0;
  for (size_t i = 0; i < E1.size(); ++i) diff = std::max(diff, std::abs(E1[i] - E2[i]));
  EXPECT_GT(diff, 0.1);
}

}  // namespace
