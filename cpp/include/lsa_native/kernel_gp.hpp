// Native sampler of K Gaussian-process prompts [CCS Definition 3.3, Appendix H.1]: covariates
// x = Σ^{1/2} ξ with ξ uniform on the unit sphere, labels Y | X ~ N(0, K_+(X)) with
// K_ij = K(ξ_i, ξ_j) (ξ = Σ^{-1/2} x) and K_+ = U|D|Uᵀ, written straight into the kernel-attention
// layout Z0 = E [B, d+1, n+1] and the query targets y_q [B].
//
// Kernels [CCS (12), (14)]: linear <u, w>, relu max(<u, w>, 0), exp exp(<u, w>/σ²) (σ = bandwidth,
// used by exp only); composite K♦(u, w) = α<G₁u, G₁w> + (1 − α)exp<G₂u, G₂w> with diagonal
// G₁ = diag(g1), G₂ = diag(g2) [CCS Appendix D, Figure 4]. Every variate is a pure function of (seed, step, prompt index b, position)
// (common/philox.hpp), so a batch is bitwise the same for any thread count. CPU, parallel over
// prompts, thread-safe. Invalid arguments throw lsa_native::Error.
#pragma once

#include <cstdint>

#include "lsa_native/types.hpp"

namespace lsa_native {

// Codes in the order of lsa_native.baselines.KERNELS (the Python table they are generated from),
// then K♦ (sampling.CompositeKernelGPPrompts; not a kernel of that table: it has parameters).
enum class GPKernel : int { linear = 0, relu = 1, exp = 2, composite = 3 };

// Largest 1/σ² the exp kernel accepts (σ >= 0.041): K = exp(<ξ, ξ'>/σ²) <= e^600 stays finite in
// the double arithmetic. K♦'s exp part needs max_k g2_k² <= the same bound (<G₂ξ, G₂ξ'> <= max g2²
// on the unit sphere). Labels of size ~e^{1/(2σ²)} still overflow float32 outputs beyond
// 1/σ² ≈ 176; the Python layer reports that.
constexpr double kKernelGPMaxExpScale = 600.0;

struct KernelGPLaw {
  index_t dim;              // d >= 1
  index_t context;          // n >= 1 context points (n+1 with the query), n+1 <= 4096
  GPKernel kernel;
  double bandwidth = 1.0;   // σ > 0 (exp: 1/σ² <= kKernelGPMaxExpScale)
  const double* sigma = nullptr;  // Σ [d, d] symmetric positive definite; nullptr: Σ = I
  // kernel == composite only: α in [0, 1] and the diagonals g1, g2 [d] (finite) of G₁, G₂.
  double alpha = 0.0;
  const double* g1 = nullptr;
  const double* g2 = nullptr;
};

// Draws prompts b = 0..B−1 of training step `step` under `seed`.
// Z0 [B, d+1, n+1]: columns j < n are (x_j; y_j), column n is (x_q; 0); y_q [B] the query labels;
// xi [B, n+1, d] (optional, nullptr to skip) the whitened points ξ_j (row n: the query);
// method [B] (optional) how each prompt's labels were drawn: 0 Gram root (linear; composite with
// α = 1: Y = ΞG₁θ), 1 Cholesky (exp; composite with α < 1), 2 eigendecomposition, Householder +
// implicit QL (relu, or an exp / composite kernel whose Cholesky failed at rounding level). Arithmetic in double whatever T (float or double).
// Cost per prompt O(n³): ~n³/3 flops for a Cholesky, ~7n³ for an eigendecomposition (about 0.5 s
// at n = 600 and 10 s at n = 1500 on one core), on num_threads() threads over prompts.
// Interruptible (interrupt.hpp): contexts of 63 points or more poll inside each prompt's
// factorization.
template <class T>
void sample_kernel_gp(std::uint64_t seed, std::uint64_t step, index_t batch, const KernelGPLaw& law,
                      T* Z0, T* y_q, T* xi, std::int32_t* method);

extern template void sample_kernel_gp<float>(std::uint64_t, std::uint64_t, index_t,
                                             const KernelGPLaw&, float*, float*, float*,
                                             std::int32_t*);
extern template void sample_kernel_gp<double>(std::uint64_t, std::uint64_t, index_t,
                                              const KernelGPLaw&, double*, double*, double*,
                                              std::int32_t*);

// Σ^{1/2} [d, d] (symmetric root) of a symmetric positive-definite Σ [d, d], by cyclic Jacobi;
// throws Error (naming `name`) when Σ is not finite, not symmetric or not positive definite.
void symmetric_sqrt(const double* sigma, index_t d, double* root, const char* name = "Sigma");

}  // namespace lsa_native
