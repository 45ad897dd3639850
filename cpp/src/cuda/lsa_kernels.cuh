// The CUDA kernels of the batched LSA (included by lsa_cuda.cu, and by the CPU emulation test
// cpp/tests/test_cuda_emulated.cpp, which runs them on host threads). Launch geometry, memory
// movement and reductions only: every per-entry formula is recipe::* (common/lsa_recipe.hpp).
//
// Prediction and loss gradient: one warp per prompt (grid-stride over the batch). The warp copies
// its prompt into shared memory with coalesced, unrolled streaming loads (E is read from global
// memory exactly once), then lanes take tokens (t_j, s_j) and rows (the backward row sums).
// Full forward and VJP: one block per prompt (grid-stride), E (and d_F) staged in shared memory,
// the (d+1)² Gram and small products spread over the block's threads.
// Batch sums (loss, parameter gradients) accumulate per warp/block in double, are combined per
// block in a fixed order and reduced across blocks by reduce_partials_kernel in a fixed order: no
// atomics, so two runs on one device give bitwise equal results.
#pragma once

#include <cstddef>

#include "common/lsa_recipe.hpp"
#include "cuda/kernel_common.cuh"
#include "lsa_native/lsa.hpp"

namespace lsa_native::cuda::kernels {
namespace {

using recipe::Mat;
using recipe::rows_of;

// ---- prediction and loss gradient: one warp per prompt -----------------------------------------

// What a prediction kernel computes per prompt: ŷ only; ŷ and the loss gradient terms (weight
// w = res = ŷ − y_q); or the prediction VJP (weight w = dŷ, the upstream; the same gradient terms
// and, when requested, dE = dŷ ∂ŷ/∂E).
enum class PredictionMode { predict, loss, vjp };

// Shared memory of the prediction kernels, in bytes: per block W^KQ [rows, rows], p [rows] and
// block_extra T values; per warp the double accumulators (loss gradient / VJP only), the T scratch
// and warp_extra T values (the extras: the fused sampled step's factors and draws).
struct PredictionLayout {
  int rows, cols, warps;
  bool sums;  // loss or VJP: the per-warp gradient accumulators exist
  std::size_t block_bytes, warp_bytes;
  // Per-warp doubles: acc = [loss, d_p (rows), d_K (rows²)] then coef (rows), e_q (rows).
  __host__ __device__ int acc_width() const { return 1 + rows + rows * rows; }
  __host__ __device__ std::size_t warp_doubles() const { return sums ? std::size_t(acc_width() + 2 * rows) : 0; }
  // Per-warp T: prompt [rows, cols], q [rows], t [cols], s [cols], G p [rows], then the extras.
  template <class T>
  static PredictionLayout make(int rows, int cols, int warps, bool sums, int block_extra = 0,
                               int warp_extra = 0) {
    PredictionLayout l{rows, cols, warps, sums, 0, 0};
    l.block_bytes = align16(sizeof(T) * std::size_t(rows * rows + rows + block_extra));
    l.warp_bytes = align16(sizeof(double) * l.warp_doubles() +
                           sizeof(T) * std::size_t(rows * cols + 2 * rows + 2 * cols + warp_extra));
    return l;
  }
  __host__ __device__ std::size_t total() const { return block_bytes + std::size_t(warps) * warp_bytes; }
};

// One warp's part of the prediction kernels' shared memory.
template <class T>
struct WarpArea {
  double* acc;   // [acc_width] batch sums of this warp (loss / VJP)
  double* coef;  // [rows] res g_k / N
  double* e_q;   // [rows]
  T* prompt;     // [rows, cols] the staged (or generated) prompt
  T* q;          // [rows]
  T* t;          // [cols]
  T* s;          // [cols]
  T* Gp;         // [rows] G p (VJP with dE)
  T* extra;      // [warp_extra]
};

template <class T>
__device__ __forceinline__ WarpArea<T> warp_area(const PredictionLayout& lay, unsigned char* smem,
                                                 int warp) {
  unsigned char* mine = smem + lay.block_bytes + std::size_t(warp) * lay.warp_bytes;
  WarpArea<T> a;
  a.acc = reinterpret_cast<double*>(mine);
  a.coef = a.acc + lay.acc_width();
  a.e_q = a.coef + lay.rows;
  a.prompt = reinterpret_cast<T*>(mine + sizeof(double) * lay.warp_doubles());
  a.q = a.prompt + lay.rows * lay.cols;
  a.t = a.q + lay.rows;
  a.s = a.t + lay.cols;
  a.Gp = a.s + lay.cols;
  a.extra = a.Gp + lay.rows;
  return a;
}

// Block prologue: W^KQ and p (last row of W^PV) into shared memory, the warps' accumulators zeroed.
// Returns the block's extras (block_extra T values after p).
template <class T>
__device__ __forceinline__ T* load_parameters(const PredictionLayout& lay, unsigned char* smem,
                                              const T* __restrict__ W_pv, const T* __restrict__ W_kq) {
  const int rows = lay.rows;
  T* sW_kq = reinterpret_cast<T*>(smem);
  T* sp = sW_kq + rows * rows;
  for (int i = threadIdx.x; i < rows * rows; i += blockDim.x) sW_kq[i] = W_kq[i];
  for (int i = threadIdx.x; i < rows; i += blockDim.x) sp[i] = W_pv[(rows - 1) * rows + i];
  if (lay.sums) {
    const WarpArea<T> a = warp_area<T>(lay, smem, int(threadIdx.x) / kWarp);
    for (int i = int(threadIdx.x) % kWarp; i < lay.acc_width(); i += kWarp) a.acc[i] = 0;
  }
  return sp + rows;
}

// One prompt in a.prompt, by the lanes of one warp: returns ŷ (on every lane). kMode = loss adds
// the prompt's gradient terms for the weight res = ŷ − target to a.acc and lane 0's res² to
// `loss`; kMode = vjp adds them for the weight dŷ = target and writes d_E_b [rows, cols] when not
// null. Ends with the warp synchronised (the caller may overwrite the prompt).
template <class T, PredictionMode kMode>
__device__ __forceinline__ T warp_prompt(const PredictionLayout& lay, const WarpArea<T>& a,
                                         const unsigned char* smem, T target, int lane, double& loss,
                                         T* __restrict__ d_E_b = nullptr) {
  constexpr bool kSums = kMode != PredictionMode::predict;
  const int rows = lay.rows, cols = lay.cols, N = cols - 1;
  const T* sW_kq = reinterpret_cast<const T*>(smem);
  const T* sp = sW_kq + rows * rows;
  const Mat<T> Ep = rows_of<T>(a.prompt, cols), Wk = rows_of<T>(sW_kq, rows);
  for (int r = lane; r < rows; r += kWarp) a.q[r] = recipe::query_entry(Wk, Ep, rows, N, r);
  __syncwarp();
  T sum_ts = T(0);
  for (int j = lane; j < cols; j += kWarp) {
    T tj, sj;
    recipe::token_scalars(Ep, rows, sp, a.q, j, tj, sj);
    if (kSums) {
      a.t[j] = tj;
      a.s[j] = sj;
    }
    sum_ts += tj * sj;
  }
  sum_ts = warp_sum(sum_ts);
  const T pred = recipe::prediction(Ep(rows - 1, N), sum_ts, N);
  if (kSums) {
    __syncwarp();  // t, s complete
    const double w = kMode == PredictionMode::loss ? double(pred) - double(target) : double(target);
    const double scale = recipe::residual_scale<T>(w, N);
    if (kMode == PredictionMode::loss && lane == 0) loss += w * w;
    const bool input_grad = kMode == PredictionMode::vjp && d_E_b != nullptr;
    for (int r = lane; r < rows; r += kWarp) {
      T g_p, g_k;
      recipe::weighted_row_sums(Ep, cols, a.t, a.s, r, g_p, g_k);
      a.acc[1 + r] += scale * double(g_p);  // w ∂ŷ/∂p
      a.coef[r] = scale * double(g_k);
      a.e_q[r] = double(Ep(r, N));
      if (input_grad) a.Gp[r] = g_k * recipe::inv_context<T>(N);
    }
    __syncwarp();
    double* d_K = a.acc + 1 + rows;  // += coef e_q^T, lanes along the columns (no div/mod)
    for (int r = 0; r < rows; ++r)
      for (int c = lane; c < rows; c += kWarp) d_K[r * rows + c] += a.coef[r] * a.e_q[c];
    if (input_grad) {
      const T inv_n = recipe::inv_context<T>(N);
      for (int r = 0; r < rows; ++r) {  // row by row: the lanes write consecutive tokens
        const T through_q = recipe::through_query_entry(Wk, a.Gp, rows, r);
        for (int j = lane; j < cols; j += kWarp)
          d_E_b[r * cols + j] = recipe::prediction_input_grad_entry(target, inv_n, sp, a.q, a.t,
                                                                    a.s, through_q, rows, N, r, j);
      }
    }
  }
  __syncwarp();
  return pred;
}

// Block epilogue of the loss kernels: lane 0's `loss` into its warp's acc[0], then the block partial
// partial [gridDim.x, acc_width] with the warps combined in order 0, 1, ...
template <class T>
__device__ __forceinline__ void block_partial(const PredictionLayout& lay, unsigned char* smem,
                                              double loss, double* __restrict__ partial) {
  if (threadIdx.x % kWarp == 0) warp_area<T>(lay, smem, int(threadIdx.x) / kWarp).acc[0] = loss;
  __syncthreads();
  const int width = lay.acc_width();
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    double sum = 0;
    for (int w = 0; w < lay.warps; ++w) sum += warp_area<T>(lay, smem, w).acc[i];
    partial[index_t(blockIdx.x) * width + i] = sum;
  }
}

// predict: y_hat. loss (upstream = y_q): also the per-block partial sums partial [gridDim.x,
// 1 + rows + rows²] = [Σ res², Σ res g_p/N, Σ res (g_k/N) e_q^T] (SPEC 3.2). vjp (upstream = dŷ):
// the same partials with weight dŷ (slot 0 unused) and d_E when not null.
template <class T, PredictionMode kMode>
__global__ void lsa_prediction_kernel(LsaShape sh, PredictionLayout lay, const T* __restrict__ E,
                                      const T* __restrict__ upstream, const T* __restrict__ W_pv,
                                      const T* __restrict__ W_kq, T* __restrict__ y_hat,
                                      double* __restrict__ partial, T* __restrict__ d_E) {
  LSA_DYNAMIC_SHARED(smem);
  const int size = lay.rows * lay.cols;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  load_parameters(lay, smem, W_pv, W_kq);
  __syncthreads();
  const WarpArea<T> a = warp_area<T>(lay, smem, warp);
  double loss = 0;  // lane 0's running Σ res²
  const index_t n_warps = index_t(gridDim.x) * lay.warps;
  for (index_t b = index_t(blockIdx.x) * lay.warps + warp; b < sh.batch; b += n_warps) {
    stage(E + b * size, a.prompt, size, lane, kWarp);
    __syncwarp();
    const T target = kMode == PredictionMode::predict ? T(0) : upstream[b];
    const T pred = warp_prompt<T, kMode>(lay, a, smem, target, lane, loss,
                                         d_E == nullptr ? nullptr : d_E + b * size);
    if (lane == 0 && y_hat != nullptr) y_hat[b] = pred;
  }
  if (kMode != PredictionMode::predict) block_partial<T>(lay, smem, loss, partial);
}

// d_W_pv = 0 but its last row = d_p · scale; d_W_kq = d_K · scale; with scale = 1/B for the loss
// gradient (and loss = ½ Σ res² / B  [ZFB (3.7)]) or 1 for the prediction VJP (loss null).
template <class T>
__global__ void prediction_epilogue_kernel(const double* __restrict__ total, int rows, double scale,
                                           T* __restrict__ d_W_pv, T* __restrict__ d_W_kq,
                                           double* __restrict__ loss) {
  const double* d_p = total + 1;
  const double* d_K = d_p + rows;
  for (int i = threadIdx.x; i < rows * rows; i += blockDim.x) {
    const int r = i / rows, c = i % rows;
    d_W_pv[i] = r == rows - 1 ? T(d_p[c] * scale) : T(0);
    d_W_kq[i] = T(d_K[i] * scale);
  }
  if (threadIdx.x == 0 && loss != nullptr) *loss = 0.5 * total[0] * scale;
}

// ---- full forward and VJP: one block per prompt --------------------------------------------------

constexpr int kBlockThreads = 256;

// F = E + P E with P = W^PV G W^KQ, G = E E^T / N   [ZFB (3.3)], Gram-first.
// Shared T: W^PV, W^KQ, G, GW, P [rows, rows] each, then the prompt [rows, cols].
template <class T>
__global__ void lsa_forward_kernel(LsaShape sh, const T* __restrict__ E, const T* __restrict__ W_pv,
                                   const T* __restrict__ W_kq, T* __restrict__ F) {
  LSA_DYNAMIC_SHARED(smem);
  const int rows = int(sh.dim + 1), cols = int(sh.context + 1), N = cols - 1;
  const int n2 = rows * rows, size = rows * cols;
  T* sW_pv = reinterpret_cast<T*>(smem);
  T* sW_kq = sW_pv + n2;
  T* G = sW_kq + n2;
  T* GW = G + n2;
  T* P = GW + n2;
  T* prompt = P + n2;
  for (int i = threadIdx.x; i < n2; i += blockDim.x) {
    sW_pv[i] = W_pv[i];
    sW_kq[i] = W_kq[i];
  }
  const Mat<T> Ep = rows_of<T>(prompt, cols);
  const T inv_n = recipe::inv_context<T>(N);
  for (index_t b = blockIdx.x; b < sh.batch; b += gridDim.x) {
    __syncthreads();  // parameters loaded / previous prompt done
    stage(E + b * size, prompt, size, threadIdx.x, blockDim.x);
    __syncthreads();
    for (int i = threadIdx.x; i < n2; i += blockDim.x)
      G[i] = recipe::token_product(Ep, Ep, cols, i / rows, i % rows) * inv_n;  // G = E E^T / N
    __syncthreads();
    for (int i = threadIdx.x; i < n2; i += blockDim.x)  // G W^KQ
      GW[i] = recipe::product_entry(rows_of<T>(G, rows), rows_of<T>(sW_kq, rows), rows,
                                    i / rows, i % rows);
    __syncthreads();
    for (int i = threadIdx.x; i < n2; i += blockDim.x)  // P = W^PV (G W^KQ)
      P[i] = recipe::product_entry(rows_of<T>(sW_pv, rows), rows_of<T>(GW, rows), rows,
                                   i / rows, i % rows);
    __syncthreads();
    T* Fb = F + b * size;
    for (int i = threadIdx.x; i < size; i += blockDim.x) {  // F = E + P E
      const int r = i / cols, j = i % cols;
      Fb[i] = recipe::row_combination_entry(Ep(r, j), rows_of<T>(P, rows), Ep, rows, r, j);
    }
  }
}

// VJP of lsa_forward (SPEC 3.2; the steps are listed at the end of lsa_recipe.hpp).
// Shared: double accumulators dW^PV, dW^KQ [rows, rows] each; T: W^PV, W^KQ, G, dP, T1, T2, Pt,
// Tmp, dG [rows, rows] each, then E and d_F [rows, cols]. partial [gridDim.x, 2 rows²].
template <class T>
__global__ void lsa_vjp_kernel(LsaShape sh, const T* __restrict__ E, const T* __restrict__ W_pv,
                               const T* __restrict__ W_kq, const T* __restrict__ d_F,
                               T* __restrict__ d_E, double* __restrict__ partial) {
  LSA_DYNAMIC_SHARED(smem);
  const int rows = int(sh.dim + 1), cols = int(sh.context + 1), N = cols - 1;
  const int n2 = rows * rows, size = rows * cols;
  double* acc = reinterpret_cast<double*>(smem);  // [2 n2]
  T* sW_pv = reinterpret_cast<T*>(acc + 2 * n2);
  T* sW_kq = sW_pv + n2;
  T* G = sW_kq + n2;
  T* dP = G + n2;
  T* T1 = dP + n2;
  T* T2 = T1 + n2;
  T* Pt = T2 + n2;
  T* Tmp = Pt + n2;
  T* dG = Tmp + n2;
  T* e = dG + n2;
  T* df = e + size;
  for (int i = threadIdx.x; i < n2; i += blockDim.x) {
    sW_pv[i] = W_pv[i];
    sW_kq[i] = W_kq[i];
    acc[i] = acc[n2 + i] = 0;
  }
  auto M = [rows](const T* p) { return rows_of<T>(p, rows); };
  const Mat<T> Ep = rows_of<T>(e, cols), dFp = rows_of<T>(df, cols);
  const Mat<T> W_pv_t = M(sW_pv).transposed(), W_kq_t = M(sW_kq).transposed();
  const T inv_n = recipe::inv_context<T>(N);
  for (index_t b = blockIdx.x; b < sh.batch; b += gridDim.x) {
    __syncthreads();
    stage(E + b * size, e, size, threadIdx.x, blockDim.x);
    stage(d_F + b * size, df, size, threadIdx.x, blockDim.x);
    __syncthreads();
    for (int i = threadIdx.x; i < n2; i += blockDim.x) {
      const int r = i / rows, c = i % rows;
      G[i] = recipe::token_product(Ep, Ep, cols, r, c) * inv_n;  // G = E E^T / N
      dP[i] = recipe::token_product(dFp, Ep, cols, r, c);        // dP = d_F E^T
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n2; i += blockDim.x) {
      const int r = i / rows, c = i % rows;
      T1[i] = recipe::product_entry(W_kq_t, M(G), rows, r, c);  // W^KQ^T G = (G W^KQ)^T
      T2[i] = recipe::product_entry(M(G), W_pv_t, rows, r, c);  // G W^PV^T = (W^PV G)^T
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n2; i += blockDim.x) {
      const int r = i / rows, c = i % rows;
      acc[i] += double(recipe::product_entry(M(dP), M(T1), rows, r, c));       // dW^PV += dP T1
      acc[n2 + i] += double(recipe::product_entry(M(T2), M(dP), rows, r, c));  // dW^KQ += T2 dP
      if (d_E != nullptr) {
        Pt[i] = recipe::product_entry(W_kq_t, M(T2), rows, r, c);   // P^T = W^KQ^T T2
        Tmp[i] = recipe::product_entry(W_pv_t, M(dP), rows, r, c);  // W^PV^T dP
      }
    }
    if (d_E == nullptr) continue;  // uniform across the block
    __syncthreads();
    for (int i = threadIdx.x; i < n2; i += blockDim.x)  // dG = (W^PV^T dP) W^KQ^T
      dG[i] = recipe::product_entry(M(Tmp), W_kq_t, rows, i / rows, i % rows);
    __syncthreads();
    for (int i = threadIdx.x; i < n2; i += blockDim.x)  // (dG + dG^T) / N, into G (free now)
      G[i] = recipe::symmetric_part_entry(M(dG), N, i / rows, i % rows);
    __syncthreads();
    T* dEb = d_E + b * size;
    for (int i = threadIdx.x; i < size; i += blockDim.x) {  // dE = (d_F + P^T d_F) + ((dG+dG^T)/N) E
      const int r = i / cols, j = i % cols;
      const T first = recipe::row_combination_entry(dFp(r, j), M(Pt), dFp, rows, r, j);
      dEb[i] = recipe::row_combination_entry(first, M(G), Ep, rows, r, j);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 2 * n2; i += blockDim.x) partial[index_t(blockIdx.x) * 2 * n2 + i] = acc[i];
}

template <class T>
__global__ void vjp_epilogue_kernel(const double* __restrict__ total, int n2, T* __restrict__ d_W_pv,
                                    T* __restrict__ d_W_kq) {
  for (int i = threadIdx.x; i < n2; i += blockDim.x) {
    d_W_pv[i] = T(total[i]);
    d_W_kq[i] = T(total[n2 + i]);
  }
}

template <class T>
std::size_t forward_smem(int rows, int cols) {
  return sizeof(T) * std::size_t(5 * rows * rows + rows * cols);
}
template <class T>
std::size_t vjp_smem(int rows, int cols) {
  return sizeof(double) * std::size_t(2 * rows * rows) +
         sizeof(T) * std::size_t(9 * rows * rows + 2 * rows * cols);
}

}  // namespace
}  // namespace lsa_native::cuda::kernels
