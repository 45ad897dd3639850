// The CUDA K-GP sampler kernel (cuda/kernel_gp_kernels.cuh) run on the CPU by the execution-model
// emulator: every prompt equals the CPU driver's, for each kernel, with and without Σ, float and
// double outputs, a batch that is not a multiple of the block. Both run detail::kgp's recipe in
// double; the CUDA kernel with libm (ScalarOps), the CPU driver with its table's SIMD log/sin/cos/exp
// for the linear, exp and composite K♦ kernels (cpu/sampling_kernels.inl), which round differently
// by a few ulp: those prompts agree to rounding (double: 1e-9 relative, K's factor carrying the gaps times at
// most ~1e4; float outputs: plus one rounding to float), numerically singular exp K's included (the
// CPU redoes them with ScalarOps). relu prompts run ScalarOps on both: the same bits.
#include "cuda_emulation.hpp"  // first: defines the CUDA keywords the kernels use

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "cuda/kernel_gp_kernels.cuh"
#include "lsa_native/kernel_gp.hpp"

namespace {

using lsa_native::index_t;
namespace kgp = lsa_native::detail::kgp;

// max_i |a_i − b_i| / max(1, |b_i|)
template <class T>
double max_gap(const std::vector<T>& a, const std::vector<T>& b) {
  double g = a.size() == b.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    g = std::max(g, std::fabs(double(a[i]) - double(b[i])) / std::max(1.0, std::fabs(double(b[i]))));
  return g;
}

// K♦'s diagonals for the composite cases (Figure 4(c)'s pattern: G₁ on the first two coordinates,
// G₂ = √½ on the others; in d = 1 both on the one coordinate).
std::vector<double> composite_g(int d, int which) {
  std::vector<double> g(d);
  for (int k = 0; k < d; ++k)
    g[k] = which == 1 ? (k < 2 ? 1.0 : 0.0) : (k >= 2 || d == 1 ? std::sqrt(0.5) : 0.0);
  return g;
}

// `launches` > 1 splits the batch over several launches (first > 0), as the CUDA driver does when
// the per-prompt workspaces of the whole batch exceed its scratch budget. alpha: K♦'s α when
// kernel is kComposite (G₁, G₂ from composite_g).
template <class T>
void expect_kernel_matches_driver(int kernel, bool with_sigma, int d, int n, index_t batch,
                                  int launches = 1, double alpha = 0.5) {
  const std::uint64_t seed = 77, step = 5;
  const int n1 = n + 1;
  const double bandwidth = 0.9, inv_bw2 = 1.0 / (bandwidth * bandwidth);
  std::vector<double> sigma(d * d, 0.0), root(d * d);
  for (int i = 0; i < d; ++i) sigma[i * d + i] = 1.0 + 0.5 * i;
  if (d > 1) sigma[1] = sigma[d] = 0.3;
  if (with_sigma) lsa_native::symmetric_sqrt(sigma.data(), d, root.data());
  const std::vector<double> g1 = composite_g(d, 1), g2 = composite_g(d, 2);
  lsa_native::KernelGPLaw law{d, n, static_cast<lsa_native::GPKernel>(kernel), bandwidth,
                              with_sigma ? sigma.data() : nullptr};
  // the recipe's K♦ parameters [α, g1, g2] (in device memory on a GPU: the driver copies them)
  std::vector<double> params{alpha};
  params.insert(params.end(), g1.begin(), g1.end());
  params.insert(params.end(), g2.begin(), g2.end());
  kgp::Kernel recipe_kernel{kernel, inv_bw2};
  if (kernel == kgp::kComposite) {
    law.alpha = alpha, law.g1 = g1.data(), law.g2 = g2.data();
    recipe_kernel.composite = params.data();
  }

  const index_t zsize = batch * (d + 1) * n1;
  std::vector<T> z_cpu(zsize), y_cpu(batch), xi_cpu(batch * n1 * d);
  std::vector<std::int32_t> m_cpu(batch);
  lsa_native::sample_kernel_gp<T>(seed, step, batch, law, z_cpu.data(), y_cpu.data(), xi_cpu.data(),
                                  m_cpu.data());

  std::vector<T> z(zsize, T(-7)), y(batch, T(-7)), xi(batch * n1 * d, T(-7));
  std::vector<std::int32_t> m(batch, -1);
  const index_t chunk = (batch + launches - 1) / launches;
  // Exactly one chunk's workspace, so that a prompt writing past its slice shows (under ASan).
  std::vector<double> work(chunk * kgp::prompt_workspace(n1, d));
  int unconverged = 0;
  const unsigned threads = lsa_native::cuda::kernels::kKernelGPThreads;
  for (index_t first = 0; first < batch; first += chunk) {
    const index_t count = std::min(chunk, batch - first);
    lsa_emu::launch(unsigned((count + threads - 1) / threads), threads, 0,
                    lsa_native::cuda::kernels::kernel_gp_kernel<T>,
                    lsa_native::rng::philox_key(seed), std::uint32_t(step), first, count,
                    recipe_kernel, with_sigma ? static_cast<const double*>(root.data()) : nullptr,
                    d, n1, work.data(), z.data(), y.data(), xi.data(), m.data(), &unconverged);
  }
  EXPECT_EQ(unconverged, 0);
  EXPECT_EQ(m, m_cpu);
  const double tol = kernel == kgp::kRelu ? 0.0 : std::is_same<T, float>::value ? 2.5e-7 : 1e-9;
  EXPECT_LE(max_gap(z, z_cpu), tol);
  EXPECT_LE(max_gap(y, y_cpu), tol);
  EXPECT_LE(max_gap(xi, xi_cpu), tol);
}

TEST(KernelGPEmulated, EveryKernelMatchesTheDriver) {
  for (int kernel : {kgp::kLinear, kgp::kRelu, kgp::kExp})
    for (bool with_sigma : {false, true}) {
      expect_kernel_matches_driver<double>(kernel, with_sigma, 3, 7, 70);
      expect_kernel_matches_driver<float>(kernel, with_sigma, 5, 12, 9);
    }
}

TEST(KernelGPEmulated, OneDimensionAndOneContextPoint) {
  expect_kernel_matches_driver<double>(kgp::kExp, false, 1, 1, 3);
  expect_kernel_matches_driver<double>(kgp::kRelu, true, 1, 2, 65);
}

// The linear kernel's θ [d] lives in the label workspace: a large d with one context point needs
// more room than the factorizations (19 doubles at n + 1 = 2 would overrun 2n1² + 5n1 = 18).
TEST(KernelGPEmulated, LinearKernelLargeDimensionFewPoints) {
  expect_kernel_matches_driver<double>(kgp::kLinear, false, 19, 1, 5);
  expect_kernel_matches_driver<float>(kgp::kLinear, true, 40, 2, 3);
}

// K♦ [CCS Appendix D]: α < 1 by the CPU's SIMD Cholesky lanes (scalar K♦ entries) against the
// kernel's scalar recipe; α = 1 by the Gram route Y = ΞG₁θ; α = 0 (exp on G₂ξ).
TEST(KernelGPEmulated, CompositeKernelMatchesTheDriver) {
  for (double alpha : {0.5, 1.0, 0.0})
    for (bool with_sigma : {false, true}) {
      expect_kernel_matches_driver<double>(kgp::kComposite, with_sigma, 5, 14, 70, 1, alpha);
      expect_kernel_matches_driver<float>(kgp::kComposite, with_sigma, 5, 9, 9, 1, alpha);
    }
  expect_kernel_matches_driver<double>(kgp::kComposite, true, 1, 1, 5, 1, 0.5);
  expect_kernel_matches_driver<double>(kgp::kComposite, false, 3, 6, 150, 3, 0.25);
}

TEST(KernelGPEmulated, BatchSplitOverSeveralLaunches) {
  expect_kernel_matches_driver<double>(kgp::kRelu, false, 3, 9, 150, 3);
  expect_kernel_matches_driver<float>(kgp::kExp, true, 4, 6, 67, 2);
}

}  // namespace
