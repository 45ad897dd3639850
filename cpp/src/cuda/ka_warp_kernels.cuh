// The warp-per-prompt CUDA kernels of kernel attention [CCS (3), (5), (12)] (included by
// ka_cuda.cu and by the CPU emulation test cpp/tests/test_cuda_emulated.cpp). Same arrays, modes,
// context layout (recipe::KaContext) and fixed-order partials as ka_kernel (ka_kernels.cuh), which
// stays the path for shapes whose per-warp workspace does not fit shared memory.
//
// Why: ka_kernel spreads one prompt over a 128-thread block, so every step ends at __syncthreads
// and every product entry reads both operands from shared memory. Here one warp owns a prompt
// (several warps per block, grid-stride over the batch by warp) and
//   * lane t owns the token columns j = t, t + 32, …: every per-token step (U = B X, the logit
//     column S[:, j] and its softmax, Y = Z M h̃, the residual, dY = Vᵀ dO, dh̃ and dS, dW, dX)
//     reads its own column (consecutive lanes, consecutive words: conflict-free) and the other
//     operand as a warp broadcast (one address for all lanes: one wavefront), accumulating
//     kKaTile output rows in registers so that the own-column value is loaded once per kKaTile
//     FMAs — about one shared wavefront per warp FMA instead of two plus conflicts;
//   * the products over tokens that run along rows (dZ[:, i] += dY h̃ᵀ, dU = W dSᵀ) are owned by the
//     lane of token i, which reads row i of h̃ / dS: the workspace's row stride Sw is odd, so the 32
//     rows sit in 32 different banks; the parameter-gradient entries (dV, dB, dC; lanes over entries)
//     read rows with the same odd stride;
//   * the lanes of a warp only wait for each other at __syncwarp (per layer one, plus three per head
//     in the backward and one in the forward); no block barrier after the parameters are staged.
// Under the loss and the predictions alone the last layer is the query layer (ka_warp_query_forward
// / _backward: the query column only, O(n·d + d²) per head instead of O(n²·d); KaArgs::query_only).
// Every entry sums in the recipe's order (recipe::product_entry / token_product /
// row_combination_entry: the inner index ascending), with the activation, softmax and loss-seed
// formulas called from common/ka_recipe.hpp, so the CPU tests of the recipe cover this arithmetic.
#pragma once

#include <algorithm>
#include <cstddef>

#include "common/ka_recipe.hpp"
#include "cuda/ka_kernels.cuh"
#include "cuda/kernel_common.cuh"
#include "lsa_native/kernel_attention.hpp"

// The query layer's functions run once per prompt: called out of line, so that they do not raise
// the registers of the full-layer code they would be inlined into (sm_90, the loss kernel in float /
// double: 155 / 128 registers without the query layer, 178 / 174 with it inlined, 162 / 138 out
// of line with a 128-byte call frame; no spills).
#if defined(__CUDACC__)
#define LSA_KA_OUT_OF_LINE __noinline__
#else
#define LSA_KA_OUT_OF_LINE
#endif

namespace lsa_native::cuda::kernels {
namespace {

constexpr int kKaTile = 8;       // output rows a lane accumulates in registers per pass
constexpr int kKaMaxWarps = 4;   // warps (prompts in flight) per block
template <class T>
inline constexpr int kVec = int(16 / sizeof(T));  // values per 16-byte shared-memory load

// Shared memory of the warp kernels: per block the parameters staged per head (HeadParams); per
// warp the double accumulators [Σ r², dV, dB, dC] (not in the forward) and the workspace: the
// forward state in the context's row order with row stride Sw (recipe::KaContext with Tt = Sw),
// then the backward scratch dZ, dZ', dY [D, Sw], dS [n, Sw], dU, dW [d, Sw]. A forward that saves
// no context keeps only Z_ℓ, Z_{ℓ+1} and one head's U, W, h̃, Y (`compact`: Z_ℓ in slot ℓ mod 2,
// one head slot): 58 instead of 162 rows at the CCS size.
// The recomputing workspace (`recompute`; ka_cuda.cu's default, LSA_NATIVE_KA_RECOMPUTE=0 turns it
// off; the loss and the VJP without a saved context): Z_0..Z_L and one head slot, the backward
// recomputing each head's U, W, h̃, Y from Z_ℓ (ka_warp_head_forward, the forward's code: the
// same bits) before its reverse step; 128 instead of 220 rows at the CCS size (the loss: 20.5
// instead of 33.7 KB a warp in float), for more warps per SM at the price of the forward's full
// layers run twice.
struct KaWarpLayout : KaDims {
  int Sw;  // the workspace's row stride
  bool compact;    // Z_ℓ in slot ℓ mod 2 (the forward without a context), one head slot
  bool recompute;  // Z_0..Z_L, one head slot recomputed by the backward (ka_warp_kernel<.., true>)
  bool one_slot;   // compact or recompute: one head slot, at head_at
  int head_at;     // the one head slot's offset (values of T; int offsets where a warp runs)
  int warps;  // per block; 0: the workspace of one warp does not fit (use ka_kernel)
  recipe::KaContext ctx;  // the saved context's layout (global memory, Tt = cols rounded up)
  recipe::KaContext ws;   // the same rows in the workspace (Tt = Sw; one head slot at head_at)
  int state_values, param_values;  // workspace values per warp; V, B, C values (the gradient)
  int Pd, PD;                        // d, D rounded up to kVec: the staged parameters' row length
  std::size_t params_bytes, acc_bytes, state_bytes;
  // Staged values of one head (ℓ, s), each matrix [rows, P] (see HeadParams).
  __host__ __device__ int head_values() const { return 4 * d * Pd + 2 * D * PD; }
  __host__ __device__ int acc_width() const { return 1 + param_values; }
  __host__ __device__ std::size_t warp_bytes() const { return acc_bytes + state_bytes; }
  __host__ __device__ std::size_t shared_bytes() const { return params_bytes + std::size_t(warps) * warp_bytes(); }
  // Workspace offsets of Z_ℓ and of head (ℓ, s)'s U, W, h̃, Y (the context's order: U, W [d],
  // h̃ [n], Y [D] rows), and the forward state's size (the backward scratch follows it).
  __host__ __device__ long long z(int l) const { return ws.z(compact ? l % 2 : l); }
  __host__ __device__ long long u(int l, int s) const { return one_slot ? head_at : ws.u(l, s); }
  __host__ __device__ long long w(int l, int s) const { return one_slot ? head_at + d * Sw : ws.w(l, s); }
  __host__ __device__ long long h(int l, int s) const {
    return one_slot ? head_at + 2 * d * Sw : ws.h(l, s);
  }
  __host__ __device__ long long y(int l, int s) const {
    return one_slot ? head_at + (2 * d + n) * Sw : ws.y(l, s);
  }
  __host__ __device__ long long forward_size() const {
    return one_slot ? head_at + (long long)(2 * d + n + D) * Sw : ws.size();
  }

