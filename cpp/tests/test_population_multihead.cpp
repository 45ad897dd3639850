// The H-head population kernel table (cpu/population_multihead_kernels.hpp) of every compiled
// instruction set this CPU can run agrees with the baseline table: 2L and its gradient (dense Λ and
// diagonal Λ, which take different product paths; with and without label noise; the loss alone),
// and the separate heads' keys and chain rule. The Python tests check the chosen table against the
// numpy reference; this ties the others to it. Tolerance: the tables differ only in vector width
// and FMA contraction, so by rounding: 1e-12 of the largest entry of the result.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "cpu/isa.hpp"
#include "cpu/population_multihead_kernels.hpp"

namespace {

using lsa_native::index_t;
using lsa_native::cpu::Isa;
namespace cpu = lsa_native::cpu;
using Table = cpu::PopulationMultiheadKernels;

#define LSA_TEST_ISA_VALUE(name, label, ...) Isa::name,
const std::vector<Isa> kIsas = {LSA_NATIVE_CPU_ISAS(LSA_TEST_ISA_VALUE, ~)};
#undef LSA_TEST_ISA_VALUE

Table table_of(Isa isa) {
  return LSA_NATIVE_KERNELS_FOR(isa, Table, population_multihead_kernels());
}

std::vector<double> normals(size_t n, std::mt19937_64& gen, double scale) {
  std::normal_distribution<double> normal;
  std::vector<double> v(n);
  for (auto& x : v) x = scale * normal(gen);
  return v;
}

// Λ = A Aᵀ/d + I (dense), or diag(0.5 + |z|).
std::vector<double> covariance(index_t d, bool diagonal, std::mt19937_64& gen) {
  const std::vector<double> A = normals(static_cast<size_t>(d * d), gen, 1.0);
  std::vector<double> L(static_cast<size_t>(d * d), 0.0);
  for (index_t i = 0; i < d; ++i)
    for (index_t j = 0; j < d; ++j) {
      if (diagonal) {
        if (i == j) L[i * d + i] = 0.5 + std::fabs(A[i * d + i]);
        continue;
      }
      for (index_t m = 0; m < d; ++m) L[i * d + j] += A[i * d + m] * A[j * d + m] / double(d);
      if (i == j) L[i * d + j] += 1;
    }
  return L;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, const char* what,
                  Isa isa) {
  double scale = 0;
  for (const double x : want) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-12 * scale) << what << ", " << cpu::isa_label(isa) << ", entry " << i;
}

TEST(PopulationMultiheadTables, EveryIsaEqualsTheBaseline) {
  std::mt19937_64 gen(21);
  const Table base = table_of(Isa::baseline);
  struct Size {
    index_t d, H, rank, N;
  };
  // d = 1; odd sizes around the vector widths; the benchmark size
  for (const Size s : {Size{1, 1, 1, 1}, Size{3, 2, 2, 5}, Size{5, 3, 6, 4}, Size{9, 4, 3, 20},
                       Size{20, 8, 4, 20}}) {
    const index_t n_parts = s.H * (s.d + 1) * (s.d + 1), n_keys = s.H * s.rank * (s.d + 1);
    const std::vector<double> parts = normals(static_cast<size_t>(n_parts), gen, 0.5);
    const std::vector<double> W_k = normals(static_cast<size_t>(n_keys), gen, 0.5),
                              W_q = normals(static_cast<size_t>(n_keys), gen, 0.5);
    for (const bool diagonal : {false, true}) {
      const std::vector<double> Lam = covariance(s.d, diagonal, gen);
      for (const double sigma : {0.0, 0.7}) {
        std::vector<double> want_g(static_cast<size_t>(n_parts));
        const double want = base.twice_loss(s.d, s.H, parts.data(), Lam.data(), s.N, sigma, sigma > 0,
                                            want_g.data());
        for (const Isa isa : kIsas) {
          if (!cpu::isa_supported(isa)) continue;
          const Table t = table_of(isa);
          std::vector<double> g(static_cast<size_t>(n_parts), -1.0);
          const double got = t.twice_loss(s.d, s.H, parts.data(), Lam.data(), s.N, sigma, sigma > 0,
                                          g.data());
          ASSERT_NEAR(got, want, 1e-12 * std::fabs(want)) << cpu::isa_label(isa) << ", d = " << s.d;
          expect_close(g, want_g, "gradient", isa);
          const double loss_only =
              t.twice_loss(s.d, s.H, parts.data(), Lam.data(), s.N, sigma, sigma > 0, nullptr);
          ASSERT_NEAR(loss_only, want, 1e-12 * std::fabs(want)) << cpu::isa_label(isa) << ", loss alone";
        }
      }
    }
    // separate heads: the keys into the parts, the chain rule from a gradient of the parts
    std::vector<double> want_parts = parts, want_k(static_cast<size_t>(n_keys)), want_q(want_k.size());
    base.separate_keys(s.d, s.H, s.rank, W_k.data(), W_q.data(), want_parts.data());
    base.separate_gradient(s.d, s.H, s.rank, W_k.data(), W_q.data(), parts.data(), want_k.data(),
                           want_q.data());
    for (const Isa isa : kIsas) {
      if (!cpu::isa_supported(isa)) continue;
      const Table t = table_of(isa);
      std::vector<double> got_parts = parts, got_k(want_k.size(), -1.0), got_q(want_q.size(), -1.0);
      t.separate_keys(s.d, s.H, s.rank, W_k.data(), W_q.data(), got_parts.data());
      t.separate_gradient(s.d, s.H, s.rank, W_k.data(), W_q.data(), parts.data(), got_k.data(),
                          got_q.data());
      expect_close(got_parts, want_parts, "separate keys", isa);
      expect_close(got_k, want_k, "d_W_k", isa);
      expect_close(got_q, want_q, "d_W_q", isa);
    }
  }
}

