// The CUDA kernels of the H-head LSA (multihead.hpp, H >= 2; H = 1 runs lsa_kernels.cuh), included
// by multihead_cuda.cu and by the CPU emulation test cpp/tests/test_multihead_emulated.cpp. Launch
// geometry, memory movement and reductions only: every per-entry formula is multihead::* or
// recipe::* (common/multihead_recipe.hpp, common/lsa_recipe.hpp), but for the plain ordered sums of
// products over 16-byte loads of the Gram route (heads_gram, dot_quads).
//
// Prediction, loss gradient and prediction VJP: a group of 4-32 lanes per prompt (grid-stride),
// Gram-first as the CPU kernels (fewer flops than the token form for H >= 2): the group copies its
// prompt token-major into shared memory (cp.async), forms G = E Eᵀ/N in 4 x 4 register tiles, then
// per head q_h, G q_h, G p_h (lanes over H (d+1) entries): never the O(N²) attention matrix. Full
// forward and VJP: one block per prompt (grid-stride), the one-head block kernels' steps summed
// over the heads. Batch sums accumulate per block in double, in slot (or thread) order, and are
// reduced across blocks by reduce_partials_kernel in a fixed order: no atomics, two runs on one
// device give bitwise equal results.
#pragma once

#include <algorithm>
#include <cstddef>

#include "common/lsa_recipe.hpp"
#include "common/multihead_recipe.hpp"
#include "cuda/kernel_common.cuh"
#include "cuda/lsa_kernels.cuh"
#include "lsa_native/lsa.hpp"

