// Small dense matrix kit for per-prompt math on both backends (LSA_HD): dot products, traces and
// updates of dense matrices, in-place Cholesky, two symmetric eigensolvers (cyclic Jacobi for a
// few dozen rows; Householder tridiagonalisation + implicit QL, O(n³) with a small constant, for
// large ones), triangular mat-vecs and solves. (The CPU's matrix products are the SIMD register
// tiles of cpu/small_matrix_simd.hpp.) One thread (or one CUDA thread) owns a matrix: a d x d Λ,
// or a prompt's (n+1) x (n+1) kernel matrix (up to thousands of rows).
//
// Layout: every matrix is dense row-major n x n, entry (i, j) at a[i * n + j], no aliasing between
// arguments unless stated. Nothing here allocates or includes CUDA or SIMD headers. Nothing throws
// by itself; the long routines take a `poll` callable, called every O(n²) flops (NoPoll by
// default), through which a host caller may stop them by throwing (lsa_native::Interrupted).
#pragma once

#include <cmath>

#include "common/hd.hpp"

namespace lsa_native::detail {

// The default `poll` of the long routines: nothing (device code, callers that never stop them).
struct NoPoll {
  LSA_HD void operator()() const {}
};

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
LSA_HD_LOCAL T dot(const T* x, const T* y, int n) {
  T s = T(0);
  for (int i = 0; i < n; ++i) s += x[i] * y[i];
  return s;
}

// y += c x over n entries.
template <class T>
LSA_HD_LOCAL void axpy(T c, const T* x, int n, T* y) {
  for (int i = 0; i < n; ++i) y[i] += c * x[i];
}

// tr A.
template <class T>
LSA_HD_LOCAL T trace(const T* a, int n) {
  T s = T(0);
  for (int i = 0; i < n; ++i) s += a[i * n + i];
  return s;
}

// tr(A B) = Σ_ij A_ij B_ji.
template <class T>
LSA_HD_LOCAL T trace_product(const T* a, const T* b, int n) {
  T s = T(0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) s += a[i * n + j] * b[j * n + i];
  return s;
}

// M += c x yᵀ.
template <class T>
LSA_HD_LOCAL void add_outer(T* m, int n, T c, const T* x, const T* y) {
  for (int i = 0; i < n; ++i) axpy(c * x[i], y, n, m + i * n);
}

// In-place Cholesky A = L Lᵀ of a symmetric positive-definite n x n matrix [a: n x n].
// Reads the lower triangle only; on success the lower triangle holds L, the strict upper triangle
// is zeroed, and it returns true. Returns false (a left partly overwritten) at the first pivot that
// is not > 0 or not finite: A is not numerically positive definite. Every entry is
// L_ij = (a_ij − Σ_{k<j} L_ik L_jk) / L_jj (L_jj = √(a_jj − Σ_{k<j} L_jk²)), summed in k order in T;
// computed column by column, so that the entries of one column are independent sums (they overlap
// in the pipeline), O(n³/3). poll() runs before each column.
template <class T, class Poll = NoPoll>
LSA_HD_LOCAL bool cholesky_in_place(T* a, int n, Poll poll = {}) {
  for (int j = 0; j < n; ++j) {
    poll();
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
// Cost: ~12n³ flops per sweep, and the sweeps grow slowly with n (8 at n = 100, 10 at n = 600 for
// a relu kernel matrix; 11 and 15 for exp); the column mirror of every rotation is a strided store
// (2n cache lines), which doubles the time per sweep once a and v outgrow the L2 cache (n ≳ 250).
// Together ~n^3.4 in practice: for large n use householder_tridiagonal + tridiagonal_ql.
template <class T>
LSA_HD_LOCAL int jacobi_eigen(T* a, int n, T* w, T* v, int max_sweeps = 30) {
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

// √(x² + y²) without overflow or destructive underflow [LAPACK dlapy2].
template <class T>
LSA_HD_LOCAL T scaled_hypot(T x, T y) {
  const T ax = std::fabs(x), ay = std::fabs(y);
  const T big = ax > ay ? ax : ay, small = ax > ay ? ay : ax;
  if (big == T(0)) return T(0);
  const T r = small / big;
  return big * std::sqrt(T(1) + r * r);
}

// Householder reduction T = Qᵀ A Q of a symmetric A [n x n] to tridiagonal form
// [Golub & Van Loan, Matrix Computations, Alg. 8.3.1; reflectors as LAPACK's dlarfg].
// diag [n] gets T_ii, off [n] gets T_{i,i+1} (off[n−1] = 0). Reads and overwrites the upper
// triangle of a only (the lower one is ignored); on return row k <= n−3 of a holds the reflector
// H_k = I − τ_k v_k v_kᵀ acting on indices k+1..n−1: a[k][k+1] = τ_k, a[k][j] = v_kj for j >= k+2
// (v_k,k+1 = 1), and Q = H_0 H_1 ⋯ H_{n−3} (householder_apply). work [2n]. 4n³/3 flops, every
// access along rows (the symmetric mat-vec and rank-2 update read the upper triangle row by row).
// Entries are assumed to be at most ~1/n of the overflow threshold (scale A first otherwise).
template <class T, class Poll = NoPoll>
LSA_HD_LOCAL void householder_tridiagonal(T* a, int n, T* diag, T* off, T* work, Poll poll = {}) {
  T* v = work;      // v_k on indices k+1..n−1
  T* p = work + n;  // τ A₂₂ v, then w = p − (τ/2)(pᵀv) v
  for (int k = 0; k + 2 < n; ++k) {
    poll();
    T* row = a + k * n;  // (a_k,k+1 .. a_k,n−1) = column k below the diagonal, x
    diag[k] = row[k];
    const T alpha = row[k + 1];
    T tail = T(0);  // max |x_j|, j >= k+2
    for (int j = k + 2; j < n; ++j) tail = tail > std::fabs(row[j]) ? tail : std::fabs(row[j]);
    if (tail == T(0)) {  // x already a multiple of e_1: H_k = I
      off[k] = alpha;
      row[k + 1] = T(0);
      continue;
    }
    const T scale = tail > std::fabs(alpha) ? tail : std::fabs(alpha);  // ‖x‖ without overflow
    T ss = (alpha / scale) * (alpha / scale);
    for (int j = k + 2; j < n; ++j) ss += (row[j] / scale) * (row[j] / scale);
    const T beta = alpha > T(0) ? -scale * std::sqrt(ss) : scale * std::sqrt(ss);  // H_k x = β e_1
    const T tau = (beta - alpha) / beta;
    const T inv = T(1) / (alpha - beta);
    v[k + 1] = T(1);
    for (int j = k + 2; j < n; ++j) v[j] = row[j] *= inv;
    off[k] = beta;
    row[k + 1] = tau;
    // p = τ A₂₂ v from the upper triangle: row i gives p_i its dot product and p_j (j > i) a_ij v_i.
    for (int i = k + 1; i < n; ++i) p[i] = T(0);
    for (int i = k + 1; i < n; ++i) {
      const T* ai = a + i * n;
      const T vi = v[i];
      T s = ai[i] * vi;
      for (int j = i + 1; j < n; ++j) {
        s += ai[j] * v[j];
        p[j] += ai[j] * vi;
      }
      p[i] += s;
    }
    T pv = T(0);
    for (int i = k + 1; i < n; ++i) pv += (p[i] *= tau) * v[i];
    const T half = T(0.5) * tau * pv;
    for (int i = k + 1; i < n; ++i) p[i] -= half * v[i];
    // A₂₂ <- H A₂₂ H = A₂₂ − v wᵀ − w vᵀ (upper triangle).
    for (int i = k + 1; i < n; ++i) {
      T* ai = a + i * n;
      const T vi = v[i], wi = p[i];
      for (int j = i; j < n; ++j) ai[j] -= vi * p[j] + wi * v[j];
    }
  }
  if (n >= 2) {
    diag[n - 2] = a[(n - 2) * n + n - 2];
    off[n - 2] = a[(n - 2) * n + n - 1];
  }
  diag[n - 1] = a[n * n - 1];
  off[n - 1] = T(0);
}

// x <- Q x for the Q = H_0 H_1 ⋯ H_{n−3} that householder_tridiagonal left in a [n x n], x [n].
// 2n² flops.
template <class T>
LSA_HD_LOCAL void householder_apply(const T* a, int n, T* x) {
  for (int k = n - 3; k >= 0; --k) {
    const T* row = a + k * n;
    const T tau = row[k + 1];
    if (tau == T(0)) continue;
    T s = x[k + 1];
    for (int j = k + 2; j < n; ++j) s += row[j] * x[j];
    s *= tau;
    x[k + 1] -= s;
    for (int j = k + 2; j < n; ++j) x[j] -= s * row[j];
  }
}

// Eigenvalues and eigenvectors of the symmetric tridiagonal T (diag [n], off [n]: T_{i,i+1},
// off[n−1] ignored) by the implicit QL method with Wilkinson-type shifts [EISPACK tql2, as in
// JAMA; Golub & Van Loan §8.3]: T = S Λ Sᵀ. On return diag holds Λ (unsorted) and off is
// destroyed; every rotation is applied to the rows of vt [n x n], so that vt <- Sᵀ vt (vt = I on
// entry gives the eigenvectors of T as rows; contiguous row updates, ~6n³ flops in all).
// Deflation: |off_i| <= eps·max_{j<=l}(|T_jj| + |T_j,j+1|). Returns the number of QL iterations
// (~1.5n typical), or −1 when they exceed 30n (LAPACK dsteqr's limit; never observed).
template <class T, class Poll = NoPoll>
LSA_HD_LOCAL int tridiagonal_ql(T* diag, T* off, int n, T* vt, Poll poll = {}) {
  const T eps = SmallEps<T>::value;
  off[n - 1] = T(0);
  T shift_sum = T(0), tst1 = T(0);
  int iterations = 0;
  for (int l = 0; l < n; ++l) {
    poll();
    const T size = std::fabs(diag[l]) + std::fabs(off[l]);
    tst1 = tst1 > size ? tst1 : size;
    int m = l;
    while (m < n - 1 && std::fabs(off[m]) > eps * tst1) ++m;
    if (m > l) {
      do {
        if (++iterations > 30 * n) return -1;
        // Shift from the leading 2x2 block; diag[l+2..] move with it (accumulated in shift_sum).
        T g = diag[l];
        T p = (diag[l + 1] - g) / (T(2) * off[l]);
        T r = scaled_hypot(p, T(1));
        if (p < T(0)) r = -r;
        diag[l] = off[l] / (p + r);
        diag[l + 1] = off[l] * (p + r);
        const T dl1 = diag[l + 1];
        T h = g - diag[l];
        for (int i = l + 2; i < n; ++i) diag[i] -= h;
        shift_sum += h;
        // Chase the bulge from m up to l with plane rotations.
        p = diag[m];
        T c = T(1), c2 = T(1), c3 = T(1), s = T(0), s2 = T(0);
        const T el1 = off[l + 1];
        for (int i = m - 1; i >= l; --i) {
          c3 = c2;
          c2 = c;
          s2 = s;
          g = c * off[i];
          h = c * p;
          r = scaled_hypot(p, off[i]);
          off[i + 1] = s * r;
          s = off[i] / r;
          c = p / r;
          p = c * diag[i] - s * g;
          diag[i + 1] = h + s * (c * g + s * diag[i]);
          T* vi = vt + i * n;
          T* vi1 = vi + n;
          for (int k = 0; k < n; ++k) {
            const T x = vi[k], y = vi1[k];
            vi1[k] = s * x + c * y;
            vi[k] = c * x - s * y;
          }
        }
        p = -s * s2 * c3 * el1 * off[l] / dl1;
        off[l] = s * p;
        diag[l] = c * p;
      } while (std::fabs(off[l]) > eps * tst1);
    }
    diag[l] += shift_sum;
    off[l] = T(0);
  }
  return iterations;
}

// y = L x for lower-triangular L [n x n] (strict upper triangle ignored), x [n], y [n] (y != x).
template <class T>
LSA_HD_LOCAL void lower_matvec(const T* l, int n, const T* x, T* y) {
  for (int i = 0; i < n; ++i) {
    T s = T(0);
    for (int k = 0; k <= i; ++k) s += l[i * n + k] * x[k];
    y[i] = s;
  }
}

// y = Lᵀ x for lower-triangular L [n x n], x [n], y [n] (y != x).
template <class T>
LSA_HD_LOCAL void lower_t_matvec(const T* l, int n, const T* x, T* y) {
  for (int i = 0; i < n; ++i) {
    T s = T(0);
    for (int k = i; k < n; ++k) s += l[k * n + i] * x[k];
    y[i] = s;
  }
}

// x <- L⁻¹ x (forward substitution) for lower-triangular L [n x n] with non-zero diagonal, x [n].
template <class T>
LSA_HD_LOCAL void lower_solve(const T* l, int n, T* x) {
  for (int i = 0; i < n; ++i) {
    T s = x[i];
    for (int k = 0; k < i; ++k) s -= l[i * n + k] * x[k];
    x[i] = s / l[i * n + i];
  }
}

// x <- L⁻ᵀ x (back substitution) for lower-triangular L [n x n] with non-zero diagonal, x [n].
template <class T>
LSA_HD_LOCAL void lower_t_solve(const T* l, int n, T* x) {
  for (int i = n - 1; i >= 0; --i) {
    T s = x[i];
    for (int k = i + 1; k < n; ++k) s -= l[k * n + i] * x[k];
    x[i] = s / l[i * n + i];
  }
}

}  // namespace lsa_native::detail
