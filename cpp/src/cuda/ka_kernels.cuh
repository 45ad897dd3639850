// The CUDA kernels of kernel attention [CCS (3), (5), (12)] (included by ka_cuda.cu, and by the
// CPU emulation test cpp/tests/test_cuda_emulated.cpp, which runs them on host threads). Launch
// geometry, memory movement and reductions only: every per-entry formula is recipe::*
// (common/ka_recipe.hpp).
//
// One block per prompt (grid-stride over the batch). The block's workspace holds the prompt's
// forward state in the layout of the saved context (recipe::KaContext: Z_0..Z_L, U, W, h̃, Y, rows
// padded to Tt with exact zeros), then the backward scratch dZ, dZ', dY, dh̃, dU, dW. The
// workspace, the parameters V, B, C and the double gradient accumulators live in shared memory
// when they fit (KaLayout decides; the CCS size d = 5, n = 30, L = 3 needs ~30 KB in float), else
// the workspace in a global per-block scratch, the parameters read from global memory and the
// accumulators in the block's row of `partial`: the same code through pointers. Each gradient
// entry is owned by one thread and accumulated over the block's prompts in batch order; blocks'
// partials are reduced by reduce_partials_kernel in a fixed order (no atomics: two runs on one
// device give bitwise equal results). Offsets of whole prompts are 64-bit.
#pragma once

#include <cstddef>

#include "common/ka_recipe.hpp"
#include "cuda/kernel_common.cuh"
#include "lsa_native/kernel_attention.hpp"

namespace lsa_native::cuda::kernels {
namespace {

constexpr int kKaThreads = 128;

// forward; vjp (a dense ∂ℓ/∂Z_L); loss_grad and predict_vjp: the query backward seeded at
// Z_L[d, n] by the loss's r / B (y_q labels) or by −∂ℓ/∂ŷ (y_q the upstream d_y): one kernel
// each, so that the seed rule costs nothing at run time.
enum class KaMode { forward, vjp, loss_grad, predict_vjp };

// The seed rule of a query-backward mode (recipe::query_seed).
template <KaMode kMode>
__host__ __device__ constexpr recipe::QuerySeed query_seed() {
  return kMode == KaMode::predict_vjp ? recipe::QuerySeed::prediction_gradient
                                      : recipe::QuerySeed::labels;
}

// The sizes of a kernel-attention call every kernel layout starts from.
struct KaDims {
  int d, n, D, cols, L, H;  // D = d + 1 rows, cols = n + 1 tokens
  static KaDims of(const KernelAttentionShape& s) {
    const int d = int(s.dim), n = int(s.context);
    return {d, n, d + 1, n + 1, int(s.layers), int(s.heads)};
  }
};

// Where a kernel's data lives and how big it is (values of T unless said otherwise).
struct KaLayout : KaDims {
  recipe::KaContext ctx;
  int state_values;  // workspace: ctx.size() (+ the backward scratch except in the forward)
  int param_values;  // V, B, C: L·H·((d+1)² + 2d²)
  bool params_shared, state_shared, acc_shared;
  std::size_t acc_bytes, params_bytes, state_bytes;  // shared bytes of each region (0: global)
  __host__ __device__ int acc_width() const { return 1 + param_values; }  // [Σ r², dV, dB, dC]
  __host__ __device__ std::size_t shared_bytes() const { return acc_bytes + params_bytes + state_bytes; }

