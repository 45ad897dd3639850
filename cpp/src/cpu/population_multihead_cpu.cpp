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

// The parts of each head that reach ŷ: p_h = (p1_h; p2_h), K_h = [K1_h; k2_hᵀ]. Also the gradient
// of 2L with respect to them (same layout).
struct HeadParts {
  index_t d, H;
  Vec p1, p2, K1, k2;  // [H, d], [H], [H, d, d], [H, d]
  HeadParts(index_t d_, index_t H_)
      : d(d_), H(H_), p1(static_cast<size_t>(H_ * d_), 0.0), p2(static_cast<size_t>(H_), 0.0), K1(static_cast<size_t>(H_ * d_ * d_), 0.0),
        k2(static_cast<size_t>(H_ * d_), 0.0) {}
  double* P1(index_t h) { return p1.data() + h * d; }
  double* Km(index_t h) { return K1.data() + h * d * d; }
  double* K2(index_t h) { return k2.data() + h * d; }
  const double* P1(index_t h) const { return p1.data() + h * d; }
  const double* Km(index_t h) const { return K1.data() + h * d * d; }
  const double* K2(index_t h) const { return k2.data() + h * d; }
  // Flattened (p1, p2, K1, k2), the layout of the random-covariance expansion.
  Vec flat() const {
    Vec v(p1);
    v.insert(v.end(), p2.begin(), p2.end());
    v.insert(v.end(), K1.begin(), K1.end());
    v.insert(v.end(), k2.begin(), k2.end());
    return v;
  }
  void unflat(const double* v) {
    for (Vec* part : {&p1, &p2, &K1, &k2}) {
      std::copy(v, v + part->size(), part->begin());
      v += part->size();
    }
  }
};

// 2L at fixed Λ and, when g is not null, its gradient: the kernel of this CPU's instruction set.
double twice_loss_heads(const HeadParts& P, const double* Lam, index_t N, const LabelNoise& noise,
                        HeadParts* g) {
  const Vec parts = P.flat();
  Vec grad(g ? parts.size() : 0);
  const double twice = population_multihead_kernels().twice_loss(
      P.d, P.H, parts.data(), Lam, N, noise.std, noise.query, g ? grad.data() : nullptr);
  if (g) g->unflat(grad.data());
  return twice;
}

// Writes ½∂(2L) into full-size gradients (exact zeros where a parameter does not reach ŷ).
void write_merged(const HeadParts& g, double* d_W_pv, double* d_W_kq) {
  const index_t d = g.d, n1 = d + 1, sz = n1 * n1;
  std::fill(d_W_pv, d_W_pv + g.H * sz, 0.0);
  std::fill(d_W_kq, d_W_kq + g.H * sz, 0.0);
  for (index_t h = 0; h < g.H; ++h) {
    double *pv = d_W_pv + h * sz, *kq = d_W_kq + h * sz;
    for (index_t c = 0; c < d; ++c) {
      pv[d * n1 + c] = 0.5 * g.P1(h)[c];
      kq[d * n1 + c] = 0.5 * g.K2(h)[c];
      for (index_t r = 0; r < d; ++r) kq[r * n1 + c] = 0.5 * g.Km(h)[r * d + c];
    }
    pv[d * n1 + d] = 0.5 * g.p2[h];
  }
}

// p_h and the K-block of W^KQ_h = W^K_hᵀ W^Q_h (separate) or W_kq[h] (merged).
HeadParts read_heads(index_t d, index_t H, index_t rank, const double* W_pv, const double* W_kq,
                     const double* W_k, const double* W_q) {
  HeadParts P(d, H);
  const index_t n1 = d + 1;
  std::vector<double> row(static_cast<size_t>(d));
  for (index_t h = 0; h < H; ++h) {
    const double* pv = W_pv + h * n1 * n1;
    for (index_t c = 0; c < d; ++c) P.P1(h)[c] = pv[d * n1 + c];
    P.p2[h] = pv[d * n1 + d];
    for (index_t r = 0; r <= d; ++r) {
      double* v = r < d ? P.Km(h) + r * d : P.K2(h);
      if (rank == 0) {
        std::copy(W_kq + h * n1 * n1 + r * n1, W_kq + h * n1 * n1 + r * n1 + d, v);
        continue;
      }
      // (W^Kᵀ W^Q)[r, :d] = Σ_ρ W^K[ρ, r] W^Q[ρ, :d] (rows of W^Q combined: contiguous loops)
      const double *Wk = W_k + h * rank * n1, *Wq = W_q + h * rank * n1;
      std::fill(row.begin(), row.end(), 0.0);
      for (index_t q = 0; q < rank; ++q) {
        const double wk = Wk[q * n1 + r];
        for (index_t c = 0; c < d; ++c) row[c] += wk * Wq[q * n1 + c];
      }
      std::copy(row.begin(), row.end(), v);
    }
  }
  return P;
}