  // As many warps (≤ max_warps) as fit `max_shared` bytes; `with_context`: the forward saves the
  // context, the VJP reads one (else compact; other modes keep the whole forward state for the
  // backward, or with `recompute` Z_0..Z_L alone where no context is read).
  template <class T>
  static KaWarpLayout make(const KernelAttentionShape& s, KaMode mode, std::size_t max_shared,
                           int max_warps = kKaMaxWarps, bool with_context = true,
                           bool recompute = false) {
    KaWarpLayout l{};
    static_cast<KaDims&>(l) = KaDims::of(s);
    l.compact = mode == KaMode::forward && !with_context;
    l.recompute = recompute && mode != KaMode::forward && !with_context;
    // A multiple of the 16-byte load, an odd number of them: rows start aligned, and the rows
    // read by the lanes of a quarter warp (16-byte loads) or a warp (4-byte loads, ≤ 32 / kVec
    // rows) fall in distinct banks.
    l.Sw = kVec<T> * (((l.cols + kVec<T> - 1) / kVec<T>) | 1);
    l.ctx = recipe::context_layout<T>(s);
    l.ws = l.ctx;
    l.ws.Tt = l.Sw;
    l.one_slot = l.compact || l.recompute;
    // Beyond 2^30 values the state is too (state_values 0, no warps): the int offsets never run.
    l.head_at = int(std::min<long long>(l.compact ? l.ws.z(2) : l.recompute ? l.ws.z(l.L + 1) : 0, 1LL << 30));
    const long long scratch = mode == KaMode::forward ? 0 : (long long)l.Sw * (3 * l.D + l.n + 2 * l.d);
    const long long state = l.forward_size() + scratch;
    l.param_values = l.L * l.H * (l.D * l.D + 2 * l.d * l.d);
    l.Pd = (l.d + kVec<T> - 1) / kVec<T> * kVec<T>;
    l.PD = (l.D + kVec<T> - 1) / kVec<T> * kVec<T>;
    l.params_bytes = align16(sizeof(T) * std::size_t(l.L * l.H) * std::size_t(l.head_values()));
    l.acc_bytes = mode == KaMode::forward ? 0 : align16(sizeof(double) * std::size_t(l.acc_width()));
    l.state_bytes = align16(sizeof(T) * std::size_t(state));
    l.state_values = state < (1LL << 30) ? int(state) : 0;
    l.warps = 0;
    if (l.state_values > 0 && l.params_bytes < max_shared)
      l.warps = int(std::min<std::size_t>(std::size_t(max_warps), (max_shared - l.params_bytes) / l.warp_bytes()));
    return l;
  }
};

// ---- one lane's column products ------------------------------------------------------------
// acc[k] += Σ_{m < inner} A(r0 + k, m) · x(m) for the rows r0 + k < rows, m ascending (the
// recipe's per-entry order), A read as warp broadcasts, x(m) from the lane's own column or row.
// A is one of: a recipe::Mat (scalar loads: the small parameter matrices), Rows (A(r, m) = p[r·ld
// + m]: 16-byte loads along m) or Cols (A(r, m) = p[m·ld + r]: 16-byte loads along r). Workspace
// rows start 16-byte aligned (ld a multiple of kVec) and their padding columns are 0.

template <class T>
struct __align__(16) Pack {
  T v[kVec<T>];
};

template <class T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T>*>(p);
}

template <class T>
struct Rows {  // A(r, m) = p[r·ld + m]
  const T* p;
  int ld;
};
template <class T>
struct Cols {  // A(r, m) = p[m·ld + r]
  const T* p;
  int ld;
};

// x(m) = p[m·ld + j]: the lane's own column (consecutive lanes, consecutive words).
template <class T>
struct OwnColumn {
  const T* p;
  int ld, j;
  __device__ __forceinline__ T operator()(int m) const { return p[m * ld + j]; }
  __device__ __forceinline__ Pack<T> pack(int m) const {
    Pack<T> x;
LSA_UNROLL
    for (int v = 0; v < kVec<T>; ++v) x.v[v] = p[(m + v) * ld + j];
    return x;
  }
};
// x(m) = p[m]: the lane's own row (16-byte loads; rows of an odd number of 16-byte units apart,
// so the lanes of a quarter warp hit distinct banks).
template <class T>
struct OwnRow {
  const T* p;
  __device__ __forceinline__ T operator()(int m) const { return p[m]; }
  __device__ __forceinline__ Pack<T> pack(int m) const { return load_pack(p + m); }
};

template <class T, class X>
__device__ __forceinline__ void tile(recipe::Mat<T> A, int rows, int r0, int inner, const X& x,
                                     T (&acc)[kKaTile]) {
  for (int m = 0; m < inner; ++m) {
    const T xm = x(m);
LSA_UNROLL
    for (int k = 0; k < kKaTile; ++k)
      if (r0 + k < rows) acc[k] += A(r0 + k, m) * xm;
  }
}

template <class T, class X>
__device__ __forceinline__ void tile(Rows<T> A, int rows, int r0, int inner, const X& x,
                                     T (&acc)[kKaTile]) {
  constexpr int V = kVec<T>;
  int m = 0;
  for (; m + V <= inner; m += V) {
    const Pack<T> xm = x.pack(m);
LSA_UNROLL
    for (int k = 0; k < kKaTile; ++k)
      if (r0 + k < rows) {
        const Pack<T> a = load_pack(A.p + (r0 + k) * A.ld + m);
LSA_UNROLL
        for (int v = 0; v < V; ++v) acc[k] += a.v[v] * xm.v[v];
      }
  }
  for (; m < inner; ++m) {
    const T xm = x(m);
LSA_UNROLL
    for (int k = 0; k < kKaTile; ++k)
      if (r0 + k < rows) acc[k] += A.p[(r0 + k) * A.ld + m] * xm;
  }
}

// Rows r0 + k ≥ rows inside a loaded pack accumulate values that are never stored; a pack is
// loaded only when its first row is < rows ≤ ld, so it stays inside the row.
template <class T, class X>
__device__ __forceinline__ void tile(Cols<T> A, int rows, int r0, int inner, const X& x,
                                     T (&acc)[kKaTile]) {
  constexpr int V = kVec<T>;
  for (int m = 0; m < inner; ++m) {
    const T xm = x(m);
LSA_UNROLL
    for (int q = 0; q < kKaTile / V; ++q)
      if (r0 + q * V < rows) {
        const Pack<T> a = load_pack(A.p + m * A.ld + r0 + q * V);
LSA_UNROLL
        for (int v = 0; v < V; ++v) acc[q * V + v] += a.v[v] * xm;
      }
  }
}

// out(r) = init(r) + Σ_{m < inner} A(r, m) x(m) for every r < rows (one column, kKaTile rows per
// pass); init(r) is read before out(r) is written, so out may update in place.
template <class A, template <class> class X, class T, class Init, class Out>
__device__ __forceinline__ void column_product(A a, int rows, int inner, const X<T>& x, Init init, Out out) {
  for (int r0 = 0; r0 < rows; r0 += kKaTile) {
    T acc[kKaTile];
LSA_UNROLL
    for (int k = 0; k < kKaTile; ++k) acc[k] = r0 + k < rows ? init(r0 + k) : T(0);
    tile(a, rows, r0, inner, x, acc);
LSA_UNROLL
    for (int k = 0; k < kKaTile; ++k)
      if (r0 + k < rows) out(r0 + k, acc[k]);
  }
}

// x = Σ_{j < cols} a[j] b[j] and y = Σ_j c[j] e[j] (recipe::token_product over workspace rows),
// 16-byte loads; two independent chains, so a lane's two entries overlap their FMA latencies.
template <class T>
__device__ __forceinline__ void token_dots(const T* a, const T* b, const T* c, const T* e, int cols,
                                           T& x, T& y) {
  x = y = T(0);
  int j = 0;
  for (; j + kVec<T> <= cols; j += kVec<T>) {
    const Pack<T> pa = load_pack(a + j), pb = load_pack(b + j), pc = load_pack(c + j), pe = load_pack(e + j);
LSA_UNROLL
    for (int v = 0; v < kVec<T>; ++v) {
      x += pa.v[v] * pb.v[v];
      y += pc.v[v] * pe.v[v];
    }
  }
  for (; j < cols; ++j) {
    x += a[j] * b[j];
    y += c[j] * e[j];
  }
}

// The parameters of head (ℓ, s) staged in shared memory for broadcast 16-byte loads along the
// output rows (Cols operands), rows of Pd / PD values (padding 0): Bt[c, a] = B[a, c] and Ct (U = B X,
// W = C X), Bp[a, b] = B[a, b] and Cp (dX += Bᵀ dU + Cᵀ dW), Vt[q, r] = V[r, q] (Z += V Y) and
// Vp[r, q] = V[r, q] (dY = Vᵀ dO).
template <class T>
struct HeadParams {
  const T *Bt, *Ct, *Bp, *Cp, *Vt, *Vp;
  __device__ HeadParams(const KaWarpLayout& lay, const T* staged, int p) {
    Bt = staged + std::size_t(p) * std::size_t(lay.head_values());
    Ct = Bt + lay.d * lay.Pd;
    Bp = Ct + lay.d * lay.Pd;
    Cp = Bp + lay.d * lay.Pd;
    Vt = Cp + lay.d * lay.Pd;
    Vp = Vt + lay.D * lay.PD;
  }
};

// Stages V, B, C ([L, H, D, D], [L, H, d, d] x 2, global) as HeadParams with the block's threads.
template <class T>
__device__ void stage_head_params(const KaWarpLayout& lay, const T* __restrict__ V,
                                  const T* __restrict__ Bq, const T* __restrict__ Ck, T* staged,
                                  int tid, int nt) {
  const int d = lay.d, D = lay.D, Pd = lay.Pd, PD = lay.PD, hv = lay.head_values();
  for (int i = tid; i < lay.L * lay.H * hv; i += nt) {
    const int p = i / hv, k = i % hv;
    const int m = k < 4 * d * Pd ? k / (d * Pd) : 4 + (k - 4 * d * Pd) / (D * PD);  // which matrix
    const int e = m < 4 ? k - m * d * Pd : k - 4 * d * Pd - (m - 4) * D * PD;       // entry in it
    const int P = m < 4 ? Pd : PD, row = e / P, col = e % P;
    const bool transposed = m == 0 || m == 1 || m == 4;  // Bt, Ct, Vt
    const int r = transposed ? col : row, c = transposed ? row : col;  // entry (r, c) of B, C or V
    const int n = m < 4 ? d : D;
    const T* src = m == 0 || m == 2 ? Bq : m == 1 || m == 3 ? Ck : V;
    staged[i] = col < n ? src[std::size_t(p) * n * n + r * n + c] : T(0);
  }
}

// Head s of layer ℓ when only TF = Z_{ℓ+1}[d, n] is needed (recipe: the query layer, O(n·d + d²)
// per head): lanes over the d or D entries of w_q, q, y and over the n sources of s and h. The
// saved vectors sit in the query column n of the head's slots, where the full layer keeps the same
// quantities: w_q = W[:, n], h = h̃[:, n], y = Y[:, n], and q in U's column n (U itself is not
// needed). Ends with __syncwarp.
template <class T>
__device__ __forceinline__ void ka_warp_query_head(const KaWarpLayout& lay, T* ws, const T* staged,
                                                   const Activation* acts, int l, int s, int lane) {
  using recipe::column;
  using recipe::rows_of;
  const int d = lay.d, n = lay.n, D = lay.D, S = lay.Sw;
  const T* Zl = ws + lay.z(l);
  const recipe::Mat<T> Z = rows_of<T>(Zl, S);
  const Activation a = acts[s];
  const HeadParams<T> hp(lay, staged, l * lay.H + s);
  T *U = ws + lay.u(l, s), *W = ws + lay.w(l, s), *Hs = ws + lay.h(l, s), *Y = ws + lay.y(l, s);
  for (int r = lane; r < d; r += kWarp)  // w_q = C x_q
    W[r * S + n] = recipe::matvec_entry(rows_of<T>(hp.Cp, lay.Pd), column<T>(Zl + n, S), d, r);
  __syncwarp();
  for (int c = lane; c < d; c += kWarp)  // q = Bᵀ w_q
    U[c * S + n] = recipe::matvec_entry(rows_of<T>(hp.Bp, lay.Pd).transposed(), column<T>(W + n, S), d, c);
  __syncwarp();
  // s_i = x_i · q, h = h̃(s)   (12); column-wise (softmax): the column's max and sum read by
  // every lane in the recipe's order (recipe::column_max, column_sum: the CPU's order, which
  // a saturated softmax's backward needs to the last bit), each lane scaling its own sources.
  const bool cw = recipe::column_wise(a);
  const auto q = column<T>(U + n, S);
  for (int i = lane; i < n; i += kWarp) {
    const T v = recipe::column_dot_entry(Z, q, d, i);
    Hs[i * S + n] = cw ? v : recipe::activation_value(a, v, T(0));
  }
  __syncwarp();
  if (cw) {
    const auto Sm = rows_of<T>(Hs, S);
    const T shift = recipe::column_max(Sm, n, n);
    __syncwarp();
    for (int i = lane; i < n; i += kWarp) Hs[i * S + n] = recipe::activation_value(a, Hs[i * S + n], shift);
    __syncwarp();
    const T scale = recipe::inverse(recipe::column_sum(Sm, n, n));
    __syncwarp();
    for (int i = lane; i < n; i += kWarp) Hs[i * S + n] *= scale;
    __syncwarp();
  }
  for (int r = lane; r < D; r += kWarp)  // y = Z M h
    Y[r * S + n] = recipe::source_sum_entry(Z, column<T>(Hs + n, S), n, r);
  __syncwarp();
}

// The query layer ℓ, head by head (ka_warp_query_head), accumulating TF = Z_{ℓ+1}[d, n]   (3);
// only Z_{ℓ+1}[d, n] is written. Ends with __syncwarp.
template <class T>
__device__ LSA_KA_OUT_OF_LINE void ka_warp_query_forward(const KaWarpLayout& lay, T* ws, const T* staged,
                                      const Activation* acts, int l, int lane) {
  const int d = lay.d, n = lay.n, D = lay.D, S = lay.Sw;
  T tf = ws[lay.z(l) + d * S + n];
  for (int s = 0; s < lay.H; ++s) {
    ka_warp_query_head(lay, ws, staged, acts, l, s, lane);
    const HeadParams<T> hp(lay, staged, l * lay.H + s);
    const T* Y = ws + lay.y(l, s);
    tf = recipe::query_label_step(tf, recipe::rows_of<T>(hp.Vp, lay.PD), recipe::column<T>(Y + n, S),
                                  D, d);  // (3)
  }
  if (lane == 0) ws[lay.z(l + 1) + d * S + n] = tf;
  __syncwarp();
}

// The backward of ka_warp_query_forward from the loss seed g = ∂ℓ/∂TF (dZ, the first scratch
// rows, is g at [d, n] and 0 elsewhere), in place: dZ becomes ∂ℓ/∂Z_ℓ (dZ[d, n] is never written).
// Per head (recipe: the query layer's reverse mode): dy in dY's column n, ds in dS's, a in dU's,
// dw_q in dW's; lanes over the sources for dh, ds and dZ[:, i<n], over entries for the rest.
// Parameter gradients accumulate into gV, gB, gC. kRecompute (one head slot): with several heads,
// head s's query columns are computed again first. Ends with __syncwarp.
template <bool kRecompute, class T>
__device__ LSA_KA_OUT_OF_LINE void ka_warp_query_backward(const KaWarpLayout& lay, T* ws, const T* staged,
                                       const Activation* acts, double* gV, double* gB, double* gC,
                                       int l, int lane) {
  using recipe::column;
  using recipe::rows_of;
  const int d = lay.d, n = lay.n, D = lay.D, S = lay.Sw;
  const T* Zl = ws + lay.z(l);
  const recipe::Mat<T> Z = rows_of<T>(Zl, S);
  T* dZ = ws + lay.forward_size();
  T* dY = dZ + 2 * D * S;
  T* dS = dY + D * S;
  T* dU = dS + n * S;
  T* dW = dU + d * S;
  const T g = dZ[d * S + n];
  for (int s = 0; s < lay.H; ++s) {
    if constexpr (kRecompute)
      if (lay.H > 1) {  // one slot for all heads (with one head it still holds the forward's)
        __syncwarp();
        ka_warp_query_head(lay, ws, staged, acts, l, s, lane);
      }
    const int p = l * lay.H + s;
    const Activation a = acts[s];
    const HeadParams<T> hp(lay, staged, p);
    const recipe::Mat<T> Vm = rows_of<T>(hp.Vp, lay.PD), Bm = rows_of<T>(hp.Bp, lay.Pd),
                         Cm = rows_of<T>(hp.Cp, lay.Pd);
    const T *U = ws + lay.u(l, s), *W = ws + lay.w(l, s), *Hs = ws + lay.h(l, s), *Y = ws + lay.y(l, s);
    const auto wq = column<T>(W + n, S), q = column<T>(U + n, S), y = column<T>(Y + n, S);
    for (int r = lane; r < D; r += kWarp) {  // dV[d, :] += g y, dy = g V[d, :]
      gV[p * D * D + d * D + r] += double(g * y(r, 0));
      dY[r * S + n] = recipe::query_dy(g, Vm, d, r);
    }
    __syncwarp();
    // dh_i = x̄_iᵀ dy, then ds_i (softmax: with Σ_i h_i dh_i), then dZ[:, i] += dy h_i + q ds_i
    const bool cw = recipe::column_wise(a);
    const auto dy = column<T>(dY + n, S);
    for (int i = lane; i < n; i += kWarp) {
      const T dh = recipe::column_dot_entry(Z, dy, D, i);
      dS[i * S + n] = cw ? dh : recipe::activation_gradient(a, Hs[i * S + n], dh, T(0));
    }
    if (cw) {  // Σ_i h_i dh_i read by every lane in the recipe's order (recipe::column_dot)
      __syncwarp();
      const T dot = recipe::column_dot(rows_of<T>(Hs, S), rows_of<T>(dS, S), n, n);
      __syncwarp();
      for (int i = lane; i < n; i += kWarp)
        dS[i * S + n] = recipe::activation_gradient(a, Hs[i * S + n], dS[i * S + n], dot);
    }
    for (int i = lane; i < n; i += kWarp) {
      const T h = Hs[i * S + n], ds = dS[i * S + n];
      for (int r = 0; r < D; ++r) dZ[r * S + i] += dy(r, 0) * h;
      for (int c = 0; c < d; ++c) dZ[c * S + i] += q(c, 0) * ds;
    }
    __syncwarp();
    for (int c = lane; c < d; c += kWarp)  // a = Σ_{i<n} ds_i x_i
      dU[c * S + n] = recipe::source_sum_entry(Z, column<T>(dS + n, S), n, c);
    __syncwarp();
    const auto av = column<T>(dU + n, S);
    for (int r = lane; r < d; r += kWarp) dW[r * S + n] = recipe::matvec_entry(Bm, av, d, r);  // dw_q = B a
    for (int e = lane; e < d * d; e += kWarp) gB[p * d * d + e] += double(wq(e / d, 0) * av(e % d, 0));
    __syncwarp();
    const auto dwq = column<T>(dW + n, S);
    for (int e = lane; e < d * d; e += kWarp) gC[p * d * d + e] += double(dwq(e / d, 0) * Z(e % d, n));
    for (int c = lane; c < d; c += kWarp)  // dX[:, n] += Cᵀ dw_q
      dZ[c * S + n] = recipe::input_gradient_entry(dZ[c * S + n], Cm, column<T>(dW + n, S), d, c, 0);
  }
  __syncwarp();
}

// Head (ℓ, s) of a full layer from Z_ℓ = Zp: U = B X, W = C X, h̃ (12) and Y = Z_ℓ M h̃ into the
// head's slots, and with kResidual Z_{ℓ+1} += V Y into Zn (3) (without: the recomputing
// workspace's backward, ka_warp_backward<true>, the same bits again). Lane t owns the columns
// t, t + 32, …; reads U and W across columns after a __syncwarp; no final __syncwarp.
template <bool kResidual, class T>
__device__ __forceinline__ void ka_warp_head_forward(const KaWarpLayout& lay, T* ws, const T* staged,
                                                     const Activation* acts, int l, int s,
                                                     const T* Zp, T* Zn, int lane) {
  const int d = lay.d, n = lay.n, D = lay.D, cols = lay.cols, S = lay.Sw;
  const auto zero = [](int) { return T(0); };
  const int p = l * lay.H + s;
  const Activation a = acts[s];
  const HeadParams<T> hp(lay, staged, p);
  T *U = ws + lay.u(l, s), *W = ws + lay.w(l, s), *Hs = ws + lay.h(l, s), *Y = ws + lay.y(l, s);
  for (int j = lane; j < cols; j += kWarp) {  // U = B X, W = C X: recipe::u_entry
    const OwnColumn<T> xj{Zp, S, j};
    column_product(Cols<T>{hp.Bt, lay.Pd}, d, d, xj, zero, [&](int r, T v) { U[r * S + j] = v; });
    column_product(Cols<T>{hp.Ct, lay.Pd}, d, d, xj, zero, [&](int r, T v) { W[r * S + j] = v; });
  }
  __syncwarp();
  for (int j = lane; j < cols; j += kWarp) {
    // S[:, j] = Uᵀ W[:, j] (recipe::logit_entry), h̃ element-wise or by column   (12)
    // Column-wise (softmax), on the lane's own column: the max (recipe::column_max) taken as S
    // is written, then e^(S − max) and its sum (column_sum) in one pass, then the scale.
    const bool cw = recipe::column_wise(a);
    T shift = T(0);
    column_product(Cols<T>{U, S}, n, d, OwnColumn<T>{W, S, j}, zero, [&](int i, T v) {
      Hs[i * S + j] = cw ? v : recipe::activation_value(a, v, T(0));
      shift = i == 0 ? v : recipe::max_step(shift, v);
    });
    if (cw) {
      T sum = T(0);
      for (int i = 0; i < n; ++i) {
        const T e = recipe::activation_value(a, Hs[i * S + j], shift);
        Hs[i * S + j] = e;
        sum += e;
      }
      const T scale = recipe::inverse(sum);
      for (int i = 0; i < n; ++i) Hs[i * S + j] *= scale;
    }
    // Y[:, j] = Z M h̃[:, j] (recipe::y_entry); Z_{ℓ+1}[:, j] += V Y[:, j] (residual_entry)   (3)
    column_product(Rows<T>{Zp, S}, D, n, OwnColumn<T>{Hs, S, j}, zero,
                   [&](int r, T v) { Y[r * S + j] = v; });
    if constexpr (kResidual)
      column_product(Cols<T>{hp.Vt, lay.PD}, D, D, OwnColumn<T>{Y, S, j},
                     [&](int r) { return Zn[r * S + j]; }, [&](int r, T v) { Zn[r * S + j] = v; });
  }
}

// Forward of one prompt in the warp's workspace ws from Z_0 already staged (and synchronized);
// writes the predictions Z_ℓ[d, n] (or their negatives, recipe::prediction), ℓ = 0..L, to their
// places in the prompt's `predictions` (recipe::prediction_row, _column) when not null.
// `query_last`: the last layer computes Z_L[d, n] alone (ka_warp_query_forward). Ends with
// __syncwarp.
template <class T>
__device__ void ka_warp_forward(const KaWarpLayout& lay, T* ws, const T* staged,
                                const Activation* acts, T* predictions, PredictionOutput what,
                                bool query_last, int lane) {
  const int d = lay.d, n = lay.n, D = lay.D, cols = lay.cols, S = lay.Sw;
  const auto store = [&](int l) {  // TF_ℓ (or ŷ_ℓ) from Z_ℓ in the workspace
    const int at = recipe::prediction_column(what, l, lay.L);
    if (predictions != nullptr && lane == 0 && at >= 0)
      predictions[at] = recipe::prediction(ws[lay.z(l) + d * S + n], what);
  };
  store(0);
  const int full = query_last ? lay.L - 1 : lay.L;
  for (int l = 0; l < full; ++l) {
    const T* Zp = ws + lay.z(l);
    T* Zn = ws + lay.z(l + 1);
    for (int j = lane; j < cols; j += kWarp)
      for (int r = 0; r < D; ++r) Zn[r * S + j] = Zp[r * S + j];
    for (int s = 0; s < lay.H; ++s) {
      if (lay.one_slot && s > 0) __syncwarp();  // the previous head's U, W, h̃, Y are read no more
      ka_warp_head_forward<true>(lay, ws, staged, acts, l, s, Zp, Zn, lane);
    }
    __syncwarp();  // Z_{ℓ+1} complete: the next layer reads its rows across tokens
    store(l + 1);
  }
  if (query_last) {
    ka_warp_query_forward(lay, ws, staged, acts, lay.L - 1, lane);
    store(lay.L);
  }
}

// Reverse mode of layers top − 1 .. 0 of one prompt whose forward state is in ws, from the seed
// dZ = ∂ℓ/∂Z_top in the first scratch rows; parameter gradients accumulated into gV, gB, gC (the
// warp's doubles). Returns ∂ℓ/∂Z_0 (inside the scratch). kRecompute (one head slot): each head's
// U, W, h̃, Y computed again from Z_ℓ first (ka_warp_head_forward: the forward's bits). Ends with
// __syncwarp.
template <bool kRecompute, class T>
__device__ T* ka_warp_backward(const KaWarpLayout& lay, T* ws, const T* staged,
                               const Activation* acts, double* gV, double* gB, double* gC, int top,
                               int lane) {
  const int d = lay.d, n = lay.n, D = lay.D, cols = lay.cols, S = lay.Sw;
  const auto zero = [](int) { return T(0); };
  T* dZ = ws + lay.forward_size();
  T* dZp = dZ + D * S;
  T* dY = dZp + D * S;
  T* dS = dY + D * S;
  T* dU = dS + n * S;
  T* dW = dU + d * S;
  for (int l = top - 1; l >= 0; --l) {
    const T* Zl = ws + lay.z(l);
    for (int j = lane; j < cols; j += kWarp)
      for (int r = 0; r < D; ++r) dZp[r * S + j] = dZ[r * S + j];
    for (int s = 0; s < lay.H; ++s) {
      if constexpr (kRecompute) {
        __syncwarp();  // the slot's previous contents are read no more
        ka_warp_head_forward<false>(lay, ws, staged, acts, l, s, Zl, static_cast<T*>(nullptr), lane);
        __syncwarp();  // h̃, U, W and Y are read across columns below
      }
      const int p = l * lay.H + s;
      const Activation a = acts[s];
      const HeadParams<T> hp(lay, staged, p);
      const T *U = ws + lay.u(l, s), *W = ws + lay.w(l, s), *Hs = ws + lay.h(l, s);
      const T* Y = ws + lay.y(l, s);
      for (int e = lane; e < D * D; e += 2 * kWarp) {  // dV += dO Yᵀ (lanes over entries, two at a time)
        const int f = e + kWarp < D * D ? e + kWarp : e;  // (f = e: computed twice, stored once)
        T x, y;
        token_dots(dZ + (e / D) * S, Y + (e % D) * S, dZ + (f / D) * S, Y + (f % D) * S, cols, x, y);
        gV[p * D * D + e] += double(x);
        if (f != e) gV[p * D * D + f] += double(y);
      }
      for (int j = lane; j < cols; j += kWarp)  // dY[:, j] = Vᵀ dO[:, j]: recipe::dy_entry
        column_product(Cols<T>{hp.Vp, lay.PD}, D, D, OwnColumn<T>{dZ, S, j}, zero,
                       [&](int q, T v) { dY[q * S + j] = v; });
      __syncwarp();
      for (int j = lane; j < cols; j += kWarp) {
        if (j < n)  // dZ[:, j] += dY h̃ᵀ[:, j] (token_product_entry; row j of h̃, odd stride)
          column_product(Rows<T>{dY, S}, D, cols, OwnRow<T>{Hs + j * S}, zero,
                         [&](int r, T v) { dZp[r * S + j] += v; });
        // dh̃[:, j] = (Z M)ᵀ dY[:, j] (dh_entry), then dS[:, j] = activation gradient, own column
        // (element-wise activations at once; softmax needs Σ_i h̃ dh̃ first: recipe::column_dot)
        const bool cw = recipe::column_wise(a);
        T dot = T(0);
        column_product(Cols<T>{Zl, S}, n, D, OwnColumn<T>{dY, S, j}, zero, [&](int i, T v) {
          const T h = Hs[i * S + j];
          dS[i * S + j] = cw ? v : recipe::activation_gradient(a, h, v, T(0));
          dot += h * v;
        });
        if (cw)
          for (int i = 0; i < n; ++i) dS[i * S + j] = recipe::activation_gradient(a, Hs[i * S + j], dS[i * S + j], dot);
      }
      __syncwarp();
      for (int j = lane; j < cols; j += kWarp) {
        // dU[:, j] = W dSᵀ[:, j] for j < n (row j of dS; query column 0), dW[:, j] = U[:, :n] dS[:, j]
        if (j < n)
          column_product(Rows<T>{W, S}, d, cols, OwnRow<T>{dS + j * S}, zero,
                         [&](int r, T v) { dU[r * S + j] = v; });
        else
          for (int r = 0; r < d; ++r) dU[r * S + j] = T(0);
        column_product(Rows<T>{U, S}, d, n, OwnColumn<T>{dS, S, j}, zero,
                       [&](int r, T v) { dW[r * S + j] = v; });
        // dX[:, j] += Bᵀ dU[:, j] + Cᵀ dW[:, j]: recipe::input_gradient_entry, B's term first
        column_product(Cols<T>{hp.Bp, lay.Pd}, d, d, OwnColumn<T>{dU, S, j},
                       [&](int r) { return dZp[r * S + j]; }, [&](int r, T v) { dZp[r * S + j] = v; });
        column_product(Cols<T>{hp.Cp, lay.Pd}, d, d, OwnColumn<T>{dW, S, j},
                       [&](int r) { return dZp[r * S + j]; }, [&](int r, T v) { dZp[r * S + j] = v; });
      }
      __syncwarp();
      for (int e = lane; e < d * d; e += kWarp) {  // dB += dU Xᵀ, dC += dW Xᵀ (lanes over entries)
        T x, y;
        token_dots(dU + (e / d) * S, Zl + (e % d) * S, dW + (e / d) * S, Zl + (e % d) * S, cols, x, y);
        gB[p * d * d + e] += double(x);
        gC[p * d * d + e] += double(y);
      }
    }
    T* t = dZ;  // dZ_ℓ becomes the upstream gradient of layer ℓ − 1
    dZ = dZp;
    dZp = t;
    __syncwarp();
  }
  return dZ;
}

// Forward (Z_L, predictions, context), VJP (with or without context) or loss and gradient of a
// batch (KaArgs as ka_kernel; `partial` has one row per warp of the grid: gridDim.x · warps).
// kRecompute: the recomputing workspace (lay.recompute; the loss and the VJP without context).
template <class T, KaMode kMode, bool kRecompute = false>
__global__ void ka_warp_kernel(KernelAttentionShape sh, KaWarpLayout lay, KaArgs<T> a) {
  LSA_DYNAMIC_SHARED(smem);
  const int tid = int(threadIdx.x), nt = int(blockDim.x), lane = tid % kWarp, warp = tid / kWarp;
  const int d = lay.d, n = lay.n, D = lay.D, cols = lay.cols, L = lay.L, S = lay.Sw, Tt = lay.ctx.Tt;
  const index_t per = index_t(D) * cols, ctx_size = lay.ctx.size();
  const int ctx_rows = int(ctx_size / Tt), width = lay.acc_width();
  T* staged = reinterpret_cast<T*>(smem);
  stage_head_params(lay, a.V, a.Bq, a.Ck, staged, tid, nt);
  const int nV = L * lay.H * D * D, nB = L * lay.H * d * d;
  unsigned char* mine = smem + lay.params_bytes + std::size_t(warp) * lay.warp_bytes();
  double* acc = kMode == KaMode::forward ? nullptr : reinterpret_cast<double*>(mine);
  T* ws = reinterpret_cast<T*>(mine + lay.acc_bytes);
  if (acc != nullptr)
    for (int i = lane; i < width; i += kWarp) acc[i] = 0;
  for (int i = lane; i < lay.state_values; i += kWarp) ws[i] = T(0);  // padding columns stay 0
  __syncthreads();  // the parameters are staged
  const bool query = a.query_only(kMode);  // the last layer: its query column alone
  const index_t warps = nt / kWarp, first = index_t(blockIdx.x) * warps + warp;
  const index_t stride = index_t(gridDim.x) * warps;
  for (index_t b = first; b < sh.batch; b += stride) {
    // Inputs are copied asynchronously (all of a prompt's copies in flight at once), then waited
    // for; the next prompt's are prefetched into L2 meanwhile.
    if (b + stride < sh.batch) {
      const index_t next = b + stride;
      if (kMode == KaMode::vjp && a.context != nullptr)
        prefetch_l2(a.context + next * ctx_size, ctx_size, lane, kWarp);
      else
        prefetch_l2(a.Z0 + next * per, per, lane, kWarp);
      if (kMode == KaMode::vjp) prefetch_l2(a.d_Z_out + next * per, per, lane, kWarp);
    }
    if (kMode == KaMode::vjp && a.context != nullptr) {  // context rows (stride Tt) → workspace (Sw)
      const T* src = a.context + b * ctx_size;
      for (int r = 0; r < ctx_rows; ++r)
        for (int j = lane; j < cols; j += kWarp) copy_async(ws + r * S + j, src + index_t(r) * Tt + j);
      copy_async_wait();
      __syncwarp();
    } else {
      const T* z0 = a.Z0 + b * per;
      for (int j = lane; j < cols; j += kWarp)
        for (int r = 0; r < D; ++r) copy_async(ws + r * S + j, z0 + r * cols + j);
      copy_async_wait();
      __syncwarp();
      T* row = a.predictions ? a.predictions + recipe::prediction_row(a.prediction_output, b, L) : nullptr;
      ka_warp_forward(lay, ws, staged, a.acts, row, a.prediction_output, query, lane);
    }
    if (kMode == KaMode::forward) {
      if (a.Z_out != nullptr) {
        const T* ZL = ws + lay.z(L);
        for (int j = lane; j < cols; j += kWarp)
          for (int r = 0; r < D; ++r) a.Z_out[b * per + r * cols + j] = ZL[r * S + j];
      }
      if (a.context != nullptr) {  // workspace → context rows, padding 0 (then !lay.compact)
        T* dst = a.context + b * ctx_size;
        for (int r = 0; r < ctx_rows; ++r)
          for (int j = lane; j < Tt; j += kWarp) dst[index_t(r) * Tt + j] = j < cols ? ws[r * S + j] : T(0);
      }
      __syncwarp();  // the next prompt overwrites the workspace
      continue;
    }
    T* dZ = ws + lay.forward_size();  // the seed ∂ℓ/∂Z_L
    if (kMode == KaMode::vjp) {
      const T* src = a.d_Z_out + b * per;
      for (int j = lane; j < cols; j += kWarp)
        for (int r = 0; r < D; ++r) copy_async(dZ + r * S + j, src + r * cols + j);
      copy_async_wait();
    } else {  // ∂ℓ/∂Z_L at [d, n]: the loss's r / B, or −∂ℓ/∂ŷ (recipe::query_seed)
      constexpr recipe::QuerySeed kSeed = query_seed<kMode>();
      const double y = double(a.y_q[b]);
      const double r = recipe::query_residual(kSeed, double(ws[lay.z(L) + d * S + n]), y);
      if (lane == 0) acc[0] += r * r;
      const T seed = T(recipe::query_seed(kSeed, r, y, sh.batch));
      for (int j = lane; j < cols; j += kWarp)
        for (int q = 0; q < D; ++q) dZ[q * S + j] = q == d && j == n ? seed : T(0);
    }
    __syncwarp();
    double *gV = acc + 1, *gB = gV + nV, *gC = gB + nB;
    if (query) ka_warp_query_backward<kRecompute>(lay, ws, staged, a.acts, gV, gB, gC, L - 1, lane);
    const T* dZ0 = ka_warp_backward<kRecompute>(lay, ws, staged, a.acts, gV, gB, gC, query ? L - 1 : L, lane);
    if (a.d_Z0 != nullptr)
      for (int j = lane; j < cols; j += kWarp)
        for (int r = 0; r < D; ++r) a.d_Z0[b * per + r * cols + j] = dZ0[r * S + j];
    __syncwarp();
  }
  if (acc != nullptr)
    for (int i = lane; i < width; i += kWarp) a.partial[first * width + i] = acc[i];
}

}  // namespace
}  // namespace lsa_native::cuda::kernels
