// Small dense matrix kit for per-prompt math on both backends (LSA_HD): dot products, traces and
// updates of dense matrices, in-place Cholesky, cyclic Jacobi eigensolver, triangular mat-vecs
// and solves. (The CPU's matrix products are the SIMD register tiles of cpu/small_matrix_simd.hpp.) One thread (or one CUDA thread) owns a
// matrix; sizes are a few dozen at most (a prompt's (n+1) x (n+1) kernel matrix, a d x d Λ).
//
// Layout: every matrix is dense row-major n x n, entry (i, j) at a[i * n + j], no aliasing between
// arguments unless stated. Nothing here allocates, throws or includes CUDA or SIMD headers.
#pragma once

#include <cmath>

#include "common/hd.hpp"

namespace lsa_native::detail {

// Machine epsilon without std::numeric_limits (not constexpr on every device compiler).
template <class T>
struct SmallEps;
template <>
struct SmallEps<float> {
  static constexpr float value = 1.1920928955078125e-07f;
};
template <>
struct SmallEps<double> {
  static constexpr double value = 2.220446049250313080847e-16;
};

// ---- dense row-major n x n matrices and n-vectors ----

// Σ_i x[i] y[i] over n entries (also the Frobenius product Σ A∘B of two matrices, n = rows·cols).
template <class T>
LSA_HD T dot(const T* x, const T* y, int n) {
  T s = T(0);
  for (int i = 0; i < n; ++i) s += x[i] * y[i];
  return s;
}

// y += c x over n entries.
template <class T>
LSA_HD void axpy(T c, const T* x, int n, T* y) {
  for (int i = 0; i < n; ++i) y[i] += c * x[i];
}

// tr A.
template <class T>
LSA_HD T trace(const T* a, int n) {
  T s = T(0);
  for (int i = 0; i < n; ++i) s += a[i * n + i];
  return s;
}

// tr(A B) = Σ_ij A_ij B_ji.
template <class T>
LSA_HD T trace_product(const T* a, const T* b, int n) {
  T s = T(0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) s += a[i * n + j] * b[j * n + i];
  return s;
}

// M += c x yᵀ.
template <class T>
LSA_HD void add_outer(T* m, int n, T c, const T* x, const T* y) {
  for (int i = 0; i < n; ++i) axpy(c * x[i], y, n, m + i * n);
}

// In-place Cholesky A = L Lᵀ of a symmetric positive-definite n x n matrix [a: n x n].
// Reads the lower triangle only; on success the lower triangle holds L, the strict upper triangle
// is zeroed, and it returns true. Returns false (a left partly overwritten) at the first pivot that
// is not > 0 or not finite: A is not numerically positive definite. Every entry is
// L_ij = (a_ij − Σ_{k<j} L_ik L_jk) / L_jj (L_jj = √(a_jj − Σ_{k<j} L_jk²)), summed in k order in T;
// computed column by column, so that the entries of one column are independent sums (they overlap
// in the pipeline), O(n³/3).
template <class T>
LSA_HD bool cholesky_in_place(T* a, int n) {
  for (int j = 0; j < n; ++j) {
    T s = a[j * n + j];
    for (int k = 0; k < j; ++k) s -= a[j * n + k] * a[j * n + k];
    if (!(s > T(0)) || !(s < T(INFINITY))) return false;  // also rejects NaN
    const T pivot = std::sqrt(s);
    a[j * n + j] = pivot;
    for (int i = j + 1; i < n; ++i) {
      T v = a[i * n + j];
      for (int k = 0; k < j; ++k) v -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = v / pivot;
    }
    for (int i = 0; i < j; ++i) a[i * n + j] = T(0);  // the strict upper triangle of column j
  }
  return true;
}

// Cyclic Jacobi eigensolver for a symmetric n x n matrix [a: n x n, overwritten].
// On return w [n] holds the eigenvalues (unsorted) and v [n x n] the orthonormal eigenvectors as
// columns (A = V diag(w) Vᵀ), both to rounding: each rotation is orthogonal to working precision,
// and a converged matrix has off(A) = (Σ_{i≠j} a_ij²)^{1/2} <= tol·‖A‖_F with tol = n·eps, which
// bounds every eigenvalue error by tol·‖A‖_F (Weyl). Reads both triangles (symmetric input assumed).
// One sweep visits every pair (p < q) in row order and applies the rotation that zeroes a_pq
// [Golub & Van Loan, Matrix Computations, Alg. 8.5.2 / 8.5.3, with Rutishauser's stable update].
// Returns the number of sweeps used (>= 0), or -1 when max_sweeps did not reach the tolerance
// (quadratic convergence makes ~6-10 sweeps typical for n <= 64; 30 is a generous limit).
template <class T>
LSA_HD int jacobi_eigen(T* a, int n, T* w, T* v, int max_sweeps = 30) {
  // The rotations accumulate into vᵀ (rows = eigenvectors) held in v, so that both A's and V's
  // updates run along contiguous rows; v is transposed in place at the end.
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) v[i * n + j] = T(i == j);
  T norm2 = T(0);  // ‖A‖_F², invariant under the rotations
  for (int i = 0; i < n * n; ++i) norm2 += a[i] * a[i];
  const T tol = T(n) * SmallEps<T>::value;
  int sweeps = -1;
  for (int sweep = 0; sweep <= max_sweeps; ++sweep) {
    T off2 = T(0);
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) off2 += T(2) * a[p * n + q] * a[p * n + q];
    if (off2 <= tol * tol * norm2) {
      sweeps = sweep;
      break;
    }
    if (sweep == max_sweeps) break;
    for (int p = 0; p < n - 1; ++p) {
      for (int q = p + 1; q < n; ++q) {
        T* ap = a + p * n;
        T* aq = a + q * n;
        const T apq = ap[q];
        if (apq == T(0)) continue;
        const T app = ap[p], aqq = aq[q];
        // a_pq below the rounding of both diagonal entries: drop it [Numerical Recipes §11.1].
        const T g = T(100) * std::fabs(apq);
        if (std::fabs(app) + g == std::fabs(app) && std::fabs(aqq) + g == std::fabs(aqq)) {
          ap[q] = T(0);
          aq[p] = T(0);
          continue;
        }
        // cot 2φ = θ = (a_qq − a_pp)/(2 a_pq); t = tan φ the smaller root of t² + 2θt − 1 = 0.
        const T theta = (aqq - app) / (T(2) * apq);
        const T at = std::fabs(theta);
        T t = at > T(1e15) ? T(0.5) / at : T(1) / (at + std::sqrt(at * at + T(1)));  // no θ² overflow
        if (theta < T(0)) t = -t;
        const T c = T(1) / std::sqrt(t * t + T(1));
        const T s = t * c;
        const T tau = s / (T(1) + c);
        // Rows p and q: a_pk <- c·a_pk − s·a_qk, a_qk <- s·a_pk + c·a_qk (Rutishauser's form);
        // the 2x2 block is then set exactly and columns p, q mirrored from the rows (symmetry).
        for (int k = 0; k < n; ++k) {
          const T rp = ap[k], rq = aq[k];
          ap[k] = rp - s * (rq + tau * rp);
          aq[k] = rq + s * (rp - tau * rq);
        }
        ap[p] = app - t * apq;
        aq[q] = aqq + t * apq;
        ap[q] = T(0);
        aq[p] = T(0);
        for (int k = 0; k < n; ++k) {
          a[k * n + p] = ap[k];
          a[k * n + q] = aq[k];
        }
        T* vp = v + p * n;
        T* vq = v + q * n;
        for (int k = 0; k < n; ++k) {
          const T xp = vp[k], xq = vq[k];
          vp[k] = xp - s * (xq + tau * xp);
          vq[k] = xq + s * (xp - tau * xq);
        }
      }
    }
  }
  for (int i = 0; i < n; ++i) w[i] = a[i * n + i];
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      const T x = v[i * n + j];
      v[i * n + j] = v[j * n + i];
      v[j * n + i] = x;
    }
  return sweeps;
}