// 2L and its flattened gradient: fixed Λ, or the exact expectation over a random diagonal Λτ
// (random_diagonal_expectation: L is a cubic in each λ_i, docs/population.md).
double twice_loss_law(const HeadParts& P, PopulationCovariance law, const double* cov, index_t N,
                      const LabelNoise& noise, HeadParts* g) {
  if (law == PopulationCovariance::fixed) return twice_loss_heads(P, cov, N, noise, g);
  const Vec total = random_diagonal_expectation(P.d, cov, [&](const double* Lambda) {
    HeadParts gi(P.d, P.H);
    Vec out{twice_loss_heads(P, Lambda, N, noise, g ? &gi : nullptr)};
    if (g) {
      const Vec f = gi.flat();
      out.insert(out.end(), f.begin(), f.end());
    }
    return out;
  });
  if (g) g->unflat(total.data() + 1);
  return total[0];
}

}  // namespace

double multihead_population_loss(index_t d, index_t heads, const double* W_pv, const double* W_kq,
                                 PopulationCovariance law, const double* covariance, index_t N,
                                 double* d_W_pv, double* d_W_kq, const LabelNoise& noise) {
  const HeadParts P = read_heads(d, heads, 0, W_pv, W_kq, nullptr, nullptr);
  const bool want_grad = d_W_pv && d_W_kq;
  HeadParts g(d, heads);
  const double twice = twice_loss_law(P, law, covariance, N, noise, want_grad ? &g : nullptr);
  if (want_grad) write_merged(g, d_W_pv, d_W_kq);
  return 0.5 * twice;
}

double multihead_population_loss_separate(index_t d, index_t heads, index_t rank,
                                          const double* W_pv, const double* W_k, const double* W_q,
                                          PopulationCovariance law, const double* covariance, index_t N,
                                          double* d_W_pv, double* d_W_k, double* d_W_q,
                                          const LabelNoise& noise) {
  const HeadParts P = read_heads(d, heads, rank, W_pv, nullptr, W_k, W_q);
  const bool want_grad = d_W_pv && d_W_k && d_W_q;
  HeadParts g(d, heads);
  const double twice = twice_loss_law(P, law, covariance, N, noise, want_grad ? &g : nullptr);
  if (!want_grad) return 0.5 * twice;
  const index_t n1 = d + 1, sz = n1 * n1;
  std::vector<double> d_W_kq(static_cast<size_t>(heads * sz));
  write_merged(g, d_W_pv, d_W_kq.data());
  // K_h = W^K_hᵀ W^Q_h[:, :d] with G_h = ∂L/∂K_h [d+1, d]:
  //   ∂W^K_h[ρ, r] = Σ_c W^Q_h[ρ, c] G_h[r, c],  ∂W^Q_h[ρ, c] = Σ_r W^K_h[ρ, r] G_h[r, c] (c < d).
  std::fill(d_W_k, d_W_k + heads * rank * n1, 0.0);
  std::fill(d_W_q, d_W_q + heads * rank * n1, 0.0);
  // Loops with a contiguous innermost axis and no reduction chain: ∂W^Q_h[ρ] combines rows of G_h,
  // ∂W^K_h[ρ] rows of G_hᵀ (GT).
  std::vector<double> GT(static_cast<size_t>(d * n1));
  for (index_t h = 0; h < heads; ++h) {
    const double *G = d_W_kq.data() + h * sz, *Wk = W_k + h * rank * n1, *Wq = W_q + h * rank * n1;
    double *gk = d_W_k + h * rank * n1, *gq = d_W_q + h * rank * n1;
    for (index_t r = 0; r <= d; ++r)
      for (index_t c = 0; c < d; ++c) GT[c * n1 + r] = G[r * n1 + c];
    for (index_t q = 0; q < rank; ++q) {
      for (index_t r = 0; r <= d; ++r) {
        const double wk = Wk[q * n1 + r];
        for (index_t c = 0; c < d; ++c) gq[q * n1 + c] += wk * G[r * n1 + c];
      }
      for (index_t c = 0; c < d; ++c) {
        const double wq = Wq[q * n1 + c];
        for (index_t r = 0; r <= d; ++r) gk[q * n1 + r] += wq * GT[c * n1 + r];
      }
    }
  }
  return 0.5 * twice;
}

}  // namespace lsa_native::cpu
