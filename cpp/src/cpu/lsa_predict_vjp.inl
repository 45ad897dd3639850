// VJP of the LSA prediction ŷ = [f_LSA(E)]_{d+1,N+1} [ZFB (3.6)] for an upstream dŷ [B] (lsa.hpp),
// over a range of prompts; included by one translation unit per instruction set with LSA_ISA_NS
// defined (lsa_kernels_{base,avx2,avx512}.cpp), after lsa_kernels.inl, whose one-pass prediction
// scratch it uses: per prompt one read of the tokens for t_j = p·e_j, s_j = q·e_j (q = W^KQ e_q),
// G q = (1/N) Σ_j s_j e_j and G p = (1/N) Σ_j t_j e_j (PredictionScratch::pass), then the dE write:
//   ∂ŷ/∂p = G q (last row of dW^PV),  ∂ŷ/∂W^KQ = (G p) e_qᵀ,
//   ∂ŷ/∂e_j = (1/N)(s_j p + t_j q) for every column j, + W^KQᵀ G p on the query column, + 1 on the
//   query-label slot [d, N].
// Token sums in T with SIMD partial sums (simd.hpp); batch sums of the parameter gradients in
// double (PredictionGradSums, the loss gradient's), reduced in chunk order by the driver
// (lsa_cpu.cpp). The per-entry formulas are those of common/lsa_recipe.hpp (the CUDA kernel's):
// the query column's W^KQᵀ G p by the recipe itself, the dE columns by `combine_tokens`, the
// vector form of prediction_input_grad_entry [SPEC 3.2]. Without dE at small d the prompts-in-lanes
// path (lsa_kernels.inl's backward_pass) forms G in registers first (Gram-first at d + 1 <=
// kGramMaxRows) and rounds in that order instead, within the same tested bounds.
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

// out[j] = α s_j + β t_j over the prompt's `cols` tokens, from t, s in the scratch's chunk order
// (PredictionScratch: chunk c at c·L, the last, overlapping chunk's masked lanes 0); adds x − x of
// every stored value to `poison`. The overlapping last chunk is stored first: the whole chunks
// after it overwrite its masked lanes with their tokens' values.
template <class T>
inline void combine_tokens(const PredictionScratch<T>& w, T alpha, T beta, T* out,
                           simd::Vec<T>& poison) {
  constexpr index_t L = simd::kLanes<T>;
  const PromptChunks<T>& v = w.view;
  const simd::Vec<T> va = simd::broadcast(alpha), vb = simd::broadcast(beta);
  auto chunk = [&](index_t c) { return va * simd::load(w.s + c * L) + vb * simd::load(w.t + c * L); };
  if (w.cols < L) {  // staged prompt: tokens in lanes 0..cols−1 of chunk 0
    const simd::Vec<T> x = chunk(0);
    for (index_t j = 0; j < w.cols; ++j) out[j] = x[j];
    poison += x - x;
    return;
  }
  if (v.tail) {
    const simd::Vec<T> x = chunk(v.n_full);
    simd::store(out + v.tail_off, x);
    poison += x - x;
  }
  for (index_t c = 0; c < v.n_full; ++c) {
    const simd::Vec<T> x = chunk(c);
    simd::store(out + c * L, x);
    poison += x - x;
  }
}

// At small d (prompts_in_lanes): the same with the prompts in lanes. The dE values overwrite the
// group's X (no longer read after the pass), then go back to the prompts' layout (unstage).
template <class T>
bool predict_vjp_lanes(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, const T* d_y,
                       T* d_E, index_t b0, index_t b1, double* partial) {
  LanePrompts<T> w(sh.dim, sh.context, W_pv, W_kq);
  LaneGradSums<T> sums(w.rows);
  const index_t rows = w.rows, cols = w.cols, N = sh.context;
  const T inv_n = T(1) / T(N);
  const double scale = recipe::residual_scale<T>(1.0, N);
  Vec<T> poison = simd::zero<T>();
  simd::VecBuffer<T> Gp(rows);
  for_each_lane_group(w, E, b0, b1, [&](index_t b, index_t count) {
    if (d_E) w.template pass<true>();  // t and s for dE
    else w.backward_pass();
    const Vec<T> g = w.gather(d_y, b, count);
    Vec<double> gd[kDoubleVecs<T>];
    lanes_to_double<T>(g, count, gd);
    sums.add(gd, scale, w, false);
    if (!d_E) return;
    const Vec<T> gn = g * inv_n;
    for (index_t r = 0; r < rows; ++r) Gp[r] = w.g_k[r] * inv_n;
    for (index_t r = 0; r < rows; ++r) {
      const Vec<T> alpha = gn * w.p[r], beta = gn * w.q[r];
      Vec<T>* o = w.X + r * cols;
      for (index_t j = 0; j < cols; ++j) o[j] = alpha * w.s[j] + beta * w.t[j];
      // The query column through q = W^KQ e_q (recipe::through_query_entry), and ŷ's label slot.
      Vec<T> through = simd::zero<T>();
      for (index_t k = 0; k < rows; ++k) through += simd::broadcast(w.W[k * rows + r]) * Gp[k];
      o[N] += g * through;
      if (r == rows - 1) o[N] += g;
    }
    w.unstage(d_E, b, count, poison);
  });
  sums.write(partial, false);
  return detail::poison_clear(hsum(poison));
}

template <class T>
bool predict_vjp_range(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, const T* d_y,
                       T* d_E, index_t b0, index_t b1, double* partial) {
  if (prompts_in_lanes(sh.dim, sh.context, d_E ? kLanesMaxTokensInputGrad : kLanesMaxTokensBackward))
    return predict_vjp_lanes(sh, E, W_pv, W_kq, d_y, d_E, b0, b1, partial);
  const index_t D = sh.dim + 1, C = sh.context + 1, N = sh.context, values = D * C;
  const recipe::Mat<T> Wk = recipe::rows_of(W_kq, int(D));
  simd::Vec<T> poison = simd::zero<T>();  // of d_E (the parameter gradients are checked reduced)
  const T* p = W_pv + (D - 1) * D;
  const T inv_n = T(1) / T(N);
  PredictionScratch<T> w(sh.dim, N, W_kq);
  const AheadPrompts<T> next(E, values, b1);
  PredictionGradSums sums(D);  // Σ_b dŷ_b G_b q_b → last row of dW^PV, Σ_b dŷ_b (G_b p) e_q,bᵀ → dW^KQ
  simd::UnitVector<T> Gp(static_cast<size_t>(D));
  for (index_t b = b0; b < b1; ++b) {
    // one read of the prompt: t, s, g_p = N G q, g_k = N G p
    w.template pass<true>(E + b * values, p, next.at(b), next.bytes(b), d_E != nullptr);
    const T g = d_y[b];
    sums.add(recipe::residual_scale<T>(double(g), N), w);
    if (!d_E) continue;
    for (index_t r = 0; r < D; ++r) Gp[r] = w.g_k(r) * inv_n;
    T* out = d_E + b * values;
    const T gn = g * inv_n;
    for (index_t r = 0; r < D; ++r) {
      T* o = out + r * C;
      combine_tokens(w, gn * p[r], gn * w.q[r], o, poison);
      // The query column through q = W^KQ e_q, and ŷ's query-label slot [d, N].
      o[N] += g * recipe::through_query_entry(Wk, Gp.data(), int(D), int(r));
      if (r == D - 1) o[N] += g;
      poison += simd::broadcast(detail::poison(o[N]));
    }
  }
  sums.write(partial);
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
