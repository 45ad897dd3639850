// CUDA backend of the H-head LSA (multihead.hpp, H >= 2): staging of host arrays and launch
// geometry around the kernels of multihead_kernels.cuh (shared launch helpers and reductions:
// lsa_launch.cuh, launch.cuh).
#include <initializer_list>
#include <mutex>
#include <string>

#include "cuda/lsa_launch.cuh"
#include "cuda/multihead_cuda.hpp"
#include "cuda/multihead_kernels.cuh"
#include "cuda/runtime.cuh"

namespace lsa_native::cuda {
namespace {

using namespace kernels;  // NOLINT: the kernels and their layout helpers

// The prediction kernel's layout with the most resident warps per SM (registers and shared
// memory, the occupancy API): warps per block 2, 4, 8 and the spread or least token stride, the
// first best in that order (more blocks per SM: one block's barrier waits are another's compute);
// 1-warp blocks only when no other fits (their many partial sums cost a slower reduction). The
// last answer is kept (training calls ask for the same shape every step).
template <class T, class Kernel>
HeadsLayout heads_layout(Kernel kernel, const char* what, const LsaShape& sh, index_t heads,
                         bool sums, bool input_grad, const DeviceScope& scope) {
  check_prompt_size(sh);
  const int rows = int(sh.dim + 1), cols = int(sh.context + 1);
  struct Key {  // (the three modes' kernels share Kernel's type: the kernel is part of the key)
    const void* kernel;
    int device, heads, rows, cols;
    bool input_grad;
    bool operator==(const Key& o) const {
      return kernel == o.kernel && device == o.device && heads == o.heads && rows == o.rows &&
             cols == o.cols && input_grad == o.input_grad;
    }
  };
  static std::mutex mutex;
  static Key last_key{nullptr, -1, 0, 0, 0, false};
  static HeadsLayout last{};
  const Key key{reinterpret_cast<const void*>(kernel), scope.device(), int(heads), rows, cols,
                input_grad};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (key == last_key) return last;
  }
  const int group = HeadsLayout::default_group(int(heads), rows);
  const std::size_t max_shared = std::size_t(scope.max_shared_bytes());
  prepare(kernel, max_shared, scope, what, sh);  // the occupancy API sees every size below
  HeadsLayout best = HeadsLayout::make<T>(int(heads), rows, cols, 1, sums, input_grad, group, false);
  int best_warps = 0;
  static_assert(8 * kWarp <= kHeadsMaxThreads, "the kernel's launch bounds");
  for (int warps : {2, 4, 8, 1}) {
    if (warps == 1 && best_warps > 0) break;
    for (bool spread : {true, false}) {
      const HeadsLayout lay =
          HeadsLayout::make<T>(int(heads), rows, cols, warps, sums, input_grad, group, spread);
      if (lay.total() > max_shared) continue;
      int per_sm = 0;
      LSA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, warps * kWarp,
                                                                   lay.total()));
      if (per_sm * warps > best_warps) best = lay, best_warps = per_sm * warps;
    }
  }
  if (best_warps > 0) {  // (none fits: the least one, and prepare() below says how much it needs)
    std::lock_guard<std::mutex> lock(mutex);
    last_key = key, last = best;
  }
  return best;
}

// Launches a prediction kernel; for a loss or VJP, the per-block partials into *partial and the
// block count into *blocks_out.
template <class T, PredictionMode kMode>
void launch_heads_prediction(const LsaShape& sh, index_t heads, const DeviceScope& scope,
                             const T* E, const T* upstream, const T* W_pv, const T* W_kq, T* y_hat,
                             T* d_E, Scratch* partial, int* blocks_out) {
  constexpr bool kSums = kMode != PredictionMode::predict;
  constexpr const char* kNames[] = {"multihead_lsa_predict", "multihead_lsa_loss_and_grad",
                                    "multihead_lsa_predict_vjp"};
  auto kernel = multihead_prediction_kernel<T, kMode>;
  const HeadsLayout lay =
      heads_layout<T>(kernel, kNames[int(kMode)], sh, heads, kSums, d_E != nullptr, scope);
  prepare(kernel, lay.total(), scope, kNames[int(kMode)], sh);
  const int threads = lay.warps * kWarp;
  const int blocks = resident_blocks(kernel, threads, lay.total(), scope,
                                     (sh.batch + lay.slots() - 1) / lay.slots());
  double* partial_ptr = nullptr;
  if (kSums) {
    *partial = Scratch(sizeof(double) * std::size_t(blocks) * std::size_t(lay.acc_width()));
    partial_ptr = static_cast<double*>(partial->get());
    *blocks_out = blocks;
  }
  kernel<<<blocks, threads, lay.total(), stream()>>>(sh, lay, E, upstream, W_pv, W_kq, y_hat,
                                                     partial_ptr, d_E);
  check_launch("multihead_prediction_kernel");
}

