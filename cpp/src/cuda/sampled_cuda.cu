// CUDA backend of the linear-prompt sampler and of the fused sampled LSA steps: the law's factors
// and the parameters to the device, launch geometry around sampled_kernels.cuh, and the
// fixed-order reduction of lsa_launch.cuh.
#include <algorithm>
#include <limits>

#include "cuda/lsa_launch.cuh"
#include "cuda/runtime.cuh"
#include "cuda/sampled_cuda.hpp"
#include "cuda/sampled_kernels.cuh"

namespace lsa_native::cuda {
namespace {

using namespace kernels;  // NOLINT: the kernels and their layout helpers

constexpr int kWishartWarps = 4;
// Per-thread Wishart work goes to shared memory when a block's fits in the default 48 KiB, else
// to a global scratch of at most this many bytes (the grid is capped to fit).
constexpr std::size_t kWishartSharedCap = 48 * 1024;
constexpr std::size_t kWishartScratchCap = std::size_t(256) << 20;

template <class T>
int launch_tokens(const linear::Law<T>& P, index_t batch, const DeviceScope& scope, const T* W_pv,
                  const T* W_kq, Scratch* partial) {
  const LsaShape sh{batch, P.d, P.N};
  const PredictionLayout lay = prediction_layout<T>(sh, true, scope, 0, tokens_warp_extra(P.d));
  auto kernel = sampled_tokens_kernel<T>;
  prepare(kernel, lay.total(), scope, "linear_prompts_lsa_loss_and_grad(method='tokens')", sh);
  const int threads = lay.warps * kWarp;
  const int blocks = resident_blocks(kernel, threads, lay.total(), scope,
                                     (batch + lay.warps - 1) / lay.warps);
  *partial = Scratch(sizeof(double) * std::size_t(blocks) * std::size_t(lay.acc_width()));
  kernel<<<blocks, threads, lay.total(), stream()>>>(P, batch, lay, W_pv, W_kq,
                                                     static_cast<double*>(partial->get()));
  check_launch("sampled_tokens_kernel");
  return blocks;
}

template <class T>
int launch_wishart(const linear::Law<T>& P, index_t batch, const DeviceScope& scope, const T* W_pv,
                   const T* W_kq, Scratch* partial, Scratch* work) {
  WishartLayout lay{int(P.d), int(wishart::noise_dim(P)), kWishartWarps, true};
  if (lay.shared_bytes<T>() > kWishartSharedCap) lay.work_in_shared = false;
  const std::size_t smem = lay.shared_bytes<T>();
  auto kernel = sampled_wishart_kernel<T>;
  prepare(kernel, smem, scope, "linear_prompts_lsa_loss_and_grad(method='wishart')",
          LsaShape{batch, P.d, P.N});
  const int threads = kWishartWarps * kWarp;
  index_t cap = (batch + threads - 1) / threads;
  const std::size_t per_block = sizeof(T) * std::size_t(threads) * std::size_t(lay.thread_values());
  if (!lay.work_in_shared) cap = std::min<index_t>(cap, std::max<index_t>(1, index_t(kWishartScratchCap / per_block)));
  const int blocks = resident_blocks(kernel, threads, smem, scope, cap);
  if (!lay.work_in_shared) *work = Scratch(per_block * std::size_t(blocks));
  *partial = Scratch(sizeof(double) * std::size_t(blocks) * std::size_t(lay.acc_width()));
  kernel<<<blocks, threads, smem, stream()>>>(P, batch, lay, W_pv, W_kq, static_cast<T*>(work->get()),
                                              static_cast<double*>(partial->get()));
  check_launch("sampled_wishart_kernel");
  return blocks;
}

}  // namespace

template <class T>
void sample_linear_prompts(const linear::Law<T>& host_law, index_t batch,
                           const LinearPromptOutputs<T>& host_out) {
  DeviceScope scope({host_out.E, host_out.y_q, host_out.X, host_out.y, host_out.w, host_out.x_q,
                     host_out.lambda});
  const index_t d = host_law.d, N = host_law.N;
  DeviceInput<T> L(scope, host_law.L, d * d), Lq(scope, host_law.Lq, d * d);
  linear::Law<T> P = host_law;  // the same law with device copies of the factors
  P.L = L.get();
  P.Lq = Lq.get();
  DeviceOutput<T> E(scope, host_out.E, batch * (d + 1) * (N + 1)), y_q(scope, host_out.y_q, batch),
      X(scope, host_out.X, batch * N * d), y(scope, host_out.y, batch * N),
      w(scope, host_out.w, batch * d), x_q(scope, host_out.x_q, batch * d),
      lambda(scope, host_out.lambda, batch * d);
  const LinearPromptOutputs<T> out{E.get(), y_q.get(), X.get(), y.get(), w.get(), x_q.get(), lambda.get()};
  const LsaShape sh{batch, d, N};
  const PredictionLayout lay = prediction_layout<T>(sh, false, scope, 0, tokens_warp_extra(d));
  auto kernel = linear_prompts_kernel<T>;
  prepare(kernel, lay.total(), scope, "LinearPrompts.sample(device='cuda')", sh);
  const int threads = lay.warps * kWarp;
  const int blocks = resident_blocks(kernel, threads, lay.total(), scope,
                                     (batch + lay.warps - 1) / lay.warps);
  kernel<<<blocks, threads, lay.total(), stream()>>>(P, batch, lay, out);
  check_launch("linear_prompts_kernel");
  scope.finish();  // host outputs back (device outputs: nothing waits)
}

template <class T>
double linear_prompts_lsa_loss_and_grad(const linear::Law<T>& host_law, index_t batch,
                                        FusedMethod method, const T* W_pv, const T* W_kq,
                                        T* d_W_pv, T* d_W_kq, double* loss) {
  DeviceScope scope({W_pv, W_kq, d_W_pv, d_W_kq, loss});
  const index_t d = host_law.d, rows = d + 1, n2 = rows * rows;
  DeviceInput<T> pv(scope, W_pv, n2), kq(scope, W_kq, n2);
  DeviceInput<T> L(scope, host_law.L, d * d), Lq(scope, host_law.Lq, d * d);
  DeviceOutput<T> dpv(scope, d_W_pv, n2), dkq(scope, d_W_kq, n2);
  linear::Law<T> P = host_law;  // the same law with device copies of the factors
  P.L = L.get();
  P.Lq = Lq.get();
  Scratch partial, work;
  const int blocks = method == FusedMethod::wishart
                         ? launch_wishart(P, batch, scope, pv.get(), kq.get(), &partial, &work)
                         : launch_tokens(P, batch, scope, pv.get(), kq.get(), &partial);
  double returned = std::numeric_limits<double>::quiet_NaN();  // host: back with the one wait
  finish_loss_and_grad(scope, partial, blocks, int(rows), batch, dpv.get(), dkq.get(),
                       loss != nullptr ? loss : &returned);
  return returned;
}

template void sample_linear_prompts<float>(const linear::Law<float>&, index_t,
                                           const LinearPromptOutputs<float>&);
template void sample_linear_prompts<double>(const linear::Law<double>&, index_t,
                                            const LinearPromptOutputs<double>&);
template double linear_prompts_lsa_loss_and_grad<float>(const linear::Law<float>&, index_t,
                                                        FusedMethod, const float*, const float*,
                                                        float*, float*, double*);
template double linear_prompts_lsa_loss_and_grad<double>(const linear::Law<double>&, index_t,
                                                         FusedMethod, const double*,
                                                         const double*, double*, double*, double*);

}  // namespace lsa_native::cuda
