// CUDA backend of kernel attention (kernel_attention.hpp): staging of host arrays, launch geometry
// and the fixed-order reduction of the parameter gradients around the kernels of ka_warp_kernels.cuh
// (a warp per prompt) and ka_kernels.cuh (a block per prompt: shapes whose per-warp workspace does
// not fit shared memory, or every shape under LSA_NATIVE_CUDA_OLD_KERNELS=1). The warp kernel runs
// the last layer as the query layer for the loss and the predictions (LSA_NATIVE_KA_QUERY=0: in
// full); the block kernel always runs it in full. The loss and the VJP without context keep
// Z_0..Z_L and one head slot per warp, the backward recomputing each head's forward
// (KaWarpLayout::recompute: less shared memory a warp, more warps per SM; faster, docs/gpu.md);
// LSA_NATIVE_KA_RECOMPUTE=0 stores every head's U, W, h̃, Y instead, for same-build comparisons
// (the same per-prompt bits, batch sums to rounding: the launch grid that groups them changes with
// occupancy).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/ka_cuda.hpp"
#include "cuda/ka_kernels.cuh"
#include "cuda/ka_warp_kernels.cuh"
#include "cuda/launch.cuh"
#include "cuda/runtime.cuh"

namespace lsa_native::cuda {
namespace {

using kernels::KaArgs;
using kernels::KaLayout;
using kernels::KaMode;
using kernels::KaWarpLayout;

// Sizes every kernel-attention call on the GPU shares.
template <class T>
struct KaSizes {
  index_t per, ctx, nV, nB;
  explicit KaSizes(const KernelAttentionShape& s)
      : per((s.dim + 1) * (s.context + 1)), ctx(recipe::context_layout<T>(s).size()),
        nV(s.layers * s.heads * (s.dim + 1) * (s.dim + 1)),
        nB(s.layers * s.heads * s.dim * s.dim) {
    // Indices inside one prompt's workspace and the parameter arrays are int in the kernels.
    detail::require(ctx < (index_t(1) << 30) && nV + 2 * nB < (index_t(1) << 30),
                    "CUDA kernel attention: one prompt's context or the parameters exceed 2^30 "
                    "values; use device='cpu'");
  }
};

std::string shape_text(const char* what, const KernelAttentionShape& sh) {
  return std::string(what) + ": d = " + std::to_string(sh.dim) + ", n = " + std::to_string(sh.context) +
         ", L = " + std::to_string(sh.layers) + ", H = " + std::to_string(sh.heads);
}

// Runs ka_warp_kernel<T, kMode, kRecompute> over the batch (kRecompute = most.recompute), with the
// warps per block (≤ most.warps) that keep the most warps resident per SM; returns the rows of
// *partial (one per warp of the grid).
template <class T, KaMode kMode, bool kRecompute>
int launch_warps(const KernelAttentionShape& sh, const DeviceScope& scope, const KaWarpLayout& most,
                 KaArgs<T> args, Scratch* partial, const char* what) {
  auto kernel = kernels::ka_warp_kernel<T, kMode, kRecompute>;
  const std::size_t max_shared = std::size_t(scope.max_shared_bytes());
  prepare_shared(kernel, most.shared_bytes(), scope, shape_text(what, sh));
  // The grid is sized to the resident warps: ask for the largest shared-memory carveout (the kernel
  // reads its global arrays once; L1 buys it nothing).
  LSA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                      int(cudaSharedmemCarveoutMaxShared)));
  const bool with_context = args.context != nullptr;
  KaWarpLayout lay = most;
  int resident = 0;
  for (int w = 1; w <= most.warps; ++w) {
    const KaWarpLayout l = KaWarpLayout::make<T>(sh, kMode, max_shared, w, with_context, kRecompute);
    int per_sm = 0;
    LSA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kernels::kWarp * w,
                                                                 l.shared_bytes()));
    if (per_sm * w >= resident) {  // ties: more warps per block (fewer parameter stagings)
      resident = per_sm * w;
      lay = l;
    }
  }
  const std::size_t smem = lay.shared_bytes();
  const int threads = kernels::kWarp * lay.warps;
  const int blocks = resident_blocks(kernel, threads, smem, scope, (sh.batch + lay.warps - 1) / lay.warps);
  const int rows = blocks * lay.warps;
  if (kMode != KaMode::forward) {
    *partial = Scratch(sizeof(double) * std::size_t(rows) * std::size_t(lay.acc_width()));
    args.partial = static_cast<double*>(partial->get());
  }
  kernel<<<blocks, threads, smem, stream()>>>(sh, lay, args);
  check_launch("ka_warp_kernel");
  return rows;
}

