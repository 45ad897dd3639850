// Per-prompt recipe of the K Gaussian-process prompts of CCS Definition 3.3 (LSA_HD, both backends):
// sphere covariates ξ, the kernel matrix K(ξ_i, ξ_j), a root R with R Rᵀ = K_+, and labels Y = R z.
//
// Randomness (common/random.hpp layout; a variate is a function of (seed, step, prompt, stream,
// position) only, so a batch never depends on thread count, chunking or device):
//   stream kStreamGPPoints: double normals g at positions i·d + k (point i <= n, coordinate k),
//                           ξ_i = g_i / ‖g_i‖ (uniform on the unit sphere, CCS H.1);
//   stream kStreamGPLabels: double normals z at positions 0.. (n+1 of them; d for the linear kernel).
// All arithmetic is in double whatever the output type: an (n+1)-point exp kernel is too
// ill-conditioned for a float Cholesky, and float and double batches of a seed are then the same
// draws.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/hd.hpp"
#include "common/random.hpp"
#include "common/small_matrix.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native::detail::kgp {

constexpr std::uint32_t kStreamGPPoints = rng::kStreamKernelGPFirst;      // ξ directions
constexpr std::uint32_t kStreamGPLabels = rng::kStreamKernelGPFirst + 1;  // z of Y = R z

// Kernel codes (the values of lsa_native::GPKernel).
constexpr int kLinear = 0, kRelu = 1, kExp = 2;

// How a prompt's labels were drawn (the values recorded in the `method` output).
constexpr int kMethodGram = 0;       // linear: Y = Ξ θ, θ ~ N(0, I_d) (R = Ξ, K = ΞΞᵀ is PSD)
constexpr int kMethodCholesky = 1;   // K = L Lᵀ succeeded: K_+ = K, Y = L z
constexpr int kMethodJacobi = 2;     // K = U D Uᵀ (Jacobi): Y = U |D|^{1/2} z
constexpr int kMethodJacobiUnconverged = 3;  // Jacobi hit its sweep limit (never observed)

// The normals at positions [0, count) of a stream, two per Philox block (double Box–Muller).
LSA_HD void stream_normals(const rng::StreamAddress& a, int count, double* z) {
  for (int b = 0; 2 * b < count; ++b) {
    std::uint32_t w[4];
    rng::stream_block(a, static_cast<std::uint32_t>(b), w);
    double pair[2];
    rng::normals_from_block(w, pair);
    z[2 * b] = pair[0];
    if (2 * b + 1 < count) z[2 * b + 1] = pair[1];
  }
}

// ξ [n1 x d]: n1 points uniform on the unit sphere S^{d−1} (normalized Gaussians)  [CCS H.1].
LSA_HD void sphere_points(const rng::StreamAddress& points, int n1, int d, double* xi) {
  stream_normals(points, n1 * d, xi);
  for (int i = 0; i < n1; ++i) {
    double s = 0;
    for (int k = 0; k < d; ++k) s += xi[i * d + k] * xi[i * d + k];
    const double inv = 1.0 / std::sqrt(s);  // s > 0: Box–Muller radii are never 0
    for (int k = 0; k < d; ++k) xi[i * d + k] *= inv;
  }
}

// K(u, w) from t = <u, w>: linear t, relu max(t, 0), exp exp(t/σ²) with inv_bw2 = 1/σ²
// [CCS (12), (14)].
LSA_HD double kernel_value(int kernel, double t, double inv_bw2) {
  if (kernel == kLinear) return t;
  if (kernel == kRelu) return t > 0 ? t : 0.0;
  return std::exp(t * inv_bw2);
}

// K [n1 x n1], K_ij = K(ξ_i, ξ_j) (exactly symmetric: each entry computed once).
LSA_HD void kernel_matrix(int kernel, double inv_bw2, const double* xi, int n1, int d, double* K) {
  for (int i = 0; i < n1; ++i)
    for (int j = 0; j <= i; ++j) {
      double t = 0;
      for (int k = 0; k < d; ++k) t += xi[i * d + k] * xi[j * d + k];
      K[i * n1 + j] = K[j * n1 + i] = kernel_value(kernel, t, inv_bw2);
    }
}

// Workspace doubles gp_labels needs for n1 points.
LSA_HD int gp_workspace(int n1) { return 2 * n1 * n1 + 2 * n1; }