// The baseline's separate keys are W^K_hᵀ W^Q_h (a hand-written product), and the chain rule is its
// adjoint: <G, ∂K(W_k, W_q)[dW]> = <∂W, dW> for the products K = W_kᵀ W_q.
TEST(PopulationMultiheadTables, SeparateKeysAndTheirChainRuleByHand) {
  std::mt19937_64 gen(5);
  const index_t d = 4, H = 2, rank = 3, n1 = d + 1;
  const Table base = table_of(Isa::baseline);
  const std::vector<double> W_k = normals(H * rank * n1, gen, 1.0), W_q = normals(H * rank * n1, gen, 1.0);
  std::vector<double> parts(static_cast<size_t>(H * n1 * n1), 0.0);
  base.separate_keys(d, H, rank, W_k.data(), W_q.data(), parts.data());
  const index_t K1_at = H * d + H, k2_at = K1_at + H * d * d;
  auto K_entry = [&](const std::vector<double>& p, index_t h, index_t r, index_t c) {
    return r < d ? p[K1_at + (h * d + r) * d + c] : p[k2_at + h * d + c];
  };
  for (index_t h = 0; h < H; ++h)
    for (index_t r = 0; r < n1; ++r)
      for (index_t c = 0; c < d; ++c) {
        double want = 0;
        for (index_t q = 0; q < rank; ++q) want += W_k[(h * rank + q) * n1 + r] * W_q[(h * rank + q) * n1 + c];
        EXPECT_NEAR(K_entry(parts, h, r, c), want, 1e-14) << h << " " << r << " " << c;
      }
  // adjoint: L(W_k, W_q) = ½ <grad, K> (the parts' K entries) has ∂/∂W_k = separate_gradient's
  // d_W_k; checked by central differences (exact for this bilinear map up to rounding)
  const std::vector<double> grad = normals(parts.size(), gen, 1.0);
  std::vector<double> dk(W_k.size()), dq(W_q.size());
  base.separate_gradient(d, H, rank, W_k.data(), W_q.data(), grad.data(), dk.data(), dq.data());
  auto half_inner = [&](const std::vector<double>& Wk, const std::vector<double>& Wq) {
    std::vector<double> p(parts.size(), 0.0);
    base.separate_keys(d, H, rank, Wk.data(), Wq.data(), p.data());
    double s = 0;
    for (index_t h = 0; h < H; ++h)
      for (index_t r = 0; r < n1; ++r)
        for (index_t c = 0; c < d; ++c) s += 0.5 * K_entry(grad, h, r, c) * K_entry(p, h, r, c);
    return s;
  };
  const double e = 1e-3;
  for (size_t i = 0; i < W_k.size(); ++i) {
    std::vector<double> a = W_k, b = W_k;
    a[i] += e;
    b[i] -= e;
    EXPECT_NEAR(dk[i], (half_inner(a, W_q) - half_inner(b, W_q)) / (2 * e), 1e-9) << "d_W_k " << i;
    std::vector<double> qa = W_q, qb = W_q;
    qa[i] += e;
    qb[i] -= e;
    EXPECT_NEAR(dq[i], (half_inner(W_k, qa) - half_inner(W_k, qb)) / (2 * e), 1e-9) << "d_W_q " << i;
  }
}

}  // namespace