namespace lsa_native::cuda::kernels {
namespace {

// ---- prediction, loss gradient and prediction VJP: a group of lanes per prompt -----------------

// Shared memory of the H-head prediction kernels. A warp holds 32 / group prompts (slots), group
// lanes each (group a power of two in [4, 32]: small prompts share a warp). Vectors of length rows
// are stored with stride rp = token_stride() and zeros after their rows entries (16-byte loads, no
// edge tests). Per block: W^KQ [H, rows, rp] and p [H, rp] (T), and for a loss or VJP the block's
// batch sums acc [acc_width] (double). Per slot: the doubles w Gq, w Gp [H rows], e_q [rows], w²
// (loss / VJP), then T: the prompt token-major [cols, rp], G [rows, rp], q [H, rp], Gq, Gp [H rows]
// each, and for a VJP with d_E: S [rows²], through [rows].
struct HeadsLayout {
  int heads, rows, cols, warps, group;
  bool spread;            // token stride 4 mod 8 (conflict-free staging) rather than the least
  bool sums, input_grad;  // loss or VJP: the batch sums exist; VJP: S and through exist
  std::size_t block_bytes, slot_bytes;
  __host__ __device__ int acc_width() const { return int(multihead::loss_grad_width(heads, rows)); }
  __host__ __device__ int slots() const { return warps * (kWarp / group); }
  __host__ __device__ int slot_doubles() const {  // even: the T part stays 16-byte aligned
    return sums ? (2 * heads * rows + rows + 2) / 2 * 2 : 0;
  }
  // rows rounded up to a multiple of 4 (16-byte aligned tokens) and, when spread, to 4 mod 8:
  // heads_stage's 8 consecutive tokens of a row then fall in 8 different groups of 4 banks.
  __host__ __device__ int token_stride() const {
    const int rp = (rows + 3) / 4 * 4;
    return spread && rp % 8 == 0 ? rp + 4 : rp;
  }
  // The smallest power-of-two group in [4, 32] with at least one lane per G tile and per 4 head
  // entries (the loops over tokens, tiles and head entries stride by the group).
  static int default_group(int heads, int rows) {
    const int work = std::max(multihead::gram_tiles(rows), (heads * rows + 3) / 4);
    int g = 4;
    while (g < kWarp && g < work) g *= 2;
    return g;
  }
  // Bytes before the block's batch sums: the staged W^KQ_h [H, rows, rp] and last rows p_h [H, rp].
  template <class T>
  __host__ __device__ std::size_t acc_offset() const {
    const int rp = token_stride();
    return align16(sizeof(T) * std::size_t(heads) * std::size_t(rows * rp + rp));
  }
  template <class T>
  static HeadsLayout make(int heads, int rows, int cols, int warps, bool sums, bool input_grad,
                          int group, bool spread = true) {
    HeadsLayout l{heads, rows, cols, warps, group, spread, sums, sums && input_grad, 0, 0};
    const int rp = l.token_stride();
    l.block_bytes = l.template acc_offset<T>() +
                    align16(sums ? sizeof(double) * std::size_t(l.acc_width()) : 0);
    const std::size_t ts = std::size_t(rp * cols + rows * rp + heads * rp + 2 * heads * rows) +
                           (l.input_grad ? std::size_t(rows * rows + rows) : 0);
    l.slot_bytes = align16(sizeof(double) * std::size_t(l.slot_doubles()) + sizeof(T) * ts);
    return l;
  }
  __host__ __device__ std::size_t total() const { return block_bytes + std::size_t(slots()) * slot_bytes; }
};

// The prediction kernels' blocks: at most 8 warps (multihead_cuda.cu picks the warps per block
// and token stride with the most resident warps), at most 96 registers a thread in float (sm_90:
// 78 / 96 / 96 for predict / loss / VJP, no spills; 20 warps per SM in 4-warp blocks) and 128 in
// double.
constexpr int kHeadsMaxThreads = 8 * kWarp;
template <class T>
constexpr int heads_max_registers() {
  return sizeof(T) == 4 ? 96 : 128;
}
#if defined(__CUDACC__) && (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 4))
#define LSA_HEADS_MAXNREG(T) __maxnreg__(heads_max_registers<T>())  // nvcc >= 12.4
#else
#define LSA_HEADS_MAXNREG(T)
#endif

// One prompt slot's part of the prediction kernels' shared memory.
template <class T>
struct HeadsSlot {
  double *wGq, *wGp, *e_q, *w2;  // the prompt's weighted terms of the batch sums (loss / VJP)
  T *prompt, *G, *q, *Gq, *Gp, *S, *through;
};

template <class T>
__device__ __forceinline__ HeadsSlot<T> heads_slot(const HeadsLayout& lay, unsigned char* smem,
                                                   int slot) {
  unsigned char* mine = smem + lay.block_bytes + std::size_t(slot) * lay.slot_bytes;
  const int hr = lay.heads * lay.rows, n2 = lay.rows * lay.rows, rp = lay.token_stride();
  HeadsSlot<T> a;
  a.wGq = reinterpret_cast<double*>(mine);
  a.wGp = a.wGq + (lay.sums ? hr : 0);
  a.e_q = a.wGp + (lay.sums ? hr : 0);
  a.w2 = a.e_q + (lay.sums ? lay.rows : 0);
  a.prompt = reinterpret_cast<T*>(mine + sizeof(double) * std::size_t(lay.slot_doubles()));
  a.G = a.prompt + rp * lay.cols;
  a.q = a.G + lay.rows * rp;
  a.Gq = a.q + lay.heads * rp;
  a.Gp = a.Gq + hr;
  a.S = a.Gp + hr;
  a.through = a.S + n2;
  return a;
}

// v[i] = p[i], i < 4, p 16-byte aligned (shared memory): one 128-bit load for float, two for double.
template <class T>
__device__ __forceinline__ void load4(const T* p, T (&v)[4]) {
#if defined(__CUDACC__)
  if constexpr (sizeof(T) == 4) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  } else {
    const double2 a = reinterpret_cast<const double2*>(p)[0], b = reinterpret_cast<const double2*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
  }
#else
  for (int i = 0; i < 4; ++i) v[i] = p[i];
#endif
}

// Σ_{c < 4 quads} a[c] b[c] in order c = 0, 1, ... (the zero padding adds nothing), a and b
// 16-byte aligned shared memory: the dot products of padded vectors (q_h, G q_h, G p_h).
template <class T>
__device__ __forceinline__ T dot_quads(const T* a, const T* b, int quads) {
  T acc = T(0);
  for (int u = 0; u < quads; ++u) {
    T x[4], y[4];
    load4(a + 4 * u, x);
    load4(b + 4 * u, y);
    for (int k = 0; k < 4; ++k) acc += x[k] * y[k];
  }
  return acc;
}

// Copies prompt E_b [rows, cols] token-major into a.prompt [cols, rp] without a register round trip
// (copy_async; the caller waits): a step of the group covers gs / tw rows of tw = min(gs, 8)
// consecutive tokens, sector-sized global reads and (rp = 4 mod 8) conflict-free shared writes.
template <class T>
__device__ __forceinline__ void heads_stage(const HeadsLayout& lay, T* prompt, const T* E_b, int gl) {
  const int rows = lay.rows, cols = lay.cols, rp = lay.token_stride(), gs = lay.group;
  const int tw = gs < 8 ? gs : 8, rw = gs / tw, dr = gl / tw, dj = gl % tw;
  for (int r = dr; r < rows; r += rw)
    for (int j = dj; j < cols; j += tw) copy_async(prompt + j * rp + r, E_b + r * cols + j);
}

// G = E Eᵀ / N of the staged prompt into G [rows, rp]: the group's lanes over the 4 x 4 tiles of
// the upper triangle, each a register tile over the tokens (two 16-byte loads and 16 FMAs a token;
// the zero padding rows make edge tiles need no test), written to both triangles.
template <class T>
__device__ __forceinline__ void heads_gram(const HeadsLayout& lay, const T* prompt, T* G, int gl) {
  const int rows = lay.rows, cols = lay.cols, rp = lay.token_stride(), gs = lay.group;
  constexpr int kTile = multihead::kGramTile;
  const T inv_n = recipe::inv_context<T>(cols - 1);
  for (int t = gl; t < multihead::gram_tiles(rows); t += gs) {
    int r0, c0;
    multihead::gram_tile_origin(t, rows, r0, c0);
    T acc[kTile][kTile] = {};
#if defined(__CUDA_ARCH__)
#pragma unroll 2
#endif
    for (int j = 0; j < cols; ++j) {  // acc += e_j[r0..] e_j[c0..]ᵀ, tokens in order
      T x[kTile], y[kTile];
      load4(prompt + j * rp + r0, x);
      load4(prompt + j * rp + c0, y);
      for (int i = 0; i < kTile; ++i)
        for (int k = 0; k < kTile; ++k) acc[i][k] += x[i] * y[k];
    }
    for (int i = 0; i < kTile && r0 + i < rows; ++i)
      for (int k = 0; k < kTile && c0 + k < rows; ++k) {
        G[(r0 + i) * rp + c0 + k] = acc[i][k] * inv_n;
        G[(c0 + k) * rp + r0 + i] = acc[i][k] * inv_n;
      }
  }
}

// One prompt by the `group` lanes gl = 0, 1, ... of its slot, staged (heads_stage, waited for):
// G = E Eᵀ/N, q_h = W^KQ_h e_q, G q_h (and G p_h for the sums); returns ŷ = E[d, N] + Σ_h p_h · G q_h
// on every lane of the group. Every lane of the warp calls (group_sum shuffles): a slot past the
// batch runs on a valid prompt and its results are dropped.
template <class T, bool kGp>
__device__ __forceinline__ T heads_prompt(const HeadsLayout& lay, const HeadsSlot<T>& a,
                                          const T* sW_kq, const T* sp, int gl) {
  const int H = lay.heads, rows = lay.rows, cols = lay.cols, N = cols - 1, gs = lay.group;
  const int hr = H * rows;
  const recipe::Mat<T> Ep{a.prompt, 1, lay.token_stride()};  // Ep(r, j) = E[r, j]
  const int rp = lay.token_stride(), quads = (rows + 3) / 4;
  heads_gram(lay, a.prompt, a.G, gl);
  for (int i = gl; i < hr; i += gs)  // q_h = W^KQ_h e_q (row i of the stacked W^KQ_h)
    a.q[(i / rows) * rp + i % rows] = dot_quads(sW_kq + i * rp, a.prompt + N * rp, quads);
  __syncwarp();
  T part = T(0);
  for (int i = gl; i < hr; i += gs) {
    const int h = i / rows, r = i % rows;
    a.Gq[i] = dot_quads(a.G + r * rp, a.q + h * rp, quads);  // (G q_h)_r, G symmetric
    if (kGp) a.Gp[i] = dot_quads(a.G + r * rp, sp + h * rp, quads);
    part += sp[h * rp + r] * a.Gq[i];
  }
  return Ep(rows - 1, N) + group_sum(part, gs);  // ŷ = E[d, N] + Σ_h p_h · G q_h
}

// The block's slots' terms added to acc in slot order 0, 1, ... (n_act slots hold prompts), the
// block's threads over acc's entries (d_K in quads of kGramTile columns of one row). Between
// __syncthreads.
template <class T>
__device__ __forceinline__ void heads_accumulate(const HeadsLayout& lay, unsigned char* smem,
                                                 double* acc, int n_act) {
  const int rows = lay.rows, hr = lay.heads * rows;
  constexpr int kQ = multihead::kGramTile;
  const int quads_per_row = (rows + kQ - 1) / kQ;
  if (threadIdx.x == 0)
    for (int s = 0; s < n_act; ++s) acc[0] += *heads_slot<T>(lay, smem, s).w2;
  for (int i = threadIdx.x; i < hr; i += blockDim.x) {
    double v = acc[1 + i];
    for (int s = 0; s < n_act; ++s) v += heads_slot<T>(lay, smem, s).wGq[i];
    acc[1 + i] = v;
  }
  double* d_K = acc + 1 + hr;
  for (int u = threadIdx.x; u < hr * quads_per_row; u += blockDim.x) {
    const int row = u / quads_per_row, c0 = kQ * (u % quads_per_row);
    double v[kQ];
    for (int k = 0; k < kQ; ++k) v[k] = c0 + k < rows ? d_K[row * rows + c0 + k] : 0.0;
    for (int s = 0; s < n_act; ++s) {
      const HeadsSlot<T> a = heads_slot<T>(lay, smem, s);
      multihead::d_K_quad(v, a.wGp[row], a.e_q, c0, rows);
    }
    for (int k = 0; k < kQ && c0 + k < rows; ++k) d_K[row * rows + c0 + k] = v[k];
  }
}

// predict: y_hat. loss (upstream = y_q): also the per-block partial sums partial [gridDim.x,
// acc_width] = [Σ res², Σ res G q_h, Σ res (G p_h) e_qᵀ]. vjp (upstream = dŷ): the same partials
// with weight dŷ (slot 0 unused) and d_E when not null. The block takes slots() prompts a round;
// with sums, the round's terms are added to the block's acc in slot order (no atomics: two runs
// give bitwise equal results).
template <class T, PredictionMode kMode>
__global__ void __launch_bounds__(kHeadsMaxThreads) LSA_HEADS_MAXNREG(T)
    multihead_prediction_kernel(LsaShape sh, HeadsLayout lay, const T* __restrict__ E,
                                const T* __restrict__ upstream, const T* __restrict__ W_pv,
                                const T* __restrict__ W_kq, T* __restrict__ y_hat,
                                double* __restrict__ partial, T* __restrict__ d_E) {
  constexpr bool kSums = kMode != PredictionMode::predict;
  LSA_DYNAMIC_SHARED(smem);
  const int H = lay.heads, rows = lay.rows, cols = lay.cols, N = cols - 1, gs = lay.group;
  const int n2 = rows * rows, hr = H * rows, size = rows * cols, width = lay.acc_width();
  const int lane = threadIdx.x % kWarp, gl = lane % gs;
  const int slot = int(threadIdx.x) / gs, slots = lay.slots();
  const int rp = lay.token_stride();
  T* sW_kq = reinterpret_cast<T*>(smem);  // [H, rows, rp]
  T* sp = sW_kq + H * rows * rp;          // [H, rp] the last rows of W^PV_h
  double* acc = reinterpret_cast<double*>(smem + lay.template acc_offset<T>());
  for (int i = threadIdx.x; i < H * rows * rp; i += blockDim.x)  // row i / rp of the stacked W^KQ_h
    sW_kq[i] = i % rp < rows ? W_kq[(i / rp) * rows + i % rp] : T(0);
  for (int i = threadIdx.x; i < H * rp; i += blockDim.x)
    sp[i] = i % rp < rows ? W_pv[(i / rp) * n2 + (rows - 1) * rows + i % rp] : T(0);
  if (kSums)
    for (int i = threadIdx.x; i < width; i += blockDim.x) acc[i] = 0;
  __syncthreads();
  const HeadsSlot<T> a = heads_slot<T>(lay, smem, slot);
  for (int j = gl; j < cols; j += gs)  // the padding stays 0: prompt rows, G and q columns
    for (int r = rows; r < rp; ++r) a.prompt[j * rp + r] = T(0);
  for (int i = gl; i < (rows + H) * (rp - rows); i += gs)
    a.G[(i / (rp - rows)) * rp + rows + i % (rp - rows)] = T(0);  // G [rows, rp] then q [H, rp]
  const T inv_n = recipe::inv_context<T>(N);
  const index_t step = index_t(gridDim.x) * slots;
  // A slot past the batch works on the last prompt (results dropped): every lane takes each step.
  auto prompt_of = [&](index_t base) { return base + slot < sh.batch ? base + slot : sh.batch - 1; };
  if (index_t(blockIdx.x) * slots < sh.batch)
    heads_stage(lay, a.prompt, E + prompt_of(index_t(blockIdx.x) * slots) * size, gl);
  for (index_t base = index_t(blockIdx.x) * slots; base < sh.batch; base += step) {
    const index_t b = prompt_of(base);
    const bool mine = base + slot < sh.batch, more = base + step < sh.batch;
    if (more && base + step + slot < sh.batch) prefetch_l2(E + (b + step) * size, size, gl, gs);
    copy_async_wait();  // this prompt, staged by the previous step (or above)
    __syncwarp();
    const T pred = heads_prompt<T, kSums>(lay, a, sW_kq, sp, gl);
    if (mine && gl == 0 && y_hat != nullptr) y_hat[b] = pred;
    if (kSums) {
      const T target = upstream[b];
      const double w = kMode == PredictionMode::loss ? double(pred) - double(target) : double(target);
      for (int i = gl; i < hr; i += gs) {  // this lane's own Gq, Gp entries
        a.wGq[i] = w * double(a.Gq[i]);
        a.wGp[i] = w * double(a.Gp[i]);
      }
      const recipe::Mat<T> Ep{a.prompt, 1, rp};
      for (int r = gl; r < rows; r += gs) a.e_q[r] = double(Ep(r, N));
      if (gl == 0) *a.w2 = kMode == PredictionMode::loss ? w * w : 0.0;
      if (kMode == PredictionMode::vjp && d_E != nullptr) {  // uniform across the block
        __syncwarp();  // Gp complete
        for (int i = gl; i < n2; i += gs)
          a.S[i] = multihead::input_grad_coefficient(target * inv_n, sp, a.q, H, rp, i / rows,
                                                     i % rows);
        for (int r = gl; r < rows; r += gs)
          a.through[r] = multihead::through_queries_entry(sW_kq, a.Gp, H, rows, rp, r);
        __syncwarp();
        T* d_E_b = d_E + b * size;
        const recipe::Mat<T> S = recipe::rows_of<T>(a.S, rows);
        for (int r = 0; r < rows && mine; ++r)  // row by row: the lanes write consecutive tokens
          for (int j = gl; j < cols; j += gs)
            d_E_b[r * cols + j] = multihead::input_grad_entry(target, S, Ep, a.through[r], rows, N, r, j);
      }
      __syncwarp();  // the group is done with its prompt: stage the next during the block's sums
      if (more) heads_stage(lay, a.prompt, E + prompt_of(base + step) * size, gl);
      __syncthreads();  // every slot's terms written
      const index_t left = sh.batch - base;
      heads_accumulate<T>(lay, smem, acc, left < slots ? int(left) : slots);
      __syncthreads();  // acc updated; the slots may be overwritten
    } else {
      __syncwarp();  // the group is done with its prompt
      if (more) heads_stage(lay, a.prompt, E + prompt_of(base + step) * size, gl);
    }
  }
  if constexpr (kSums)
    for (int i = threadIdx.x; i < width; i += blockDim.x)
      partial[index_t(blockIdx.x) * width + i] = acc[i];
}

// d_W_pv = 0 but the last row of each head = d_p[h] · scale; d_W_kq = d_K · scale; with scale = 1/B
// for the loss gradient (and loss = ½ Σ res² / B  [ZFB (3.7)]) or 1 for the prediction VJP (loss
// null). total [1 + H rows + H rows²].
template <class T>
__global__ void heads_prediction_epilogue_kernel(const double* __restrict__ total, int heads,
                                                 int rows, double scale, T* __restrict__ d_W_pv,
                                                 T* __restrict__ d_W_kq, double* __restrict__ loss) {
  const double* d_p = total + 1;
  const double* d_K = d_p + heads * rows;
  const int n2 = rows * rows;
  for (int i = threadIdx.x; i < heads * n2; i += blockDim.x) {
    const int h = i / n2, r = (i % n2) / rows, c = i % rows;
    d_W_pv[i] = r == rows - 1 ? T(d_p[h * rows + c] * scale) : T(0);
    d_W_kq[i] = T(d_K[i] * scale);
  }
  if (threadIdx.x == 0 && loss != nullptr) *loss = 0.5 * total[0] * scale;
}

// ---- full forward and VJP: one block per prompt ------------------------------------------------

// F = E + P E with P = Σ_h W^PV_h G W^KQ_h, G = E Eᵀ / N, Gram-first.
// Shared T: W^PV, W^KQ [H, rows, rows] each, G, GW, P [rows, rows] each, then the prompt.
template <class T>
__global__ void multihead_forward_kernel(LsaShape sh, int heads, const T* __restrict__ E,
                                         const T* __restrict__ W_pv, const T* __restrict__ W_kq,
                                         T* __restrict__ F) {
  LSA_DYNAMIC_SHARED(smem);
  const int rows = int(sh.dim + 1), cols = int(sh.context + 1), N = cols - 1;
  const int n2 = rows * rows, size = rows * cols;
  T* sW_pv = reinterpret_cast<T*>(smem);
  T* sW_kq = sW_pv + heads * n2;
  T* G = sW_kq + heads * n2;
  T* GW = G + n2;
  T* P = GW + n2;
  T* prompt = P + n2;
  for (int i = threadIdx.x; i < heads * n2; i += blockDim.x) {
    sW_pv[i] = W_pv[i];
    sW_kq[i] = W_kq[i];
  }
  auto M = [rows](const T* p) { return recipe::rows_of<T>(p, rows); };
  const recipe::Mat<T> Ep = recipe::rows_of<T>(prompt, cols);
  const T inv_n = recipe::inv_context<T>(N);
  for (index_t b = blockIdx.x; b < sh.batch; b += gridDim.x) {
    __syncthreads();  // parameters loaded / previous prompt done
    stage(E + b * size, prompt, size, threadIdx.x, blockDim.x);
    __syncthreads();
    for (int i = threadIdx.x; i < n2; i += blockDim.x)
      G[i] = recipe::token_product(Ep, Ep, cols, i / rows, i % rows) * inv_n;
    for (int h = 0; h < heads; ++h) {
      __syncthreads();  // G / the previous head's P done
      for (int i = threadIdx.x; i < n2; i += blockDim.x)  // G W^KQ_h
        GW[i] = recipe::product_entry(M(G), M(sW_kq + h * n2), rows, i / rows, i % rows);
      __syncthreads();
      for (int i = threadIdx.x; i < n2; i += blockDim.x)  // P += W^PV_h (G W^KQ_h)
        P[i] = (h > 0 ? P[i] : T(0)) +
               recipe::product_entry(M(sW_pv + h * n2), M(GW), rows, i / rows, i % rows);
    }
    __syncthreads();
    T* Fb = F + b * size;
    for (int i = threadIdx.x; i < size; i += blockDim.x) {  // F = E + P E
      const int r = i / cols, j = i % cols;
      Fb[i] = recipe::row_combination_entry(Ep(r, j), M(P), Ep, rows, r, j);
    }
  }
}

// VJP of the H-head forward: the one-head steps of lsa_recipe.hpp summed over the heads,
//   T1_h = W^KQ_hᵀ G, T2_h = G W^PV_hᵀ, dW^PV_h += dP T1_h, dW^KQ_h += T2_h dP,
//   Pᵀ = Σ_h W^KQ_hᵀ T2_h, dG = Σ_h (W^PV_hᵀ dP) W^KQ_hᵀ, dE = (d_F + Pᵀ d_F) + ((dG + dGᵀ)/N) E.
// Shared: double accumulators dW^PV, dW^KQ [H, rows, rows] each; T: W^PV, W^KQ [H, rows, rows]
// each, G, dP, T1, T2, Pt, Tmp, dG [rows, rows] each, then E and d_F [rows, cols].
// partial [gridDim.x, 2 H rows²].
template <class T>
__global__ void multihead_vjp_kernel(LsaShape sh, int heads, const T* __restrict__ E,
                                     const T* __restrict__ W_pv, const T* __restrict__ W_kq,
                                     const T* __restrict__ d_F, T* __restrict__ d_E,
                                     double* __restrict__ partial) {
  LSA_DYNAMIC_SHARED(smem);
  const int rows = int(sh.dim + 1), cols = int(sh.context + 1), N = cols - 1;
  const int n2 = rows * rows, size = rows * cols, hn2 = heads * n2;
  double* acc = reinterpret_cast<double*>(smem);  // [2 H n2]
  T* sW_pv = reinterpret_cast<T*>(acc + 2 * hn2);
  T* sW_kq = sW_pv + hn2;
  T* G = sW_kq + hn2;
  T* dP = G + n2;
  T* T1 = dP + n2;
  T* T2 = T1 + n2;
  T* Pt = T2 + n2;
  T* Tmp = Pt + n2;
  T* dG = Tmp + n2;
  T* e = dG + n2;
  T* df = e + size;
  for (int i = threadIdx.x; i < hn2; i += blockDim.x) {
    sW_pv[i] = W_pv[i];
    sW_kq[i] = W_kq[i];
    acc[i] = acc[hn2 + i] = 0;
  }
  auto M = [rows](const T* p) { return recipe::rows_of<T>(p, rows); };
  const recipe::Mat<T> Ep = recipe::rows_of<T>(e, cols), dFp = recipe::rows_of<T>(df, cols);
  const T inv_n = recipe::inv_context<T>(N);
  const bool input_grad = d_E != nullptr;
  for (index_t b = blockIdx.x; b < sh.batch; b += gridDim.x) {
    __syncthreads();
    stage(E + b * size, e, size, threadIdx.x, blockDim.x);
    stage(d_F + b * size, df, size, threadIdx.x, blockDim.x);
    __syncthreads();
    for (int i = threadIdx.x; i < n2; i += blockDim.x) {
      const int r = i / rows, c = i % rows;
      G[i] = recipe::token_product(Ep, Ep, cols, r, c) * inv_n;  // G = E Eᵀ / N
      dP[i] = recipe::token_product(dFp, Ep, cols, r, c);        // dP = d_F Eᵀ
    }
    for (int h = 0; h < heads; ++h) {
      const recipe::Mat<T> W_pv_t = M(sW_pv + h * n2).transposed(),
                           W_kq_t = M(sW_kq + h * n2).transposed();
      __syncthreads();  // G, dP / the previous head's products done
      for (int i = threadIdx.x; i < n2; i += blockDim.x) {
        const int r = i / rows, c = i % rows;
        T1[i] = recipe::product_entry(W_kq_t, M(G), rows, r, c);  // W^KQ_hᵀ G
        T2[i] = recipe::product_entry(M(G), W_pv_t, rows, r, c);  // G W^PV_hᵀ
        if (input_grad) Tmp[i] = recipe::product_entry(W_pv_t, M(dP), rows, r, c);  // W^PV_hᵀ dP
      }
      __syncthreads();
      for (int i = threadIdx.x; i < n2; i += blockDim.x) {
        const int r = i / rows, c = i % rows;
        acc[h * n2 + i] += double(recipe::product_entry(M(dP), M(T1), rows, r, c));
        acc[hn2 + h * n2 + i] += double(recipe::product_entry(M(T2), M(dP), rows, r, c));
        if (!input_grad) continue;
        Pt[i] = (h > 0 ? Pt[i] : T(0)) + recipe::product_entry(W_kq_t, M(T2), rows, r, c);
        dG[i] = (h > 0 ? dG[i] : T(0)) + recipe::product_entry(M(Tmp), W_kq_t, rows, r, c);
      }
    }
    if (!input_grad) continue;  // uniform across the block
    __syncthreads();
    for (int i = threadIdx.x; i < n2; i += blockDim.x)  // Tmp = (dG + dGᵀ)/N
      Tmp[i] = recipe::symmetric_part_entry(M(dG), N, i / rows, i % rows);
    __syncthreads();
    T* dEb = d_E + b * size;
    for (int i = threadIdx.x; i < size; i += blockDim.x) {
      const int r = i / cols, j = i % cols;
      const T t = recipe::row_combination_entry(dFp(r, j), M(Pt), dFp, rows, r, j);
      dEb[i] = recipe::row_combination_entry(t, M(Tmp), Ep, rows, r, j);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 2 * hn2; i += blockDim.x)
    partial[index_t(blockIdx.x) * 2 * hn2 + i] = acc[i];
}

template <class T>
std::size_t multihead_forward_smem(int heads, int rows, int cols) {
  const std::size_t h = std::size_t(heads), r = std::size_t(rows), c = std::size_t(cols);
  return sizeof(T) * (2 * h * r * r + 3 * r * r + r * c);
}
template <class T>
std::size_t multihead_vjp_smem(int heads, int rows, int cols) {
  const std::size_t h = std::size_t(heads), r = std::size_t(rows), c = std::size_t(cols);
  return sizeof(double) * (2 * h * r * r) + sizeof(T) * (2 * h * r * r + 7 * r * r + 2 * r * c);
}

}  // namespace
}  // namespace lsa_native::cuda::kernels
