// CPU kernel attention [CCS (3), (5), (12)]: per-prompt forward with saved activations, reverse-mode
// backward, parameter gradients summed per chunk of prompts in double and reduced in chunk order.
#include <algorithm>
#include <string>
#include <vector>

#include "common/kernel_attention_math.hpp"
#include "common/parallel.hpp"
#include "lsa_native/kernel_attention.hpp"

namespace lsa_native {
namespace {

template <class T>
inline void axpy(T* y, T a, const T* x, index_t n) {  // y += a x
  for (index_t j = 0; j < n; ++j) y[j] += a * x[j];
}
template <class T>
inline T dot(const T* x, const T* y, index_t n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (index_t j = 0; j < n; ++j) s += x[j] * y[j];
  return s;
}

// Per-prompt state: Z_ℓ for ℓ = 0..L [D, T], and per (ℓ, s) the saved U, W [d, T], H [n, T],
// Y = Z_ℓ M H [D, T]; plus backward scratch.
template <class T>
struct Workspace {
  index_t d, n, D, Tt, L, H;
  std::vector<T> Z, U, W, Hm, Y, dZ, dZprev, dY, dH, dU, dW;
  explicit Workspace(const KernelAttentionShape& s)
      : d(s.dim), n(s.context), D(s.dim + 1), Tt(s.context + 1), L(s.layers), H(s.heads),
        Z(static_cast<size_t>((L + 1) * D * Tt)), U(static_cast<size_t>(L * H * d * Tt)),
        W(U.size()), Hm(static_cast<size_t>(L * H * n * Tt)), Y(static_cast<size_t>(L * H * D * Tt)),
        dZ(static_cast<size_t>(D * Tt)), dZprev(dZ.size()), dY(dZ.size()),
        dH(static_cast<size_t>(n * Tt)), dU(static_cast<size_t>(d * Tt)), dW(dU.size()) {}
  T* z(index_t l) { return Z.data() + l * D * Tt; }
  T* u(index_t l, index_t s) { return U.data() + (l * H + s) * d * Tt; }
  T* w(index_t l, index_t s) { return W.data() + (l * H + s) * d * Tt; }
  T* h(index_t l, index_t s) { return Hm.data() + (l * H + s) * n * Tt; }
  T* y(index_t l, index_t s) { return Y.data() + (l * H + s) * D * Tt; }
};

template <class T>
void forward_prompt(Workspace<T>& w, const T* Z0, const T* V, const T* Bq, const T* Ck,
                    const Activation* acts) {
  const index_t d = w.d, n = w.n, D = w.D, Tt = w.Tt;
  std::copy(Z0, Z0 + D * Tt, w.z(0));
  for (index_t l = 0; l < w.L; ++l) {
    const T* Z = w.z(l);
    T* Znext = w.z(l + 1);
    std::copy(Z, Z + D * Tt, Znext);  // residual
    for (index_t s = 0; s < w.H; ++s) {
      const index_t p = l * w.H + s;
      const T* Bm = Bq + p * d * d;
      const T* Cm = Ck + p * d * d;
      const T* Vm = V + p * D * D;
      T *U = w.u(l, s), *Wk = w.w(l, s), *Hs = w.h(l, s), *Y = w.y(l, s);
      // U = B X, W = C X  (X: first d rows of Z)
      std::fill(U, U + d * Tt, T(0));
      std::fill(Wk, Wk + d * Tt, T(0));
      for (index_t a = 0; a < d; ++a)
        for (index_t b = 0; b < d; ++b) {
          axpy(U + a * Tt, Bm[a * d + b], Z + b * Tt, Tt);
          axpy(Wk + a * Tt, Cm[a * d + b], Z + b * Tt, Tt);
        }
      // S_ij = u_i · w_j for sources i < n (the query row is masked by M), then h̃   (12)
      std::fill(Hs, Hs + n * Tt, T(0));
      for (index_t i = 0; i < n; ++i)
        for (index_t a = 0; a < d; ++a) axpy(Hs + i * Tt, U[a * Tt + i], Wk + a * Tt, Tt);
      if (acts[s] == Activation::softmax) {
        for (index_t j = 0; j < Tt; ++j) detail::softmax_column(Hs + j, Hs + j, n, Tt);
      } else if (acts[s] != Activation::linear) {
        for (index_t k = 0; k < n * Tt; ++k) Hs[k] = detail::activate(acts[s], Hs[k]);
      }
      // Y = Z M h̃,  Z_{ℓ+1} += V Y   (3)
      std::fill(Y, Y + D * Tt, T(0));
      for (index_t r = 0; r < D; ++r)
        for (index_t i = 0; i < n; ++i) axpy(Y + r * Tt, Z[r * Tt + i], Hs + i * Tt, Tt);
      for (index_t r = 0; r < D; ++r)
        for (index_t q = 0; q < D; ++q) axpy(Znext + r * Tt, Vm[r * D + q], Y + q * Tt, Tt);
    }
  }
}

// Backward from d_out = ∂ℓ/∂Z_L (in w.dZ) to ∂ℓ/∂Z_0 (left in w.dZ); parameter gradients are
// accumulated into gV, gB, gC (double).
template <class T>
void backward_prompt(Workspace<T>& w, const T* V, const T* Bq, const T* Ck, const Activation* acts,
                     double* gV, double* gB, double* gC) {
  const index_t d = w.d, n = w.n, D = w.D, Tt = w.Tt;
  for (index_t l = w.L - 1; l >= 0; --l) {
    const T* Z = w.z(l);
    const T* dO = w.dZ.data();  // ∂ℓ/∂Z_{ℓ+1}: every head's output receives it
    std::copy(w.dZ.begin(), w.dZ.end(), w.dZprev.begin());  // residual
    T* dZp = w.dZprev.data();
    for (index_t s = 0; s < w.H; ++s) {
      const index_t p = l * w.H + s;
      const T* Bm = Bq + p * d * d;
      const T* Cm = Ck + p * d * d;
      const T* Vm = V + p * D * D;
      const T *U = w.u(l, s), *Wk = w.w(l, s), *Hs = w.h(l, s), *Y = w.y(l, s);
      T *dY = w.dY.data(), *dH = w.dH.data(), *dU = w.dU.data(), *dW = w.dW.data();
      // dV += dO Y^T;  dY = V^T dO
      for (index_t r = 0; r < D; ++r)
        for (index_t q = 0; q < D; ++q) gV[p * D * D + r * D + q] += double(dot(dO + r * Tt, Y + q * Tt, Tt));
      std::fill(dY, dY + D * Tt, T(0));
      for (index_t r = 0; r < D; ++r)
        for (index_t q = 0; q < D; ++q) axpy(dY + q * Tt, Vm[r * D + q], dO + r * Tt, Tt);
      // Y = Z M H:  dZ[:, i<n] += dY H^T;  dH = (Z M)^T dY
      for (index_t r = 0; r < D; ++r)
        for (index_t i = 0; i < n; ++i) dZp[r * Tt + i] += dot(dY + r * Tt, Hs + i * Tt, Tt);
      std::fill(dH, dH + n * Tt, T(0));
      for (index_t r = 0; r < D; ++r)
        for (index_t i = 0; i < n; ++i) axpy(dH + i * Tt, Z[r * Tt + i], dY + r * Tt, Tt);
      // dS (in place in dH)
      if (acts[s] == Activation::softmax) {
        for (index_t j = 0; j < Tt; ++j) detail::softmax_column_backward(Hs + j, dH + j, dH + j, n, Tt);
      } else if (acts[s] != Activation::linear) {
        for (index_t k = 0; k < n * Tt; ++k) dH[k] = detail::activation_backward(acts[s], Hs[k], dH[k]);
      }
      // S = U^T W:  dU[:, i] = W dS[i, :]^T (i < n; 0 for the query), dW = U[:, :n] dS
      std::fill(dU, dU + d * Tt, T(0));
      std::fill(dW, dW + d * Tt, T(0));
      for (index_t a = 0; a < d; ++a) {
        for (index_t i = 0; i < n; ++i) {
          dU[a * Tt + i] = dot(Wk + a * Tt, dH + i * Tt, Tt);
          axpy(dW + a * Tt, U[a * Tt + i], dH + i * Tt, Tt);
        }
      }
      // U = B X, W = C X:  dB += dU X^T, dC += dW X^T, dX += B^T dU + C^T dW
      for (index_t a = 0; a < d; ++a)
        for (index_t b = 0; b < d; ++b) {
          gB[p * d * d + a * d + b] += double(dot(dU + a * Tt, Z + b * Tt, Tt));
          gC[p * d * d + a * d + b] += double(dot(dW + a * Tt, Z + b * Tt, Tt));
          axpy(dZp + b * Tt, Bm[a * d + b], dU + a * Tt, Tt);
          axpy(dZp + b * Tt, Cm[a * d + b], dW + a * Tt, Tt);
        }
    }
    w.dZ.swap(w.dZprev);
  }
}

template <class T>
void check_pointers(const T* Z0, const T* V, const T* Bq, const T* Ck, const Activation* acts,
                    index_t heads) {
  detail::require(Z0 && V && Bq && Ck && acts, "Z0, V, B, C and activations must not be null");
  for (index_t s = 0; s < heads; ++s) {
    const int a = static_cast<int>(acts[s]);
    detail::require(a >= 0 && a <= 3, "activations: unknown activation code " + std::to_string(a));
  }
}

}  // namespace

void validate(const KernelAttentionShape& s) {
  detail::require(s.batch >= 1, "batch B must be >= 1, got " + std::to_string(s.batch));
  detail::require(s.dim >= 1, "dimension d must be >= 1, got " + std::to_string(s.dim));
  detail::require(s.context >= 1, "context length n must be >= 1, got " + std::to_string(s.context));
  detail::require(s.layers >= 1, "layers L must be >= 1, got " + std::to_string(s.layers));
  detail::require(s.heads >= 1, "heads H must be >= 1, got " + std::to_string(s.heads));
}

template <class T>
void kernel_attention_forward(const KernelAttentionShape& sh, const T* Z0, const T* V, const T* Bq,
                              const T* Ck, const Activation* acts, T* Z_out, T* predictions) {
  validate(sh);
  check_pointers(Z0, V, Bq, Ck, acts, sh.heads);
  const index_t D = sh.dim + 1, Tt = sh.context + 1, per = D * Tt;
  detail::parallel_for(detail::chunk_count(sh.batch), [&](index_t c) {
    Workspace<T> w(sh);
    const index_t b0 = c * detail::kPromptsPerChunk;
    const index_t b1 = std::min(sh.batch, b0 + detail::kPromptsPerChunk);
    for (index_t b = b0; b < b1; ++b) {
      forward_prompt(w, Z0 + b * per, V, Bq, Ck, acts);
      if (Z_out) std::copy(w.z(sh.layers), w.z(sh.layers) + per, Z_out + b * per);
      if (predictions)
        for (index_t l = 0; l <= sh.layers; ++l)
          predictions[b * (sh.layers + 1) + l] = w.z(l)[sh.dim * Tt + sh.context];
    }
  });
}

template <class T>
double kernel_attention_loss_and_grad(const KernelAttentionShape& sh, const T* Z0, const T* y_q,
                                      const T* V, const T* Bq, const T* Ck, const Activation* acts,
                                      T* d_V, T* d_B, T* d_C, T* d_Z0, T* predictions) {
  validate(sh);
  check_pointers(Z0, V, Bq, Ck, acts, sh.heads);
  detail::require(y_q && d_V && d_B && d_C, "y_q, d_V, d_B and d_C must not be null");
  const index_t d = sh.dim, D = d + 1, Tt = sh.context + 1, per = D * Tt;
  const index_t nV = sh.layers * sh.heads * D * D, nB = sh.layers * sh.heads * d * d;
  const index_t width = 1 + nV + 2 * nB;
  const index_t n_chunks = detail::chunk_count(sh.batch);
  std::vector<double> partials(static_cast<size_t>(n_chunks * width), 0.0);
  const double inv_b = 1.0 / double(sh.batch);
  detail::parallel_for(n_chunks, [&](index_t c) {
    Workspace<T> w(sh);
    double* part = partials.data() + c * width;
    const index_t b0 = c * detail::kPromptsPerChunk;
    const index_t b1 = std::min(sh.batch, b0 + detail::kPromptsPerChunk);
    for (index_t b = b0; b < b1; ++b) {
      forward_prompt(w, Z0 + b * per, V, Bq, Ck, acts);
      const T tf = w.z(sh.layers)[d * Tt + sh.context];
      const double residual = double(tf) + double(y_q[b]);  // TF predicts −y   (5)
      part[0] += residual * residual;
      if (predictions)
        for (index_t l = 0; l <= sh.layers; ++l)
          predictions[b * (sh.layers + 1) + l] = w.z(l)[d * Tt + sh.context];
      std::fill(w.dZ.begin(), w.dZ.end(), T(0));
      w.dZ[d * Tt + sh.context] = T(2 * residual * inv_b);
      backward_prompt(w, V, Bq, Ck, acts, part + 1, part + 1 + nV, part + 1 + nV + nB);
      if (d_Z0) std::copy(w.dZ.begin(), w.dZ.end(), d_Z0 + b * per);
    }
  });
  std::vector<double> total(static_cast<size_t>(width), 0.0);
  for (index_t c = 0; c < n_chunks; ++c)  // chunk order: independent of the thread count
    for (index_t i = 0; i < width; ++i) total[i] += partials[c * width + i];
  for (index_t i = 0; i < nV; ++i) d_V[i] = T(total[1 + i]);
  for (index_t i = 0; i < nB; ++i) {
    d_B[i] = T(total[1 + nV + i]);
    d_C[i] = T(total[1 + nV + nB + i]);
  }
  return total[0] * inv_b;
}

#define LSA_NATIVE_INSTANTIATE(T)                                                                  \
  template void kernel_attention_forward<T>(const KernelAttentionShape&, const T*, const T*,       \
                                            const T*, const T*, const Activation*, T*, T*);        \
  template double kernel_attention_loss_and_grad<T>(const KernelAttentionShape&, const T*,         \
                                                    const T*, const T*, const T*, const T*,        \
                                                    const Activation*, T*, T*, T*, T*, T*);
LSA_NATIVE_INSTANTIATE(float)
LSA_NATIVE_INSTANTIATE(double)
#undef LSA_NATIVE_INSTANTIATE

}  // namespace lsa_native
