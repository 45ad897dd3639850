// CPU backend of kernel attention [CCS (3), (5); the loss ½·MSE, see common/ka_recipe.hpp]: ISA dispatch, chunks of prompts over threads,
// parameter-gradient partials reduced in chunk order (thread-count independent). Arguments are
// validated by kernel_attention_dispatch.cpp.
#include <cmath>
#include <vector>

#include "common/parallel.hpp"
#include "cpu/isa.hpp"
#include "cpu/kernel_attention_cpu.hpp"
#include "cpu/kernel_attention_kernels.hpp"

namespace lsa_native::cpu {
namespace {

template <class T>
const KaKernels<T>& kernels() {
  return LSA_NATIVE_SELECT_KERNELS(KaKernels<T>, ka_kernels<T>());
}

// Chunked parameter-gradient partials reduced in chunk order into d_V, d_B, d_C; returns the
// reduced slot 0 (the loss sum for loss_and_grad). `outputs_ok` is false when a chunk flagged a
// non-finite d_Z0 or prediction; d_V, d_B, d_C (small) are tested as they are written.
struct Reduced {
  double slot0;
  bool outputs_ok;
  const char* bad_gradient;  // "d_V", "d_B", "d_C" or null
};

template <class T, class Chunk>
Reduced reduce_gradients(const KernelAttentionShape& sh, T* d_V, T* d_B, T* d_C, Chunk chunk) {
  const index_t d = sh.dim, width = ka_partial_size(sh);
  const index_t nV = sh.layers * sh.heads * (d + 1) * (d + 1), nB = sh.layers * sh.heads * d * d;
  detail::ChunkFlags flags(sh.batch);
  const std::vector<double> total =
      detail::chunk_sums(sh.batch, width, [&](index_t c, index_t b0, index_t b1, double* partial) {
        flags.ok[c] = chunk(b0, b1, partial);
      });
  T poison_V = T(0), poison_B = T(0), poison_C = T(0);
  for (index_t i = 0; i < nV; ++i) poison_V += detail::poison(d_V[i] = T(total[1 + i]));
  for (index_t i = 0; i < nB; ++i) {
    poison_B += detail::poison(d_B[i] = T(total[1 + nV + i]));
    poison_C += detail::poison(d_C[i] = T(total[1 + nV + nB + i]));
  }
  const char* bad = !detail::poison_clear(poison_V)   ? "d_V"
                    : !detail::poison_clear(poison_B) ? "d_B"
                    : !detail::poison_clear(poison_C) ? "d_C"
                                                      : nullptr;
  return {total[0], flags.all(), bad};
}

}  // namespace

// Each entry point raises Error (via ka_check_output) when an output it wrote is non-finite: the
// kernels flag that while writing, so the check costs no second pass over large outputs.
template <class T>
void kernel_attention_forward(const KernelAttentionShape& sh, const T* Z0, const T* V, const T* Bq,
                              const T* Ck, const Activation* acts, T* Z_out, T* predictions,
                              T* context, PredictionOutput prediction_output) {
  const auto& k = kernels<T>();
  detail::ChunkFlags flags(sh.batch);
  detail::for_each_chunk(sh.batch, [&](index_t c, index_t b0, index_t b1) {
    flags.ok[c] = k.forward(sh, Z0, V, Bq, Ck, acts, Z_out, predictions, context, prediction_output,
                            b0, b1);
  });
  ka_check_output(flags.all(), Z_out ? "Z_L" : "predictions", sh, Z0, V, Bq, Ck);
}

template <class T>
void kernel_attention_vjp(const KernelAttentionShape& sh, const T* Z0, const T* V, const T* Bq,
                          const T* Ck, const Activation* acts, const T* d_Z_out, T* d_V, T* d_B,
                          T* d_C, T* d_Z0, const T* context) {
  const auto& k = kernels<T>();
  const Reduced r = reduce_gradients(sh, d_V, d_B, d_C, [&](index_t b0, index_t b1, double* partial) {
    return k.vjp(sh, Z0, V, Bq, Ck, acts, d_Z_out, d_Z0, context, b0, b1, partial);
  });
  const index_t nZ = sh.batch * (sh.dim + 1) * (sh.context + 1);
  ka_check_output(r.bad_gradient == nullptr, r.bad_gradient, sh, Z0, V, Bq, Ck, "d_Z_out", d_Z_out, nZ);
  ka_check_output(r.outputs_ok, "d_Z0", sh, Z0, V, Bq, Ck, "d_Z_out", d_Z_out, nZ);
}

template <class T>
double kernel_attention_loss_and_grad(const KernelAttentionShape& sh, const T* Z0, const T* y_q,
                                      const T* V, const T* Bq, const T* Ck, const Activation* acts,
                                      T* d_V, T* d_B, T* d_C, T* d_Z0, T* predictions) {
  const auto& k = kernels<T>();
  const Reduced r = reduce_gradients(sh, d_V, d_B, d_C, [&](index_t b0, index_t b1, double* partial) {
    return k.loss_grad(sh, Z0, y_q, recipe::QuerySeed::labels, V, Bq, Ck, acts, d_Z0, predictions,
                       b0, b1, partial);
  });
  const double loss = recipe::loss_value(r.slot0, sh.batch);
  ka_check_output(std::isfinite(loss), "loss", sh, Z0, V, Bq, Ck, "y_q", y_q, sh.batch);
  ka_check_output(r.bad_gradient == nullptr, r.bad_gradient, sh, Z0, V, Bq, Ck, "y_q", y_q, sh.batch);
  ka_check_output(r.outputs_ok, d_Z0 ? "d_Z0" : "predictions", sh, Z0, V, Bq, Ck, "y_q", y_q, sh.batch);
  return loss;
}

template <class T>
void kernel_attention_predict_vjp(const KernelAttentionShape& sh, const T* Z0, const T* V,
                                  const T* Bq, const T* Ck, const Activation* acts, const T* d_y,
                                  T* d_V, T* d_B, T* d_C, T* d_Z0) {
  const auto& k = kernels<T>();
  const Reduced r = reduce_gradients(sh, d_V, d_B, d_C, [&](index_t b0, index_t b1, double* partial) {
    return k.loss_grad(sh, Z0, d_y, recipe::QuerySeed::prediction_gradient, V, Bq, Ck, acts, d_Z0,
                       nullptr, b0, b1, partial);
  });
  ka_check_output(r.bad_gradient == nullptr, r.bad_gradient, sh, Z0, V, Bq, Ck, "d_y", d_y, sh.batch);
  ka_check_output(r.outputs_ok, "d_Z0", sh, Z0, V, Bq, Ck, "d_y", d_y, sh.batch);
}

LSA_NATIVE_KA_API(LSA_NATIVE_INSTANTIATE_BACKEND, float)
LSA_NATIVE_KA_API(LSA_NATIVE_INSTANTIATE_BACKEND, double)

}  // namespace lsa_native::cpu