// d_W_pv, d_W_kq (and the loss, when `loss` is a device pointer) from the per-block partials of a
// prediction kernel, scaled by `scale` (1/B for a loss, 1 for a VJP). Queued on the stream.
template <class T>
void finish_heads_sums(const Scratch& partial, int blocks, index_t heads, int rows, double scale,
                       T* d_W_pv, T* d_W_kq, double* loss) {
  const int width = int(multihead::loss_grad_width(heads, rows));
  Scratch total = reduce_partials(static_cast<const double*>(partial.get()), blocks, width);
  heads_prediction_epilogue_kernel<T><<<1, kReduceThreads, 0, stream()>>>(
      static_cast<const double*>(total.get()), int(heads), rows, scale, d_W_pv, d_W_kq, loss);
  check_launch("heads_prediction_epilogue_kernel");
}

}  // namespace

template <class T>
void multihead_lsa_predict(const LsaShape& sh, index_t H, const T* E, const T* W_pv,
                           const T* W_kq, T* y_hat) {
  DeviceScope scope({E, W_pv, W_kq, y_hat});
  const index_t rc = (sh.dim + 1) * (sh.context + 1), nW = H * (sh.dim + 1) * (sh.dim + 1);
  DeviceInput<T> e(scope, E, sh.batch * rc), pv(scope, W_pv, nW), kq(scope, W_kq, nW);
  DeviceOutput<T> out(scope, y_hat, sh.batch);
  launch_heads_prediction<T, PredictionMode::predict>(sh, H, scope, e.get(), nullptr, pv.get(),
                                                      kq.get(), out.get(), nullptr, nullptr, nullptr);
  scope.finish();
}

template <class T>
void multihead_lsa_loss_and_grad_into(const LsaShape& sh, index_t H, const T* E, const T* y_q,
                                      const T* W_pv, const T* W_kq, T* d_W_pv, T* d_W_kq,
                                      T* y_hat, double* loss) {
  DeviceScope scope({E, y_q, W_pv, W_kq, d_W_pv, d_W_kq, y_hat, loss});
  const index_t rc = (sh.dim + 1) * (sh.context + 1), nW = H * (sh.dim + 1) * (sh.dim + 1);
  DeviceInput<T> e(scope, E, sh.batch * rc), y(scope, y_q, sh.batch), pv(scope, W_pv, nW),
      kq(scope, W_kq, nW);
  DeviceOutput<T> dpv(scope, d_W_pv, nW), dkq(scope, d_W_kq, nW), yh(scope, y_hat, sh.batch);
  DeviceOutput<double> out(scope, loss, 1);
  Scratch partial;
  int blocks = 0;
  launch_heads_prediction<T, PredictionMode::loss>(sh, H, scope, e.get(), y.get(), pv.get(),
                                                   kq.get(), yh.get(), nullptr, &partial, &blocks);
  finish_heads_sums(partial, blocks, H, int(sh.dim + 1), 1.0 / double(sh.batch), dpv.get(),
                    dkq.get(), out.get());
  scope.finish();  // host outputs (a host `loss` among them) copied back; device ones: no wait
}

template <class T>
double multihead_lsa_loss_and_grad(const LsaShape& sh, index_t H, const T* E, const T* y_q,
                                   const T* W_pv, const T* W_kq, T* d_W_pv, T* d_W_kq, T* y_hat) {
  double loss = 0;  // host memory: copied back with the call's one wait
  multihead_lsa_loss_and_grad_into(sh, H, E, y_q, W_pv, W_kq, d_W_pv, d_W_kq, y_hat, &loss);
  return loss;
}

