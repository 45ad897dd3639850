// Per-prompt recipe of the K Gaussian-process prompts of CCS Definition 3.3 (LSA_HD, both backends):
// sphere covariates ξ, the kernel matrix K(ξ_i, ξ_j), a root R with R Rᵀ = K_+, and labels Y = R z.
//
// Randomness (common/random.hpp layout; a variate is a function of (seed, step, prompt, stream,
// position) only, so a batch never depends on thread count, chunking or device):
//   stream kStreamGPPoints: double normals g at positions i·d + k (point i <= n, coordinate k),
//                           ξ_i = g_i / ‖g_i‖ (uniform on the unit sphere, CCS H.1);
//   stream kStreamGPLabels: double normals z at positions 0.. (n+1 of them; d for the Gram route:
//                           the linear kernel, K♦ with α = 1).
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
constexpr int kLinear = 0, kRelu = 1, kExp = 2, kComposite = 3;

// The kernel K of a law as the recipe reads it. composite (kComposite only; device memory on the
// GPU): [α, g₁ [d], g₂ [d]] of K♦(u, v) = α<G₁u, G₁v> + (1 − α)exp<G₂u, G₂v>, G = diag(g)
// [CCS Appendix D, Figure 4], checked by the dispatcher (α in [0, 1], max g₂ₖ² <= 1/σ²'s bound).
struct Kernel {
  int code;
  double inv_bw2 = 1.0;               // exp: 1/σ²
  const double* composite = nullptr;  // kComposite: composite_size(d) doubles
};

LSA_HD_LOCAL constexpr int composite_size(int d) { return 1 + 2 * d; }

// How a prompt's labels were drawn (the values recorded in the `method` output).
constexpr int kMethodGram = 0;       // linear: Y = Ξ θ, θ ~ N(0, I_d) (R = Ξ, K = ΞΞᵀ is PSD)
constexpr int kMethodCholesky = 1;   // K = L Lᵀ succeeded: K_+ = K, Y = L z
constexpr int kMethodEigen = 2;      // K = U D Uᵀ (Householder + QL): Y = U |D|^{1/2} z
constexpr int kMethodEigenUnconverged = 3;  // QL hit its iteration limit (never observed)

// The route of a kernel's labels (a kMethod* above): kMethodGram where K = (GΞ)(GΞ)ᵀ (linear,
// G = I; K♦ with α = 1, G = G₁: rank <= d, no factorization); kMethodCholesky where K is positive
// definite (exp; K♦ with α < 1, whose exp part is), the eigen route its fallback; kMethodEigen for
// relu (K indefinite).
LSA_HD_LOCAL int label_route(const Kernel& kernel) {
  if (kernel.code == kLinear || (kernel.code == kComposite && kernel.composite[0] == 1.0))
    return kMethodGram;
  return kernel.code == kRelu ? kMethodEigen : kMethodCholesky;
}

// The normals at positions [0, count) of a stream, two per Philox block (double Box–Muller).
LSA_HD_LOCAL void stream_normals(const rng::StreamAddress& a, int count, double* z) {
  for (int b = 0; 2 * b < count; ++b) {
    std::uint32_t w[4];
    rng::stream_block(a, static_cast<std::uint32_t>(b), w);
    double pair[2];
    rng::normals_from_block(w, pair);
    z[2 * b] = pair[0];
    if (2 * b + 1 < count) z[2 * b + 1] = pair[1];
  }
}

// K(u, w) from t = <u, w>: linear t, relu max(t, 0), exp exp(t/σ²) with inv_bw2 = 1/σ²
// [CCS (12), (14)].
LSA_HD_LOCAL double kernel_value(int kernel, double t, double inv_bw2) {
  if (kernel == kLinear) return t;
  if (kernel == kRelu) return t > 0 ? t : 0.0;
  return std::exp(t * inv_bw2);
}

// K♦(u, v) = α<G₁u, G₁v> + (1 − α)exp<G₂u, G₂v> with p = [α, g₁ [d], g₂ [d]]  [CCS Appendix D]
// (α = 0, g₂ = 1/σ: exp's value up to the rounding of the weights; α = 1: <G₁u, G₁v>).
LSA_HD_LOCAL double composite_value(const double* p, const double* u, const double* v, int d) {
  const double* g1 = p + 1;
  const double* g2 = g1 + d;
  double t1 = 0, t2 = 0;
  for (int k = 0; k < d; ++k) {
    t1 += (g1[k] * u[k]) * (g1[k] * v[k]);
    t2 += (g2[k] * u[k]) * (g2[k] * v[k]);
  }
  return p[0] * t1 + (1 - p[0]) * std::exp(t2);
}

