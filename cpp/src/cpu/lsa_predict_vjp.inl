// VJP of the LSA prediction ŷ = [f_LSA(E)]_{d+1,N+1} [ZFB (3.6)] for an upstream dŷ [B] (lsa.hpp),
// over a range of prompts; included by one translation unit per instruction set with LSA_ISA_NS
// defined (lsa_kernels_{base,avx2,avx512}.cpp). Per prompt one pass over the tokens for t_j = p·e_j and
// s_j = q·e_j (q = W^KQ e_q), one for G q = (1/N) Σ_j s_j e_j and G p = (1/N) Σ_j t_j e_j, and the
// dE write:
//   ∂ŷ/∂p = G q (last row of dW^PV),  ∂ŷ/∂W^KQ = (G p) e_qᵀ,
//   ∂ŷ/∂e_j = (1/N)(s_j p + t_j q) for every column j, + W^KQᵀ G p on the query column, + 1 on the
//   query-label slot [d, N].
// Token sums in T with SIMD partial sums (simd.hpp); batch sums of the parameter gradients in
// double, reduced in chunk order by the driver (lsa_cpu.cpp). The per-entry formulas are those of
// common/lsa_recipe.hpp (the CUDA kernel's): q and the query column's W^KQᵀ G p by the recipe
// itself, the dE columns by `combine`, its vector form of prediction_input_grad_entry [SPEC 3.2].
#include <algorithm>
#include <vector>

#include "common/finite.hpp"
#include "common/lsa_recipe.hpp"
#include "cpu/lsa_predict_vjp.hpp"
#include "cpu/simd.hpp"

#ifndef LSA_ISA_NS
#error "define LSA_ISA_NS before including lsa_predict_vjp.inl"
#endif

namespace lsa_native::cpu::LSA_ISA_NS {
namespace {

// (Σ_j a[j] x[j], Σ_j b[j] x[j]) over n entries: vector partial sums, then the tail.
template <class T>
inline void two_dots(const T* x, const T* a, const T* b, index_t n, T& sum_a, T& sum_b) {
  constexpr index_t L = simd::kLanes<T>;
  simd::Vec<T> va = simd::zero<T>(), vb = simd::zero<T>();
  index_t j = 0;
  for (; j + L <= n; j += L) {
    const simd::Vec<T> e = simd::load(x + j);
    va += simd::load(a + j) * e;
    vb += simd::load(b + j) * e;
  }
  T ta = simd::hsum(va), tb = simd::hsum(vb);
  for (; j < n; ++j) {
    ta += a[j] * x[j];
    tb += b[j] * x[j];
  }
  sum_a = ta;
  sum_b = tb;
}

// out[j] = α a[j] + β b[j] over n entries; adds x − x of every stored value to `poison`.
template <class T>
inline void combine(T alpha, const T* a, T beta, const T* b, index_t n, T* out,
                    simd::Vec<T>& poison) {
  constexpr index_t L = simd::kLanes<T>;
  const simd::Vec<T> va = simd::broadcast(alpha), vb = simd::broadcast(beta);
  index_t j = 0;
  for (; j + L <= n; j += L) {
    const simd::Vec<T> x = va * simd::load(a + j) + vb * simd::load(b + j);
    simd::store(out + j, x);
    poison += x - x;
  }
  T tail = T(0);
  for (; j < n; ++j) tail += detail::poison(out[j] = alpha * a[j] + beta * b[j]);
  poison += simd::broadcast(tail);
}

// t[j] (+)= α x[j] and s[j] (+)= β x[j] over n entries (one read of x); `first` overwrites.
template <class T>
inline void two_axpy(const T* x, T alpha, T beta, index_t n, T* t, T* s, bool first) {
  constexpr index_t L = simd::kLanes<T>;
  const simd::Vec<T> va = simd::broadcast(alpha), vb = simd::broadcast(beta);
  index_t j = 0;
  for (; j + L <= n; j += L) {
    const simd::Vec<T> e = simd::load(x + j);
    simd::store(t + j, (first ? simd::zero<T>() : simd::load(t + j)) + va * e);
    simd::store(s + j, (first ? simd::zero<T>() : simd::load(s + j)) + vb * e);
  }
  for (; j < n; ++j) {
    t[j] = (first ? T(0) : t[j]) + alpha * x[j];
    s[j] = (first ? T(0) : s[j]) + beta * x[j];
  }
}

template <class T>
bool predict_vjp_range(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, const T* d_y,
                       T* d_E, index_t b0, index_t b1, double* partial) {
  const index_t D = sh.dim + 1, C = sh.context + 1, N = sh.context;
  const recipe::Mat<T> Wk = recipe::rows_of(W_kq, int(D));
  simd::Vec<T> poison = simd::zero<T>();  // of d_E (the parameter gradients are checked reduced)
  const T* p = W_pv + (D - 1) * D;
  const T inv_n = T(1) / T(N);
  std::vector<T> t(static_cast<size_t>(C)), s(t.size()), q(static_cast<size_t>(D)),
      Gp(q.size()), Gq(q.size());
  double* gp_row = partial;      // Σ_b dŷ_b G_b q_b            → last row of dW^PV
  double* gkq = partial + D;     // Σ_b dŷ_b (G_b p) e_q,bᵀ     → dW^KQ
  std::fill(partial, partial + D + D * D, 0.0);
  for (index_t b = b0; b < b1; ++b) {
    const T* e = E + b * D * C;
    const recipe::Mat<T> Eb = recipe::rows_of(e, int(C));
    for (index_t r = 0; r < D; ++r) q[r] = recipe::query_entry(Wk, Eb, int(D), int(N), int(r));
    // t_j = p·e_j, s_j = q·e_j: rows of E combined into t and s.
    for (index_t r = 0; r < D; ++r) two_axpy(e + r * C, p[r], q[r], C, t.data(), s.data(), r == 0);
    for (index_t r = 0; r < D; ++r) {
      T ap, aq;
      two_dots(e + r * C, t.data(), s.data(), C, ap, aq);
      Gp[r] = ap * inv_n;
      Gq[r] = aq * inv_n;
    }
    const T g = d_y[b];
    for (index_t r = 0; r < D; ++r) {
      gp_row[r] += double(g) * double(Gq[r]);
      for (index_t c = 0; c < D; ++c) gkq[r * D + c] += double(g) * double(Gp[r]) * double(e[c * C + N]);
    }
    if (!d_E) continue;
    T* out = d_E + b * D * C;
    const T gn = g * inv_n;
    for (index_t r = 0; r < D; ++r) {
      T* o = out + r * C;
      combine(gn * p[r], s.data(), gn * q[r], t.data(), C, o, poison);
      // The query column through q = W^KQ e_q, and ŷ's query-label slot [d, N].
      o[N] += g * recipe::through_query_entry(Wk, Gp.data(), int(D), int(r));
      if (r == D - 1) o[N] += g;
      poison += simd::broadcast(detail::poison(o[N]));
    }
  }
  return detail::poison_clear(simd::hsum(poison));
}

}  // namespace

template <class T>
LsaPredictVjpKernels<T> lsa_predict_vjp_kernels() {
  return {&predict_vjp_range<T>};
}
template LsaPredictVjpKernels<float> lsa_predict_vjp_kernels<float>();
template LsaPredictVjpKernels<double> lsa_predict_vjp_kernels<double>();

}  // namespace lsa_native::cpu::LSA_ISA_NS
