// CUDA backend of the batched LSA (lsa.hpp): staging of host arrays and launch geometry around the
// kernels of lsa_kernels.cuh (shared launch helpers and reductions: lsa_launch.cuh, launch.cuh).
#include <algorithm>
#include <string>

#include "cuda/lsa_cuda.hpp"
#include "cuda/lsa_launch.cuh"
#include "cuda/runtime.cuh"

namespace lsa_native::cuda {
namespace {

using namespace kernels;  // NOLINT: the kernels and their layout helpers

template <class T, PredictionMode kMode>
void launch_prediction(const LsaShape& sh, const DeviceScope& scope, const T* E, const T* upstream,
                       const T* W_pv, const T* W_kq, T* y_hat, T* d_E, Scratch* partial,
                       int* blocks_out) {
  constexpr bool kSums = kMode != PredictionMode::predict;
  constexpr const char* kNames[] = {"lsa_predict", "lsa_loss_and_grad", "lsa_predict_vjp"};
  auto kernel = lsa_prediction_kernel<T, kMode>;
  const PredictionLayout lay = prediction_layout<T>(sh, kSums, scope);
  prepare(kernel, lay.total(), scope, kNames[int(kMode)], sh);
  const int threads = lay.warps * kWarp;
  const int blocks = resident_blocks(kernel, threads, lay.total(), scope,
                                     (sh.batch + lay.warps - 1) / lay.warps);
  double* partial_ptr = nullptr;
  if (kSums) {
    *partial = Scratch(sizeof(double) * std::size_t(blocks) * std::size_t(lay.acc_width()));
    partial_ptr = static_cast<double*>(partial->get());
    *blocks_out = blocks;
  }
  kernel<<<blocks, threads, lay.total(), stream()>>>(sh, lay, E, upstream, W_pv, W_kq, y_hat,
                                                     partial_ptr, d_E);
  check_launch("lsa_prediction_kernel");
}

// The tiled full forward / VJP kernels, unless old_kernels_requested() (runtime.cuh) or only the
// old kernels' layout fits the device's shared memory (their fallback role).
bool use_tiled(std::size_t tiled_smem, std::size_t old_smem, const DeviceScope& scope) {
  if (old_kernels_requested()) return false;
  const std::size_t limit = std::size_t(scope.max_shared_bytes());
  return tiled_smem <= limit || old_smem > limit;  // neither fits: the tiled one reports it
}

}  // namespace

template <class T>
void lsa_predict(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, T* y_hat) {
  DeviceScope scope({E, W_pv, W_kq, y_hat});
  const index_t rc = (sh.dim + 1) * (sh.context + 1), n2 = (sh.dim + 1) * (sh.dim + 1);
  DeviceInput<T> e(scope, E, sh.batch * rc), pv(scope, W_pv, n2), kq(scope, W_kq, n2);
  DeviceOutput<T> out(scope, y_hat, sh.batch);
  launch_prediction<T, PredictionMode::predict>(sh, scope, e.get(), nullptr, pv.get(), kq.get(),
                                                out.get(), nullptr, nullptr, nullptr);
  scope.finish();
}

template <class T>
void lsa_loss_and_grad_into(const LsaShape& sh, const T* E, const T* y_q, const T* W_pv,
                            const T* W_kq, T* d_W_pv, T* d_W_kq, T* y_hat, double* loss) {
  DeviceScope scope({E, y_q, W_pv, W_kq, d_W_pv, d_W_kq, y_hat, loss});
  const index_t rc = (sh.dim + 1) * (sh.context + 1), n2 = (sh.dim + 1) * (sh.dim + 1);
  DeviceInput<T> e(scope, E, sh.batch * rc), y(scope, y_q, sh.batch), pv(scope, W_pv, n2),
      kq(scope, W_kq, n2);
  DeviceOutput<T> dpv(scope, d_W_pv, n2), dkq(scope, d_W_kq, n2), yh(scope, y_hat, sh.batch);
  Scratch partial;
  int blocks = 0;
  launch_prediction<T, PredictionMode::loss>(sh, scope, e.get(), y.get(), pv.get(), kq.get(),
                                             yh.get(), nullptr, &partial, &blocks);
  finish_loss_and_grad(scope, partial, blocks, int(sh.dim + 1), sh.batch, dpv.get(), dkq.get(),
                       loss);
}

template <class T>
double lsa_loss_and_grad(const LsaShape& sh, const T* E, const T* y_q, const T* W_pv,
                         const T* W_kq, T* d_W_pv, T* d_W_kq, T* y_hat) {
  double loss = 0;  // host memory: copied back with the call's one wait
  lsa_loss_and_grad_into(sh, E, y_q, W_pv, W_kq, d_W_pv, d_W_kq, y_hat, &loss);
  return loss;
}

template <class T>
void lsa_predict_vjp(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, const T* d_y,
                     T* d_W_pv, T* d_W_kq, T* d_E) {
  DeviceScope scope({E, W_pv, W_kq, d_y, d_W_pv, d_W_kq, d_E});
  const index_t rc = (sh.dim + 1) * (sh.context + 1), n2 = (sh.dim + 1) * (sh.dim + 1);
  DeviceInput<T> e(scope, E, sh.batch * rc), dy(scope, d_y, sh.batch), pv(scope, W_pv, n2),
      kq(scope, W_kq, n2);
  DeviceOutput<T> dpv(scope, d_W_pv, n2), dkq(scope, d_W_kq, n2), de(scope, d_E, sh.batch * rc);
  Scratch partial;
  int blocks = 0;
  launch_prediction<T, PredictionMode::vjp>(sh, scope, e.get(), dy.get(), pv.get(), kq.get(),
                                            nullptr, de.get(), &partial, &blocks);
  finish_prediction_sums(partial, blocks, int(sh.dim + 1), 1.0, dpv.get(), dkq.get(), nullptr);
  scope.finish();
}

template <class T>
void lsa_forward(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, T* F) {
  check_prompt_size(sh);
  DeviceScope scope({E, W_pv, W_kq, F});
  const int rows = int(sh.dim + 1), cols = int(sh.context + 1);
  const index_t rc = index_t(rows) * cols, n2 = index_t(rows) * rows;
  DeviceInput<T> e(scope, E, sh.batch * rc), pv(scope, W_pv, n2), kq(scope, W_kq, n2);
  DeviceOutput<T> out(scope, F, sh.batch * rc);
  const std::size_t tiled_smem = tiled_forward_smem<T>(rows, cols), old_smem = forward_smem<T>(rows, cols);
  const bool tiled = use_tiled(tiled_smem, old_smem, scope);
  auto kernel = tiled ? lsa_forward_tiled_kernel<T> : lsa_forward_kernel<T>;
  const std::size_t smem = tiled ? tiled_smem : old_smem;
  const int threads = tiled ? kTiledThreads : kBlockThreads;
  prepare(kernel, smem, scope, "lsa_forward", sh);
  const int blocks = resident_blocks(kernel, threads, smem, scope, sh.batch);
  kernel<<<blocks, threads, smem, stream()>>>(sh, e.get(), pv.get(), kq.get(), out.get());
  check_launch(tiled ? "lsa_forward_tiled_kernel" : "lsa_forward_kernel");
  scope.finish();
}

template <class T>
void lsa_vjp(const LsaShape& sh, const T* E, const T* W_pv, const T* W_kq, const T* d_F,
             T* d_W_pv, T* d_W_kq, T* d_E) {
  check_prompt_size(sh);
  DeviceScope scope({E, W_pv, W_kq, d_F, d_W_pv, d_W_kq, d_E});
  const int rows = int(sh.dim + 1), cols = int(sh.context + 1);
  const index_t rc = index_t(rows) * cols, n2 = index_t(rows) * rows;
  DeviceInput<T> e(scope, E, sh.batch * rc), pv(scope, W_pv, n2), kq(scope, W_kq, n2),
      df(scope, d_F, sh.batch * rc);
  DeviceOutput<T> dpv(scope, d_W_pv, n2), dkq(scope, d_W_kq, n2), de(scope, d_E, sh.batch * rc);
  const std::size_t tiled_smem = tiled_vjp_smem<T>(rows, cols), old_smem = vjp_smem<T>(rows, cols);
  const bool tiled = use_tiled(tiled_smem, old_smem, scope);
  auto kernel = tiled ? lsa_vjp_tiled_kernel<T> : lsa_vjp_kernel<T>;
  const std::size_t smem = tiled ? tiled_smem : old_smem;
  const int threads = tiled ? kTiledThreads : kBlockThreads;
  prepare(kernel, smem, scope, "lsa_vjp", sh);
  const int blocks = resident_blocks(kernel, threads, smem, scope, sh.batch);
  Scratch partial(sizeof(double) * std::size_t(blocks) * std::size_t(2 * n2));
  kernel<<<blocks, threads, smem, stream()>>>(sh, e.get(), pv.get(), kq.get(), df.get(), de.get(),
                                              static_cast<double*>(partial.get()));
  check_launch(tiled ? "lsa_vjp_tiled_kernel" : "lsa_vjp_kernel");
  Scratch total = reduce_partials(static_cast<const double*>(partial.get()), blocks, int(2 * n2));
  vjp_epilogue_kernel<T><<<1, kReduceThreads, 0, stream()>>>(static_cast<const double*>(total.get()),
                                                             int(n2), dpv.get(), dkq.get());
  check_launch("vjp_epilogue_kernel");
  scope.finish();
}

template void lsa_loss_and_grad_into<float>(const LsaShape&, const float*, const float*,
                                            const float*, const float*, float*, float*, float*,
                                            double*);
template void lsa_loss_and_grad_into<double>(const LsaShape&, const double*, const double*,
                                             const double*, const double*, double*, double*,
                                             double*, double*);
LSA_NATIVE_LSA_API(LSA_NATIVE_INSTANTIATE_BACKEND, float)
LSA_NATIVE_LSA_API(LSA_NATIVE_INSTANTIATE_BACKEND, double)

}  // namespace lsa_native::cuda
