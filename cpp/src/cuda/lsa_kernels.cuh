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

// ---- full forward and VJP, tiled: one 128-thread block per prompt ------------------------------
//
// The per-prompt work is products of three shapes, each done with few shared loads per FMA:
// - Gram products over the tokens (G = E E^T / N, dP = d_F E^T; K = N + 1): register tiles
//   kTokenTile x kTokenTile per thread in the VJP, kSmallTile x kSmallTile in the forward (G: only
//   tiles on or above the diagonal), the tokens split in
//   g interleaved groups over adjacent lanes and summed by shuffles;
// - small [d+1]^3 products (G W^KQ, W^PV (G W^KQ), the VJP's six): 3x7 register tiles;
// - the token side F = E + P E, dE = d_F + P^T d_F + S E: lanes over tokens (kTok per lane, loads
//   of E and d_F conflict-free, stores coalesced), 8-row chunks whose coefficients are read as
//   128-bit broadcasts from a transposed, padded copy CT[s * ldc + r] = C[r, s].
// Arithmetic per entry: recipe::accumulate_tile (= product_entry / token_product for g = 1) and
// the order of recipe::row_combination_entry. Barriers per prompt: 5 (forward), 6 (VJP; 4 without
// dE).

constexpr int kTiledThreads = 128;
constexpr int kTokenTile = 7;  // Gram products of the VJP (21 = 3 tiles at d = 20)
constexpr int kSmallTile = 3;  // the forward's Gram (21 = 7 tiles)
// [d+1]^3 products: 3 x 7 tiles (d = 20: 21 tiles per product, so the VJP's four fill 84 lanes,
// 3 warps, where 3 x 3 tiles left a warp of 4 lanes; 10 loads per 21 FMAs).
constexpr int kSmallRows = 3, kSmallCols = 7;
constexpr int kChunk = 8;      // rows per item of a row combination (one load8 of coefficients)
// Blocks per SM the register allocation must allow (__launch_bounds__), near what shared memory
// allows at d = 20, N = 100 (per block: forward 18 / 35 KB, VJP 40 / 74 KB in float / double, of
// the 228 KB of an H100 SM); more would spill.
template <class T>
constexpr int tiled_forward_blocks() { return sizeof(T) == 4 ? 6 : 4; }
template <class T>
constexpr int tiled_vjp_blocks() { return sizeof(T) == 4 ? 4 : 3; }

// Row stride of the transposed coefficient copies: rows rounded up to kChunk (load8 alignment).
__host__ __device__ inline int coefficient_stride(int rows) { return (rows + kChunk - 1) / kChunk * kChunk; }

// Shared memory of the tiled kernels, in bytes. Forward, T: P^T [rows, ldc], W^PV, W^KQ^T, G,
// (G W^KQ)^T [rows, rows], the prompt [rows, cols]. VJP: double dW^PV, dW^KQ [rows, rows]; T: P, S [rows, ldc],
// W^PV, W^KQ, G, dP, U, T2, dG [rows, rows], E and d_F [rows, cols].
template <class T>
std::size_t tiled_forward_smem(int rows, int cols) {  // in size_t: d large enough to overflow int
  const std::size_t r = std::size_t(rows), c = std::size_t(cols), ldc = std::size_t(coefficient_stride(rows));
  return sizeof(T) * (r * ldc + 4 * r * r + r * c);
}
template <class T>
std::size_t tiled_vjp_smem(int rows, int cols) {
  const std::size_t r = std::size_t(rows), c = std::size_t(cols), ldc = std::size_t(coefficient_stride(rows));
  return sizeof(double) * (2 * r * r) + sizeof(T) * (2 * r * ldc + 7 * r * r + 2 * r * c);
}

