// CPU LSA kernels, included by one translation unit per instruction set with LSA_ISA_NS defined.
// Loops run along tokens (contiguous in E) so that they vectorize; `omp simd reduction` (enabled by
// -fopenmp-simd, no OpenMP runtime) lets token sums vectorize without -ffast-math.
#include <algorithm>
#include <vector>

#include "common/lsa_math.hpp"
#include "cpu/lsa_kernels.hpp"

#ifndef LSA_ISA_NS
#error "define LSA_ISA_NS before including lsa_kernels.inl"
#endif

#define LSA_RESTRICT __restrict__

namespace lsa_native::cpu::LSA_ISA_NS {
namespace {

// t_j = p·e_j and s_j = e_j·q for every token j, then returns Σ_j t_j s_j.   [SPEC 3.2]
//   Eb [d+1, N+1], p [d+1] (row stride 1), q [d+1], t, s [N+1] (written)
template <class T>
T token_scalars(const T* LSA_RESTRICT Eb, index_t d, index_t cols, const T* LSA_RESTRICT p,
                const T* LSA_RESTRICT q, T* LSA_RESTRICT t, T* LSA_RESTRICT s) {
  {
    const T p0 = p[0], q0 = q[0];
    for (index_t j = 0; j < cols; ++j) {
      t[j] = p0 * Eb[j];
      s[j] = q0 * Eb[j];
    }
  }
  for (index_t r = 1; r <= d; ++r) {
    const T* LSA_RESTRICT row = Eb + r * cols;
    const T pr = p[r], qr = q[r];
    for (index_t j = 0; j < cols; ++j) {
      t[j] += pr * row[j];
      s[j] += qr * row[j];
    }
  }
  T acc = 0;
#pragma omp simd reduction(+ : acc)
  for (index_t j = 0; j < cols; ++j) acc += t[j] * s[j];
  return acc;
}

template <class T>
void predict_range(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, T* y_hat,
                   index_t b0, index_t b1) {
  const index_t d = sh.dim, N = sh.context, rows = d + 1, cols = N + 1;
  std::vector<T> scratch(rows + 2 * cols);
  T *q = scratch.data(), *t = q + rows, *s = t + cols;
  const T* p = W_pv + d * rows;  // last row of W^PV
  for (index_t b = b0; b < b1; ++b) {
    const T* Eb = E + b * rows * cols;
    detail::query_vector(W_kq, Eb, d, N, q);
    y_hat[b] = Eb[d * cols + N] + token_scalars(Eb, d, cols, p, q, t, s) / T(N);
  }
}

template <class T>
void loss_grad_range(const LsaShape& sh, const T* E, const T* y_q, const T* W_pv, const T* W_kq,
                     T* y_hat, index_t b0, index_t b1, double* partial) {
  const index_t d = sh.dim, N = sh.context, rows = d + 1, cols = N + 1;
  std::vector<T> scratch(rows + 2 * cols);
  std::vector<double> g(2 * rows);
  T *q = scratch.data(), *t = q + rows, *s = t + cols;
  double *g_p = g.data(), *g_k = g_p + rows;
  const T* p = W_pv + d * rows;
  double* loss = partial;
  double* d_p = partial + 1;
  double* d_K = d_p + rows;
  std::fill(partial, partial + loss_grad_partial_size(d), 0.0);
  const T inv_n = T(1) / T(N);
  for (index_t b = b0; b < b1; ++b) {
    const T* Eb = E + b * rows * cols;
    detail::query_vector(W_kq, Eb, d, N, q);
    const T pred = Eb[d * cols + N] + token_scalars(Eb, d, cols, p, q, t, s) * inv_n;
    if (y_hat) y_hat[b] = pred;
    const double residual = double(pred) - double(y_q[b]);
    *loss += residual * residual;
    // g_p = (1/N) Σ_j s_j e_j, g_k = (1/N) Σ_j t_j e_j: the second (cache-hot) read of the prompt.
    for (index_t r = 0; r < rows; ++r) {
      const T* LSA_RESTRICT row = Eb + r * cols;
      T ap = 0, ak = 0;
#pragma omp simd reduction(+ : ap, ak)
      for (index_t j = 0; j < cols; ++j) {
        ap += s[j] * row[j];
        ak += t[j] * row[j];
      }
      g_p[r] = double(ap * inv_n);
      g_k[r] = double(ak * inv_n);
    }
    detail::accumulate_prediction_grad(residual, g_p, g_k, Eb + N, cols, d, d_p, d_K);
  }
}

// G = E E^T / N (symmetric, double) for one prompt.   [SPEC 3.2]
template <class T>
void gram(const T* LSA_RESTRICT Eb, index_t rows, index_t cols, index_t N, double* G) {
  for (index_t r = 0; r < rows; ++r) {
    const T* LSA_RESTRICT a = Eb + r * cols;
    for (index_t c = r; c < rows; ++c) {
      const T* LSA_RESTRICT bb = Eb + c * cols;
      T acc = 0;
#pragma omp simd reduction(+ : acc)
      for (index_t j = 0; j < cols; ++j) acc += a[j] * bb[j];
      G[r * rows + c] = G[c * rows + r] = double(acc) / double(N);
    }
  }
}

// out_r = base_r + Σ_s coef[r, s] · src_s for every row r (row axpys along the tokens).
//   base, src, out [rows, cols]; coef [rows, rows]
template <class T>
void add_row_combination(const T* LSA_RESTRICT base, const T* LSA_RESTRICT coef,
                         const T* LSA_RESTRICT src, index_t rows, index_t cols,
                         T* LSA_RESTRICT out) {
  for (index_t r = 0; r < rows; ++r) {
    T* LSA_RESTRICT o = out + r * cols;
    const T* LSA_RESTRICT bs = base + r * cols;
    std::copy(bs, bs + cols, o);
    for (index_t s = 0; s < rows; ++s) {
      const T c = coef[r * rows + s];
      const T* LSA_RESTRICT x = src + s * cols;
      for (index_t j = 0; j < cols; ++j) o[j] += c * x[j];
    }
  }
}

template <class T>
void forward_range(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, T* F, index_t b0,
                   index_t b1) {
  const index_t d = sh.dim, N = sh.context, rows = d + 1, cols = N + 1, n2 = rows * rows;
  std::vector<double> work(3 * n2);
  double *G = work.data(), *GW = G + n2, *P = GW + n2;
  std::vector<T> P_t(n2);
  for (index_t b = b0; b < b1; ++b) {
    const T* Eb = E + b * rows * cols;
    gram(Eb, rows, cols, N, G);
    detail::matmul_small(G, W_kq, GW, rows);  // G W^KQ
    detail::matmul_small(W_pv, GW, P, rows);  // P = W^PV G W^KQ
    for (index_t i = 0; i < n2; ++i) P_t[i] = T(P[i]);
    add_row_combination(Eb, P_t.data(), Eb, rows, cols, F + b * rows * cols);  // F = E + P E
  }
}

template <class T>
void vjp_range(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, const T* d_F, T* d_E,
               index_t b0, index_t b1, double* partial) {
  const index_t d = sh.dim, N = sh.context, rows = d + 1, cols = N + 1, n2 = rows * rows;
  std::vector<double> work(8 * n2);
  double *G = work.data(), *GW = G + n2, *WG = GW + n2, *P = WG + n2, *dP = P + n2,
         *tmp = dP + n2, *dG = tmp + n2, *acc = dG + n2;
  std::vector<T> coef(n2);
  std::vector<T> dE_tmp(d_E ? rows * cols : 0);
  double* d_W_pv = partial;
  double* d_W_kq = partial + n2;
  std::fill(partial, partial + vjp_partial_size(d), 0.0);
  for (index_t b = b0; b < b1; ++b) {
    const T* Eb = E + b * rows * cols;
    const T* dFb = d_F + b * rows * cols;
    gram(Eb, rows, cols, N, G);
    detail::matmul_small(G, W_kq, GW, rows);   // G W^KQ
    detail::matmul_small(W_pv, G, WG, rows);   // W^PV G
    detail::matmul_small(WG, W_kq, P, rows);   // P = W^PV G W^KQ
    // dP = d_F E^T
    for (index_t r = 0; r < rows; ++r) {
      const T* LSA_RESTRICT f = dFb + r * cols;
      for (index_t c = 0; c < rows; ++c) {
        const T* LSA_RESTRICT e = Eb + c * cols;
        T a = 0;
#pragma omp simd reduction(+ : a)
        for (index_t j = 0; j < cols; ++j) a += f[j] * e[j];
        dP[r * rows + c] = double(a);
      }
    }
    detail::matmul_nt_small(dP, GW, acc, rows);  // dP (G W^KQ)^T
    for (index_t i = 0; i < n2; ++i) d_W_pv[i] += acc[i];
    detail::matmul_tn_small(WG, dP, acc, rows);  // (W^PV G)^T dP
    for (index_t i = 0; i < n2; ++i) d_W_kq[i] += acc[i];
    if (!d_E) continue;
    // dE = d_F + P^T d_F + (dG + dG^T) E / N,  dG = W^PV^T dP W^KQ^T
    detail::matmul_tn_small(W_pv, dP, tmp, rows);
    detail::matmul_nt_small(tmp, W_kq, dG, rows);
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < rows; ++c) coef[r * rows + c] = T(P[c * rows + r]);  // P^T
    add_row_combination(dFb, coef.data(), dFb, rows, cols, dE_tmp.data());
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < rows; ++c)
        coef[r * rows + c] = T((dG[r * rows + c] + dG[c * rows + r]) / double(N));
    add_row_combination(dE_tmp.data(), coef.data(), Eb, rows, cols, d_E + b * rows * cols);
  }
}

}  // namespace

template <class T>
LsaKernels<T> lsa_kernels() {
  return {&predict_range<T>, &loss_grad_range<T>, &forward_range<T>, &vjp_range<T>};
}
template LsaKernels<float> lsa_kernels<float>();
template LsaKernels<double> lsa_kernels<double>();

}  // namespace lsa_native::cpu::LSA_ISA_NS