// LSA_NATIVE_KA_QUERY=0 (read at every launch): the last layer in full also where only TF_L is
// needed (KaArgs::query_only), for same-build comparisons with the query layer.
bool query_layer_requested() {
  const char* v = std::getenv("LSA_NATIVE_KA_QUERY");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// The recomputing workspace of the warp kernel (KaWarpLayout::recompute) where it applies, unless
// LSA_NATIVE_KA_RECOMPUTE=0 (read at every launch; for same-build comparisons).
bool recompute_requested() {
  const char* v = std::getenv("LSA_NATIVE_KA_RECOMPUTE");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// Runs the kernel-attention kernel of mode kMode over the batch: ka_warp_kernel when a warp's
// workspace fits shared memory, else ka_kernel; returns the rows of *partial.
template <class T, KaMode kMode>
int launch(const KernelAttentionShape& sh, const DeviceScope& scope, KaArgs<T> args,
           Scratch* partial, const char* what) {
  args.query_layer = query_layer_requested();
  const std::size_t max_shared = std::size_t(scope.max_shared_bytes());
  const KaWarpLayout wl = KaWarpLayout::make<T>(sh, kMode, max_shared, kernels::kKaMaxWarps,
                                                args.context != nullptr, recompute_requested());
  if (wl.warps > 0 && !old_kernels_requested()) {
    if constexpr (kMode != KaMode::forward)  // (the forward has no recomputing workspace)
      if (wl.recompute) return launch_warps<T, kMode, true>(sh, scope, wl, args, partial, what);
    return launch_warps<T, kMode, false>(sh, scope, wl, args, partial, what);
  }
  const KaLayout lay = KaLayout::make<T>(sh, kMode, max_shared);
  auto kernel = kernels::ka_kernel<T, kMode>;
  const std::size_t smem = lay.shared_bytes();
  prepare_shared(kernel, smem, scope, shape_text(what, sh));
  int blocks = resident_blocks(kernel, kernels::kKaThreads, smem, scope, sh.batch);
  Scratch scratch;
  if (!lay.state_shared) {  // workspaces in global memory, one per block, 1 GiB at most in all
    // (a fixed cap, not the free memory: the grid, hence the reduction order, stays fixed)
    const std::size_t per_block = sizeof(T) * std::size_t(lay.state_values);
    blocks = int(std::max<std::size_t>(1, std::min<std::size_t>(std::size_t(blocks), (std::size_t(1) << 30) / per_block)));
    scratch = Scratch(sizeof(T) * std::size_t(blocks) * std::size_t(lay.state_values));
    args.scratch = static_cast<T*>(scratch.get());
  }
  if (kMode != KaMode::forward) {
    *partial = Scratch(sizeof(double) * std::size_t(blocks) * std::size_t(lay.acc_width()));
    args.partial = static_cast<double*>(partial->get());
  }
  kernel<<<blocks, kernels::kKaThreads, smem, stream()>>>(sh, lay, args);
  check_launch("ka_kernel");
  return blocks;  // scratch is released stream-ordered, after the kernel
}

// Reduces the partials (`rows` rows: per block or per warp) in a fixed order into d_V, d_B, d_C
// and, with `loss` (device), the loss Σ r² / (2B). Queued on the stream: nothing waits.
template <class T>
void finish_gradients(const KernelAttentionShape& sh, const KaSizes<T>& n, const Scratch& partial,
                      int rows, T* d_V, T* d_B, T* d_C, double* loss) {
  const int width = int(1 + n.nV + 2 * n.nB);
  Scratch total = reduce_partials(static_cast<const double*>(partial.get()), rows, width);
  kernels::ka_epilogue_kernel<T><<<1, kernels::kReduceThreads, 0, stream()>>>(
      static_cast<const double*>(total.get()), int(n.nV), int(n.nB), sh.batch, d_V, d_B, d_C, loss);
  check_launch("ka_epilogue_kernel");
}

}  // namespace

template <class T>
void kernel_attention_forward(const KernelAttentionShape& sh, const T* Z0, const T* V, const T* Bq,
                              const T* Ck, const Activation* acts, T* Z_out, T* predictions,
                              T* context, PredictionOutput prediction_output) {
  const KaSizes<T> n(sh);
  DeviceScope scope({Z0, V, Bq, Ck, Z_out, predictions, context});
  DeviceInput<T> z0(scope, Z0, sh.batch * n.per), v(scope, V, n.nV), b(scope, Bq, n.nB),
      c(scope, Ck, n.nB);
  DeviceInput<Activation> a(scope, acts, sh.heads);
  // [B, L+1], or [B] for y_hat_final: a host output is copied back at this size.
  const index_t n_preds = recipe::prediction_count(prediction_output, sh.batch, int(sh.layers));
  DeviceOutput<T> zo(scope, Z_out, sh.batch * n.per), pr(scope, predictions, n_preds),
      cx(scope, context, sh.batch * n.ctx);
  KaArgs<T> args{z0.get(), nullptr, v.get(), b.get(), c.get(), a.get(), nullptr, cx.get(),
                 zo.get(), pr.get(), nullptr, nullptr, nullptr, prediction_output};
  launch<T, KaMode::forward>(sh, scope, args, nullptr, "kernel_attention_forward");
  scope.finish();
}

template <class T>
void kernel_attention_vjp(const KernelAttentionShape& sh, const T* Z0, const T* V, const T* Bq,
                          const T* Ck, const Activation* acts, const T* d_Z_out, T* d_V, T* d_B,
                          T* d_C, T* d_Z0, const T* context) {
  const KaSizes<T> n(sh);
  DeviceScope scope({Z0, V, Bq, Ck, d_Z_out, d_V, d_B, d_C, d_Z0, context});
  // With a context the forward is not recomputed: Z0 is not read.
  DeviceInput<T> z0(scope, context ? nullptr : Z0, sh.batch * n.per), v(scope, V, n.nV),
      b(scope, Bq, n.nB), c(scope, Ck, n.nB), dz(scope, d_Z_out, sh.batch * n.per),
      cx(scope, context, sh.batch * n.ctx);
  DeviceInput<Activation> a(scope, acts, sh.heads);
  DeviceOutput<T> dv(scope, d_V, n.nV), db(scope, d_B, n.nB), dc(scope, d_C, n.nB),
      dz0(scope, d_Z0, sh.batch * n.per);
  KaArgs<T> args{z0.get(), nullptr, v.get(), b.get(), c.get(), a.get(), dz.get(),
                 const_cast<T*>(cx.get()), nullptr, nullptr, dz0.get(), nullptr, nullptr};
  Scratch partial;
  const int rows = launch<T, KaMode::vjp>(sh, scope, args, &partial, "kernel_attention_vjp");
  finish_gradients(sh, n, partial, rows, dv.get(), db.get(), dc.get(), nullptr);
  scope.finish();
}

template <class T>
void kernel_attention_loss_and_grad_into(const KernelAttentionShape& sh, const T* Z0, const T* y_q,
                                         const T* V, const T* Bq, const T* Ck,
                                         const Activation* acts, T* d_V, T* d_B, T* d_C, T* d_Z0,
                                         T* predictions, double* loss) {
  const KaSizes<T> n(sh);
  DeviceScope scope({Z0, y_q, V, Bq, Ck, d_V, d_B, d_C, d_Z0, predictions, loss});
  DeviceInput<T> z0(scope, Z0, sh.batch * n.per), y(scope, y_q, sh.batch), v(scope, V, n.nV),
      b(scope, Bq, n.nB), c(scope, Ck, n.nB);
  DeviceInput<Activation> a(scope, acts, sh.heads);
  DeviceOutput<T> dv(scope, d_V, n.nV), db(scope, d_B, n.nB), dc(scope, d_C, n.nB),
      dz0(scope, d_Z0, sh.batch * n.per),
      pr(scope, predictions, recipe::prediction_count(PredictionOutput::tf, sh.batch, int(sh.layers)));
  DeviceOutput<double> l(scope, loss, 1);
  KaArgs<T> args{z0.get(), y.get(), v.get(), b.get(), c.get(), a.get(), nullptr, nullptr,
                 nullptr, pr.get(), dz0.get(), nullptr, nullptr};
  Scratch partial;
  const int rows =
      launch<T, KaMode::loss_grad>(sh, scope, args, &partial, "kernel_attention_loss_and_grad");
  finish_gradients(sh, n, partial, rows, dv.get(), db.get(), dc.get(), l.get());
  scope.finish();
}

template <class T>
void kernel_attention_predict_vjp(const KernelAttentionShape& sh, const T* Z0, const T* V,
                                  const T* Bq, const T* Ck, const Activation* acts, const T* d_y,
                                  T* d_V, T* d_B, T* d_C, T* d_Z0) {
  const KaSizes<T> n(sh);
  DeviceScope scope({Z0, d_y, V, Bq, Ck, d_V, d_B, d_C, d_Z0});
  DeviceInput<T> z0(scope, Z0, sh.batch * n.per), dy(scope, d_y, sh.batch), v(scope, V, n.nV),
      b(scope, Bq, n.nB), c(scope, Ck, n.nB);
  DeviceInput<Activation> a(scope, acts, sh.heads);
  DeviceOutput<T> dv(scope, d_V, n.nV), db(scope, d_B, n.nB), dc(scope, d_C, n.nB),
      dz0(scope, d_Z0, sh.batch * n.per);
  // loss_and_grad's kernel with y_q = d_y and the seed −d_y (KaMode::predict_vjp); no loss.
  KaArgs<T> args{z0.get(), dy.get(), v.get(), b.get(), c.get(), a.get(), nullptr, nullptr,
                 nullptr, nullptr, dz0.get(), nullptr, nullptr};
  Scratch partial;
  const int rows =
      launch<T, KaMode::predict_vjp>(sh, scope, args, &partial, "kernel_attention_predict_vjp");
  finish_gradients(sh, n, partial, rows, dv.get(), db.get(), dc.get(), nullptr);
  scope.finish();
}

template <class T>
double kernel_attention_loss_and_grad(const KernelAttentionShape& sh, const T* Z0, const T* y_q,
                                      const T* V, const T* Bq, const T* Ck, const Activation* acts,
                                      T* d_V, T* d_B, T* d_C, T* d_Z0, T* predictions) {
  double loss = 0;  // host memory: copied back with the call's one wait
  kernel_attention_loss_and_grad_into(sh, Z0, y_q, V, Bq, Ck, acts, d_V, d_B, d_C, d_Z0,
                                      predictions, &loss);
  return loss;
}

#define LSA_NATIVE_KA_INTO(T)                                                                      \
  template void kernel_attention_loss_and_grad_into<T>(const KernelAttentionShape&, const T*,      \
                                                       const T*, const T*, const T*, const T*,     \
                                                       const Activation*, T*, T*, T*, T*, T*,      \
                                                       double*);
LSA_NATIVE_KA_INTO(float)
LSA_NATIVE_KA_INTO(double)
#undef LSA_NATIVE_KA_INTO
LSA_NATIVE_KA_API(LSA_NATIVE_INSTANTIATE_BACKEND, float)
LSA_NATIVE_KA_API(LSA_NATIVE_INSTANTIATE_BACKEND, double)

}  // namespace lsa_native::cuda