// Y [n1] ~ N(0, K_+(ξ)) given ξ [n1 x d]  [CCS Definition 3.3], K_+ = U|D|Uᵀ.
// linear: Y = Ξ θ (θ = the first d normals of `labels`): covariance ΞΞᵀ = K = K_+ in O(n1·d);
// exp: Cholesky K = L Lᵀ, Y = L z (K is PSD, so K_+ = K); when the Cholesky fails at rounding
//      level (a pivot <= 0 of a numerically singular K) and always for relu (indefinite K):
//      cyclic Jacobi K = U D Uᵀ, Y = U |D|^{1/2} z, whose covariance is U|D|Uᵀ = K_+.
// work: gp_workspace(n1) doubles. Returns the method used (kMethod*).
LSA_HD int gp_labels(int kernel, double inv_bw2, const double* xi, int n1, int d,
                     const rng::StreamAddress& labels, double* work, double* y) {
  if (kernel == kLinear) {
    double* theta = work;
    stream_normals(labels, d, theta);
    for (int i = 0; i < n1; ++i) {
      double s = 0;
      for (int k = 0; k < d; ++k) s += xi[i * d + k] * theta[k];
      y[i] = s;
    }
    return kMethodGram;
  }
  double* A = work;              // [n1 x n1]
  double* V = A + n1 * n1;       // [n1 x n1]
  double* w = V + n1 * n1;       // [n1]
  double* z = w + n1;            // [n1]
  stream_normals(labels, n1, z);
  kernel_matrix(kernel, inv_bw2, xi, n1, d, A);
  if (kernel == kExp && cholesky_in_place(A, n1)) {
    lower_matvec(A, n1, z, y);
    return kMethodCholesky;
  }
  if (kernel == kExp) kernel_matrix(kernel, inv_bw2, xi, n1, d, A);  // the Cholesky overwrote it
  const int sweeps = jacobi_eigen(A, n1, w, V);
  for (int j = 0; j < n1; ++j) w[j] = std::sqrt(std::fabs(w[j])) * z[j];
  for (int i = 0; i < n1; ++i) {
    double s = 0;
    for (int j = 0; j < n1; ++j) s += V[i * n1 + j] * w[j];
    y[i] = s;
  }
  return sweeps >= 0 ? kMethodJacobi : kMethodJacobiUnconverged;
}

}  // namespace lsa_native::detail::kgp

namespace lsa_native::detail::kgp {

// Doubles of per-prompt scratch sample_prompt needs: ξ [n1 x d], Y [n1], gp_labels' workspace.
LSA_HD index_t prompt_workspace(int n1, int d) {
  return index_t(n1) * d + n1 + gp_workspace(n1);
}

// One K-GP prompt b of a step, written in the kernel-attention layout — the whole per-prompt work
// of the CPU driver and of the CUDA kernel (one thread per prompt), so both run this arithmetic.
// R: Σ^{1/2} [d x d] or nullptr (Σ = I). z [d+1, n1]: columns (x_j; y_j), last (x_q; 0);
// *y_q the query label; xi_out [n1, d] (nullable) the whitened points; returns the method (kMethod*).
template <class T>
LSA_HD int sample_prompt(const rng::PhiloxKey& key, std::uint32_t prompt, std::uint32_t step,
                         int kernel, double inv_bw2, const double* R, int n1, int d,
                         double* work, T* z, T* y_q, T* xi_out) {
  double* xi = work;
  double* y = xi + n1 * d;
  sphere_points({key, prompt, step, kStreamGPPoints}, n1, d, xi);
  const int method = gp_labels(kernel, inv_bw2, xi, n1, d, {key, prompt, step, kStreamGPLabels},
                               y + n1, y);
  for (int j = 0; j < n1; ++j) {
    const double* x = xi + j * d;
    for (int k = 0; k < d; ++k) {
      double s = x[k];
      if (R) {  // x = Σ^{1/2} ξ
        s = 0;
        for (int l = 0; l < d; ++l) s += R[k * d + l] * x[l];
      }
      z[k * n1 + j] = static_cast<T>(s);
    }
    z[d * n1 + j] = j < n1 - 1 ? static_cast<T>(y[j]) : T(0);
  }
  *y_q = static_cast<T>(y[n1 - 1]);
  if (xi_out)
    for (int i = 0; i < n1 * d; ++i) xi_out[i] = static_cast<T>(xi[i]);
  return method;
}

}  // namespace lsa_native::detail::kgp