// One product of a phase: out[r, c] = Σ_{k<K} A(r, k) B(k, c) for r < n_r, c < n_c, A and B views
// (recipe::Mat, or RowsOf / ColsOf: k steps by 1 in A = RowsOf and B = ColsOf). sym: the product
// is symmetric (A B^T with A = B), only tiles on or above the diagonal are computed and each entry
// is stored at (r, c) and (c, r).
template <class MA, class MB = MA>
struct Product {
  MA A;
  MB B;
  int n_r, n_c, K;
  bool sym;
};
template <class T>
using FastProduct = Product<recipe::RowsOf<T>, recipe::ColsOf<T>>;  // k contiguous in both
template <class T>
using AnyProduct = Product<Mat<T>>;

template <int kR, int kC>
__device__ __forceinline__ int tile_count(int n_r, int n_c, bool sym) {
  const int tr = (n_r + kR - 1) / kR, tc = (n_c + kC - 1) / kC;  // sym: square tiles
  return sym ? tr * (tr + 1) / 2 : tr * tc;
}

// How many lanes share a tile's k range (1, 2, 4 or 8) in run_products: the fewest warp
// instructions (a warp with any active lane issues the whole item: k loop of rows x cols FMAs and
// rows + cols loads per k, the shuffle sums, the stores), then, among counts within 15% of that,
// the most warps (a shorter critical path per prompt). A block is issue-bound when several
// blocks share an SM, so idle warps cost nothing and half-empty ones cost as much as full ones.
__device__ __forceinline__ int split_count(int tiles, int K, int tile_rows, int tile_cols,
                                           int nthreads) {
  const int area = tile_rows * tile_cols;
  long long cost[4], warps[4];
  long long best = -1;
  for (int l = 0; l < 4; ++l) {
    const int g = 1 << l;
    const int items = tiles * g;
    warps[l] = 0;
    for (int base = 0; base < items; base += nthreads) {
      const int in_round = items - base < nthreads ? items - base : nthreads;
      warps[l] += (in_round + kWarp - 1) / kWarp;
    }
    const long long per_item = (long long)((K + g - 1) / g) * (area + tile_rows + tile_cols) +
                               2LL * area * l + area + 30;
    cost[l] = warps[l] * per_item;
    if (best < 0 || cost[l] < best) best = cost[l];
  }
  int g = 1;
  long long most = 0;
  for (int l = 0; l < 4; ++l)
    if (cost[l] * 100 <= best * 115 && warps[l] > most) {
      most = warps[l];
      g = 1 << l;
    }
  return g;
}

// split_count of all kMax products ps (computed once per block: the shapes are fixed). Planned
// for all of them whatever `count` run_products gets: g sets the summation order, so an entry
// rounds the same whether or not the optional products run (dW with and without dE, bitwise).
template <int kR, int kC, class P, int kMax>
__device__ __forceinline__ int products_split(const P (&ps)[kMax]) {
  int tiles = 0, k_max = 0;
LSA_UNROLL
  for (int p = 0; p < kMax; ++p) {
    tiles += tile_count<kR, kC>(ps[p].n_r, ps[p].n_c, ps[p].sym);
    k_max = ps[p].K > k_max ? ps[p].K : k_max;
  }
  return split_count(tiles, k_max, kR, kC, int(blockDim.x));
}

