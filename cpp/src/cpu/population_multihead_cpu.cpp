// CPU implementation of the exact population loss of H-head linear attention and its gradient
// (population_multihead.hpp; derivation: docs/population.md, "H heads"; numpy transcription:
// reference/population_multihead.py). Arguments are validated by population_multihead.cpp. The
// loss at fixed Λ is the per-ISA kernel of population_multihead_kernels.inl; here: the heads read
// from (W_pv, W_kq) or (W_pv, W_k, W_q), the random-diagonal expansion, the chain rule of
// separate heads.
#include <algorithm>
#include <vector>

#include "cpu/population_multihead_cpu.hpp"
#include "cpu/population_multihead_kernels.hpp"
#include "cpu/random_diagonal_expansion.hpp"

namespace lsa_native::cpu {

const PopulationMultiheadKernels& population_multihead_kernels() {
  return LSA_NATIVE_SELECT_KERNELS(PopulationMultiheadKernels, population_multihead_kernels());
}

namespace {

using Vec = std::vector<double>;

// The parts of each head that reach ŷ, flattened in the kernels' layout
// (population_multihead_kernels.hpp): p1 [H, d], p2 [H], K1 [H, d, d], k2 [H, d]; p_h = (p1_h; p2_h),
// K_h = [K1_h; k2_hᵀ]. Also the gradient of 2L with respect to them (same layout).
struct HeadParts {
  index_t d, H;
  double* base;
  static index_t size(index_t d, index_t H) { return H * (d + 1) * (d + 1); }
  double* P1(index_t h) const { return base + h * d; }
  double& p2(index_t h) const { return base[H * d + h]; }
  double* Km(index_t h) const { return base + H * d + H + h * d * d; }
  double* K2(index_t h) const { return base + H * d + H + H * d * d + h * d; }
  // row r of K_h: K1_h's row r < d, k2_h for r = d
  double* K_row(index_t h, index_t r) const { return r < d ? Km(h) + r * d : K2(h); }
};

// p_h and the K-block of W^KQ_h = W^K_hᵀ W^Q_h (separate, rank >= 1: the kernel table's product) or
// W_kq[h] (merged, rank 0) written into P.
void read_heads(const HeadParts& P, index_t rank, const double* W_pv, const double* W_kq,
                const double* W_k, const double* W_q) {
  const index_t d = P.d, n1 = d + 1;
  for (index_t h = 0; h < P.H; ++h) {
    const double* pv = W_pv + h * n1 * n1;
    std::copy(pv + d * n1, pv + d * n1 + d, P.P1(h));
    P.p2(h) = pv[d * n1 + d];
    if (rank == 0)
      for (index_t r = 0; r <= d; ++r)
        std::copy(W_kq + h * n1 * n1 + r * n1, W_kq + h * n1 * n1 + r * n1 + d, P.K_row(h, r));
  }
  if (rank > 0) population_multihead_kernels().separate_keys(d, P.H, rank, W_k, W_q, P.base);
}

// 2L and, when grad is not null, its gradient with respect to the parts (grad [H (d+1)²]): the
// kernel of this CPU at fixed Λ, or the exact expectation over a random diagonal Λτ
// (random_diagonal_expectation: L is a cubic in each λ_i, docs/population.md).
double twice_loss_law(const HeadParts& P, PopulationCovariance law, const double* cov, index_t N,
                      const LabelNoise& noise, double* grad) {
  const auto& kernel = population_multihead_kernels().twice_loss;
  if (law == PopulationCovariance::fixed)
    return kernel(P.d, P.H, P.base, cov, N, noise.std, noise.query, grad);
  const size_t n = grad ? static_cast<size_t>(HeadParts::size(P.d, P.H)) : 0;
  const Vec total = random_diagonal_expectation(P.d, cov, [&](const double* Lambda) {
    Vec out(1 + n);
    out[0] = kernel(P.d, P.H, P.base, Lambda, N, noise.std, noise.query, grad ? out.data() + 1 : nullptr);
    return out;
  });
  if (grad) std::copy(total.begin() + 1, total.end(), grad);
  return total[0];
}

// ½∂(2L) into the full-size W^PV gradient (zeros where a parameter does not reach ŷ)
void write_pv(const HeadParts& g, double* d_W_pv) {
  const index_t d = g.d, n1 = d + 1, sz = n1 * n1;
  std::fill(d_W_pv, d_W_pv + g.H * sz, 0.0);
  for (index_t h = 0; h < g.H; ++h) {
    double* last = d_W_pv + h * sz + d * n1;
    for (index_t c = 0; c < d; ++c) last[c] = 0.5 * g.P1(h)[c];
    last[d] = 0.5 * g.p2(h);
  }
}

// ½∂(2L) into the full-size merged W^KQ gradient (its last column does not reach ŷ)
void write_kq(const HeadParts& g, double* d_W_kq) {
  const index_t d = g.d, n1 = d + 1;
  for (index_t h = 0; h < g.H; ++h)
    for (index_t r = 0; r <= d; ++r) {
      double* out = d_W_kq + (h * n1 + r) * n1;
      const double* G = g.K_row(h, r);
      for (index_t c = 0; c < d; ++c) out[c] = 0.5 * G[c];
      out[d] = 0;
    }
}

// The call's parts and gradient of the parts, one buffer (parts, then the gradient when wanted).
struct Buffers {
  Vec storage;
  HeadParts parts, grad;
  Buffers(index_t d, index_t H, bool want_grad)
      : storage(static_cast<size_t>(HeadParts::size(d, H) * (want_grad ? 2 : 1))),
        parts{d, H, storage.data()},
        grad{d, H, want_grad ? storage.data() + HeadParts::size(d, H) : nullptr} {}
};

}  // namespace

double multihead_population_loss(index_t d, index_t heads, const double* W_pv, const double* W_kq,
                                 PopulationCovariance law, const double* covariance, index_t N,
                                 double* d_W_pv, double* d_W_kq, const LabelNoise& noise) {
  const bool want_grad = d_W_pv && d_W_kq;
  const Buffers b(d, heads, want_grad);
  read_heads(b.parts, 0, W_pv, W_kq, nullptr, nullptr);
  const double twice = twice_loss_law(b.parts, law, covariance, N, noise, b.grad.base);
  if (want_grad) {
    write_pv(b.grad, d_W_pv);
    write_kq(b.grad, d_W_kq);
  }
  return 0.5 * twice;
}

double multihead_population_loss_separate(index_t d, index_t heads, index_t rank,
                                          const double* W_pv, const double* W_k, const double* W_q,
                                          PopulationCovariance law, const double* covariance, index_t N,
                                          double* d_W_pv, double* d_W_k, double* d_W_q,
                                          const LabelNoise& noise) {
  const bool want_grad = d_W_pv && d_W_k && d_W_q;
  const Buffers b(d, heads, want_grad);
  read_heads(b.parts, rank, W_pv, nullptr, W_k, W_q);
  const double twice = twice_loss_law(b.parts, law, covariance, N, noise, b.grad.base);
  if (want_grad) {
    write_pv(b.grad, d_W_pv);
    population_multihead_kernels().separate_gradient(d, heads, rank, W_k, W_q, b.grad.base, d_W_k,
                                                     d_W_q);
  }
  return 0.5 * twice;
}

}  // namespace lsa_native::cpu
