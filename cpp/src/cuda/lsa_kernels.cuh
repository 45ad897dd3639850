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

// What a prediction kernel computes: ŷ only; ŷ, the loss and its gradient partials (weight res per
// prompt); or the prediction VJP (weight dŷ per prompt: the same partials, and dE).
enum class PredictionMode { predict, loss, vjp };

// Shared memory of the prediction kernels, in bytes: per block W^KQ [rows, rows] and p [rows];
// per warp the double accumulators (loss gradient / VJP only), the T scratch and `warp_extra` T
// values for the prompt source (StagedPrompts needs none; sampled_kernels.cuh's generator does).
struct PredictionLayout {
  int rows, cols, warps;
  bool sums;  // loss or vjp: the per-warp double accumulators exist
  std::size_t block_bytes, warp_bytes;
  // Per-warp doubles: acc = [loss, d_p (rows), d_K (rows²)] then coef (rows), e_q (rows).
  __host__ __device__ int acc_width() const { return 1 + rows + rows * rows; }
  __host__ __device__ std::size_t warp_doubles() const { return sums ? std::size_t(acc_width() + 2 * rows) : 0; }
  // Per-warp T: prompt [rows, cols], q [rows], t [cols], s [cols], G p [rows], extra [warp_extra].
  template <class T>
  static PredictionLayout make(int rows, int cols, int warps, bool sums, int warp_extra = 0) {
    PredictionLayout l{rows, cols, warps, sums, 0, 0};
    l.block_bytes = align16(sizeof(T) * std::size_t(rows * rows + rows));
    l.warp_bytes = align16(sizeof(double) * l.warp_doubles() +
                           sizeof(T) * std::size_t(rows * cols + 2 * rows + 2 * cols + warp_extra));
    return l;
  }
  __host__ __device__ std::size_t total() const { return block_bytes + std::size_t(warps) * warp_bytes; }
};

// Where a prediction kernel's prompts come from: E [B, rows, cols] in global memory, staged into the
// warp's shared memory with streaming loads. load() (all lanes of the warp; ends with the warp
// synchronised) fills prompt [rows, cols] and returns the prompt's input scalar upstream[b] (y_q for
// the loss, dŷ for the VJP; 0 for predict, which reads none). t [cols] and extra are scratch the
// source may use before the kernel does (the fused sampled step's generator, sampled_kernels.cuh).
template <class T>
struct StagedPrompts {
  const T* E;
  const T* upstream;
  __device__ __forceinline__ T load(index_t b, T* prompt, int size, T* /*t*/, T* /*extra*/,
                                    int lane) const {
    stage(E + b * size, prompt, size, lane, kWarp);
    __syncwarp();
    return upstream != nullptr ? upstream[b] : T(0);
  }
};