// K [n1 x n1], K_ij = K(ξ_i, ξ_j) (exactly symmetric: each entry computed once).
LSA_HD_LOCAL void kernel_matrix(const Kernel& kernel, const double* xi, int n1, int d, double* K) {
  for (int i = 0; i < n1; ++i)
    for (int j = 0; j <= i; ++j) {
      double v;
      if (kernel.code == kComposite) {
        v = composite_value(kernel.composite, xi + i * d, xi + j * d, d);
      } else {
        double t = 0;
        for (int k = 0; k < d; ++k) t += xi[i * d + k] * xi[j * d + k];
        v = kernel_value(kernel.code, t, kernel.inv_bw2);
      }
      K[i * n1 + j] = K[j * n1 + i] = v;
    }
}

// The draws and kernel matrices of a prompt, scalar (host and device: libm's log, sin/cos, exp).
// The CPU tables pass a SIMD twin (cpu/sampling_kernels.inl) whose values agree to rounding.
struct ScalarOps {
  LSA_HD static void normals(const rng::StreamAddress& a, int count, double* z) {
    stream_normals(a, count, z);
  }
  LSA_HD static void kernel_matrix(const Kernel& kernel, const double* xi, int n1, int d,
                                   double* K) {
    kgp::kernel_matrix(kernel, xi, n1, d, K);
  }
};

// ξ [n1 x d]: n1 points uniform on the unit sphere S^{d−1} (normalized Gaussians)  [CCS H.1].
// Ops: the draws and kernel values (ScalarOps above, or a CPU table's SIMD twin).
template <class Ops = ScalarOps>
LSA_HD_LOCAL void sphere_points(const rng::StreamAddress& points, int n1, int d, double* xi, Ops = {}) {
  Ops::normals(points, n1 * d, xi);
  for (int i = 0; i < n1; ++i) {
    double s = 0;
    for (int k = 0; k < d; ++k) s += xi[i * d + k] * xi[i * d + k];
    const double inv = 1.0 / std::sqrt(s);  // s > 0: Box–Muller radii are never 0
    for (int k = 0; k < d; ++k) xi[i * d + k] *= inv;
  }
}

// Workspace doubles gp_labels needs for n1 points in dimension d (the Gram route keeps θ [d]
// there, which can exceed the factorizations' room when d is large and n1 small).
LSA_HD_LOCAL int gp_workspace(int n1, int d) {
  const int factorization = 2 * n1 * n1 + 5 * n1;
  return d > factorization ? d : factorization;
}

// y [n] = U |D|^{1/2} z for the symmetric K = U D Uᵀ held in a [n x n] (overwritten), z [n]:
// K = Q T Qᵀ (Householder), T = S D Sᵀ (implicit QL), y = Q (S |D|^{1/2} z); O(n³): 4n³/3 flops
// for T and ~6n³ for S. K is scaled by 1/max|K_ij| first when that exceeds 1 (the exp kernel's
// e^{1/σ²}), so that no square overflows. work [n² + 4n]: Sᵀ [n x n], D [n], T's off-diagonal
// [n], 2n scratch. Returns the QL iterations, or −1 (not converged, or K not finite).
template <class Poll>
LSA_HD_LOCAL int abs_root_times(double* a, int n, const double* z, double* work, double* y, Poll poll) {
  double* St = work;           // [n x n] Sᵀ (rows: eigenvectors of T)
  double* diag = St + n * n;   // [n] T_ii, then D
  double* off = diag + n;      // [n] T_{i,i+1}
  double* scratch = off + n;   // [2n]
  double big = 0;
  for (int i = 0; i < n; ++i)
    for (int j = i; j < n; ++j) big = big > std::fabs(a[i * n + j]) ? big : std::fabs(a[i * n + j]);
  if (!(big < INFINITY)) return -1;  // also NaN
  const double unscale = big > 1 ? std::sqrt(big) : 1.0;  // |D|^{1/2} of K from that of K / big
  if (big > 1)
    for (int i = 0; i < n; ++i)
      for (int j = i; j < n; ++j) a[i * n + j] /= big;
  householder_tridiagonal(a, n, diag, off, scratch, poll);
  for (int i = 0; i < n * n; ++i) St[i] = 0;
  for (int i = 0; i < n; ++i) St[i * n + i] = 1;
  const int iterations = tridiagonal_ql(diag, off, n, St, poll);
  for (int i = 0; i < n; ++i) y[i] = 0;
  for (int j = 0; j < n; ++j) {  // S |D|^{1/2} z = Σ_j (|D_j|^{1/2} z_j) S_:j, row j of Sᵀ
    const double c = std::sqrt(std::fabs(diag[j])) * z[j] * unscale;
    const double* sj = St + j * n;
    for (int i = 0; i < n; ++i) y[i] += c * sj[i];
  }
  householder_apply(a, n, y);
  return iterations;
}