// The products ps[0, count) computed together by the block's threads (independent products: no
// barrier inside; the caller synchronises after). Items (tile, token group) are spread over the
// threads; the k range of a tile is split in g contiguous ranges (adjacent lanes, summed by
// group_sum), g from products_split. store(p, r, c, v) receives every
// entry once (mirrored entries of symmetric products twice: (r, c) then (c, r)). The products are
// picked with compile-time indices (kMax) so that they stay in registers, not on the stack.
template <class T, int kR, int kC, int kMax, class P, class Store>
__device__ __forceinline__ void run_products(const P (&ps)[kMax], int count, int g, Store store) {
  int tiles = 0;
LSA_UNROLL
  for (int p = 0; p < kMax; ++p) {
    if (p >= count) break;
    tiles += tile_count<kR, kC>(ps[p].n_r, ps[p].n_c, ps[p].sym);
  }
  const int nthreads = int(blockDim.x);
  const int items = tiles * g;
  for (int base = 0; base < items; base += nthreads) {
    const int item = base + int(threadIdx.x);
    const bool active = item < items;
    int t = active ? item / g : 0, p = 0;
    const int kg = item % g;
    P pr = ps[0];
LSA_UNROLL
    for (int q = 0; q < kMax; ++q) {  // the product of tile t
      if (q >= count) break;
      const int n = tile_count<kR, kC>(ps[q].n_r, ps[q].n_c, ps[q].sym);
      if (t < n) {
        p = q;
        pr = ps[q];
        break;
      }
      t -= n;
    }
    int tr = 0, tc = 0;
    if (pr.sym) {  // t-th tile of the upper triangle, row by row
      const int nt = (pr.n_r + kR - 1) / kR;
      while (t >= nt - tr) {
        t -= nt - tr;
        ++tr;
      }
      tc = tr + t;
    } else {
      const int nc = (pr.n_c + kC - 1) / kC;
      tr = t / nc;
      tc = t % nc;
    }
    T acc[kR][kC];
LSA_UNROLL
    for (int i = 0; i < kR; ++i)
LSA_UNROLL
      for (int j = 0; j < kC; ++j) acc[i][j] = T(0);
    const int k0 = active ? pr.K * kg / g : 0, k1 = active ? pr.K * (kg + 1) / g : 0;
    recipe::accumulate_tile<T, kR, kC>(acc, pr.A, pr.B, tr * kR, pr.n_r - 1, tc * kC, pr.n_c - 1, k0, k1);
    if (g > 1) {
LSA_UNROLL
      for (int i = 0; i < kR; ++i)
LSA_UNROLL
        for (int j = 0; j < kC; ++j) acc[i][j] = group_sum(acc[i][j], g);
    }
    if (!active || kg != 0) continue;
LSA_UNROLL
    for (int i = 0; i < kR; ++i)
LSA_UNROLL
      for (int j = 0; j < kC; ++j) {
        const int r = tr * kR + i, c = tc * kC + j;
        if (r >= pr.n_r || c >= pr.n_c || (pr.sym && c < r)) continue;
        store(p, r, c, acc[i][j]);
        if (pr.sym && c != r) store(p, c, r, acc[i][j]);
      }
  }
}

// out[r, j] = base[r, j] + Σ_s C[r, s] src[s, j] (+ Σ_s C2[r, s] src2[s, j] when CT2 is not null)
// for one prompt [rows, cols] (base, src, src2 in shared memory, out in global memory), in the order
// of recipe::row_combination_entry. Coefficients transposed: CT[s * ldc + r] = C[r, s]. Items
// (8-row chunk, group of 32 kTok tokens) over the warps; lane l holds tokens l, l + 32, ...
template <class T, int kTok>
__device__ __forceinline__ void row_combination_items(int rows, int cols, int ldc, const T* base,
                                                      const T* CT, const T* src, const T* CT2,
                                                      const T* src2, T* __restrict__ out) {
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  const int warps = int(blockDim.x) / kWarp;
  const int chunks = (rows + kChunk - 1) / kChunk, groups = (cols + kWarp * kTok - 1) / (kWarp * kTok);
  for (int item = warp; item < chunks * groups; item += warps) {
    const int r0 = (item % chunks) * kChunk, j0 = (item / chunks) * kWarp * kTok + lane;
    int j[kTok];
LSA_UNROLL
    for (int u = 0; u < kTok; ++u) j[u] = j0 + u * kWarp < cols ? j0 + u * kWarp : cols - 1;
    T acc[kChunk][kTok];
LSA_UNROLL
    for (int i = 0; i < kChunk; ++i) {
      const int r = r0 + i < rows ? r0 + i : rows - 1;
LSA_UNROLL
      for (int u = 0; u < kTok; ++u) acc[i][u] = base[r * cols + j[u]];
    }
    for (int term = 0; term < 2; ++term) {
      const T* C = term == 0 ? CT : CT2;
      const T* x = term == 0 ? src : src2;
      if (C == nullptr) break;
      for (int s = 0; s < rows; ++s) {
        T c[kChunk], v[kTok];
        load8(C + s * ldc + r0, c);
LSA_UNROLL
        for (int u = 0; u < kTok; ++u) v[u] = x[s * cols + j[u]];
LSA_UNROLL
        for (int i = 0; i < kChunk; ++i)
LSA_UNROLL
          for (int u = 0; u < kTok; ++u) acc[i][u] += c[i] * v[u];
      }
    }
LSA_UNROLL
    for (int i = 0; i < kChunk; ++i) {
      if (r0 + i >= rows) break;
LSA_UNROLL
      for (int u = 0; u < kTok; ++u)
        if (j0 + u * kWarp < cols) __stcs(out + (r0 + i) * cols + j0 + u * kWarp, acc[i][u]);
    }
  }
}