  // Everything in shared memory when it fits `max_shared` bytes; else, in this order, the
  // workspace, then the parameters, then the accumulators move to global memory.
  template <class T>
  static KaLayout make(const KernelAttentionShape& s, KaMode mode, std::size_t max_shared) {
    KaLayout l{};
    static_cast<KaDims&>(l) = KaDims::of(s);
    l.ctx = recipe::context_layout<T>(s);
    const int Tt = l.ctx.Tt;
    const long long scratch = mode == KaMode::forward ? 0 : (long long)Tt * (3 * l.D + l.n + 2 * l.d);
    l.state_values = int(l.ctx.size() + scratch);
    l.param_values = l.L * l.H * (l.D * l.D + 2 * l.d * l.d);
    const std::size_t acc = mode == KaMode::forward ? 0 : align16(sizeof(double) * std::size_t(l.acc_width()));
    const std::size_t params = align16(sizeof(T) * std::size_t(l.param_values));
    const std::size_t state = align16(sizeof(T) * std::size_t(l.state_values));
    l.acc_shared = l.params_shared = l.state_shared = true;
    if (acc + params + state > max_shared) l.state_shared = false;
    if (acc + params > max_shared) l.params_shared = false;
    if (acc > max_shared) l.acc_shared = false;
    l.acc_bytes = l.acc_shared ? acc : 0;
    l.params_bytes = l.params_shared ? params : 0;
    l.state_bytes = l.state_shared ? state : 0;
    return l;
  }
};

template <class T>
struct KaArgs {
  const T *Z0, *y_q, *V, *Bq, *Ck;  // [B, D, cols], [B] (predict_vjp: d_y), [L, H, D, D], [L, H, d, d] x 2
  const Activation* acts;           // [H], device memory
  const T* d_Z_out;                 // vjp: [B, D, cols]
  T* context;       // forward: written when not null; vjp: read when not null [B, ctx.size()]
  T *Z_out, *predictions, *d_Z0;  // written when not null: [B, D, cols], [B, L+1], [B, D, cols]
  double* partial;  // vjp, loss_grad: [gridDim.x, acc_width] per-block sums
  T* scratch;       // [gridDim.x, state_values] when the workspace is not in shared memory
  PredictionOutput prediction_output = PredictionOutput::tf;  // forward: TF_ℓ or ŷ_ℓ = −TF_ℓ
  // The last layer may compute the query column alone (recipe: the query layer) when nothing but
  // TF_L is asked for from it (off: the full layer, LSA_NATIVE_KA_QUERY=0 for comparisons). Only
  // ka_warp_kernel has the query layer; ka_kernel always runs the full last layer.
  bool query_layer = true;
  // Whether a kernel of mode m runs the last layer as the query layer: the loss and gradient, and a
  // forward writing neither Z_L nor the context (the predictions alone); never the VJP (dense ∂ℓ/∂Z_L).
  __host__ __device__ bool query_only(KaMode m) const {
    return query_layer && m != KaMode::vjp && Z_out == nullptr && context == nullptr;
  }
};

// Forward of one prompt in the workspace ws (layout lay.ctx) by the block's threads; Z_0 is staged
// from global memory. Ends synchronized.
template <class T>
__device__ void ka_forward_prompt(const KaLayout& lay, T* ws, const T* __restrict__ Z0b,
                                  const T* V, const T* Bq, const T* Ck, const Activation* acts,
                                  int tid, int nt) {
  using recipe::rows_of;
  const int d = lay.d, n = lay.n, D = lay.D, cols = lay.cols, Tt = lay.ctx.Tt;
  const recipe::KaContext& c = lay.ctx;
  for (int i = tid; i < D * cols; i += nt) ws[(i / cols) * Tt + i % cols] = Z0b[i];
  __syncthreads();
  for (int l = 0; l < lay.L; ++l) {
    const T* Zp = ws + c.z(l);
    T* Zn = ws + c.z(l + 1);
    const auto Z = rows_of<T>(Zp, Tt);
    for (int i = tid; i < D * cols; i += nt) Zn[(i / cols) * Tt + i % cols] = Zp[(i / cols) * Tt + i % cols];
    for (int s = 0; s < lay.H; ++s) {
      const int p = l * lay.H + s;
      const Activation a = acts[s];
      const bool cw = recipe::column_wise(a);
      const auto Bm = rows_of<T>(Bq + p * d * d, d), Cm = rows_of<T>(Ck + p * d * d, d);
      const auto Vm = rows_of<T>(V + p * D * D, D);
      T *U = ws + c.u(l, s), *W = ws + c.w(l, s), *Hs = ws + c.h(l, s), *Y = ws + c.y(l, s);
      for (int i = tid; i < d * cols; i += nt) {  // U = B X, W = C X
        const int r = i / cols, j = i % cols;
        U[r * Tt + j] = recipe::u_entry(Bm, Z, d, r, j);
        W[r * Tt + j] = recipe::u_entry(Cm, Z, d, r, j);
      }
      __syncthreads();
      for (int i = tid; i < n * cols; i += nt) {  // S = Uᵀ W; element-wise h̃ at once   (12)
        const int r = i / cols, j = i % cols;
        const T v = recipe::logit_entry(rows_of<T>(U, Tt), rows_of<T>(W, Tt), d, r, j);
        Hs[r * Tt + j] = cw ? v : recipe::activation_value(a, v, T(0));
      }
      __syncthreads();
      if (cw) {  // column-wise h̃ (softmax): one thread per target column, max subtracted
        const auto Sm = rows_of<T>(Hs, Tt);
        for (int j = tid; j < cols; j += nt) {
          const T shift = recipe::column_max(Sm, n, j);
          for (int i = 0; i < n; ++i) Hs[i * Tt + j] = recipe::activation_value(a, Hs[i * Tt + j], shift);
          const T scale = recipe::inverse(recipe::column_sum(Sm, n, j));
          for (int i = 0; i < n; ++i) Hs[i * Tt + j] *= scale;
        }
        __syncthreads();
      }
      for (int i = tid; i < D * cols; i += nt) {  // Y = Z M h̃
        const int r = i / cols, j = i % cols;
        Y[r * Tt + j] = recipe::y_entry(Z, rows_of<T>(Hs, Tt), n, r, j);
      }
      __syncthreads();
      for (int i = tid; i < D * cols; i += nt) {  // Z_{ℓ+1} += V Y   (3)
        const int r = i / cols, j = i % cols;
        Zn[r * Tt + j] = recipe::residual_entry(Zn[r * Tt + j], Vm, rows_of<T>(Y, Tt), D, r, j);
      }
      __syncthreads();
    }
  }
}

// Backward of one prompt from ∂ℓ/∂Z_L in dZ (the first scratch buffer) to ∂ℓ/∂Z_0, returned (one
// of the two dZ buffers); parameter gradients accumulate into g = [dV | dB | dC] (double).
// Starts and ends synchronized.
template <class T>
__device__ T* ka_backward_prompt(const KaLayout& lay, T* ws, const T* V, const T* Bq, const T* Ck,
                                 const Activation* acts, double* g, int tid, int nt) {
  using recipe::rows_of;
  const int d = lay.d, n = lay.n, D = lay.D, cols = lay.cols, Tt = lay.ctx.Tt;
  const recipe::KaContext& c = lay.ctx;
  const int LH = lay.L * lay.H;
  double *gV = g, *gB = gV + LH * D * D, *gC = gB + LH * d * d;
  T* dZ = ws + c.size();
  T* dZp = dZ + D * Tt;
  T* dY = dZp + D * Tt;
  T* dH = dY + D * Tt;
  T* dU = dH + n * Tt;
  T* dW = dU + d * Tt;
  const auto dYm = rows_of<T>(dY, Tt), dHm = rows_of<T>(dH, Tt);
  const auto dUm = rows_of<T>(dU, Tt), dWm = rows_of<T>(dW, Tt);
  for (int l = lay.L - 1; l >= 0; --l) {
    const auto Z = rows_of<T>(ws + c.z(l), Tt);
    const auto dO = rows_of<T>(dZ, Tt);
    for (int i = tid; i < D * cols; i += nt) dZp[(i / cols) * Tt + i % cols] = dZ[(i / cols) * Tt + i % cols];
    for (int s = 0; s < lay.H; ++s) {
      const int p = l * lay.H + s;
      const Activation a = acts[s];
      const auto Bm = rows_of<T>(Bq + p * d * d, d), Cm = rows_of<T>(Ck + p * d * d, d);
      const auto Vm = rows_of<T>(V + p * D * D, D);
      const auto U = rows_of<T>(ws + c.u(l, s), Tt), W = rows_of<T>(ws + c.w(l, s), Tt);
      const auto Hs = rows_of<T>(ws + c.h(l, s), Tt), Y = rows_of<T>(ws + c.y(l, s), Tt);
      for (int i = tid; i < D * D; i += nt)  // dV += dO Yᵀ
        gV[p * D * D + i] += double(recipe::token_product_entry(dO, Y, cols, i / D, i % D));
      for (int i = tid; i < D * cols; i += nt) {  // dY = Vᵀ dO
        const int q = i / cols, j = i % cols;
        dY[q * Tt + j] = recipe::dy_entry(Vm, dO, D, q, j);
      }
      __syncthreads();
      for (int i = tid; i < D * n; i += nt) {  // dZ[:, i<n] += dY h̃ᵀ
        const int r = i / n, k = i % n;
        dZp[r * Tt + k] += recipe::token_product_entry(dYm, Hs, cols, r, k);
      }
      for (int i = tid; i < n * cols; i += nt) {  // dh̃ = (Z M)ᵀ dY
        const int k = i / cols, j = i % cols;
        dH[k * Tt + j] = recipe::dh_entry(Z, dYm, D, k, j);
      }
      __syncthreads();
      if (recipe::column_wise(a)) {  // dS from dh̃, one thread per column
        for (int j = tid; j < cols; j += nt) {
          const T dot = recipe::column_dot(Hs, dHm, n, j);
          for (int k = 0; k < n; ++k) dH[k * Tt + j] = recipe::activation_gradient(a, Hs(k, j), dH[k * Tt + j], dot);
        }
      } else {
        for (int i = tid; i < n * cols; i += nt) {
          const int k = i / cols, j = i % cols;
          dH[k * Tt + j] = recipe::activation_gradient(a, Hs(k, j), dH[k * Tt + j], T(0));
        }
      }
      __syncthreads();
      for (int i = tid; i < d * cols; i += nt) {  // dU[:, i<n] = W dSᵀ (query column 0), dW = U dS
        const int r = i / cols, j = i % cols;
        dU[r * Tt + j] = j < n ? recipe::token_product_entry(W, dHm, cols, r, j) : T(0);
        dW[r * Tt + j] = recipe::dw_entry(U, dHm, n, r, j);
      }
      __syncthreads();
      for (int i = tid; i < d * d; i += nt) {  // dB += dU Xᵀ, dC += dW Xᵀ
        const int r = i / d, b = i % d;
        gB[p * d * d + i] += double(recipe::token_product_entry(dUm, Z, cols, r, b));
        gC[p * d * d + i] += double(recipe::token_product_entry(dWm, Z, cols, r, b));
      }
      for (int i = tid; i < d * cols; i += nt) {  // dX += Bᵀ dU + Cᵀ dW
        const int b = i / cols, j = i % cols;
        const T v = recipe::input_gradient_entry(dZp[b * Tt + j], Bm, dUm, d, b, j);
        dZp[b * Tt + j] = recipe::input_gradient_entry(v, Cm, dWm, d, b, j);
      }
      __syncthreads();
    }
    T* t = dZ;  // dZ_ℓ becomes the upstream gradient of layer ℓ − 1
    dZ = dZp;
    dZp = t;
  }
  return dZ;
}

// Forward (Z_L, predictions, context), VJP (with or without context) or loss and gradient of a
// batch; see KaArgs for the arrays.
template <class T, KaMode kMode>
__global__ void ka_kernel(KernelAttentionShape sh, KaLayout lay, KaArgs<T> a) {
  LSA_DYNAMIC_SHARED(smem);
  const int tid = int(threadIdx.x), nt = int(blockDim.x);
  const int d = lay.d, n = lay.n, D = lay.D, cols = lay.cols, L = lay.L, Tt = lay.ctx.Tt;
  const index_t per = index_t(D) * cols, ctx_size = lay.ctx.size();
  const int width = lay.acc_width();
  double* acc = nullptr;
  if (kMode != KaMode::forward)
    acc = lay.acc_shared ? reinterpret_cast<double*>(smem) : a.partial + index_t(blockIdx.x) * width;
  const T *V = a.V, *Bq = a.Bq, *Ck = a.Ck;
  if (lay.params_shared) {
    T* p = reinterpret_cast<T*>(smem + lay.acc_bytes);
    const int nV = L * lay.H * D * D, nB = L * lay.H * d * d;
    for (int i = tid; i < nV; i += nt) p[i] = a.V[i];
    for (int i = tid; i < nB; i += nt) {
      p[nV + i] = a.Bq[i];
      p[nV + nB + i] = a.Ck[i];
    }
    V = p;
    Bq = p + nV;
    Ck = p + nV + nB;
  }
  T* ws = lay.state_shared ? reinterpret_cast<T*>(smem + lay.acc_bytes + lay.params_bytes)
                           : a.scratch + index_t(blockIdx.x) * lay.state_values;
  for (int i = tid; i < lay.state_values; i += nt) ws[i] = T(0);  // the padding stays 0
  if (acc != nullptr)
    for (int i = tid; i < width; i += nt) acc[i] = 0;
  __syncthreads();
  for (index_t b = blockIdx.x; b < sh.batch; b += gridDim.x) {
    if (kMode == KaMode::vjp && a.context != nullptr) {
      const T* src = a.context + b * ctx_size;
      for (index_t i = tid; i < ctx_size; i += nt) ws[i] = src[i];
      __syncthreads();
    } else {
      ka_forward_prompt(lay, ws, a.Z0 + b * per, V, Bq, Ck, a.acts, tid, nt);
    }
    if (a.predictions != nullptr && kMode != KaMode::vjp)
      for (int l = tid; l <= L; l += nt) {
        const int at = recipe::prediction_column(a.prediction_output, l, L);
        if (at >= 0)
          a.predictions[recipe::prediction_row(a.prediction_output, b, L) + at] =
              recipe::prediction(ws[lay.ctx.z(l) + d * Tt + n], a.prediction_output);
      }
    if (kMode == KaMode::forward) {
      if (a.Z_out != nullptr) {
        const T* ZL = ws + lay.ctx.z(L);
        for (int i = tid; i < per; i += nt) a.Z_out[b * per + i] = ZL[(i / cols) * Tt + i % cols];
      }
      if (a.context != nullptr)
        for (index_t i = tid; i < ctx_size; i += nt) a.context[b * ctx_size + i] = ws[i];
      __syncthreads();  // the next prompt overwrites the workspace
      continue;
    }
    T* dZ = ws + ctx_size;  // the seed ∂ℓ/∂Z_L
    if (kMode == KaMode::vjp) {
      const T* src = a.d_Z_out + b * per;
      for (int i = tid; i < per; i += nt) dZ[(i / cols) * Tt + i % cols] = src[i];
    } else {  // ∂ℓ/∂Z_L at [d, n]: the loss's r / B, or −∂ℓ/∂ŷ (recipe::query_seed)
      constexpr recipe::QuerySeed kSeed = query_seed<kMode>();
      const double y = double(a.y_q[b]);
      const double r = recipe::query_residual(kSeed, double(ws[lay.ctx.z(L) + d * Tt + n]), y);
      if (tid == 0) acc[0] += r * r;
      for (int i = tid; i < D * Tt; i += nt)
        dZ[i] = i == d * Tt + n ? T(recipe::query_seed(kSeed, r, y, sh.batch)) : T(0);
    }
    __syncthreads();
    const T* dZ0 = ka_backward_prompt(lay, ws, V, Bq, Ck, a.acts, acc + 1, tid, nt);
    if (a.d_Z0 != nullptr)
      for (int i = tid; i < per; i += nt) a.d_Z0[b * per + i] = dZ0[(i / cols) * Tt + i % cols];
    __syncthreads();
  }
  if (kMode != KaMode::forward && lay.acc_shared)
    for (int i = tid; i < width; i += nt) a.partial[index_t(blockIdx.x) * width + i] = acc[i];
}

// d_V, d_B, d_C from the reduced sums total = [Σ r², dV, dB, dC]; loss = Σ r² / (2B)
// (recipe::loss_value: ½·MSE, ½ × CCS (5)).
template <class T>
__global__ void ka_epilogue_kernel(const double* __restrict__ total, int nV, int nB, index_t batch,
                                   T* __restrict__ d_V, T* __restrict__ d_B, T* __restrict__ d_C,
                                   double* __restrict__ loss) {
  for (int i = threadIdx.x; i < nV; i += blockDim.x) d_V[i] = T(total[1 + i]);
  for (int i = threadIdx.x; i < nB; i += blockDim.x) {
    d_B[i] = T(total[1 + nV + i]);
    d_C[i] = T(total[1 + nV + nB + i]);
  }
  if (threadIdx.x == 0 && loss != nullptr) *loss = recipe::loss_value(total[0], batch);
}

}  // namespace
}  // namespace lsa_native::cuda::kernels