// Y [n1] ~ N(0, K_+(ξ)) given ξ [n1 x d]  [CCS Definition 3.3], K_+ = U|D|Uᵀ, by label_route:
// Gram: Y = (ΞG) θ (θ = the first d normals of `labels`; G = I for linear, G₁ for K♦ with α = 1):
//      covariance ΞG²Ξᵀ = K = K_+ in O(n1·d);
// Cholesky (exp, K♦ with α < 1): K = L Lᵀ, Y = L z (K is PSD, so K_+ = K), n1³/3 flops; when the
//      Cholesky fails at rounding level (a pivot <= 0 of a numerically singular K), the eigen route;
// eigen (relu, indefinite K, and that fallback): K = U D Uᵀ by Householder + implicit QL
//      (abs_root_times), Y = U |D|^{1/2} z, whose covariance is U|D|Uᵀ = K_+; ~7n1³ flops (about
//      0.5 s at n1 = 600 on one core). (A cyclic Jacobi did this before: ~150n1³ flops and worse
//      than cubic in n1. The switch changed the eigenvectors' signs, hence Y's values for a
//      (seed, step); not the law.)
// work: gp_workspace(n1, d) doubles. poll() runs every O(n1²) flops (see small_matrix.hpp).
// Returns the method used (kMethod*).
template <class Poll = NoPoll, class Ops = ScalarOps>
LSA_HD_LOCAL int gp_labels(const Kernel& kernel, const double* xi, int n1, int d,
                     const rng::StreamAddress& labels, double* work, double* y, Poll poll = {},
                     Ops = {}) {
  const int route = label_route(kernel);
  if (route == kMethodGram) {
    double* theta = work;
    Ops::normals(labels, d, theta);
    if (kernel.code == kComposite)  // G₁θ (a g of 1 leaves θ's bits: the linear kernel's labels)
      for (int k = 0; k < d; ++k) theta[k] *= kernel.composite[1 + k];
    for (int i = 0; i < n1; ++i) {
      double s = 0;
      for (int k = 0; k < d; ++k) s += xi[i * d + k] * theta[k];
      y[i] = s;
    }
    return kMethodGram;
  }
  double* A = work;              // [n1 x n1]
  double* z = A + n1 * n1;       // [n1]
  double* eigen_work = z + n1;   // [n1² + 4 n1]
  Ops::normals(labels, n1, z);
  Ops::kernel_matrix(kernel, xi, n1, d, A);
  if (route == kMethodCholesky && cholesky_in_place(A, n1, poll)) {
    lower_matvec(A, n1, z, y);
    return kMethodCholesky;
  }
  if (route == kMethodCholesky) Ops::kernel_matrix(kernel, xi, n1, d, A);  // the Cholesky overwrote it
  return abs_root_times(A, n1, z, eigen_work, y, poll) >= 0 ? kMethodEigen
                                                            : kMethodEigenUnconverged;
}

// Doubles of per-prompt scratch sample_prompt needs: ξ [n1 x d], Y [n1], gp_labels' workspace.
LSA_HD_LOCAL index_t prompt_workspace(int n1, int d) {
  return index_t(n1) * d + n1 + gp_workspace(n1, d);
}

// The prompt's outputs from ξ [n1 x d] and Y [n1] (sample_prompt's arguments R, z, y_q, xi_out).
template <class T>
LSA_HD_LOCAL void write_prompt(const double* xi, const double* y, const double* R, int n1, int d, T* z,
                         T* y_q, T* xi_out) {
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
}

// One K-GP prompt b of a step, written in the kernel-attention layout — the whole per-prompt work
// of the CPU driver and of the CUDA kernel (one thread per prompt), so both run this arithmetic.
// R: Σ^{1/2} [d x d] or nullptr (Σ = I). z [d+1, n1]: columns (x_j; y_j), last (x_q; 0);
// *y_q the query label; xi_out [n1, d] (nullable) the whitened points; poll as in gp_labels;
// returns the method (kMethod*). ops: the draws and kernel matrices (ScalarOps, or the CPU
// tables' SIMD twin).
template <class T, class Poll = NoPoll, class Ops = ScalarOps>
LSA_HD_LOCAL int sample_prompt(const rng::PhiloxKey& key, std::uint32_t prompt, std::uint32_t step,
                         const Kernel& kernel, const double* R, int n1, int d, double* work,
                         T* z, T* y_q, T* xi_out, Poll poll = {}, Ops ops = {}) {
  double* xi = work;
  double* y = xi + n1 * d;
  sphere_points({key, prompt, step, kStreamGPPoints}, n1, d, xi, ops);
  const int method = gp_labels(kernel, xi, n1, d, {key, prompt, step, kStreamGPLabels}, y + n1, y,
                               poll, ops);
  write_prompt(xi, y, R, n1, d, z, y_q, xi_out);
  return method;
}

}  // namespace lsa_native::detail::kgp
