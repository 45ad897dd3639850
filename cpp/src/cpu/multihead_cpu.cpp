// CPU driver of the multi-head LSA kernels (multihead_kernels.inl): ISA dispatch, chunking over
// threads, batch sums reduced in chunk order (results independent of the thread count), output
// checks naming the inputs.
#include <cmath>
#include <vector>

#include "common/finite.hpp"
#include "common/parallel.hpp"
#include "cpu/isa.hpp"
#include "cpu/multihead_cpu.hpp"
#include "cpu/multihead_kernels.hpp"

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

}  // namespace

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
  const double inv_b = 1.0 / double(sh.batch);
  const double* d_p = total.data() + 1;
  write_head_gradients(sh.dim, H, d_p, d_p + H * (sh.dim + 1), inv_b, d_W_pv, d_W_kq);
  const double loss = 0.5 * total[0] * inv_b;
  const index_t nE = prompt_values(sh), nW = head_values(sh, H);
  const std::initializer_list<detail::NamedInput<T>> inputs = {
      {"E", E, nE}, {"y_q", y_q, sh.batch}, {"W_pv", W_pv, nW}, {"W_kq", W_kq, nW}};
  detail::check_output<T>(std::isfinite(loss), "loss", inputs);
  check_parameter_gradients(d_W_pv, d_W_kq, nW, inputs);
  return loss;
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

LSA_NATIVE_MULTIHEAD_API(LSA_NATIVE_INSTANTIATE_BACKEND, float)
LSA_NATIVE_MULTIHEAD_API(LSA_NATIVE_INSTANTIATE_BACKEND, double)

}  // namespace cpu
}  // namespace lsa_native