template <class T>
void multihead_lsa_predict_vjp(const LsaShape& sh, index_t H, const T* E, const T* W_pv,
                               const T* W_kq, const T* d_y, T* d_W_pv, T* d_W_kq, T* d_E) {
  DeviceScope scope({E, W_pv, W_kq, d_y, d_W_pv, d_W_kq, d_E});
  const index_t rc = (sh.dim + 1) * (sh.context + 1), nW = H * (sh.dim + 1) * (sh.dim + 1);
  DeviceInput<T> e(scope, E, sh.batch * rc), dy(scope, d_y, sh.batch), pv(scope, W_pv, nW),
      kq(scope, W_kq, nW);
  DeviceOutput<T> dpv(scope, d_W_pv, nW), dkq(scope, d_W_kq, nW), de(scope, d_E, sh.batch * rc);
  Scratch partial;
  int blocks = 0;
  launch_heads_prediction<T, PredictionMode::vjp>(sh, H, scope, e.get(), dy.get(), pv.get(),
                                                  kq.get(), nullptr, de.get(), &partial, &blocks);
  finish_heads_sums(partial, blocks, H, int(sh.dim + 1), 1.0, dpv.get(), dkq.get(),
                    static_cast<double*>(nullptr));
  scope.finish();
}

template <class T>
void multihead_lsa_forward(const LsaShape& sh, index_t H, const T* E, const T* W_pv,
                           const T* W_kq, T* F) {
  check_prompt_size(sh);
  DeviceScope scope({E, W_pv, W_kq, F});
  const int rows = int(sh.dim + 1), cols = int(sh.context + 1);
  const index_t rc = index_t(rows) * cols, nW = H * rows * rows;
  DeviceInput<T> e(scope, E, sh.batch * rc), pv(scope, W_pv, nW), kq(scope, W_kq, nW);
  DeviceOutput<T> out(scope, F, sh.batch * rc);
  const std::size_t smem = multihead_forward_smem<T>(int(H), rows, cols);
  auto kernel = multihead_forward_kernel<T>;
  prepare(kernel, smem, scope, "multihead_lsa_forward", sh);
  const int blocks = resident_blocks(kernel, kBlockThreads, smem, scope, sh.batch);
  kernel<<<blocks, kBlockThreads, smem, stream()>>>(sh, int(H), e.get(), pv.get(), kq.get(), out.get());
  check_launch("multihead_forward_kernel");
  scope.finish();
}

template <class T>
void multihead_lsa_vjp(const LsaShape& sh, index_t H, const T* E, const T* W_pv, const T* W_kq,
                       const T* d_F, T* d_W_pv, T* d_W_kq, T* d_E) {
  check_prompt_size(sh);
  DeviceScope scope({E, W_pv, W_kq, d_F, d_W_pv, d_W_kq, d_E});
  const int rows = int(sh.dim + 1), cols = int(sh.context + 1);
  const index_t rc = index_t(rows) * cols, nW = H * rows * rows;
  DeviceInput<T> e(scope, E, sh.batch * rc), pv(scope, W_pv, nW), kq(scope, W_kq, nW),
      df(scope, d_F, sh.batch * rc);
  DeviceOutput<T> dpv(scope, d_W_pv, nW), dkq(scope, d_W_kq, nW), de(scope, d_E, sh.batch * rc);
  const std::size_t smem = multihead_vjp_smem<T>(int(H), rows, cols);
  auto kernel = multihead_vjp_kernel<T>;
  prepare(kernel, smem, scope, "multihead_lsa_vjp", sh);
  const int blocks = resident_blocks(kernel, kBlockThreads, smem, scope, sh.batch);
  Scratch partial(sizeof(double) * std::size_t(blocks) * std::size_t(2 * nW));
  kernel<<<blocks, kBlockThreads, smem, stream()>>>(sh, int(H), e.get(), pv.get(), kq.get(),
                                                    df.get(), de.get(),
                                                    static_cast<double*>(partial.get()));
  check_launch("multihead_vjp_kernel");
  Scratch total = reduce_partials(static_cast<const double*>(partial.get()), blocks, int(2 * nW));
  // [dW_pv (H heads), dW_kq (H heads)]: the one-head epilogue over H rows² entries per half
  vjp_epilogue_kernel<T><<<1, kReduceThreads, 0, stream()>>>(static_cast<const double*>(total.get()),
                                                             int(nW), dpv.get(), dkq.get());
  check_launch("vjp_epilogue_kernel");
  scope.finish();
}

template void multihead_lsa_loss_and_grad_into<float>(const LsaShape&, index_t, const float*,
                                                      const float*, const float*, const float*,
                                                      float*, float*, float*, double*);
template void multihead_lsa_loss_and_grad_into<double>(const LsaShape&, index_t, const double*,
                                                       const double*, const double*,
                                                       const double*, double*, double*, double*,
                                                       double*);
LSA_NATIVE_MULTIHEAD_API(LSA_NATIVE_INSTANTIATE_BACKEND, float)
LSA_NATIVE_MULTIHEAD_API(LSA_NATIVE_INSTANTIATE_BACKEND, double)

}  // namespace lsa_native::cuda
