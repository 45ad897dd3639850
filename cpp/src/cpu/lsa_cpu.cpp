// CPU driver of the batched LSA kernels: ISA dispatch, chunking, threads, ordered reductions.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/finite.hpp"
#include "common/parallel.hpp"
#include "cpu/isa.hpp"
#include "cpu/lsa_cpu.hpp"
#include "cpu/lsa_kernels.hpp"
#include "cpu/lsa_predict_vjp.hpp"
#include "lsa_native/device.hpp"

namespace lsa_native {
namespace cpu {

namespace {

template <class T>
const LsaKernels<T>& kernels() {
  return LSA_NATIVE_SELECT_KERNELS(LsaKernels<T>, lsa_kernels<T>());
}

template <class T>
const LsaPredictVjpKernels<T>& predict_vjp_kernels() {
  return LSA_NATIVE_SELECT_KERNELS(LsaPredictVjpKernels<T>, lsa_predict_vjp_kernels<T>());
}

inline index_t prompt_values(const LsaShape& sh) { return sh.batch * (sh.dim + 1) * (sh.context + 1); }
inline index_t param_values(const LsaShape& sh) { return (sh.dim + 1) * (sh.dim + 1); }

// The (d+1)² values of dW_pv and dW_kq, checked after they are written (small: no flag needed).
template <class T>
void check_parameter_gradients(const T* d_W_pv, const T* d_W_kq, index_t n2,
                               std::initializer_list<detail::NamedInput<T>> inputs) {
  detail::check_output<T>(detail::all_finite(d_W_pv, n2), "dW_pv", inputs);
  detail::check_output<T>(detail::all_finite(d_W_kq, n2), "dW_kq", inputs);
}

}  // namespace

template <class T>
void lsa_predict(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, T* y_hat) {
  const auto& k = kernels<T>();
  detail::ChunkFlags flags(sh.batch);
  detail::for_each_chunk(sh.batch, [&](index_t c, index_t b0, index_t b1) {
    flags.ok[c] = k.predict(sh, E, W_pv, W_kq, y_hat, b0, b1);
  });
  const index_t nE = prompt_values(sh), n2 = param_values(sh);
  detail::check_output<T>(flags.all(), "y_hat", {{"E", E, nE}, {"W_pv", W_pv, n2}, {"W_kq", W_kq, n2}});
}

template <class T>
double lsa_loss_and_grad(const LsaShape& sh, const T* E, const T* y_q, const T* W_pv,
                         const T* W_kq, T* d_W_pv, T* d_W_kq, T* y_hat) {
  const auto& k = kernels<T>();
  const std::vector<double> total = detail::chunk_sums(
      sh.batch, loss_grad_partial_size(sh.dim), [&](index_t, index_t b0, index_t b1, double* partial) {
        k.loss_grad(sh, E, y_q, W_pv, W_kq, y_hat, b0, b1, partial);
      });
  const double loss = finish_loss_and_grad(total.data(), sh.dim, sh.batch, d_W_pv, d_W_kq);
  // ŷ enters the loss, so a finite loss means finite predictions; the gradients are (d+1)² values.
  const index_t nE = prompt_values(sh), n2 = param_values(sh);
  const std::initializer_list<detail::NamedInput<T>> inputs = {
      {"E", E, nE}, {"y_q", y_q, sh.batch}, {"W_pv", W_pv, n2}, {"W_kq", W_kq, n2}};
  detail::check_output<T>(std::isfinite(loss), "loss", inputs);
  check_parameter_gradients(d_W_pv, d_W_kq, n2, inputs);
  return loss;
}

template <class T>
void lsa_forward(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, T* F) {
  const auto& k = kernels<T>();
  detail::ChunkFlags flags(sh.batch);
  detail::for_each_chunk(sh.batch, [&](index_t c, index_t b0, index_t b1) {
    flags.ok[c] = k.forward(sh, E, W_pv, W_kq, F, b0, b1);
  });
  const index_t nE = prompt_values(sh), n2 = param_values(sh);
  detail::check_output<T>(flags.all(), "F", {{"E", E, nE}, {"W_pv", W_pv, n2}, {"W_kq", W_kq, n2}});
}

template <class T>
void lsa_vjp(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, const T* d_F,
             T* d_W_pv, T* d_W_kq, T* d_E) {
  const auto& k = kernels<T>();
  const index_t n2 = param_values(sh);
  detail::ChunkFlags flags(sh.batch);
  const std::vector<double> total = detail::chunk_sums(
      sh.batch, vjp_partial_size(sh.dim), [&](index_t c, index_t b0, index_t b1, double* partial) {
        flags.ok[c] = k.vjp(sh, E, W_pv, W_kq, d_F, d_E, b0, b1, partial);
      });
  for (index_t i = 0; i < n2; ++i) {
    d_W_pv[i] = T(total[i]);
    d_W_kq[i] = T(total[n2 + i]);
  }
  const index_t nE = prompt_values(sh);
  const std::initializer_list<detail::NamedInput<T>> inputs = {
      {"E", E, nE}, {"W_pv", W_pv, n2}, {"W_kq", W_kq, n2}, {"d_F", d_F, nE}};
  check_parameter_gradients(d_W_pv, d_W_kq, n2, inputs);
  detail::check_output<T>(flags.all(), "dE", inputs);
}

template <class T>
void lsa_predict_vjp(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, const T* d_y,
                     T* d_W_pv, T* d_W_kq, T* d_E) {
  const auto& k = predict_vjp_kernels<T>();
  detail::ChunkFlags flags(sh.batch);
  const std::vector<double> total = detail::chunk_sums(
      sh.batch, predict_vjp_partial_size(sh.dim), [&](index_t c, index_t b0, index_t b1, double* partial) {
        flags.ok[c] = k.range(sh, E, W_pv, W_kq, d_y, d_E, b0, b1, partial);
      });
  write_prediction_gradients(sh.dim, total.data(), total.data() + sh.dim + 1, 1.0, d_W_pv, d_W_kq);
  const index_t nE = prompt_values(sh), n2 = param_values(sh);
  const std::initializer_list<detail::NamedInput<T>> inputs = {
      {"E", E, nE}, {"W_pv", W_pv, n2}, {"W_kq", W_kq, n2}, {"d_y", d_y, sh.batch}};
  check_parameter_gradients(d_W_pv, d_W_kq, n2, inputs);
  detail::check_output<T>(flags.all(), "dE", inputs);
}

LSA_NATIVE_LSA_API(LSA_NATIVE_INSTANTIATE_BACKEND, float)
LSA_NATIVE_LSA_API(LSA_NATIVE_INSTANTIATE_BACKEND, double)

}  // namespace cpu

}  // namespace lsa_native
