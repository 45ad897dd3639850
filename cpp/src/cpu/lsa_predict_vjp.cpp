// VJP of the LSA prediction ŷ = [f_LSA(E)]_{d+1,N+1} [ZFB (3.6)] for an upstream dŷ [B] (declared
// at the end of lsa.hpp). Per prompt one pass over the tokens for t_j = p·e_j and s_j = q·e_j
// (q = W^KQ e_q), one for G q = (1/N) Σ_j s_j e_j and G p = (1/N) Σ_j t_j e_j, and the dE write:
//   ∂ŷ/∂p = G q (last row of dW^PV),  ∂ŷ/∂W^KQ = (G p) e_qᵀ,
//   ∂ŷ/∂e_j = (1/N)(s_j p + t_j q) for every column j, + W^KQᵀ G p on the query column, + 1 on the
//   query-label slot [d, N].
// Token sums in T (SIMD partial sums); batch sums of the parameter gradients in double, in chunk order.
#include <algorithm>
#include <vector>

#include "cpu/lsa_cpu.hpp"

namespace lsa_native::cpu {
namespace {

template <class T>
void predict_vjp_prompts(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, const T* d_y,
                         T* d_E, index_t b0, index_t b1, double* partial) {
  const index_t D = sh.dim + 1, C = sh.context + 1, N = sh.context;
  const T* p = W_pv + (D - 1) * D;
  const T inv_n = T(1) / T(N);
  std::vector<T> t(static_cast<size_t>(C)), s(t.size()), q(static_cast<size_t>(D)),
      Gp(q.size()), Gq(q.size());
  double* gp_row = partial;      // Σ_b dŷ_b G_b q_b            → last row of dW^PV
  double* gkq = partial + D;     // Σ_b dŷ_b (G_b p) e_q,bᵀ     → dW^KQ
  std::fill(partial, partial + D + D * D, 0.0);
  for (index_t b = b0; b < b1; ++b) {
    const T* e = E + b * D * C;
    for (index_t r = 0; r < D; ++r) {
      T acc = 0;
      for (index_t c = 0; c < D; ++c) acc += W_kq[r * D + c] * e[c * C + N];
      q[r] = acc;
    }
    std::fill(t.begin(), t.end(), T(0));
    std::fill(s.begin(), s.end(), T(0));
    for (index_t r = 0; r < D; ++r) {
      const T pr = p[r], qr = q[r];
      const T* row = e + r * C;
#pragma omp simd
      for (index_t j = 0; j < C; ++j) {
        t[j] += pr * row[j];
        s[j] += qr * row[j];
      }
    }
    for (index_t r = 0; r < D; ++r) {
      const T* row = e + r * C;
      T ap = 0, aq = 0;
#pragma omp simd reduction(+ : ap, aq)
      for (index_t j = 0; j < C; ++j) {
        ap += row[j] * t[j];
        aq += row[j] * s[j];
      }
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
      const T a = gn * p[r], c2 = gn * q[r];
      T* o = out + r * C;
#pragma omp simd
      for (index_t j = 0; j < C; ++j) o[j] = a * s[j] + c2 * t[j];
      T through_q = 0;  // (W^KQᵀ G p)_r: the query column through q = W^KQ e_q
      for (index_t k = 0; k < D; ++k) through_q += W_kq[k * D + r] * Gp[k];
      o[N] += g * through_q;
    }
    out[(D - 1) * C + N] += g;  // ŷ adds the query-label slot
  }
}

}  // namespace

template <class T>
void predict_vjp_range(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, const T* d_y,
                       T* d_E, index_t b0, index_t b1, double* partial) {
  predict_vjp_prompts(sh, E, W_pv, W_kq, d_y, d_E, b0, b1, partial);
}
template void predict_vjp_range<float>(const LsaShape&, const float*, const float*, const float*,
                                       const float*, float*, index_t, index_t, double*);
template void predict_vjp_range<double>(const LsaShape&, const double*, const double*,
                                        const double*, const double*, double*, index_t, index_t,
                                        double*);

}  // namespace lsa_native::cpu
