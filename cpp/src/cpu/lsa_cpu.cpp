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

bool use_avx2_kernels() {
#if defined(LSA_NATIVE_X86_DISPATCH)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

namespace {

template <class T>
const LsaKernels<T>& kernels() {
  return LSA_NATIVE_SELECT_KERNELS(LsaKernels<T>, lsa_kernels<T>());
}

template <class T>
const LsaPredictVjpKernels<T>& predict_vjp_kernels() {
  return LSA_NATIVE_SELECT_KERNELS(LsaPredictVjpKernels<T>, lsa_predict_vjp_kernels<T>());
}

// One finiteness flag per chunk (written by the chunk's thread), all set after the call.
struct ChunkFlags {
  std::vector<char> ok;
  explicit ChunkFlags(index_t batch) : ok(static_cast<size_t>(detail::chunk_count(batch)), 1) {}
  bool all() const { return std::all_of(ok.begin(), ok.end(), [](char f) { return f != 0; }); }
};

inline index_t prompt_values(const LsaShape& sh) { return sh.batch * (sh.dim + 1) * (sh.context + 1); }
inline index_t param_values(const LsaShape& sh) { return (sh.dim + 1) * (sh.dim + 1); }

// Gradients of the prediction's parameters from batch sums d_p [d+1] (∂/∂p) and d_K [(d+1)²]
// (∂/∂W^KQ), times `scale`: d_W_pv is zero but its last row (p is the last row of W^PV).
template <class T>
void write_prediction_gradients(index_t d, const double* d_p, const double* d_K, double scale,
                                T* d_W_pv, T* d_W_kq) {
  const index_t rows = d + 1;
  for (index_t i = 0; i < rows * rows; ++i) d_W_pv[i] = T(0);
  for (index_t c = 0; c < rows; ++c) d_W_pv[d * rows + c] = T(d_p[c] * scale);
  for (index_t i = 0; i < rows * rows; ++i) d_W_kq[i] = T(d_K[i] * scale);
}

}  // namespace

template <class T>
void lsa_predict(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, T* y_hat) {
  const auto& k = kernels<T>();
  ChunkFlags flags(sh.batch);
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
  const index_t d = sh.dim, rows = d + 1;
  const index_t width = loss_grad_partial_size(d);
  std::vector<double> partials(static_cast<size_t>(detail::chunk_count(sh.batch) * width));
  detail::for_each_chunk(sh.batch, [&](index_t c, index_t b0, index_t b1) {
    k.loss_grad(sh, E, y_q, W_pv, W_kq, y_hat, b0, b1, partials.data() + c * width);
  });
  const std::vector<double> total = detail::reduce_partials(partials, width);
  const double inv_b = 1.0 / double(sh.batch);
  write_prediction_gradients(d, total.data() + 1, total.data() + 1 + rows, inv_b, d_W_pv, d_W_kq);
  const double loss = 0.5 * total[0] * inv_b;
  // ŷ enters the loss, so a finite loss means finite predictions; the gradients are (d+1)² values.
  const index_t nE = prompt_values(sh), n2 = param_values(sh);
  const std::initializer_list<detail::NamedInput<T>> inputs = {
      {"E", E, nE}, {"y_q", y_q, sh.batch}, {"W_pv", W_pv, n2}, {"W_kq", W_kq, n2}};
  detail::check_output<T>(std::isfinite(loss), "loss", inputs);
  detail::check_output<T>(detail::all_finite(d_W_pv, n2), "dW_pv", inputs);
  detail::check_output<T>(detail::all_finite(d_W_kq, n2), "dW_kq", inputs);
  return loss;
}

template <class T>
void lsa_forward(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, T* F) {
  const auto& k = kernels<T>();
  ChunkFlags flags(sh.batch);
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
  const index_t n2 = (sh.dim + 1) * (sh.dim + 1);
  const index_t width = vjp_partial_size(sh.dim);
  std::vector<double> partials(static_cast<size_t>(detail::chunk_count(sh.batch) * width));
  ChunkFlags flags(sh.batch);
  detail::for_each_chunk(sh.batch, [&](index_t c, index_t b0, index_t b1) {
    flags.ok[c] = k.vjp(sh, E, W_pv, W_kq, d_F, d_E, b0, b1, partials.data() + c * width);
  });
  const std::vector<double> total = detail::reduce_partials(partials, width);
  for (index_t i = 0; i < n2; ++i) {
    d_W_pv[i] = T(total[i]);
    d_W_kq[i] = T(total[n2 + i]);
  }
  const index_t nE = prompt_values(sh);
  const std::initializer_list<detail::NamedInput<T>> inputs = {
      {"E", E, nE}, {"W_pv", W_pv, n2}, {"W_kq", W_kq, n2}, {"d_F", d_F, nE}};
  detail::check_output<T>(detail::all_finite(d_W_pv, n2), "dW_pv", inputs);
  detail::check_output<T>(detail::all_finite(d_W_kq, n2), "dW_kq", inputs);
  detail::check_output<T>(flags.all(), "dE", inputs);
}

template <class T>
void lsa_predict_vjp(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, const T* d_y,
                     T* d_W_pv, T* d_W_kq, T* d_E) {
  const auto& k = predict_vjp_kernels<T>();
  const index_t width = predict_vjp_partial_size(sh.dim);
  std::vector<double> partials(static_cast<size_t>(detail::chunk_count(sh.batch) * width));
  ChunkFlags flags(sh.batch);
  detail::for_each_chunk(sh.batch, [&](index_t c, index_t b0, index_t b1) {
    flags.ok[c] = k.range(sh, E, W_pv, W_kq, d_y, d_E, b0, b1, partials.data() + c * width);
  });
  const std::vector<double> total = detail::reduce_partials(partials, width);
  write_prediction_gradients(sh.dim, total.data(), total.data() + sh.dim + 1, 1.0, d_W_pv, d_W_kq);
  const index_t nE = prompt_values(sh), n2 = param_values(sh);
  const std::initializer_list<detail::NamedInput<T>> inputs = {
      {"E", E, nE}, {"W_pv", W_pv, n2}, {"W_kq", W_kq, n2}, {"d_y", d_y, sh.batch}};
  detail::check_output<T>(detail::all_finite(d_W_pv, n2), "dW_pv", inputs);
  detail::check_output<T>(detail::all_finite(d_W_kq, n2), "dW_kq", inputs);
  detail::check_output<T>(flags.all(), "dE", inputs);
}

LSA_NATIVE_LSA_API(LSA_NATIVE_INSTANTIATE_BACKEND, float)
LSA_NATIVE_LSA_API(LSA_NATIVE_INSTANTIATE_BACKEND, double)

}  // namespace cpu

const char* cpu_kernel_isa() { return cpu::use_avx2_kernels() ? "avx2-fma" : "baseline"; }

}  // namespace lsa_native