// predict: y_hat. loss (weight w_b = res_b = ŷ_b − y_q,b): also the per-block partial sums
// partial [gridDim.x, 1 + rows + rows²] = [Σ w², Σ w g_p/N, Σ w (g_k/N) e_q^T] (SPEC 3.2).
// vjp (weight w_b = dŷ_b = upstream[b]): the same partials (slot 0 unused) and, when d_E is not
// null, d_E [B, rows, cols] = dŷ ∂ŷ/∂E (recipe::prediction_input_grad_entry).
// The prompts and upstream[b] come from `src` (StagedPrompts, or a generator).
template <class T, PredictionMode kMode, class Source = StagedPrompts<T>>
__global__ void lsa_prediction_kernel(LsaShape sh, PredictionLayout lay, Source src,
                                      const T* __restrict__ W_pv, const T* __restrict__ W_kq,
                                      T* __restrict__ y_hat, double* __restrict__ partial,
                                      T* __restrict__ d_E) {
  constexpr bool kSums = kMode != PredictionMode::predict;
  LSA_DYNAMIC_SHARED(smem);
  const int rows = lay.rows, cols = lay.cols, N = cols - 1, size = rows * cols;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  T* sW_kq = reinterpret_cast<T*>(smem);  // [rows, rows]
  T* sp = sW_kq + rows * rows;            // [rows] last row of W^PV
  unsigned char* mine = smem + lay.block_bytes + std::size_t(warp) * lay.warp_bytes;
  double* acc = reinterpret_cast<double*>(mine);  // [acc_width]
  double* coef = acc + lay.acc_width();           // [rows] w g_k / N
  double* e_q = coef + rows;                      // [rows]
  T* prompt = reinterpret_cast<T*>(mine + sizeof(double) * lay.warp_doubles());  // [rows, cols]
  T* q = prompt + size;                           // [rows]
  T* t = q + rows;                                // [cols]
  T* s = t + cols;                                // [cols]
  T* Gp = s + cols;                               // [rows] G p = g_k / N (vjp with d_E)
  T* extra = Gp + rows;                           // [warp_extra] the source's scratch

  for (int i = threadIdx.x; i < rows * rows; i += blockDim.x) sW_kq[i] = W_kq[i];
  for (int i = threadIdx.x; i < rows; i += blockDim.x) sp[i] = W_pv[(rows - 1) * rows + i];
  if (kSums)
    for (int i = lane; i < lay.acc_width(); i += kWarp) acc[i] = 0;
  __syncthreads();

  const Mat<T> Ep = rows_of<T>(prompt, cols), Wk = rows_of<T>(sW_kq, rows);
  const T inv_n = recipe::inv_context<T>(N);
  double loss = 0;  // lane 0's running Σ res²
  const index_t n_warps = index_t(gridDim.x) * lay.warps;
  for (index_t b = index_t(blockIdx.x) * lay.warps + warp; b < sh.batch; b += n_warps) {
    const T in_b = src.load(b, prompt, size, t, extra, lane);  // upstream[b]
    for (int r = lane; r < rows; r += kWarp) q[r] = recipe::query_entry(Wk, Ep, rows, N, r);
    __syncwarp();
    T sum_ts = T(0);
    for (int j = lane; j < cols; j += kWarp) {
      T tj, sj;
      recipe::token_scalars(Ep, rows, sp, q, j, tj, sj);
      if (kSums) {
        t[j] = tj;
        s[j] = sj;
      }
      sum_ts += tj * sj;
    }
    if (kMode != PredictionMode::vjp) {
      sum_ts = warp_sum(sum_ts);
      const T pred = recipe::prediction(Ep(rows - 1, N), sum_ts, N);
      if (lane == 0 && y_hat != nullptr) y_hat[b] = pred;
      if (kMode == PredictionMode::predict) {
        __syncwarp();  // the next prompt overwrites the staged one
        continue;
      }
    }
    __syncwarp();  // t, s complete
    double w;      // the prompt's weight
    if (kMode == PredictionMode::loss) {
      const T pred = recipe::prediction(Ep(rows - 1, N), sum_ts, N);
      w = double(pred) - double(in_b);
      if (lane == 0) loss += w * w;
    } else {
      w = double(in_b);
    }
    const double scale = recipe::residual_scale<T>(w, N);
    for (int r = lane; r < rows; r += kWarp) {
      T g_p, g_k;
      recipe::weighted_row_sums(Ep, cols, t, s, r, g_p, g_k);
      acc[1 + r] += scale * double(g_p);  // w ∂ŷ_b/∂p
      coef[r] = scale * double(g_k);
      e_q[r] = double(Ep(r, N));
      if (kMode == PredictionMode::vjp) Gp[r] = g_k * inv_n;
    }
    __syncwarp();
    double* d_K = acc + 1 + rows;  // += coef e_q^T, lanes along the columns (no div/mod)
    for (int r = 0; r < rows; ++r)
      for (int c = lane; c < rows; c += kWarp) d_K[r * rows + c] += coef[r] * e_q[c];
    if (kMode == PredictionMode::vjp && d_E != nullptr) {
      const T dy = in_b;
      T* out = d_E + b * size;
      for (int r = 0; r < rows; ++r) {  // row by row: the lanes write consecutive tokens
        const T through_q = recipe::through_query_entry(Wk, Gp, rows, r);
        for (int j = lane; j < cols; j += kWarp)
          out[r * cols + j] =
              recipe::prediction_input_grad_entry(dy, inv_n, sp, q, t, s, through_q, rows, N, r, j);
      }
    }
    __syncwarp();  // the next prompt overwrites the staged one
  }
  if (!kSums) return;
  if (lane == 0) acc[0] = loss;
  __syncthreads();
  // Block partial: warps combined in order 0, 1, ...
  const int width = lay.acc_width();
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    double sum = 0;
    for (int w = 0; w < lay.warps; ++w)
      sum += reinterpret_cast<const double*>(smem + lay.block_bytes + std::size_t(w) * lay.warp_bytes)[i];
    partial[index_t(blockIdx.x) * width + i] = sum;
  }
}

// d_W_pv = 0 but its last row = d_p · scale; d_W_kq = d_K · scale; with scale = 1/B for the loss
// gradient (then loss = ½ Σ res² / B  [ZFB (3.7)]) and 1 for the prediction VJP (loss null).
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
