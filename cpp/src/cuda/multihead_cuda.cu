// CUDA backend of the H-head LSA (multihead.hpp, H >= 2): staging of host arrays and launch
// geometry around the kernels of multihead_kernels.cuh (shared launch helpers and reductions:
// lsa_launch.cuh, launch.cuh).
#include <algorithm>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <string>

#include "cuda/lsa_launch.cuh"
#include "cuda/multihead_cuda.hpp"
#include "cuda/multihead_kernels.cuh"
#include "cuda/multihead_sampled_kernels.cuh"
#include "cuda/runtime.cuh"
#include "cuda/sampled_cuda.hpp"

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

// The fused Wishart step's threads per block, and where its per-thread work goes: shared memory
// when a block's (with the sums and parameters) fits in the default 48 KiB, else a global scratch
// of at most kHeadsWishartScratchCap bytes (the grid capped to fit), as the one-head step.
constexpr int kHeadsWishartThreads = 128;
constexpr std::size_t kHeadsWishartSharedCap = 48 * 1024;
constexpr std::size_t kHeadsWishartScratchCap = std::size_t(256) << 20;

template <class T>
int launch_heads_wishart(const linear::Law<T>& P, index_t batch, index_t heads,
                         const DeviceScope& scope, const T* W_pv, const T* W_kq, Scratch* partial,
                         Scratch* work) {
  HeadsWishartLayout lay{int(P.d), int(wishart::noise_dim(P)), int(heads), kHeadsWishartThreads, true};
  if (lay.shared_bytes<T>() > kHeadsWishartSharedCap) lay.work_in_shared = false;
  const std::size_t smem = lay.shared_bytes<T>();
  auto kernel = multihead_wishart_kernel<T>;
  prepare(kernel, smem, scope, "linear_prompts_multihead_loss_and_grad(method='wishart')",
          LsaShape{batch, P.d, P.N});
  const int threads = lay.threads;
  index_t cap = (batch + threads - 1) / threads;
  const std::size_t per_block = sizeof(T) * std::size_t(threads) * std::size_t(lay.thread_values());
  if (!lay.work_in_shared)
    cap = std::min<index_t>(cap, std::max<index_t>(1, index_t(kHeadsWishartScratchCap / per_block)));
  const int blocks = resident_blocks(kernel, threads, smem, scope, cap);
  if (!lay.work_in_shared) *work = Scratch(per_block * std::size_t(blocks));
  *partial = Scratch(sizeof(double) * std::size_t(blocks) * std::size_t(lay.width()));
  kernel<<<blocks, threads, smem, stream()>>>(P, batch, lay, W_pv, W_kq,
                                              static_cast<T*>(work->get()),
                                              static_cast<double*>(partial->get()));
  check_launch("multihead_wishart_kernel");
  return blocks;
}

// Blocks of a grid-stride kernel over n entries (256 threads, at most one entry per thread).
int entry_blocks(index_t n) { return int(std::min<index_t>((n + 255) / 256, 1024)); }

}  // namespace

template <class T>
double linear_prompts_multihead_loss_and_grad(const linear::Law<T>& host_law, index_t batch,
                                              FusedMethod method, index_t H, const T* W_pv,
                                              const T* W_kq, T* d_W_pv, T* d_W_kq, double* loss) {
  double returned = std::numeric_limits<double>::quiet_NaN();  // host: back with the one wait
  double* loss_out = loss != nullptr ? loss : &returned;
  DeviceScope scope({W_pv, W_kq, d_W_pv, d_W_kq, loss});
  const index_t d = host_law.d, N = host_law.N, rows = d + 1, nW = H * rows * rows;
  if (method == FusedMethod::tokens) {  // the GPU sampler's prompts, then the H-head loss kernel
    Scratch E(sizeof(T) * std::size_t(batch * rows * (N + 1))), y_q(sizeof(T) * std::size_t(batch));
    LinearPromptOutputs<T> prompts;
    prompts.E = static_cast<T*>(E.get());
    prompts.y_q = static_cast<T*>(y_q.get());
    sample_linear_prompts(host_law, batch, prompts);
    multihead_lsa_loss_and_grad_into(LsaShape{batch, d, N}, H, prompts.E, prompts.y_q, W_pv, W_kq,
                                     d_W_pv, d_W_kq, static_cast<T*>(nullptr), loss_out);
    return returned;
  }
  DeviceInput<T> pv(scope, W_pv, nW), kq(scope, W_kq, nW);
  DeviceInput<T> L(scope, host_law.L, d * d), Lq(scope, host_law.Lq, d * d);
  DeviceOutput<T> dpv(scope, d_W_pv, nW), dkq(scope, d_W_kq, nW);
  DeviceOutput<double> out(scope, loss_out, 1);
  linear::Law<T> P = host_law;  // the same law with device copies of the factors
  P.L = L.get();
  P.Lq = Lq.get();
  Scratch partial, work;
  const int blocks = launch_heads_wishart(P, batch, H, scope, pv.get(), kq.get(), &partial, &work);
  finish_heads_sums(partial, blocks, H, int(rows), 1.0 / double(batch), dpv.get(), dkq.get(),
                    out.get());
  scope.finish();  // host outputs (a host loss among them) back; device ones: no wait
  return returned;
}

template <class T>
void multihead_merge_kq(index_t heads, index_t rank, index_t rows, const T* W_k, const T* W_q,
                        T* W_kq) {
  DeviceScope scope({W_k, W_q, W_kq});
  const index_t nk = heads * rank * rows, n = heads * rows * rows;
  DeviceInput<T> k(scope, W_k, nk), q(scope, W_q, nk);
  DeviceOutput<T> out(scope, W_kq, n);
  merge_kq_kernel<T><<<entry_blocks(n), 256, 0, stream()>>>(heads, rank, rows, k.get(), q.get(),
                                                            out.get());
  check_launch("merge_kq_kernel");
  scope.finish();
}

template <class T>
void multihead_chain_kq(index_t heads, index_t rank, index_t rows, const T* W_k, const T* W_q,
                        const T* d_W_kq, T* d_W_k, T* d_W_q) {
  DeviceScope scope({W_k, W_q, d_W_kq, d_W_k, d_W_q});
  const index_t nk = heads * rank * rows, n = heads * rows * rows;
  DeviceInput<T> k(scope, W_k, nk), q(scope, W_q, nk), g(scope, d_W_kq, n);
  DeviceOutput<T> dk(scope, d_W_k, nk), dq(scope, d_W_q, nk);
  chain_kq_kernel<T><<<entry_blocks(nk), 256, 0, stream()>>>(heads, rank, rows, k.get(), q.get(),
                                                             g.get(), dk.get(), dq.get());
  check_launch("chain_kq_kernel");
  scope.finish();
}

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
#define LSA_NATIVE_INSTANTIATE_SAMPLED(T)                                                          \
  template double linear_prompts_multihead_loss_and_grad<T>(const linear::Law<T>&, index_t,       \
                                                            FusedMethod, index_t, const T*,       \
                                                            const T*, T*, T*, double*);
LSA_NATIVE_INSTANTIATE_SAMPLED(float)
LSA_NATIVE_INSTANTIATE_SAMPLED(double)
#undef LSA_NATIVE_INSTANTIATE_SAMPLED
LSA_NATIVE_MULTIHEAD_API(LSA_NATIVE_INSTANTIATE_BACKEND, float)
LSA_NATIVE_MULTIHEAD_API(LSA_NATIVE_INSTANTIATE_BACKEND, double)

}  // namespace lsa_native::cuda