// row_combination_items with kTok = 1, 2 or 4 tokens per lane, the fewest that cover the tokens in
// one group (more tokens per lane: more FMAs per coefficient load; fewer: less padding).
template <class T>
__device__ __forceinline__ void row_combination(int rows, int cols, int ldc, const T* base,
                                                const T* CT, const T* src, const T* CT2,
                                                const T* src2, T* __restrict__ out) {
  if (cols <= kWarp)
    row_combination_items<T, 1>(rows, cols, ldc, base, CT, src, CT2, src2, out);
  else if (cols <= 2 * kWarp)
    row_combination_items<T, 2>(rows, cols, ldc, base, CT, src, CT2, src2, out);
  else
    row_combination_items<T, 4>(rows, cols, ldc, base, CT, src, CT2, src2, out);
}

// Zeros the padding columns [rows, ldc) of a [n, ldc] coefficient copy once per block: load8 reads
// them (their products are dropped), so they must hold finite, initialised values.
template <class T>
__device__ __forceinline__ void zero_padding(T* CT, int lines, int rows, int ldc) {
  for (int i = threadIdx.x; i < lines * ldc; i += blockDim.x)
    if (i % ldc >= rows) CT[i] = T(0);
}

// F = E + P E with P = W^PV G W^KQ, G = E E^T / N   [ZFB (3.3)], Gram-first (layout:
// tiled_forward_smem; W^KQ and G W^KQ kept transposed so that every product steps k by 1).
template <class T>
__global__ void __launch_bounds__(kTiledThreads, tiled_forward_blocks<T>())
    lsa_forward_tiled_kernel(LsaShape sh, const T* __restrict__ E,
                                         const T* __restrict__ W_pv, const T* __restrict__ W_kq,
                                         T* __restrict__ F) {
  LSA_DYNAMIC_SHARED(smem);
  const int rows = int(sh.dim + 1), cols = int(sh.context + 1), N = cols - 1;
  const int n2 = rows * rows, size = rows * cols, ldc = coefficient_stride(rows);
  T* Pt = reinterpret_cast<T*>(smem);  // Pt[s * ldc + r] = P[r, s]
  T* sW_pv = Pt + rows * ldc;
  T* sW_kq_t = sW_pv + n2;  // W^KQ^T
  T* G = sW_kq_t + n2;
  T* GW_t = G + n2;  // (G W^KQ)^T
  T* prompt = GW_t + n2;
  for (int i = threadIdx.x; i < n2; i += blockDim.x) {
    sW_pv[i] = W_pv[i];
    sW_kq_t[(i % rows) * rows + i / rows] = W_kq[i];
  }
  zero_padding(Pt, rows, rows, ldc);
  // The products (fixed shared buffers) and their k splits, once per block.
  const FastProduct<T> gram[1] = {{{prompt, cols}, {prompt, cols}, rows, rows, cols, true}};  // G N
  const FastProduct<T> gw[1] = {{{G, rows}, {sW_kq_t, rows}, rows, rows, rows, false}};  // G W^KQ
  const FastProduct<T> p[1] = {{{sW_pv, rows}, {GW_t, rows}, rows, rows, rows, false}};  // P
  const int g_gram = products_split<kSmallTile, kSmallTile>(gram);
  const int g_small = products_split<kSmallRows, kSmallCols>(gw);
  const T inv_n = recipe::inv_context<T>(N);
  for (index_t b = blockIdx.x; b < sh.batch; b += gridDim.x) {
    __syncthreads();  // parameters loaded / previous prompt done
    stage_all(E + b * size, prompt, size, threadIdx.x, blockDim.x);
    if (b + gridDim.x < sh.batch) prefetch_l2(E + (b + gridDim.x) * size, size, threadIdx.x, blockDim.x);
    __syncthreads();
    run_products<T, kSmallTile, kSmallTile>(gram, 1, g_gram,
                                            [&](int, int r, int c, T v) { G[r * rows + c] = v * inv_n; });
    __syncthreads();
    run_products<T, kSmallRows, kSmallCols>(gw, 1, g_small, [&](int, int r, int c, T v) { GW_t[c * rows + r] = v; });
    __syncthreads();
    run_products<T, kSmallRows, kSmallCols>(p, 1, g_small, [&](int, int r, int c, T v) { Pt[c * ldc + r] = v; });
    __syncthreads();
    row_combination<T>(rows, cols, ldc, prompt, Pt, prompt, nullptr, nullptr, F + b * size);
  }
}

