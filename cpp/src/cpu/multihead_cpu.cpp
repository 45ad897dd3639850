// CPU driver of the multi-head LSA kernels (multihead_kernels.inl): ISA dispatch, chunking over
// threads, batch sums reduced in chunk order (results independent of the thread count), output
// checks naming the inputs.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/finite.hpp"
#include "common/multihead_recipe.hpp"
#include "common/parallel.hpp"
#include "cpu/isa.hpp"
#include "cpu/multihead_cpu.hpp"
#include "cpu/multihead_kernels.hpp"
#include "cpu/sampling_kernels.hpp"

namespace lsa_native {
namespace cpu {

namespace {

template <class T>
const MultiHeadKernels<T>& kernels() {
  return LSA_NATIVE_SELECT_KERNELS(MultiHeadKernels<T>, multihead_kernels<T>());
}

inline index_t prompt_values(const LsaShape& sh) { return sh.batch * (sh.dim + 1) * (sh.context + 1); }
inline index_t head_values(const LsaShape& sh, index_t H) { return H * (sh.dim + 1) * (sh.dim + 1); }

template <class T>
void check_parameter_gradients(const T* d_W_pv, const T* d_W_kq, index_t n,
                               std::initializer_list<detail::NamedInput<T>> inputs) {
  detail::check_output<T>(detail::all_finite(d_W_pv, n), "dW_pv", inputs);
  detail::check_output<T>(detail::all_finite(d_W_kq, n), "dW_kq", inputs);
}

// d_W_pv [H, d+1, d+1]: zero but the last row of each head (from d_p [H, d+1]); d_W_kq from d_K.
template <class T>
void write_head_gradients(index_t d, index_t H, const double* d_p, const double* d_K, double scale,
                          T* d_W_pv, T* d_W_kq) {
  const index_t rows = d + 1, n2 = rows * rows;
  for (index_t i = 0; i < H * n2; ++i) {
    d_W_pv[i] = T(0);
    d_W_kq[i] = T(d_K[i] * scale);
  }
  for (index_t h = 0; h < H; ++h)
    for (index_t c = 0; c < rows; ++c) d_W_pv[h * n2 + d * rows + c] = T(d_p[h * rows + c] * scale);
}

// L = ½ Σ r² / B and the gradients from the batch sums [multihead_loss_grad_partial_size], checked.
template <class T>
double finish_loss_and_grad(const std::vector<double>& total, index_t d, index_t H, index_t batch,
                            T* d_W_pv, T* d_W_kq,
                            std::initializer_list<detail::NamedInput<T>> inputs) {
  const double inv_b = 1.0 / double(batch);
  const double* d_p = total.data() + 1;
  write_head_gradients(d, H, d_p, d_p + H * (d + 1), inv_b, d_W_pv, d_W_kq);
  const double loss = 0.5 * total[0] * inv_b;
  detail::check_output<T>(std::isfinite(loss), "loss", inputs);
  check_parameter_gradients(d_W_pv, d_W_kq, H * (d + 1) * (d + 1), inputs);
  return loss;
}

// Prompts generated per call of the H-head kernel in the fused tokens step (in cache).
constexpr index_t kFusedPrompts = 8;

// The per-chunk batch sums of the fused tokens step over prompts [b0, b1).
template <class T>
void fused_tokens_partial(const linear::Law<T>& P, index_t H, const T* W_pv, const T* W_kq,
                          index_t b0, index_t b1, double* acc) {
  const index_t d = P.d, N = P.N, width = multihead_loss_grad_partial_size(d, H);
  const auto& sample = LSA_NATIVE_SELECT_KERNELS(SamplingKernels<T>, sampling_kernels<T>());
  const auto& k = kernels<T>();
  std::vector<T> E(static_cast<size_t>(kFusedPrompts * (d + 1) * (N + 1))), y_q(kFusedPrompts);
  std::vector<double> part(static_cast<size_t>(width));
  std::fill(acc, acc + width, 0.0);
  for (index_t s0 = b0; s0 < b1; s0 += kFusedPrompts) {
    const index_t s1 = std::min(b1, s0 + kFusedPrompts), m = s1 - s0;
    LinearPromptOutputs<T> o;
    o.E = E.data();
    o.y_q = y_q.data();
    sample.linear_prompts(P, s0, s1, o);
    k.loss_grad(LsaShape{m, d, N}, H, E.data(), y_q.data(), W_pv, W_kq, nullptr, 0, m, part.data());
    for (index_t i = 0; i < width; ++i) acc[i] += part[i];
  }
}

// The per-chunk batch sums of the fused Wishart step over prompts [b0, b1): the sampling kernels'
// Bartlett draws visited in prompt order by multihead::heads_residual.
template <class T>
void fused_wishart_partial(const linear::Law<T>& P, index_t H, const T* W_pv, const T* W_kq,
                           index_t b0, index_t b1, double* acc) {
  const index_t d = P.d, dp = wishart::noise_dim(P);
  const index_t rows = d + 1, nw = wishart::Work<T>::size(d, dp),
                nh = multihead::HeadsWork<T>::size(H, d, dp);
  std::vector<T> work(static_cast<size_t>(nw + nh + H * rows * (rows + 1)));
  std::vector<T> lanes(static_cast<size_t>(wishart_lane_values<T>(d, dp, H)), T(0));
  std::vector<double> lane_acc(static_cast<size_t>(wishart_lane_sums<T>(d, H)), 0.0);
  T* p_t = work.data() + nw + nh;
  T* W_kq_t = p_t + H * rows;
  multihead::heads_inner(H, rows, W_pv, W_kq, p_t, W_kq_t);
  WishartHeads<T> ctx{&P, H, p_t, W_kq_t, wishart::Work<T>::at(work.data(), d, dp),
                      multihead::HeadsWork<T>::at(work.data() + nw, H, d, dp), acc, lanes.data(), 0,
                      lane_acc.data()};
  std::fill(acc, acc + multihead_loss_grad_partial_size(d, H), 0.0);
  LSA_NATIVE_SELECT_KERNELS(SamplingKernels<T>, sampling_kernels<T>())
      .wishart_prompts(P, b0, b1, WishartVisitor<T>{kernels<T>().wishart_prompt, &ctx});
  kernels<T>().wishart_flush(&ctx);
}

}  // namespace

template <class T>
double linear_prompts_multihead_loss_and_grad(const linear::Law<T>& P, index_t batch,
                                              FusedMethod method, index_t H, const T* W_pv,
                                              const T* W_kq, T* d_W_pv, T* d_W_kq) {
  const std::vector<double> total = detail::chunk_sums(
      batch, multihead_loss_grad_partial_size(P.d, H),
      [&](index_t, index_t b0, index_t b1, double* partial) {
        if (method == FusedMethod::wishart)
          fused_wishart_partial(P, H, W_pv, W_kq, b0, b1, partial);
        else
          fused_tokens_partial(P, H, W_pv, W_kq, b0, b1, partial);
      });
  const index_t nW = head_values(LsaShape{batch, P.d, P.N}, H);
  return finish_loss_and_grad(total, P.d, H, batch, d_W_pv, d_W_kq,
                              {{"W_pv", W_pv, nW}, {"W_kq", W_kq, nW}});
}

template <class T>
void multihead_lsa_predict(const LsaShape& sh, index_t H, const T* E, const T* W_pv,
                           const T* W_kq, T* y_hat) {
  const auto& k = kernels<T>();
  detail::ChunkFlags flags(sh.batch);
  detail::for_each_chunk(sh.batch, [&](index_t c, index_t b0, index_t b1) {
    flags.ok[c] = k.predict(sh, H, E, W_pv, W_kq, y_hat, b0, b1);
  });
  const index_t nE = prompt_values(sh), nW = head_values(sh, H);
  detail::check_output<T>(flags.all(), "y_hat", {{"E", E, nE}, {"W_pv", W_pv, nW}, {"W_kq", W_kq, nW}});
}

template <class T>
double multihead_lsa_loss_and_grad(const LsaShape& sh, index_t H, const T* E, const T* y_q,
                                   const T* W_pv, const T* W_kq, T* d_W_pv, T* d_W_kq, T* y_hat) {
  const auto& k = kernels<T>();
  const std::vector<double> total = detail::chunk_sums(
      sh.batch, multihead_loss_grad_partial_size(sh.dim, H),
      [&](index_t, index_t b0, index_t b1, double* partial) {
        k.loss_grad(sh, H, E, y_q, W_pv, W_kq, y_hat, b0, b1, partial);
      });
  const index_t nE = prompt_values(sh), nW = head_values(sh, H);
  return finish_loss_and_grad(total, sh.dim, H, sh.batch, d_W_pv, d_W_kq,
                              {{"E", E, nE}, {"y_q", y_q, sh.batch}, {"W_pv", W_pv, nW}, {"W_kq", W_kq, nW}});
}

template <class T>
void multihead_lsa_predict_vjp(const LsaShape& sh, index_t H, const T* E, const T* W_pv,
                               const T* W_kq, const T* d_y, T* d_W_pv, T* d_W_kq, T* d_E) {
  const auto& k = kernels<T>();
  detail::ChunkFlags flags(sh.batch);
  const std::vector<double> total = detail::chunk_sums(
      sh.batch, multihead_predict_vjp_partial_size(sh.dim, H),
      [&](index_t c, index_t b0, index_t b1, double* partial) {
        flags.ok[c] = k.predict_vjp(sh, H, E, W_pv, W_kq, d_y, d_E, b0, b1, partial);
      });
  write_head_gradients(sh.dim, H, total.data(), total.data() + H * (sh.dim + 1), 1.0, d_W_pv, d_W_kq);
  const index_t nE = prompt_values(sh), nW = head_values(sh, H);
  const std::initializer_list<detail::NamedInput<T>> inputs = {
      {"E", E, nE}, {"W_pv", W_pv, nW}, {"W_kq", W_kq, nW}, {"d_y", d_y, sh.batch}};
  check_parameter_gradients(d_W_pv, d_W_kq, nW, inputs);
  detail::check_output<T>(flags.all(), "dE", inputs);
}

template <class T>
void multihead_lsa_forward(const LsaShape& sh, index_t H, const T* E, const T* W_pv,
                           const T* W_kq, T* F) {
  const auto& k = kernels<T>();
  detail::ChunkFlags flags(sh.batch);
  detail::for_each_chunk(sh.batch, [&](index_t c, index_t b0, index_t b1) {
    flags.ok[c] = k.forward(sh, H, E, W_pv, W_kq, F, b0, b1);
  });
  const index_t nE = prompt_values(sh), nW = head_values(sh, H);
  detail::check_output<T>(flags.all(), "F", {{"E", E, nE}, {"W_pv", W_pv, nW}, {"W_kq", W_kq, nW}});
}

template <class T>
void multihead_lsa_vjp(const LsaShape& sh, index_t H, const T* E, const T* W_pv, const T* W_kq,
                       const T* d_F, T* d_W_pv, T* d_W_kq, T* d_E) {
  const auto& k = kernels<T>();
  const index_t nW = head_values(sh, H);
  detail::ChunkFlags flags(sh.batch);
  const std::vector<double> total = detail::chunk_sums(
      sh.batch, multihead_vjp_partial_size(sh.dim, H),
      [&](index_t c, index_t b0, index_t b1, double* partial) {
        flags.ok[c] = k.vjp(sh, H, E, W_pv, W_kq, d_F, d_E, b0, b1, partial);
      });
  for (index_t i = 0; i < nW; ++i) {
    d_W_pv[i] = T(total[i]);
    d_W_kq[i] = T(total[nW + i]);
  }
  const index_t nE = prompt_values(sh);
  const std::initializer_list<detail::NamedInput<T>> inputs = {
      {"E", E, nE}, {"W_pv", W_pv, nW}, {"W_kq", W_kq, nW}, {"d_F", d_F, nE}};
  check_parameter_gradients(d_W_pv, d_W_kq, nW, inputs);
  detail::check_output<T>(flags.all(), "dE", inputs);
}

template <class T>
void multihead_merge_kq(index_t heads, index_t rank, index_t rows, const T* W_k, const T* W_q,
                        T* W_kq) {
  for (index_t e = 0; e < heads * rows * rows; ++e)
    W_kq[e] = multihead::merged_kq_entry(W_k, W_q, rank, rows, e);
}

template <class T>
void multihead_chain_kq(index_t heads, index_t rank, index_t rows, const T* W_k, const T* W_q,
                        const T* d_W_kq, T* d_W_k, T* d_W_q) {
  for (index_t e = 0; e < heads * rank * rows; ++e) {
    d_W_k[e] = multihead::key_grad_entry(W_q, d_W_kq, rank, rows, e);
    d_W_q[e] = multihead::query_grad_entry(W_k, d_W_kq, rank, rows, e);
  }
}

LSA_NATIVE_MULTIHEAD_API(LSA_NATIVE_INSTANTIATE_BACKEND, float)
LSA_NATIVE_MULTIHEAD_API(LSA_NATIVE_INSTANTIATE_BACKEND, double)
template double linear_prompts_multihead_loss_and_grad<float>(const linear::Law<float>&, index_t,
                                                              FusedMethod, index_t, const float*,
                                                              const float*, float*, float*);
template double linear_prompts_multihead_loss_and_grad<double>(const linear::Law<double>&, index_t,
                                                               FusedMethod, index_t, const double*,
                                                               const double*, double*, double*);

}  // namespace cpu
}  // namespace lsa_native