// y = L x for lower-triangular L [n x n] (strict upper triangle ignored), x [n], y [n] (y != x).
template <class T>
LSA_HD void lower_matvec(const T* l, int n, const T* x, T* y) {
  for (int i = 0; i < n; ++i) {
    T s = T(0);
    for (int k = 0; k <= i; ++k) s += l[i * n + k] * x[k];
    y[i] = s;
  }
}

// y = Lᵀ x for lower-triangular L [n x n], x [n], y [n] (y != x).
template <class T>
LSA_HD void lower_t_matvec(const T* l, int n, const T* x, T* y) {
  for (int i = 0; i < n; ++i) {
    T s = T(0);
    for (int k = i; k < n; ++k) s += l[k * n + i] * x[k];
    y[i] = s;
  }
}

// x <- L⁻¹ x (forward substitution) for lower-triangular L [n x n] with non-zero diagonal, x [n].
template <class T>
LSA_HD void lower_solve(const T* l, int n, T* x) {
  for (int i = 0; i < n; ++i) {
    T s = x[i];
    for (int k = 0; k < i; ++k) s -= l[i * n + k] * x[k];
    x[i] = s / l[i * n + i];
  }
}

// x <- L⁻ᵀ x (back substitution) for lower-triangular L [n x n] with non-zero diagonal, x [n].
template <class T>
LSA_HD void lower_t_solve(const T* l, int n, T* x) {
  for (int i = n - 1; i >= 0; --i) {
    T s = x[i];
    for (int k = i + 1; k < n; ++k) s -= l[k * n + i] * x[k];
    x[i] = s / l[i * n + i];
  }
}

}  // namespace lsa_native::detail