// VJP of lsa_forward (SPEC 3.2; steps at the end of lsa_recipe.hpp, U = dP W^KQ^T form; layout:
// tiled_vjp_smem). partial [gridDim.x, 2 rows²] as lsa_vjp_kernel.
template <class T>
__global__ void __launch_bounds__(kTiledThreads, tiled_vjp_blocks<T>())
    lsa_vjp_tiled_kernel(LsaShape sh, const T* __restrict__ E, const T* __restrict__ W_pv,
                                     const T* __restrict__ W_kq, const T* __restrict__ d_F,
                                     T* __restrict__ d_E, double* __restrict__ partial) {
  LSA_DYNAMIC_SHARED(smem);
  const int rows = int(sh.dim + 1), cols = int(sh.context + 1), N = cols - 1;
  const int n2 = rows * rows, size = rows * cols, ldc = coefficient_stride(rows);
  double* acc = reinterpret_cast<double*>(smem);  // [2 n2]: dW^PV, dW^KQ
  T* Pc = reinterpret_cast<T*>(acc + 2 * n2);     // Pc[s * ldc + r] = P^T[r, s]
  T* Sc = Pc + rows * ldc;                        // Sc[s * ldc + r] = S[r, s], S = (dG + dG^T)/N
  T* sW_pv = Sc + rows * ldc;
  T* sW_kq = sW_pv + n2;
  T* G = sW_kq + n2;
  T* dP = G + n2;
  T* U = dP + n2;
  T* T2 = U + n2;
  T* dG = T2 + n2;
  T* e = dG + n2;
  T* df = e + size;
  for (int i = threadIdx.x; i < n2; i += blockDim.x) {
    sW_pv[i] = W_pv[i];
    sW_kq[i] = W_kq[i];
    acc[i] = acc[n2 + i] = 0;
  }
  zero_padding(Pc, 2 * rows, rows, ldc);  // Pc and Sc
  auto M = [rows](const T* p) { return rows_of<T>(p, rows); };
  const Mat<T> W_pv_t = M(sW_pv).transposed(), W_kq_t = M(sW_kq).transposed();
  const T inv_n = recipe::inv_context<T>(N);
  const bool input_grad = d_E != nullptr;
  // The products (fixed shared buffers) and their k splits, once per block.
  const FastProduct<T> grams[2] = {{{e, cols}, {e, cols}, rows, rows, cols, true},     // G N
                                   {{df, cols}, {e, cols}, rows, rows, cols, false}};  // dP = d_F E^T
  const FastProduct<T> first[2] = {{{dP, rows}, {sW_kq, rows}, rows, rows, rows, false},  // U = dP W^KQ^T
                                   {{G, rows}, {sW_pv, rows}, rows, rows, rows, false}};  // T2 = G W^PV^T
  const AnyProduct<T> second[4] = {{M(U), M(G), rows, rows, rows, false},      // dW^PV += U G
                                   {M(T2), M(dP), rows, rows, rows, false},    // dW^KQ += T2 dP
                                   {W_pv_t, M(U), rows, rows, rows, false},    // dG = W^PV^T U
                                   {W_kq_t, M(T2), rows, rows, rows, false}};  // P^T = W^KQ^T T2
  const int n_second = input_grad ? 4 : 2;
  const int g_grams = products_split<kTokenTile, kTokenTile>(grams),
            g_first = products_split<kSmallRows, kSmallCols>(first),
            g_second = products_split<kSmallRows, kSmallCols>(second);  // the same with and without dE
  for (index_t b = blockIdx.x; b < sh.batch; b += gridDim.x) {
    __syncthreads();
    stage_all(E + b * size, e, size, threadIdx.x, blockDim.x);
    stage_all(d_F + b * size, df, size, threadIdx.x, blockDim.x);
    if (b + gridDim.x < sh.batch) {
      prefetch_l2(E + (b + gridDim.x) * size, size, threadIdx.x, blockDim.x);
      prefetch_l2(d_F + (b + gridDim.x) * size, size, threadIdx.x, blockDim.x);
    }
    __syncthreads();
    run_products<T, kTokenTile, kTokenTile>(grams, 2, g_grams, [&](int p, int r, int c, T v) {
      if (p == 0)
        G[r * rows + c] = v * inv_n;
      else
        dP[r * rows + c] = v;
    });
    __syncthreads();
    run_products<T, kSmallRows, kSmallCols>(first, 2, g_first, [&](int p, int r, int c, T v) {
      (p == 0 ? U : T2)[r * rows + c] = v;
    });
    __syncthreads();
    run_products<T, kSmallRows, kSmallCols>(second, n_second, g_second, [&](int p, int r, int c, T v) {
      if (p < 2)
        acc[p * n2 + r * rows + c] += double(v);
      else if (p == 2)
        dG[r * rows + c] = v;
      else
        Pc[c * ldc + r] = v;
    });
    if (!input_grad) continue;  // uniform across the block
    __syncthreads();
    for (int i = threadIdx.x; i < n2; i += blockDim.x) {
      const int r = i / rows, c = i % rows;
      Sc[c * ldc + r] = recipe::symmetric_part_entry(M(dG), N, r, c);
    }
    __syncthreads();
    // dE = (d_F + P^T d_F) + ((dG + dG^T)/N) E
    row_combination<T>(rows, cols, ldc, df, Pc, df, Sc, e, d_E + b * size);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 2 * n2; i += blockDim.x) partial[index_t(blockIdx.x) * 2 * n2 + i] = acc[i];
}

template <class T>
std::size_t forward_smem(int rows, int cols) {
  const std::size_t r = std::size_t(rows), c = std::size_t(cols);
  return sizeof(T) * (5 * r * r + r * c);
}
template <class T>
std::size_t vjp_smem(int rows, int cols) {
  const std::size_t r = std::size_t(rows), c = std::size_t(cols);
  return sizeof(double) * (2 * r * r) + sizeof(T) * (9 * r * r + 2 * r * c);
}

}  // namespace
}  // namespace lsa_native::cuda::kernels
